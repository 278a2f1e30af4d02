"""The web page in a real browser (headless chromium, ``tests/web/conftest.py``) over a
whole botd in-process: Telegram through the loopback Bot API, the model through the fake
Messages API. The page follows the daemon live, without a reload: Telegram taken away shows
its channel down and back up, a run appears in flight and ends with its stop reason, a
pending approval is approved from the page (the chat shows who decided), a user's
``<script>`` is shown as text in the conversation, and a message typed into the Chat view
is answered there as it streams, whole and once after a reload mid-answer.
``BOTD_SCREENSHOT=1`` writes
docs/images/web-console.png from the first test."""

from __future__ import annotations

import os
from pathlib import Path

from selenium import webdriver

from tests.approvals.harness import approvals_yaml, model_calls_the_tool, request_posted
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.support.chat import DM, chatting
from tests.support.daemon_inprocess import ANTHROPIC_KEY
from tests.support.health_probe import free_port
from tests.support.waiting import until
from tests.web.conftest import Page

SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "images" / "web-console.png"
SCRIPT = "<script>window.pwned = 1</script> what is new?"


def web_yaml(port: int) -> str:
    # down_after 0: a failed poll shows the channel down at once.
    return f"health:\n  enabled: false\n  down_after: 0\nweb:\n  enabled: true\n  port: {port}\n"


async def test_the_page_follows_channels_and_runs_live_and_shows_text_as_text(
    tmp_path: Path, browser: webdriver.Chrome
) -> None:
    port = free_port()
    async with (
        FakeTelegramAPI() as telegram,
        FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model,
        chatting(tmp_path, telegram, model=model, sections=[web_yaml(port)]) as chat,
    ):
        page = Page(browser, f"http://127.0.0.1:{port}")
        await page.open()
        await page.shows("#link", "live")
        await page.shows("#overall", "All well.")
        assert "up" in await page.shows(".channel-telegram", "telegram")

        outage = await telegram.outage()
        await page.shows(".channel-telegram", "down")
        await page.shows("#problems", "channel telegram")
        await outage.end()
        await page.shows(".channel-telegram", "up")
        await page.lacks("#problems", "channel telegram")

        release = model.hold()
        model.responder = lambda body: stream(text("Nothing much."))
        await chat.send(SCRIPT)
        await page.shows("#in-flight", f"telegram:{DM}")
        release.set()
        assert await chat.reply() == "Nothing much."
        await page.lacks("#in-flight", f"telegram:{DM}")
        await page.shows("#recent", "end_turn")
        if os.environ.get("BOTD_SCREENSHOT") == "1":
            await page.screenshot(str(SCREENSHOT))

        await page.click('nav button[data-view="conversations"]')
        await page.click("#conversation-list tr.clickable")
        shown = await page.shows("#transcript", SCRIPT)
        assert "Nothing much." in shown and "sent" in shown
        assert "&lt;script&gt;" in await page.html("#transcript")
        assert await page.script("return window.pwned") is None  # never run


async def test_a_pending_approval_is_approved_from_the_page(
    tmp_path: Path, browser: webdriver.Chrome
) -> None:
    port = free_port()
    async with (
        FakeTelegramAPI() as telegram,
        FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model,
        chatting(
            tmp_path, telegram, model=model, sections=[approvals_yaml(), web_yaml(port)]
        ) as chat,
    ):
        page = Page(browser, f"http://127.0.0.1:{port}")
        await page.open()
        await page.click('nav button[data-view="approvals"]')
        await page.shows("#approval-list", "Nothing waits")
        model_calls_the_tool(model)
        await chat.send("which jobs do I have?")
        await page.shows("#approval-list", "schedule")
        await page.shows("#approval-count", "(1)")
        await until(lambda: request_posted(tmp_path / "state"), "the request in the chat")
        await page.click('#approval-list button[data-verb="approve"]')
        await page.shows("#approval-note", "Approved.")
        await page.shows("#approval-list", "Nothing waits")
        # The chat shows the outcome on the request, and the run went on.
        await until(
            lambda: any("Approved by the web page" in t for t in chat.shown()),
            "the outcome in the chat",
        )
        await until(lambda: "All done." in chat.shown(), "the answer")


async def test_a_message_typed_into_the_box_is_answered_on_the_page_once_across_a_reload(
    tmp_path: Path, browser: webdriver.Chrome
) -> None:
    """The answer grows in place as the model streams it; the page reloaded mid-answer shows
    it as it stands, goes on with it, and ends with the question and the whole answer once."""
    port = free_port()
    words = ["The ", "answer ", "comes ", "in ", "many ", "small ", "parts, ", "then ", "ends."]
    whole = "".join(words)
    async with (
        FakeTelegramAPI() as telegram,
        FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model,
        chatting(tmp_path, telegram, model=model, sections=[web_yaml(port)]),
    ):
        model.push(stream(text(*words), delay=0.4))
        page = Page(browser, f"http://127.0.0.1:{port}")
        await page.open()
        await page.click('nav button[data-view="chat"]')
        await page.type("#chat-text", SCRIPT)
        await page.click('#chat-form button[type="submit"]')
        await page.shows("#chat-log li.user", SCRIPT)
        await page.shows("#chat-log li.bot", "The answer")  # growing, not yet whole
        assert whole not in await page.text("#chat-log li.bot")

        await page.open()  # reloaded mid-answer
        await page.click('nav button[data-view="chat"]')
        await page.shows("#chat-log li.bot.final", whole)
        assert await page.text("#chat-log li.user") == SCRIPT
        assert await page.text("#chat-log li.bot") == whole  # one answer, whole
        assert "&lt;script&gt;" in await page.html("#chat-log")
        assert await page.script("return window.pwned") is None
    assert len(model.requests) == 1
