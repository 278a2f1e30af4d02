"""Three ``botd run`` nodes answering with ``delivery: stream`` (native streams: Slack message
streams, Telegram drafts), one SIGKILLed mid-answer.

Six DMs of three messages each talk at once while a seventh gets a long answer streamed
slowly; the node streaming it (on Telegram: the node polling, so the poller moves too) is
killed with the stream open. Another node takes that conversation (and every other one the
dead node held) over. What the chats show in the end (each answer one message, streamed in
place or posted after its draft: its paragraphs read as ``Post``s, ``Shown...Chats``) must be
every answer once, complete and in the order asked in each chat (``check_answers``); a whole
message shown twice only in Telegram's window (no send key: at most the pieces between
written and confirmed at the kill), never on Slack (its look-up closes the window); no stream
left open, no draft left showing; the killed answer finished in the stream it began in on
Slack, and posted once by another node on Telegram.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.cluster.harness import MODEL_KEY, TOKEN, Cluster, Node
from tests.cluster.scenario import (
    Chats,
    ShownSlackChats,
    ShownTelegramChats,
    Users,
    pending_pieces,
    stretched_dm,
)
from tests.cluster.script import ModelScript, Tally, check_answers
from tests.conversation.crash import PARAGRAPHS
from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.fakes.slack_api import FakeSlack
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.waiting import until

STREAM = ("delivery: stream",)


@dataclass
class Killed:
    """What the scenario left for the checks."""

    users: Users
    doomed: Node
    chat: str
    """The chat whose long answer was streaming on ``doomed``."""
    in_flight: int
    """Pieces between written and confirmed right after the kill."""
    statuses: dict[str, int]

    def check(self, chats: Chats, script: ModelScript, *, window: bool) -> Tally:
        assert all(s == 0 for name, s in self.statuses.items() if name != self.doomed.name)
        tally = check_answers(chats.posts(), self.users.asked, script.long_prompts())
        print(
            f"{chats.channel}: messages shown twice: {len(tally.repeats)}; in flight at the "
            f"kill: {self.in_flight}"
        )
        assert len(tally.repeats) <= (self.in_flight if window else 0), tally.repeats
        assert tally.notices <= 1
        return tally


async def kill_mid_stream(
    cluster: Cluster,
    chats: Chats,
    script: ModelScript,
    streaming: Callable[[str], bool],
    left: Callable[[str], bool],
    *,
    poller: str | None = None,
) -> Killed:
    """The scenario (module docstring) on a started ``cluster``: ``streaming(chat)`` tells
    when the long answer shows in part, ``left(chat)`` whether it is left so by the kill;
    ``poller``: the lease prefix of the node to kill."""
    users = Users(chats, script, dms=6, messages=3)
    try:
        holder = await cluster.lease_holder(poller) if poller else None
        long = await users.ask_long(on=holder)
        doomed = cluster.node(long.asked_via)
        chat = chats.chat(stretched_dm(long))
        users.start()
        await until(lambda: streaming(chat), f"{doomed.name} streaming the long answer")
        await cluster.kill(doomed)
        in_flight = await pending_pieces(cluster)
        assert left(chat), "the long answer ended before its node was killed"
        await users.finished()
        return Killed(users, doomed, chat, in_flight, {})
    except BaseException:
        await users.cancel()
        print(cluster.logs())
        raise


def in_part(text: str) -> bool:
    """Some of the long answer, not all of it."""
    return PARAGRAPHS[2] in text and PARAGRAPHS[-1] not in text


async def test_three_nodes_streaming_to_slack_survive_a_kill_mid_stream(
    tmp_path: Path, postgres_dsn: str
) -> None:
    async with (
        FakeSlack(clock=time.time) as slack,
        FakeAnthropicAPI(api_key=MODEL_KEY) as model,
        Cluster(tmp_path, postgres_dsn, model, slack=slack, channel_options=STREAM) as cluster,
    ):
        script = ModelScript(model)
        chats = ShownSlackChats(slack)
        await cluster.start_all()
        await cluster.ready("slack")
        await until(lambda: len(slack.sockets) == 3, "every node's socket")

        def streaming(chat: str) -> bool:
            return in_part("".join(slack.visible(chat)))

        def left_open(chat: str) -> bool:
            return streaming(chat) and any(where[0] == chat for where in slack.streaming)

        killed = await kill_mid_stream(cluster, chats, script, streaming, left_open)
        await until(lambda: not slack.streaming, "every stream stopped")
        killed.statuses = await cluster.stop_all()

    killed.check(chats, script, window=False)
    (answer,) = slack.visible(killed.chat)  # the stream it began in, finished in place
    assert all(answer.count(p) == 1 for p in PARAGRAPHS)
    starts = [c for c in slack.calls_to("chat.startStream") if c.args["channel"] == killed.chat]
    stops = [c for c in slack.calls_to("chat.stopStream") if c.args["channel"] == killed.chat]
    assert [c.via for c in starts] == [killed.doomed.name]
    assert len(stops) == 1 and stops[0].via != killed.doomed.name


async def test_three_nodes_drafting_to_telegram_survive_the_pollers_kill_mid_draft(
    tmp_path: Path, postgres_dsn: str
) -> None:
    async with (
        FakeTelegramAPI(TOKEN) as telegram,
        FakeAnthropicAPI(api_key=MODEL_KEY) as model,
        Cluster(
            tmp_path, postgres_dsn, model, telegram=telegram, channel_options=STREAM
        ) as cluster,
    ):
        script = ModelScript(model)
        chats = ShownTelegramChats(telegram)
        await cluster.start_all()
        await cluster.ready("telegram")

        def drafting(chat: str) -> bool:
            draft = telegram.draft_showing(int(chat))
            return draft is not None and in_part(draft) and not telegram.visible(int(chat))

        killed = await kill_mid_stream(
            cluster, chats, script, drafting, drafting, poller="telegram:"
        )
        dm = int(killed.chat)
        await until(lambda: telegram.draft_showing(dm) is None, "the draft gone")
        killed.statuses = await cluster.stop_all()

    killed.check(chats, script, window=True)
    (answer,) = telegram.visible(dm)  # posted once, after its draft, by another node
    assert all(answer.count(p) == 1 for p in PARAGRAPHS)
    sent = telegram.calls_to("sendMessage", ok_only=True)
    posts = [c for c in sent if int(c.params["chat_id"]) == dm]
    assert len(posts) == 1 and posts[0].via != killed.doomed.name
