"""``/metrics`` counts what happened, end to end: the real daemon, Telegram's SDK over the
loopback Bot API, the Anthropic SDK over its fake, and a Slack channel whose server is out of
reach. After a scripted conversation (replies, a send retried after a 5xx, a command answer,
an upload, a pairing reply, a run held in flight, a channel down) every metric has the samples
that conversation should leave, read with ``prometheus_client``'s own parser.
"""

from __future__ import annotations

import json
from pathlib import Path

from botd.app import App
from botd.store import InboxBacklog
from botd.store.sqlite import SqliteStore
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text
from tests.fakes.telegram_api import FakeTelegramAPI, server_error
from tests.support.daemon_inprocess import (
    anthropic_yaml,
    daemon_running,
    daemon_store,
    telegram_yaml,
)
from tests.support.health_probe import free_port, named, scrape, value
from tests.support.waiting import until

ALICE, STRANGER = 111, 333


def config_text(
    tmp_path: Path, telegram: FakeTelegramAPI, model: FakeAnthropicAPI, health_port: int
) -> str:
    """Telegram (pairing; Alice allowed), Slack at a port nobody listens on, local uploads
    from ``tmp_path/out``, the health endpoint on ``health_port``."""
    telegram_section = telegram_yaml(
        telegram, "poll_timeout: 1", "dm_policy: pairing", f'allow_from: ["{ALICE}"]'
    )
    slack_section = f"""  slack:
    bot_token: xoxb-test
    app_token: xapp-test
    api_base_url: "http://127.0.0.1:{free_port()}/api/"
"""
    return (
        f"state_dir: {json.dumps(str(tmp_path / 'state'))}\n"
        f"health: {{enabled: true, port: {health_port}}}\n"
        f"media: {{outbound_dir: {json.dumps(str(tmp_path / 'out'))}}}\n"
        + anthropic_yaml(model)
        + telegram_section
        + slack_section
    )


async def test_every_metric_counts_a_scripted_conversation(
    tmp_path: Path, telegram: FakeTelegramAPI, model: FakeAnthropicAPI
) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "report.txt").write_text("all good\n", encoding="utf-8")
    port = free_port()
    config = config_text(tmp_path, telegram, model, port)

    def shown(count: int) -> bool:
        return len(telegram.visible(ALICE)) >= count

    def slack_down(daemon: App) -> bool:
        return daemon.started and daemon.channel_states().get("slack") == "down"

    async with daemon_running(config, ready=slack_down) as daemon:
        model.push(stream(text("Hi there")))
        telegram.push_text(ALICE, "hello")
        await until(lambda: shown(1), "the first reply")

        # The reply's first send meets a 502; it is retried and shows once.
        telegram.fail_next("sendMessage", server_error(502), chat_id=ALICE)
        model.push(stream(text("Back again")))
        telegram.push_text(ALICE, "again")
        await until(lambda: shown(2), "the reply retried after a 502")

        telegram.push_text(ALICE, "/help")
        await until(lambda: shown(3), "the command's answer")

        model.push(stream(text(f"Here is the report.\nMEDIA: {tmp_path / 'out' / 'report.txt'}")))
        telegram.push_text(ALICE, "the report, please")
        await until(lambda: len(telegram.uploads) == 1, "the upload")

        telegram.push_text(STRANGER, "let me in")  # not allowed: a pairing code, no message in
        await until(lambda: len(telegram.visible(STRANGER)) == 1, "the pairing reply")

        # A run whose model goes silent: it stays in flight and its message unanswered.
        model.push(stream(text("never shown"), hang_after=2))
        telegram.push_text(ALICE, "think hard")
        await until(lambda: daemon.metrics.runs_in_flight == 1, "the held run")
        await until(lambda: len(model.streams) == 4, "the held run's request")
        held, _ = await scrape(port)

        telegram.push_text(ALICE, "/stop")
        await until(lambda: shown(4), "the stop's confirmation")
        await until(lambda: daemon.metrics.runs_in_flight == 0, "the run's end")

        assert daemon.runtime is not None
        store = daemon_store(daemon)
        await until(lambda: inbox_empty(store), "the stopped message finished")
        samples, types = await scrape(port)

    # While the run was held: one run in flight, its message waiting, an age for it.
    assert value(held, "botd_runs_in_flight") == 1
    assert value(held, "botd_inbox_backlog") == 1
    oldest = value(held, "botd_inbox_oldest_unanswered_seconds")
    assert oldest is not None and oldest > 0
    assert value(held, "botd_outbox_pending") == 0

    assert types["botd_messages_in"] == "counter"
    assert types["botd_messages_out"] == "counter"
    assert types["botd_errors"] == "counter"
    assert types["botd_reply_latency_seconds"] == "histogram"
    for gauge in (
        "botd_channel_up",
        "botd_runs_in_flight",
        "botd_inbox_backlog",
        "botd_inbox_oldest_unanswered_seconds",
        "botd_outbox_pending",
    ):
        assert types[gauge] == "gauge", gauge

    # hello, again, /help, the report, think hard, /stop: the stranger's was not accepted.
    assert named(samples, "botd_messages_in_total") == {frozenset({("channel", "telegram")}): 6}
    # Three replies, the command's answer, the upload, the pairing code, the stop's
    # confirmation: each message the platform confirmed, once.
    confirmed = len(telegram.calls_to("sendMessage", ok_only=True)) + len(
        telegram.calls_to("sendDocument", ok_only=True)
    )
    assert confirmed == 6
    assert named(samples, "botd_messages_out_total") == {
        frozenset({("channel", "telegram")}): confirmed
    }
    errors = named(samples, "botd_errors_total")
    assert errors[frozenset({("channel", "telegram"), ("kind", "send_retry")})] == 1
    assert errors[frozenset({("channel", "slack"), ("kind", "channel_down")})] >= 1
    assert set(errors) == {
        frozenset({("channel", "telegram"), ("kind", "send_retry")}),
        frozenset({("channel", "slack"), ("kind", "channel_down")}),
    }  # nothing failed for good, no run failed (a stopped run is no failure)

    assert value(samples, "botd_channel_up", channel="telegram") == 1
    assert value(samples, "botd_channel_up", channel="slack") == 0
    assert value(samples, "botd_runs_in_flight") == 0
    assert value(samples, "botd_inbox_backlog") == 0
    assert value(samples, "botd_inbox_oldest_unanswered_seconds") == 0
    assert value(samples, "botd_outbox_pending") == 0

    # Four runs (hello, again, the report, think hard); three showed a piece.
    assert named(samples, "botd_runs_total") == {frozenset({("channel", "telegram")}): 4}
    assert value(samples, "botd_reply_latency_seconds_count", channel="telegram") == 3
    assert value(samples, "botd_reply_latency_seconds_bucket", channel="telegram", le="+Inf") == 3
    tokens = named(samples, "botd_tokens_total")
    assert tokens[frozenset({("model", "claude-test"), ("kind", "input")})] > 0


