"""Three ``botd run`` nodes answering Slack with ``delivery: stream`` (native message streams),
one SIGKILLed mid-answer.

Six DMs of three messages each talk at once over the nodes' Socket Mode connections while a
seventh gets a long answer streamed slowly; the node streaming it is killed with the stream
open. Another node takes that conversation (and every other one the dead node held) over.
What the chats show in the end (each answer one message, streamed in place: its paragraphs
read as ``Post``s, ``ShownSlackChats``) must be every answer once, complete and in the order
asked in each chat (``check_answers``); no piece shown twice (Slack's look-up closes the
window); no message left streaming; the killed answer finished in the stream it began in.
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.cluster.harness import MODEL_KEY, Cluster
from tests.cluster.scenario import ShownSlackChats, Users, stretched_dm
from tests.cluster.script import ModelScript, check_answers
from tests.conversation.crash import PARAGRAPHS
from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.fakes.slack_api import FakeSlack
from tests.support.waiting import until


async def test_three_nodes_streaming_to_slack_survive_a_kill_mid_stream(
    tmp_path: Path, postgres_dsn: str
) -> None:
    async with (
        FakeSlack(clock=time.time) as slack,
        FakeAnthropicAPI(api_key=MODEL_KEY) as model,
        Cluster(
            tmp_path, postgres_dsn, model, slack=slack, channel_options=("delivery: stream",)
        ) as cluster,
    ):
        script = ModelScript(model)
        chats = ShownSlackChats(slack)
        users = Users(chats, script, dms=6, messages=3)
        await cluster.start_all()
        try:
            await cluster.ready("slack")
            await until(lambda: len(slack.sockets) == 3, "every node's socket")
            long = await users.ask_long()
            doomed = cluster.node(long.asked_via)
            chat = chats.chat(stretched_dm(long))
            users.start()

            def streaming_long() -> bool:
                shown = "".join(slack.visible(chat))
                return PARAGRAPHS[2] in shown and PARAGRAPHS[-1] not in shown

            await until(streaming_long, f"{doomed.name} streaming the long answer")
            await cluster.kill(doomed)
            assert any(where[0] == chat for where in slack.streaming)  # left open
            await users.finished()
            await until(lambda: not slack.streaming, "every stream stopped")
            statuses = await cluster.stop_all()
        except BaseException:
            await users.cancel()
            print(cluster.logs())
            raise

    assert all(status == 0 for name, status in statuses.items() if name != doomed.name)
    tally = check_answers(chats.posts(), users.asked, script.long_prompts())
    assert tally.repeats == []
    assert tally.notices <= 1
    (answer,) = slack.visible(chat)  # the stream it began in, finished in place
    assert all(answer.count(p) == 1 for p in PARAGRAPHS)
    starts = [c for c in slack.calls_to("chat.startStream") if c.args.get("channel") == chat]
    stops = [c for c in slack.calls_to("chat.stopStream") if c.args.get("channel") == chat]
    assert [c.via for c in starts] == [doomed.name]
    assert len(stops) == 1 and stops[0].via != doomed.name
