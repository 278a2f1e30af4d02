"""A takeover in the middle of a preview, on two ``botd run`` nodes sharing one PostgreSQL.

The node answering a long story with a preview open (an ``edit`` preview on Telegram, a
Telegram draft, a Slack native stream: ``delivery: edit`` / ``stream``) is SIGKILLed; the
other node takes the conversation over once the lease lapses and finishes the answer as a
restart does (docs/guarantees.md, "What a user sees after a crash"): the edit preview and
the Slack stream are finished in place, one message with every paragraph once and nothing
left streaming; the draft, which is no message, gives way to the answer posted once. The
user's message ends with the done reaction, set by the node that took over, not left at
taken by the dead one. An owner SIGSTOPped mid preview instead, and continued once the other
node finished the answer, changes nothing of it: its lease is gone, so its preview edits and
stream appends are fenced. Every assertion is on what the fakes saw; the database is read
only to know when and whom to stop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from tests.cluster.harness import MODEL_KEY, TOKEN, Cluster, Node
from tests.conversation.crash import DM, PARAGRAPHS, long_answer
from tests.fakes.anthropic_api import FakeAnthropicAPI
from tests.fakes.slack_api import FakeSlack, event_callback
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.waiting import HANG_GUARD, file_contains, until

PROMPT = "tell me the long story"


@asynccontextmanager
async def two_nodes(
    tmp_path: Path,
    dsn: str,
    model: FakeAnthropicAPI,
    delivery: str,
    *,
    telegram: FakeTelegramAPI | None = None,
    slack: FakeSlack | None = None,
) -> AsyncIterator[Cluster]:
    """Two started nodes answering with ``delivery`` previews (their logs printed on a
    failure)."""
    async with Cluster(
        tmp_path,
        dsn,
        model,
        telegram=telegram,
        slack=slack,
        size=2,
        channel_options=(f"delivery: {delivery}",),
    ) as cluster:
        await cluster.start_all()
        try:
            yield cluster
        except BaseException:
            print(cluster.logs())
            raise


async def kill_the_owner(cluster: Cluster, conversation: str) -> tuple[Node, Node]:
    """SIGKILL the node answering ``conversation`` (its lease's holder); (it, the other)."""
    owner = await cluster.lease_holder(f"conversation:{conversation}")
    await cluster.kill(owner)
    return owner, next(node for node in cluster.nodes if node is not owner)


async def pause_the_owner(cluster: Cluster, conversation: str) -> tuple[Node, Node]:
    """SIGSTOP the node answering ``conversation``; (it, the other)."""
    owner = await cluster.lease_holder(f"conversation:{conversation}")
    cluster.pause(owner)
    return owner, next(node for node in cluster.nodes if node is not owner)


async def continued_past_its_lease(cluster: Cluster, node: Node, conversation: str) -> None:
    """SIGCONT ``node`` and wait until it finds its lease of ``conversation`` lost."""
    cluster.resume(node)
    lost = f"conversation {conversation}: lease lost"
    await until(file_contains(node.log, lost), f"{node.name} finding its lease lost")


async def preview_kept(cluster: Cluster, *, streaming: bool = False) -> bool:
    """The run's preview is in the database (what a takeover finds of it)."""
    rows = await cluster.query("SELECT streaming FROM previews")
    return bool(rows) and (not streaming or rows[0][0] is True)


async def answered(cluster: Cluster) -> bool:
    rows = await cluster.query("SELECT state FROM inbox")
    return [row[0] for row in rows] == ["answered"]


async def slack_stream_kept(slack: FakeSlack, model: FakeAnthropicAPI, cluster: Cluster) -> None:
    """Both nodes on Slack's socket; U1 asks in D1 for the long answer (the next one too,
    for the node that takes over), whose native stream has grown and is kept in the store."""
    await cluster.ready("slack")
    await until(lambda: len(slack.sockets) == 2, "both nodes' sockets")
    model.push(long_answer(delay=0.5), long_answer(delay=0.0))
    asked = {"type": "message", "channel": "D1", "channel_type": "im", "user": "U1"}
    asked |= {"text": PROMPT, "ts": "100.000001"}
    assert await slack.deliver_event(event_callback(asked))
    await until(lambda: bool(slack.calls_to("chat.appendStream")), "the stream grew")
    await until(lambda: preview_kept(cluster, streaming=True), "the stream kept")


async def test_a_takeover_mid_edit_preview_finishes_that_same_preview(
    tmp_path: Path, postgres_dsn: str
) -> None:
    async with (
        FakeTelegramAPI(TOKEN) as telegram,
        FakeAnthropicAPI(api_key=MODEL_KEY) as model,
        two_nodes(tmp_path, postgres_dsn, model, "edit", telegram=telegram) as cluster,
    ):
        await cluster.ready("telegram")
        model.push(long_answer(delay=0.5), long_answer(delay=0.0))
        asked = telegram.push_text(DM, PROMPT)
        await until(lambda: preview_kept(cluster), "the preview kept")
        await telegram.wait_for_call("editMessageText", ok_only=True, timeout=HANG_GUARD)
        _, other = await kill_the_owner(cluster, f"telegram:{DM}")
        (cut,) = telegram.visible(DM)
        assert PARAGRAPHS[-1] not in cut  # cut mid-answer
        await until(lambda: PARAGRAPHS[-1] in "".join(telegram.visible(DM)), "the answer")
        await until(lambda: answered(cluster), "the message answered")
        reaction = (DM, int(asked["message_id"]))
        await until(lambda: telegram.reactions.get(reaction) == "👍", "the done reaction")
        statuses = await cluster.stop_all()

    assert statuses[other.name] == 0
    (answer,) = telegram.visible(DM)  # one message: the preview, finished in place
    assert all(answer.count(p) == 1 for p in PARAGRAPHS)
    assert len(telegram.calls_to("sendMessage", ok_only=True)) == 1
    edits = telegram.calls_to("editMessageText", ok_only=True)
    assert edits[-1].via == other.name and edits[-1].params["text"] == answer
    assert len(model.requests) == 2  # asked again by the node that took over
    reactions = telegram.calls_to("setMessageReaction", ok_only=True)
    assert reactions[-1].via == other.name


async def test_a_takeover_mid_telegram_draft_posts_the_answer_once(
    tmp_path: Path, postgres_dsn: str
) -> None:
    async with (
        FakeTelegramAPI(TOKEN) as telegram,
        FakeAnthropicAPI(api_key=MODEL_KEY) as model,
        two_nodes(tmp_path, postgres_dsn, model, "stream", telegram=telegram) as cluster,
    ):
        await cluster.ready("telegram")
        model.push(long_answer(delay=0.5), long_answer(delay=0.0))
        asked = telegram.push_text(DM, PROMPT)
        await telegram.wait_for_call("sendMessageDraft", 2, ok_only=True, timeout=HANG_GUARD)
        _, other = await kill_the_owner(cluster, f"telegram:{DM}")
        assert telegram.visible(DM) == []  # only a draft showed, cut mid-answer
        cut = telegram.draft_showing(DM)
        assert cut is not None and PARAGRAPHS[-1] not in cut
        await until(lambda: bool(telegram.visible(DM)), "the answer")
        await until(lambda: answered(cluster), "the message answered")
        reaction = (DM, int(asked["message_id"]))
        await until(lambda: telegram.reactions.get(reaction) == "👍", "the done reaction")
        statuses = await cluster.stop_all()

    assert statuses[other.name] == 0
    (answer,) = telegram.visible(DM)  # the answer once; the draft ended with it
    assert all(answer.count(p) == 1 for p in PARAGRAPHS)
    assert [call.via for call in telegram.calls_to("sendMessage", ok_only=True)] == [other.name]
    assert telegram.draft_showing(DM) is None
    assert telegram.calls_to("editMessageText") == []


async def test_a_takeover_mid_slack_stream_ends_that_same_stream_as_the_answer(
    tmp_path: Path, postgres_dsn: str
) -> None:
    async with (
        FakeSlack() as slack,
        FakeAnthropicAPI(api_key=MODEL_KEY) as model,
        two_nodes(tmp_path, postgres_dsn, model, "stream", slack=slack) as cluster,
    ):
        await slack_stream_kept(slack, model, cluster)
        _, other = await kill_the_owner(cluster, "slack:D1")
        (cut,) = slack.visible("D1")
        assert PARAGRAPHS[-1] not in cut and slack.streaming  # left open by the dead node
        await until(lambda: PARAGRAPHS[-1] in "".join(slack.visible("D1")), "the answer")
        await until(lambda: not slack.streaming, "the stream stopped")
        await until(lambda: answered(cluster), "the message answered")
        reaction = ("D1", "100.000001")
        done = ["white_check_mark"]
        await until(lambda: slack.reactions.get(reaction) == done, "only the done reaction")
        statuses = await cluster.stop_all()

    assert statuses[other.name] == 0
    (answer,) = slack.visible("D1")  # one message: the stream, finished in place
    assert all(answer.count(p) == 1 for p in PARAGRAPHS)
    assert len(slack.calls_to("chat.startStream")) == 1
    assert [call.via for call in slack.calls_to("chat.stopStream")] == [other.name]
    assert slack.calls_to("chat.postMessage") == []
    assert slack.reactions[reaction] == done  # the dead node's taken reaction taken away


async def test_an_owner_paused_mid_edit_preview_leaves_the_finished_answer_alone(
    tmp_path: Path, postgres_dsn: str
) -> None:
    async with (
        FakeTelegramAPI(TOKEN) as telegram,
        FakeAnthropicAPI(api_key=MODEL_KEY) as model,
        two_nodes(tmp_path, postgres_dsn, model, "edit", telegram=telegram) as cluster,
    ):
        await cluster.ready("telegram")
        model.push(long_answer(delay=0.5), long_answer(delay=0.0))
        telegram.push_text(DM, PROMPT)
        await until(lambda: preview_kept(cluster), "the preview kept")
        await telegram.wait_for_call("editMessageText", ok_only=True, timeout=HANG_GUARD)
        paused, other = await pause_the_owner(cluster, f"telegram:{DM}")
        await until(lambda: PARAGRAPHS[-1] in "".join(telegram.visible(DM)), "the answer")
        await until(lambda: answered(cluster), "the message answered")
        finished = len(telegram.calls)
        await continued_past_its_lease(cluster, paused, f"telegram:{DM}")
        statuses = await cluster.stop_all()  # whatever the paused node still did is done

    assert statuses == {paused.name: 0, other.name: 0}
    (answer,) = telegram.visible(DM)  # the preview, finished in place by the other node
    assert all(answer.count(p) == 1 for p in PARAGRAPHS)
    late = [
        c
        for c in telegram.calls[finished:]
        if c.via == paused.name and c.method in ("sendMessage", "editMessageText", "deleteMessage")
    ]
    assert late == []


async def test_an_owner_paused_mid_slack_stream_leaves_the_finished_answer_alone(
    tmp_path: Path, postgres_dsn: str
) -> None:
    async with (
        FakeSlack() as slack,
        FakeAnthropicAPI(api_key=MODEL_KEY) as model,
        two_nodes(tmp_path, postgres_dsn, model, "stream", slack=slack) as cluster,
    ):
        await slack_stream_kept(slack, model, cluster)
        paused, other = await pause_the_owner(cluster, "slack:D1")
        await until(lambda: PARAGRAPHS[-1] in "".join(slack.visible("D1")), "the answer")
        await until(lambda: not slack.streaming, "the stream stopped")
        await until(lambda: answered(cluster), "the message answered")
        finished = len(slack.calls)
        await continued_past_its_lease(cluster, paused, "slack:D1")
        statuses = await cluster.stop_all()

    assert statuses == {paused.name: 0, other.name: 0}
    (answer,) = slack.visible("D1")
    assert all(answer.count(p) == 1 for p in PARAGRAPHS)
    assert [call.via for call in slack.calls_to("chat.stopStream")] == [other.name]
    writes = ("chat.postMessage", "chat.update", "chat.appendStream", "chat.delete")
    late = [c for c in slack.calls[finished:] if c.via == paused.name and c.method in writes]
    assert late == []