async def test_an_edited_preview_counts_once_and_a_reply_given_up_counts_as_failed(
    tmp_path: Path, telegram: FakeTelegramAPI, model: FakeAnthropicAPI
) -> None:
    port = free_port()
    config = (
        f"state_dir: {json.dumps(str(tmp_path / 'state'))}\n"
        f"health: {{enabled: true, port: {port}}}\n"
        + anthropic_yaml(model)
        + telegram_yaml(
            telegram,
            "poll_timeout: 1",
            "dm_policy: open",
            "delivery: edit",
            "delivery_retry_for: 1",
        )
    )
    async with daemon_running(config) as daemon:
        # Streamed slowly (the fake paces its frames): the preview is posted with the first
        # words, edited as the text grows, and finished in place.
        model.push(stream(text("The answer ", "grows ", "word ", "by ", "word."), delay=0.5))
        telegram.push_text(ALICE, "hello")
        await until(lambda: telegram.visible(ALICE) == ["The answer grows word by word."], "it")
        assert telegram.calls_to("editMessageText", ok_only=True)
        assert len(telegram.calls_to("sendMessage", ok_only=True)) == 1

        # Alice's chat cannot be reached: the reply is retried for its budget, then given up.
        telegram.fail_next("sendMessage", server_error(502), times=10_000, chat_id=ALICE)
        model.push(stream(text("Lost")))
        telegram.push_text(ALICE, "again")
        await until(
            lambda: (
                daemon.metrics.value("botd_errors_total", channel="telegram", kind="send_failed")
                > 0
            ),
            "the reply given up",
        )
        samples, _ = await scrape(port)

    assert named(samples, "botd_messages_out_total") == {frozenset({("channel", "telegram")}): 1}
    assert value(samples, "botd_errors_total", channel="telegram", kind="send_failed") == 1
    retries = value(samples, "botd_errors_total", channel="telegram", kind="send_retry")
    assert retries is not None and retries >= 1
    assert value(samples, "botd_reply_latency_seconds_count", channel="telegram") == 1


async def inbox_empty(store: SqliteStore) -> InboxBacklog | None:
    """The store's inbox backlog once nothing waits in it (None until then)."""
    backlog = await store.inbox_backlog()
    return backlog if backlog.count == 0 else None
