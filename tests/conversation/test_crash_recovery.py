"""``botd run`` killed or stopped mid-answer, then started again: nothing lost, nothing twice.

The daemon runs as a subprocess with the real SDKs against the loopback Telegram and Anthropic
fakes. The test reads the daemon's database (read-only, beside the running process: WAL allows
it) only to know when to pull the plug; every assertion is about what the platform and the
model saw. Waits are hang guards, never delays that a result depends on.
"""

from __future__ import annotations

import json
import signal
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from botd.inbound.router import STORE_FAILED_NOTICE
from tests.channels.slack.harness import message_event
from tests.conversation.crash import (
    DM,
    NOTICE,
    PARAGRAPHS,
    TOKEN,
    crash_config,
    long_answer,
    slack_crash_config,
)
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.slack_api import FakeSlack, event_callback
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.daemon_process import HANG_GUARD, RunningDaemon, ended, reap, start_daemon
from tests.support.waiting import until


async def _start(config: Path, cwd: Path) -> RunningDaemon:
    return await start_daemon(
        config, cwd, ANTHROPIC_TEST_KEY="sk-ant-test", TELEGRAM_TEST_TOKEN=TOKEN
    )


_ended = ended


def _query(state: Path, sql: str) -> list[tuple[object, ...]]:
    db = state / "botd.sqlite3"
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    except sqlite3.OperationalError:
        return []  # not migrated yet
    finally:
        conn.close()


def _settled_posts(state: Path, at_least: int) -> Callable[[], bool]:
    """At least ``at_least`` blocks confirmed sent and none between written and confirmed."""

    def settled() -> bool:
        rows = _query(state, "SELECT state, count(*) FROM outbox GROUP BY state")
        counts = {str(row[0]): int(str(row[1])) for row in rows}
        return counts.get("sent", 0) >= at_least and counts.get("pending", 0) == 0

    return settled


def _texts(telegram: FakeTelegramAPI) -> list[str]:
    return [str(c.params["text"]) for c in telegram.calls_to("sendMessage", ok_only=True)]


def _all_shown(telegram: FakeTelegramAPI) -> Callable[[], bool]:
    return lambda: all(p in _texts(telegram) for p in PARAGRAPHS)


def _user_turns(body: dict[str, object], prompt: str) -> int:
    return json.dumps(body["messages"]).count(prompt)


async def _restart_and_finish(config: Path, tmp_path: Path, telegram: FakeTelegramAPI) -> list[str]:
    second = await _start(config, tmp_path)
    try:
        await until(_all_shown(telegram), "every paragraph")
        second.send_signal(signal.SIGTERM)
        assert await _ended(second) == 0
    finally:
        await reap(second)
    return _texts(telegram)


async def test_sigkill_mid_stream_then_restart_answers_in_full_once(tmp_path: Path) -> None:
    state = tmp_path / "state"
    prompt = "tell me the long story"
    async with FakeTelegramAPI(TOKEN) as telegram, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        config = crash_config(tmp_path, state, telegram, model)
        model.push(long_answer(delay=0.6))
        first = await _start(config, tmp_path)
        try:
            telegram.push_text(DM, prompt)
            await until(_settled_posts(state, 3), "three paragraphs posted")
            first.kill()  # SIGKILL: no shutdown code runs
            await _ended(first)
        finally:
            await reap(first)
        shown_before = len(_texts(telegram))
        assert 3 <= shown_before < len(PARAGRAPHS)

        model.push(long_answer(delay=0.0))
        texts = await _restart_and_finish(config, tmp_path, telegram)

    for paragraph in PARAGRAPHS:
        assert texts.count(paragraph) == 1, paragraph  # every paragraph, none twice
    assert texts.count(NOTICE) == 1
    assert texts.index(NOTICE) == shown_before  # told before the answer goes on
    # The model was asked again, with the user's turn once in the history.
    assert len(model.requests) == 2
    assert _user_turns(model.requests[1].body, prompt) == 1


async def test_sigkill_before_the_model_answered_then_restart_answers(tmp_path: Path) -> None:
    state = tmp_path / "state"
    prompt = "are you there"
    async with FakeTelegramAPI(TOKEN) as telegram, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        config = crash_config(tmp_path, state, telegram, model)
        model.push(stream(stall=True))  # the model takes the request and says nothing
        first = await _start(config, tmp_path)
        try:
            telegram.push_text(DM, prompt)
            await until(lambda: len(model.requests) == 1, "the model asked")
            first.kill()
            await _ended(first)
        finally:
            await reap(first)
        assert _texts(telegram) == []

        model.push(stream(text("Yes, ", "here.")), stream(text("Noted.")))
        second = await _start(config, tmp_path)
        try:
            await telegram.wait_for_call("sendMessage", 1, ok_only=True, timeout=HANG_GUARD)
            telegram.push_text(DM, "good")
            await telegram.wait_for_call("sendMessage", 2, ok_only=True, timeout=HANG_GUARD)
            second.send_signal(signal.SIGTERM)
            assert await _ended(second) == 0
        finally:
            await reap(second)

    # Nothing was shown before the crash, so there is nothing to call interrupted.
    assert _texts(telegram) == ["Yes, here.", "Noted."]
    assert len(model.requests) == 3
    assert _user_turns(model.requests[1].body, prompt) == 1
    # The next request carries the recovered turn and its answer.
    later = json.dumps(model.requests[2].body["messages"])
    assert later.count(prompt) == 1 and "Yes, here." in later


