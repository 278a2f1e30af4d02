"""Files sent on Slack reach the model, end to end: slack-bolt inside botd against its
loopback fake, the Anthropic fake answering."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.slack_api import FakeSlack, event_callback
from tests.media.files import PNG
from tests.media.telegram_botd import images, last_user_content, texts
from tests.support.daemon_inprocess import (
    ANTHROPIC_KEY,
    HANG_GUARD,
    anthropic_yaml,
    config_yaml,
    daemon_running,
)
from tests.support.waiting import until

BOT_TOKEN = "xoxb-media-test"


def _slack_yaml(slack: FakeSlack) -> str:
    return f"""channels:
  slack:
    bot_token: {BOT_TOKEN}
    app_token: xapp-test
    api_base_url: {json.dumps(slack.base_url)}
    dm_policy: open
"""


def _dm_with_file(
    slack: FakeSlack, ts: str, text_: str, file: dict[str, object]
) -> dict[str, object]:
    return event_callback(
        {
            "type": "message",
            "subtype": "file_share",
            "channel": "D1",
            "channel_type": "im",
            "user": "U1",
            "text": text_,
            "ts": ts,
            "files": [file],
        }
    )


async def test_a_slack_image_reaches_the_model_fetched_with_the_bot_token(
    tmp_path: Path,
) -> None:
    async with FakeSlack() as slack, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        config = config_yaml(tmp_path, anthropic_yaml(model), _slack_yaml(slack))
        ready = lambda d: d.runtime is not None and "slack" in d.runtime.adapters  # noqa: E731
        async with daemon_running(config, ready=ready):
            await slack.wait_socket(HANG_GUARD)
            model.push(stream(text("A chart.")))
            file = slack.add_file(PNG, name="chart.png", mimetype="image/png", token=BOT_TOKEN)
            await slack.send_event(_dm_with_file(slack, "1.000001", "what is this", file))
            await until(
                lambda: slack.calls_to("chat.postMessage"), 'slack.calls_to("chat.postMessage")'
            )
    content = last_user_content(model)
    assert images(content) == [PNG]
    assert "what is this" in texts(content)
    assert [token for _, token in slack.file_downloads] == [BOT_TOKEN]


async def test_a_slack_file_refused_for_want_of_files_read_gets_one_line(
    tmp_path: Path,
) -> None:
    async with FakeSlack() as slack, FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model:
        config = config_yaml(tmp_path, anthropic_yaml(model), _slack_yaml(slack))
        ready = lambda d: d.runtime is not None and "slack" in d.runtime.adapters  # noqa: E731
        async with daemon_running(config, ready=ready):
            await slack.wait_socket(HANG_GUARD)
            # Served only for another token: Slack answers with its sign-in page.
            file = slack.add_file(PNG, name="chart.png", mimetype="image/png", token="xoxb-other")
            await slack.send_event(_dm_with_file(slack, "1.000002", "", file))
            await until(
                lambda: slack.calls_to("chat.postMessage"), 'slack.calls_to("chat.postMessage")'
            )
    [call] = slack.calls_to("chat.postMessage")
    assert "files:read" in str(call.args["text"])
    assert model.requests == []
