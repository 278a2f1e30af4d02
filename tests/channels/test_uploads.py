"""Files out on Slack and Discord: the delivery layer fetches a ``MEDIA:`` URL through the
address guard and the adapter uploads it with the real SDK over the loopback fakes
(slack-sdk's ``files_upload_v2`` sequence; discord.py's attachments). A failure of Slack's
upload URL is retried and the file is shared once; a platform refusal posts the link once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from botd.channels.discord.adapter import DiscordAdapter
from botd.channels.slack.adapter import SlackAdapter
from botd.chat import Target
from botd.delivery import ChannelDelivery, RetrySettings
from botd.delivery.media import MediaSettings
from botd.store.sqlite import SqliteStore
from botd.subscriber import BlockReply
from tests.channels.discord.harness import Sink, make_adapter
from tests.channels.routed import through_router
from tests.fakes.discord_api import CHANNEL_ID, FakeDiscordAPI
from tests.fakes.files import FileServer
from tests.fakes.slack_api import FakeSlack
from tests.support.waiting import HANG_GUARD

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8
LOOPBACK = MediaSettings(allow_hosts=("127.0.0.1",))
FAST_RETRY = RetrySettings(budget=10.0, first=0.01, cap=0.05)


@pytest.fixture
async def server() -> AsyncIterator[FileServer]:
    async with FileServer({"cat.png": ("image/png", PNG)}) as files:
        yield files


@pytest.fixture
async def slack() -> AsyncIterator[tuple[FakeSlack, SlackAdapter]]:
    async with FakeSlack() as fake:
        adapter = SlackAdapter(
            bot_token="xoxb-test", app_token="xapp-test", api_base_url=fake.base_url
        )
        yield fake, adapter
        await adapter.stop()


@pytest.fixture
async def discord_bot(tmp_path: Path) -> AsyncIterator[tuple[FakeDiscordAPI, DiscordAdapter]]:
    async with FakeDiscordAPI() as fake:
        with SqliteStore.open(tmp_path / "state") as store:
            adapter = make_adapter(fake)
            sink = through_router(store, Sink(), "discord")
            await asyncio.wait_for(adapter.start(sink), HANG_GUARD)
            yield fake, adapter
            await asyncio.wait_for(adapter.stop(), HANG_GUARD)


def delivery(
    name: str, adapter: SlackAdapter | DiscordAdapter, media: MediaSettings
) -> ChannelDelivery:
    return ChannelDelivery({name: adapter}, retry=FAST_RETRY, media=media)


async def test_slack_uploads_with_files_upload_v2(
    slack: tuple[FakeSlack, SlackAdapter], server: FileServer
) -> None:
    fake, adapter = slack
    reply = BlockReply("Here is a *cat*.", media_urls=[server.url("cat.png")])
    refs = await delivery("slack", adapter, LOOPBACK).deliver(Target("slack", "C1"), reply)
    methods = [call.method for call in fake.calls]
    assert methods == ["files.getUploadURLExternal", "files.completeUploadExternal"]
    [shared] = fake.shared_files
    assert (shared.data, shared.channel, shared.title) == (PNG, "C1", "cat.png")
    assert shared.initial_comment == "Here is a _cat_."  # rendered as mrkdwn
    assert [ref.message_id for ref in refs] == [shared.file_id]
    assert fake.calls_to("chat.postMessage") == []


async def test_slack_upload_url_failure_is_retried_and_shared_once(
    slack: tuple[FakeSlack, SlackAdapter], server: FileServer
) -> None:
    fake, adapter = slack
    fake.fail_upload(500)
    reply = BlockReply("", media_urls=[server.url("cat.png")])
    await delivery("slack", adapter, LOOPBACK).deliver(
        Target("slack", "C1", thread_id="9.1"), reply
    )
    assert len(fake.upload_posts) == 2
    [shared] = fake.shared_files
    assert (shared.data, shared.thread_ts) == (PNG, "9.1")


async def test_slack_refusal_posts_the_link_once(
    slack: tuple[FakeSlack, SlackAdapter], server: FileServer, caplog: pytest.LogCaptureFixture
) -> None:
    fake, adapter = slack
    fake.fail_next("files.completeUploadExternal", "not_in_channel")
    url = server.url("cat.png")
    await delivery("slack", adapter, LOOPBACK).deliver(
        Target("slack", "C1"), BlockReply("A cat.", media_urls=[url])
    )
    assert fake.shared_files == []
    [post] = fake.calls_to("chat.postMessage")
    assert post.args["text"].startswith("A cat.")
    assert post.args["text"].count(url) == 1
    assert "not_in_channel" in caplog.text  # in Slack's words


async def test_slack_default_guard_refuses_loopback(
    slack: tuple[FakeSlack, SlackAdapter], server: FileServer
) -> None:
    fake, adapter = slack
    url = server.url("cat.png")
    await delivery("slack", adapter, MediaSettings()).deliver(
        Target("slack", "C1"), BlockReply("", media_urls=[url])
    )
    assert server.requests == []
    assert fake.calls_to("files.getUploadURLExternal") == []
    [post] = fake.calls_to("chat.postMessage")
    assert url in post.args["text"]


async def test_discord_uploads_an_attachment_with_the_caption(
    discord_bot: tuple[FakeDiscordAPI, DiscordAdapter], server: FileServer
) -> None:
    fake, adapter = discord_bot
    reply = BlockReply(
        "A cat.", media_urls=[server.url("cat.png")], reply_to_id="1600000000000000001"
    )
    target = Target("discord", str(CHANNEL_ID))
    refs = await delivery("discord", adapter, LOOPBACK).deliver(target, reply)
    [post] = fake.message_posts()
    [attachment] = post.files
    assert (attachment.filename, attachment.data) == ("cat.png", PNG)
    assert post.body["content"] == "A cat."
    assert int(post.body["message_reference"]["message_id"]) == 1600000000000000001
    assert len(refs) == 1


async def test_discord_file_too_large_posts_the_link(
    discord_bot: tuple[FakeDiscordAPI, DiscordAdapter], server: FileServer
) -> None:
    fake, adapter = discord_bot
    server.files["big.bin"] = ("application/octet-stream", b"x" * (10 * 1024 * 1024 + 1))
    url = server.url("big.bin")
    settings = MediaSettings(allow_hosts=("127.0.0.1",), max_bytes=50 * 1024 * 1024)
    await delivery("discord", adapter, settings).deliver(
        Target("discord", str(CHANNEL_ID)), BlockReply("", media_urls=[url])
    )
    [post] = fake.message_posts()
    assert post.files == []
    assert post.body["content"] == url
