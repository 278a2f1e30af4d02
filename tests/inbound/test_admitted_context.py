"""Context only from admitted people, end to end: what botd shows the model besides the prompt
(a Slack thread's earlier messages, kept group chatter, edits, and the files they came with)
comes only from senders the access policy admits in that chat, and the bot's own lines.
Real python-telegram-bot, slack-bolt and anthropic SDKs over the loopback fakes, the whole
daemon in the test's loop.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from botd.app import App
from botd.channels.slack.threads import THREAD_HEADER, refused_line, render_thread
from botd.inbound.kept_context import CONTEXT_HEADER, EDITED
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.slack_api import (
    BOT_ID,
    BOT_USER_ID,
    FakeSlack,
    event_callback,
    message_changed,
)
from tests.fakes.telegram_api import BOT_USERNAME, FakeTelegramAPI, user
from tests.media.files import JPEG, PNG
from tests.media.telegram_botd import images, texts
from tests.support.daemon_inprocess import (
    ANTHROPIC_KEY,
    HANG_GUARD,
    anthropic_yaml,
    config_yaml,
    daemon_running,
    slack_yaml,
    telegram_yaml,
)
from tests.support.waiting import until

SECRET = "SECRET"
"""In every text of a refused sender: the model's requests must not contain it."""


def _user_content(model: FakeAnthropicAPI, request: int = -1) -> list[dict[str, Any]]:
    """The content blocks of the last user message of model request ``request``."""
    messages = model.requests[request].body["messages"]
    content = [m for m in messages if m["role"] == "user"][-1]["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def _everything_sent(model: FakeAnthropicAPI) -> str:
    """Every request the model was sent, as one text."""
    return "\n".join(json.dumps(r.body) for r in model.requests)


# --- Slack threads -----------------------------------------------------------------------------

CHANNEL = "C42"
THREAD = "1700000000.000100"
SLACK_TOKEN = "xoxb-test"


def _slack_config(tmp_path: Path, slack: FakeSlack, model: FakeAnthropicAPI) -> str:
    # Only U1 and U7 may address the bot in this channel.
    only = f"groups: {{{CHANNEL}: {{allow_from: [U1, U7]}}}}"
    return config_yaml(tmp_path, anthropic_yaml(model), slack_yaml(slack, only))


def _said(ts: str, user_id: str, said: str, **more: Any) -> dict[str, Any]:
    return {"type": "message", "user": user_id, "text": said, "ts": ts, **more}


async def test_a_slack_thread_shows_only_admitted_senders_and_the_bots_own_lines(
    tmp_path: Path,
) -> None:
    thread = {"thread_ts": THREAD}
    async with FakeSlack() as slack, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        slack.replies[THREAD] = [
            _said(THREAD, "U9", f"{SECRET} plan, do not tell the bot", **thread),
            _said("1700000000.000200", "U1", "The deploy failed", **thread),
            _said("1700000000.000250", "U9", f"{SECRET} password is hunter2", **thread),
            _said("1700000000.000300", BOT_USER_ID, "Earlier bot note", **thread),
            # Another bot, not on allow_from: left out like a person would be.
            {
                **_said("1700000000.000320", "", f"{SECRET} from a bot", **thread),
                "subtype": "bot_message",
                "bot_id": "B77",
            },
            {**_said("1700000000.000350", "", "A later bot note", **thread), "bot_id": BOT_ID},
        ]
        model.push(stream(text("Roll back.")))
        async with daemon_running(_slack_config(tmp_path, slack, model)):
            mention = _said(
                "1700000000.000400",
                "U7",
                f"<@{BOT_USER_ID}> what should we do?",
                channel=CHANNEL,
                channel_type="channel",
                user_profile={"display_name": "Sam"},
                **thread,
            )
            await slack.send_event(event_callback(mention))
            await until(lambda: bool(slack.calls_to("chat.postMessage")), "the answer", HANG_GUARD)
        # The refused sender is not even looked up by name.
        assert [c.args["user"] for c in slack.calls_to("users.info")] == ["U1"]
    assert _user_content(model)[0]["text"].splitlines() == [
        THREAD_HEADER,
        refused_line(3),
        "[id U1] The deploy failed",
        "[you] Earlier bot note",
        "[you] A later bot note",
        "",
        "[Sam (id U7)] what should we do?",
    ]
    sent = _everything_sent(model)
    assert SECRET not in sent and "U9" not in sent and "B77" not in sent


def test_the_left_out_count_comes_before_the_first_message_and_the_limit_after_it() -> None:
    thread = [_said(f"1.{n:06d}", "U1", f"reply {n}") for n in range(5)]
    shown = render_thread(thread, 3, refused=2).splitlines()
    assert shown == [
        THREAD_HEADER,
        refused_line(2),
        "[id U1] reply 0",
        "[… 2 more message(s) of the thread left out]",
        "[id U1] reply 3",
        "[id U1] reply 4",
    ]
    assert render_thread([], 3, refused=2) == f"{THREAD_HEADER}\n{refused_line(2)}"
    assert render_thread([], 3) == "" and render_thread(thread, 0, refused=2) == ""


async def test_a_slack_thread_of_refused_senders_alone_says_so(tmp_path: Path) -> None:
    async with FakeSlack() as slack, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        slack.replies[THREAD] = [_said(THREAD, "U9", f"{SECRET} look at this", thread_ts=THREAD)]
        model.push(stream(text("I cannot see it.")))
        async with daemon_running(_slack_config(tmp_path, slack, model)):
            mention = _said(
                "1700000000.000400",
                "U1",
                f"<@{BOT_USER_ID}> what do you think of the above?",
                channel=CHANNEL,
                channel_type="channel",
                thread_ts=THREAD,
            )
            await slack.send_event(event_callback(mention))
            await until(lambda: bool(slack.calls_to("chat.postMessage")), "the answer", HANG_GUARD)
    lines = _user_content(model)[0]["text"].splitlines()
    assert lines[:3] == [THREAD_HEADER, refused_line(1), ""]
    assert lines[3].endswith("what do you think of the above?")
    assert SECRET not in _everything_sent(model)


# --- kept chatter, edits and files ------------------------------------------------------------


async def _handled(slack: FakeSlack, event: dict[str, Any]) -> None:
    """Send ``event`` and wait for its acknowledgement: the router has kept or dropped it."""
    envelope = await slack.send_event(event_callback(event))
    await until(lambda: envelope in slack.acks, "the event acknowledged", HANG_GUARD)


async def test_slack_chatter_edits_and_files_of_a_refused_sender_never_reach_the_model(
    tmp_path: Path,
) -> None:
    channel = {"channel": CHANNEL, "channel_type": "channel"}
    async with FakeSlack() as slack, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        theirs = slack.add_file(PNG, name="plan.png", mimetype="image/png", token=SLACK_TOKEN)
        ours = slack.add_file(JPEG, name="menu.jpg", mimetype="image/jpeg", token=SLACK_TOKEN)
        refused = _said("1.000100", "U9", f"{SECRET} one", **channel)
        admitted = _said("1.000300", "U1", "lunch at noon?", **channel)
        events = [
            refused,
            _said(
                "1.000200", "U9", f"{SECRET} file", subtype="file_share", files=[theirs], **channel
            ),
            message_changed(refused, f"{SECRET} edited", edited_ts="1.000250"),
            admitted,
            _said("1.000400", "U1", "the menu", subtype="file_share", files=[ours], **channel),
            message_changed(admitted, "lunch at one?", edited_ts="1.000450"),
        ]
        model.push(stream(text("At one.")))
        async with daemon_running(_slack_config(tmp_path, slack, model)):
            for event in events:  # one at a time: Slack's events are handled side by side
                await _handled(slack, event)
            mention = _said("1.000500", "U7", f"<@{BOT_USER_ID}> so when?", **channel)
            await slack.send_event(event_callback(mention))
            await until(lambda: bool(slack.calls_to("chat.postMessage")), "the answer", HANG_GUARD)
    content = _user_content(model)
    assert texts(content).splitlines()[:4] == [
        CONTEXT_HEADER,
        "[id U1] lunch at noon?",
        "[id U1] the menu [sent menu.jpg]",
        f"[id U1] {EDITED} lunch at one?",
    ]
    assert images(content) == [JPEG]
    assert [path for path, _ in slack.file_downloads] == [ours["url_private"].split("-pri/")[1]]
    sent = _everything_sent(model)
    assert SECRET not in sent and "U9" not in sent and "plan.png" not in sent


GROUP = -100777
ALICE, BOB, MALLORY = 111, 222, 666
ONLY = f"allow_from: [{ALICE}, {BOB}]"


async def test_telegram_chatter_edits_and_files_of_a_refused_sender_never_reach_the_model(
    tmp_path: Path,
) -> None:
    async with FakeTelegramAPI() as telegram, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        config = config_yaml(
            tmp_path,
            anthropic_yaml(model),
            telegram_yaml(telegram, "poll_timeout: 1", "groups:", f'  "{GROUP}": {{{ONLY}}}'),
        )
        model.push(stream(text("At one.")))
        mallory, bob, alice = user(MALLORY, "Mallory"), user(BOB, "Bob"), user(ALICE, "Alice")

        def ready(daemon: App) -> bool:
            return daemon.runtime is not None and "telegram" in daemon.runtime.adapters

        async with daemon_running(config, ready=ready):
            said = telegram.push_text(GROUP, f"{SECRET} one", sender=mallory)
            telegram.push_edit(said, f"{SECRET} edited", edit_date=said["date"] + 5)
            telegram.push_file(GROUP, "photo", PNG, caption=f"{SECRET} photo", sender=mallory)
            said = telegram.push_text(GROUP, "lunch at noon?", sender=bob)
            telegram.push_file(GROUP, "photo", JPEG, caption="the menu", sender=bob)
            telegram.push_edit(said, "lunch at one?", edit_date=said["date"] + 5)
            # Updates are handled in order: this one comes after all of the above.
            telegram.push_text(GROUP, f"@{BOT_USERNAME} so when?", sender=alice)
            await telegram.wait_for_call("sendMessage", timeout=HANG_GUARD)
        # Only Bob's photo was fetched (the large size of each photo is what is read).
        fetched = {c.params["file_id"] for c in telegram.calls_to("getFile")}
    content = _user_content(model)
    assert texts(content).splitlines()[:4] == [
        CONTEXT_HEADER,
        f"[Bob (id {BOB})] lunch at noon?",
        f"[Bob (id {BOB})] the menu [sent photo.jpg]",
        f"[Bob (id {BOB})] {EDITED} lunch at one?",
    ]
    assert images(content) == [JPEG]
    assert len(fetched) == 1
    sent = _everything_sent(model)
    assert SECRET not in sent and str(MALLORY) not in sent and "Mallory" not in sent