async def test_sigterm_past_the_grace_resumes_after_restart_and_tells_once(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    prompt = "a long one please"
    async with FakeTelegramAPI(TOKEN) as telegram, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        config = crash_config(tmp_path, state, telegram, model)
        # Longer than any grace the daemon may have (12 x 1 s).
        model.push(long_answer(delay=1.0))
        first = await _start(config, tmp_path)
        try:
            telegram.push_text(DM, prompt)
            await until(_settled_posts(state, 3), "three paragraphs posted")
            first.send_signal(signal.SIGTERM)
            assert await _ended(first) == 0
        finally:
            await reap(first)
        shown_before = len(_texts(telegram))
        assert shown_before < len(PARAGRAPHS)
        # Left unanswered in the inbox for the next start.
        assert _query(state, "SELECT state FROM inbox") == [("running",)]

        model.push(long_answer(delay=0.0))
        texts = await _restart_and_finish(config, tmp_path, telegram)

    for paragraph in PARAGRAPHS:
        assert texts.count(paragraph) == 1, paragraph
    assert texts.count(NOTICE) == 1
    assert _query(state, "SELECT state FROM inbox") == [("answered",)]
    assert _user_turns(model.requests[1].body, prompt) == 1


class ServingTelegram(FakeTelegramAPI):
    """The Telegram fake, noting which updates it handed out."""

    def __init__(self, token: str) -> None:
        super().__init__(token)
        self.served: list[int] = []

    async def _api_getUpdates(self, params: dict[str, Any]) -> Any:
        updates = await super()._api_getUpdates(params)
        self.served.extend(int(u["update_id"]) for u in updates)
        return updates


async def test_telegram_an_update_not_accepted_stays_with_telegram(tmp_path: Path) -> None:
    state = tmp_path / "state"
    async with ServingTelegram(TOKEN) as telegram, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        config = crash_config(tmp_path, state, telegram, model)
        first = await _start(config, tmp_path)
        lock = None
        try:
            await telegram.wait_for_call("getUpdates", 1, timeout=HANG_GUARD)  # polling
            # Another writer holds the database: the accept cannot commit yet.
            lock = sqlite3.connect(state / "botd.sqlite3", isolation_level=None)
            lock.execute("BEGIN IMMEDIATE")
            telegram.push_text(DM, "still there?")
            pushed = telegram._next_update_id - 1
            await until(lambda: pushed in telegram.served, "the update handed out")
            # The accept fails (the database stays locked past its busy timeout); the next
            # poll must not confirm the update, but ask for it again.
            polls = len(telegram.calls_to("getUpdates"))
            await telegram.wait_for_call("getUpdates", polls + 1, timeout=HANG_GUARD)
            # The sender is told once that the message could not be taken (sent in the
            # background, so not ordered with the poll).
            await telegram.wait_for_call("sendMessage", 1, ok_only=True, timeout=HANG_GUARD)
            first.kill()  # dies before the message was ever accepted
            await _ended(first)
        finally:
            if lock is not None:
                lock.execute("ROLLBACK")
                lock.close()
            await reap(first)
        # Never confirmed: no getUpdates asked for an offset past it.
        offsets = [int(c.params.get("offset") or 0) for c in telegram.calls_to("getUpdates")]
        assert max(offsets) <= pushed
        assert _query(state, "SELECT count(*) FROM inbox") == [(0,)]

        model.push(stream(text("Yes.")))
        second = await _start(config, tmp_path)
        try:
            # The first process told the sender once that it could not take the message; the
            # second answers the update Telegram hands out again.
            await telegram.wait_for_call("sendMessage", 2, ok_only=True, timeout=HANG_GUARD)
            second.send_signal(signal.SIGTERM)
            assert await _ended(second) == 0
        finally:
            await reap(second)
    assert _texts(telegram) == [STORE_FAILED_NOTICE, "Yes."]
    assert _query(state, "SELECT state FROM inbox") == [("answered",)]


async def test_sigkill_mid_preview_then_restart_finishes_that_same_preview(tmp_path: Path) -> None:
    # ``delivery: edit``: the preview's message is kept by the run's anchor, so the resumed
    # run edits it into the answer instead of leaving it stale beside a second copy. (A
    # Slack stream is kept the same way; a Telegram draft is no message and needs nothing.)
    state = tmp_path / "state"
    async with FakeTelegramAPI(TOKEN) as telegram, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        config = crash_config(tmp_path, state, telegram, model, extra="    delivery: edit\n")
        model.push(long_answer(delay=0.45))
        first = await _start(config, tmp_path)
        try:
            telegram.push_text(DM, "tell me the long story")
            await until(lambda: bool(_query(state, "SELECT anchor FROM previews")), "kept")
            await telegram.wait_for_call("editMessageText", ok_only=True, timeout=HANG_GUARD)
            first.kill()
            await _ended(first)
        finally:
            await reap(first)
        (preview,) = telegram.visible(DM)
        assert PARAGRAPHS[-1] not in preview  # cut mid-answer

        model.push(long_answer(delay=0.0))
        second = await _start(config, tmp_path)
        try:
            await until(lambda: PARAGRAPHS[-1] in "".join(telegram.visible(DM)), "the answer")
            second.send_signal(signal.SIGTERM)
            assert await _ended(second) == 0
        finally:
            await reap(second)

    (answer,) = telegram.visible(DM)  # one message: the preview, finished in place
    assert all(answer.count(p) == 1 for p in PARAGRAPHS)
    assert len(telegram.calls_to("sendMessage", ok_only=True)) == 1


async def test_sigkill_mid_slack_stream_then_restart_ends_that_same_stream_as_the_answer(
    tmp_path: Path,
) -> None:
    # ``delivery: stream`` in a Slack DM: the open stream is kept by the run's anchor, so
    # the resumed run stops it and edits it into the whole answer: one message, none left
    # streaming, no second copy posted.
    state = tmp_path / "state"
    async with FakeSlack() as slack, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        config = slack_crash_config(tmp_path, state, slack, model, extra="    delivery: stream\n")
        model.push(long_answer(delay=0.45))
        first = await _start(config, tmp_path)
        try:
            await slack.wait_socket(HANG_GUARD)
            hello = message_event("D1", "100.000001", "tell me the long story")
            await slack.send_event(event_callback(hello))
            await until(lambda: bool(slack.calls_to("chat.appendStream")), "the stream grew")
            await until(lambda: _query(state, "SELECT streaming FROM previews") == [(1,)], "kept")
            first.kill()
            await _ended(first)
        finally:
            await reap(first)
        (streamed,) = slack.visible("D1")
        assert PARAGRAPHS[-1] not in streamed  # cut mid-answer
        assert slack.streaming  # left open by the killed process

        model.push(long_answer(delay=0.0))
        second = await _start(config, tmp_path)
        try:
            await until(lambda: PARAGRAPHS[-1] in "".join(slack.visible("D1")), "the answer")
            await until(lambda: not slack.streaming, "the stream stopped")
            second.send_signal(signal.SIGTERM)
            assert await _ended(second) == 0
        finally:
            await reap(second)

    (answer,) = slack.visible("D1")  # one message: the stream, finished in place
    assert all(answer.count(p) == 1 for p in PARAGRAPHS)
    assert len(slack.calls_to("chat.startStream")) == 1
    assert len(slack.calls_to("chat.stopStream")) == 1
    assert slack.calls_to("chat.postMessage") == []
    assert _query(state, "SELECT state FROM inbox") == [("answered",)]


async def test_sigkill_mid_telegram_draft_then_restart_posts_the_answer_once(
    tmp_path: Path,
) -> None:
    # ``delivery: stream`` in a Telegram private chat: a draft is no message (the chat drops
    # it once a message is posted there), so nothing is kept; the resumed run drafts anew and
    # posts the whole answer once.
    state = tmp_path / "state"
    async with FakeTelegramAPI(TOKEN) as telegram, FakeAnthropicAPI(api_key="sk-ant-test") as model:
        config = crash_config(tmp_path, state, telegram, model, extra="    delivery: stream\n")
        model.push(long_answer(delay=0.45))
        first = await _start(config, tmp_path)
        try:
            telegram.push_text(DM, "tell me the long story")
            await telegram.wait_for_call("sendMessageDraft", 2, ok_only=True, timeout=HANG_GUARD)
            first.kill()
            await _ended(first)
        finally:
            await reap(first)
        assert telegram.visible(DM) == []  # only a draft showed, cut mid-answer
        cut = telegram.draft_showing(DM)
        assert cut is not None and PARAGRAPHS[-1] not in cut

        model.push(long_answer(delay=0.0))
        second = await _start(config, tmp_path)
        try:
            await until(lambda: bool(telegram.visible(DM)), "the answer")
            second.send_signal(signal.SIGTERM)
            assert await _ended(second) == 0
        finally:
            await reap(second)

    (answer,) = telegram.visible(DM)  # the answer once; the draft ended with it
    assert all(answer.count(p) == 1 for p in PARAGRAPHS)
    assert telegram.draft_showing(DM) is None
    assert telegram.calls_to("editMessageText") == []
