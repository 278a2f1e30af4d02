"""Files out, end to end: a reply's ``MEDIA:`` lines and the message tool's ``media`` become
real uploads, through botd's whole wiring with python-telegram-bot and the Anthropic SDK over
the loopback fakes.

URLs are served by a loopback file server that ``agent.web_fetch.allow_hosts`` lets through;
with the default guard the same URL is refused, and its link is posted once instead. Local
files come only from ``media.outbound_dir`` (a path outside it, a symlink, a hard link to a
file elsewhere is named with the reason instead), or from the conversation's own workspace
(``/workspace/...``). A 5xx on the upload is retried and the file shows
once. ``[[reply_to_current]]`` in ``blocks`` mode replies to the message being answered.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from botd.agent.providers.scripted import ScriptedProvider
from botd.app import App
from botd.channels.base import OutboundFile, SendScope
from botd.channels.console.adapter import ConsoleAdapter
from botd.chat import Capabilities, MessageRef, Target
from botd.conversation import Conversations
from botd.delivery import ChannelDelivery, Outgoing, RunOptions
from botd.delivery.media import MediaSettings, MediaUnavailable, load, shown_instead
from botd.store.sqlite import SqliteStore
from botd.subscriber import BlockReply, PartialReply
from botd.text.markup import PLAIN
from botd.workspace import workspace_dir
from tests.conversation.harness import dispatching, settings
from tests.fakes.anthropic_api import FakeAnthropicAPI, stream, text, tool_use
from tests.fakes.files import FileServer
from tests.fakes.telegram_api import FakeTelegramAPI, server_error
from tests.support.daemon_inprocess import (
    ANTHROPIC_KEY,
    HANG_GUARD,
    anthropic_yaml,
    config_yaml,
    daemon_running,
    telegram_yaml,
)
from tests.support.waiting import until

DM = 777
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
OGG = b"OggS" + b"\x00voice" * 100


def media_yaml(
    *, allow_loopback: bool, outbound_dir: Path | None = None, tools: Sequence[str] = ()
) -> str:
    hosts = '["127.0.0.1"]' if allow_loopback else "[]"
    lines = f"agent:\n  web_fetch:\n    allow_hosts: {hosts}\n"
    if tools:
        lines += f"  tools: {json.dumps(list(tools))}\n"
    if outbound_dir is not None:
        lines += f"media:\n  outbound_dir: {json.dumps(str(outbound_dir))}\n"
    return lines


@asynccontextmanager
async def botd(
    tmp_path: Path,
    *,
    allow_loopback: bool = True,
    outbound_dir: Path | None = None,
    tools: Sequence[str] = (),
) -> AsyncIterator[tuple[App, FakeTelegramAPI, FakeAnthropicAPI, FileServer]]:
    files = {"cat.png": ("image/png", PNG), "hello.ogg": ("audio/ogg", OGG)}
    async with (
        FakeTelegramAPI() as telegram,
        FakeAnthropicAPI(api_key=ANTHROPIC_KEY) as model,
        FileServer(files) as server,
    ):
        config = config_yaml(
            tmp_path,
            anthropic_yaml(model),
            telegram_yaml(telegram, "dm_policy: open"),
            media_yaml(allow_loopback=allow_loopback, outbound_dir=outbound_dir, tools=tools),
        )
        ready = lambda d: d.runtime is not None and "telegram" in d.runtime.adapters  # noqa: E731
        async with daemon_running(config, ready=ready) as daemon:
            yield daemon, telegram, model, server


async def run_over(daemon: App) -> None:
    assert daemon.runtime is not None
    await asyncio.wait_for(daemon.runtime.dispatcher.drain(), HANG_GUARD)


async def answered(daemon: App, telegram: FakeTelegramAPI, prompt: str = "a cat?") -> int:
    """Send ``prompt`` from the DM, wait until its run is over; the message's id."""
    before = len(telegram.calls)
    message = telegram.push_text(DM, prompt)
    # The run's first reply (a text or an upload) shows it was taken; a quick run shows no
    # "typing…" to wait for.
    await until(
        lambda: any(c.method.startswith("send") for c in telegram.calls[before:]),
        'any(c.method.startswith("send") for c in telegram.calls[before:])',
    )
    await run_over(daemon)
    return int(message["message_id"])


async def test_a_media_url_is_uploaded_as_a_photo_with_the_text_as_caption(
    tmp_path: Path,
) -> None:
    async with botd(tmp_path) as (daemon, telegram, model, server):
        model.push(stream(text(f"Here is a cat.\nMEDIA: {server.url('cat.png')}")))
        await answered(daemon, telegram)
        await telegram.wait_for_call("sendPhoto", ok_only=True)
    [upload] = telegram.uploads
    assert upload.method == "sendPhoto"
    assert upload.file.data == PNG
    assert upload.file.filename == "cat.png"
    assert upload.caption == "Here is a cat."
    assert telegram.calls_to("sendMessage") == []  # the text went as the caption
    assert server.requests == ["cat.png"]


async def test_audio_as_voice_sends_a_voice_note(tmp_path: Path) -> None:
    async with botd(tmp_path) as (daemon, telegram, model, server):
        model.push(stream(text(f"[[audio_as_voice]]\nMEDIA: {server.url('hello.ogg')}")))
        await answered(daemon, telegram)
        await telegram.wait_for_call("sendVoice", ok_only=True)
    [upload] = telegram.uploads
    assert (upload.method, upload.file.data) == ("sendVoice", OGG)


async def test_a_private_url_under_the_default_guard_is_posted_as_its_link_once(
    tmp_path: Path,
) -> None:
    async with botd(tmp_path, allow_loopback=False) as (daemon, telegram, model, server):
        url = server.url("cat.png")
        model.push(stream(text(f"Here is a cat.\nMEDIA: {url}")))
        await answered(daemon, telegram)
        await telegram.wait_for_call("sendMessage", ok_only=True)
    assert telegram.uploads == []
    assert server.requests == []  # refused before any request was made
    texts = [call.params["text"] for call in telegram.calls_to("sendMessage")]
    assert len(texts) == 1
    assert texts[0].startswith("Here is a cat.")
    assert texts[0].count(url) == 1


async def test_local_files_only_from_the_outbound_dir(tmp_path: Path) -> None:
    outbound = tmp_path / "out"
    outbound.mkdir()
    (outbound / "report.txt").write_bytes(b"the report")
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    secret = secrets / "secret.txt"
    secret.write_bytes(b"do not send")
    (outbound / "escape.txt").symlink_to(secret)
    (outbound / "linked").symlink_to(secrets)
    os.link(secret, outbound / "notes.txt")
    reply = (
        f"Files:\nMEDIA: {outbound / 'report.txt'}\nMEDIA: {secret}\n"
        f"MEDIA: {outbound / 'escape.txt'}\nMEDIA: ./linked/secret.txt\n"
        f"MEDIA: {outbound / 'notes.txt'}\nMEDIA: ../secrets/secret.txt"
    )
    async with botd(tmp_path, outbound_dir=outbound) as (daemon, telegram, model, _server):
        model.push(stream(text(reply)))
        await answered(daemon, telegram, "the files?")

        def posted() -> int:  # six references, each posted once: as a file or as a text
            return len(telegram.uploads) + len(telegram.calls_to("sendMessage", ok_only=True))

        await until(lambda: posted() >= 6, "each reference posted")
    assert all(u.file.data != b"do not send" for u in telegram.uploads)
    [upload] = telegram.uploads
    assert (upload.method, upload.file.data, upload.caption) == (
        "sendDocument",
        b"the report",
        "Files:",
    )
    texts = [call.params["text"] for call in telegram.calls_to("sendMessage")]
    assert texts == [
        "secret.txt (not sent: outside media.outbound_dir)",
        "escape.txt (not sent: a link)",
        "secret.txt (not sent: a link)",
        "notes.txt (not sent: more than one hard link)",
        "secret.txt (not sent: outside media.outbound_dir)",
    ]


async def test_local_files_are_refused_without_an_outbound_dir(tmp_path: Path) -> None:
    path = tmp_path / "photo.png"
    path.write_bytes(PNG)
    async with botd(tmp_path) as (daemon, telegram, model, _server):
        model.push(stream(text(f"MEDIA: {path}")))
        await answered(daemon, telegram)
        await telegram.wait_for_call("sendMessage", ok_only=True)
    assert telegram.uploads == []
    [call] = telegram.calls_to("sendMessage")
    assert call.params["text"].startswith("photo.png (not sent: local files are not sent")


async def test_a_5xx_on_the_upload_is_retried_and_the_file_shows_once(tmp_path: Path) -> None:
    async with botd(tmp_path) as (daemon, telegram, model, server):
        telegram.fail_next("sendPhoto", server_error(502))
        model.push(stream(text(f"A cat.\nMEDIA: {server.url('cat.png')}")))
        await answered(daemon, telegram)
        await telegram.wait_for_call("sendPhoto", ok_only=True)
    assert [call.status for call in telegram.calls_to("sendPhoto")] == [502, 200]
    assert len(telegram.uploads) == 1
    assert telegram.uploads[0].caption == "A cat."
    assert telegram.calls_to("sendMessage") == []  # the caption was not posted again


async def test_the_message_tool_uploads_its_media(tmp_path: Path) -> None:
    async with botd(tmp_path) as (daemon, telegram, model, server):
        args = {"action": "send", "message": "Sent separately", "media": [server.url("cat.png")]}
        model.push(
            stream(tool_use("t1", "message", json.dumps(args)), stop_reason="tool_use"),
            stream(text("Done.")),
        )
        await answered(daemon, telegram)
        await telegram.wait_for_call("sendPhoto", ok_only=True)
    [upload] = telegram.uploads
    assert (upload.file.data, upload.caption) == (PNG, "Sent separately")
    assert [call.params["text"] for call in telegram.calls_to("sendMessage")] == ["Done."]


async def test_a_file_the_agent_wrote_in_its_workspace_is_uploaded(tmp_path: Path) -> None:
    """``write_file`` writes into the DM's workspace; the message tool's ``media`` and the
    reply's ``MEDIA:`` name it as ``/workspace/...`` and it is uploaded, while a file of
    another conversation's workspace is named with the reason instead."""
    other = workspace_dir(tmp_path / "state", "telegram:888") / "theirs.txt"
    other.parent.mkdir(parents=True)
    other.write_text("another chat's file")
    write = {"path": "out/report.txt", "content": "the report\n"}
    send = {"action": "send", "message": "Early copy", "media": ["/workspace/out/report.txt"]}
    async with botd(tmp_path, tools=["write_file", "message"]) as (daemon, telegram, model, _):
        model.push(
            stream(tool_use("t1", "write_file", json.dumps(write)), stop_reason="tool_use"),
            stream(tool_use("t2", "message", json.dumps(send)), stop_reason="tool_use"),
            stream(text(f"Here.\nMEDIA: /workspace/out/report.txt\nMEDIA: {other}")),
        )
        await answered(daemon, telegram, "the report?")
        await until(lambda: len(telegram.uploads) >= 2, "both uploads")
        await telegram.wait_for_call("sendMessage", ok_only=True)
    assert [(u.method, u.file.data, u.caption) for u in telegram.uploads] == [
        ("sendDocument", b"the report\n", "Early copy"),
        ("sendDocument", b"the report\n", "Here."),
    ]
    texts = [call.params["text"] for call in telegram.calls_to("sendMessage")]
    assert texts == ["theirs.txt (not sent: not this conversation's workspace)"]


async def test_reply_to_current_replies_to_the_message_in_blocks_mode(tmp_path: Path) -> None:
    async with botd(tmp_path) as (daemon, telegram, model, _server):
        model.push(stream(text("[[reply_to_current]] Yes, this one.")))
        message_id = await answered(daemon, telegram)
        await telegram.wait_for_call("sendMessage", ok_only=True)
    [call] = telegram.calls_to("sendMessage")
    assert call.params["text"] == "Yes, this one."
    assert call.params["reply_parameters"]["message_id"] == message_id


# --- the outbox: one piece per file, references written down --------------------------------


class FileAdapter:
    """A chat that records texts and uploads (name, bytes, caption)."""

    name = "console"
    capabilities = Capabilities(text_limit=4000, markup=PLAIN, caption_limit=1000)

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.files: list[tuple[str, bytes, str]] = []

    async def start(self, sink: object) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def send(
        self, target: Target, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        self.texts.append(markdown)
        return [MessageRef(target, f"t{len(self.texts)}")]

    async def send_file(
        self,
        target: Target,
        file: OutboundFile,
        caption: str = "",
        *,
        scope: SendScope | None = None,
    ) -> list[MessageRef]:
        self.files.append((file.filename, file.data, caption))
        return [MessageRef(target, f"f{len(self.files)}")]

    async def edit(
        self, ref: MessageRef, markdown: str, *, scope: SendScope | None = None
    ) -> list[MessageRef]:
        self.texts[int(ref.message_id[1:]) - 1] = markdown
        return [ref]

    async def typing(self, target: Target) -> None:
        return None


class Journal:
    """A run journal that remembers what was written (seq, text, files) and confirmed."""

    def __init__(self) -> None:
        self.pieces: list[tuple[int, str, list[str]]] = []
        self.confirmed: list[int] = []

    async def written(self, piece: Outgoing, text: str) -> int:
        assert isinstance(piece.reply, BlockReply)
        self.pieces.append((piece.seq, text, list(piece.reply.media_urls)))
        return piece.seq

    def sent(self, key: int, refs: Sequence[MessageRef]) -> None:
        self.confirmed.append(key)

    def failed(self, key: int) -> None:
        raise AssertionError("nothing fails here")


def outbound_files(tmp_path: Path) -> tuple[Path, MediaSettings]:
    outbound = tmp_path / "out"
    outbound.mkdir()
    (outbound / "a.png").write_bytes(PNG)
    (outbound / "b.ogg").write_bytes(OGG)
    return outbound, MediaSettings(outbound_dir=outbound)


async def test_each_file_is_its_own_journaled_piece(tmp_path: Path) -> None:
    outbound, media = outbound_files(tmp_path)
    adapter, journal = FileAdapter(), Journal()
    delivery = ChannelDelivery({"console": adapter}, media=media)
    output = delivery.open_run(Target("console", "c1"), RunOptions(journal=journal))
    a, b = str(outbound / "a.png"), str(outbound / "b.ogg")
    output.block(BlockReply("Two files.", media_urls=[a, b]))
    output.final(BlockReply("Done."))
    await output.close()
    assert journal.pieces == [(1, "Two files.", [a]), (2, "", [b]), (3, "Done.", [])]
    assert journal.confirmed == [1, 2, 3]
    assert adapter.files == [("a.png", PNG, "Two files."), ("b.ogg", OGG, "")]
    assert adapter.texts == ["Done."]


async def test_a_text_too_long_for_a_caption_is_its_own_piece_before_the_file(
    tmp_path: Path,
) -> None:
    # Posted and confirmed before the upload is written down: a crash during the upload
    # sends the file again at the restart, never the text.
    outbound, media = outbound_files(tmp_path)
    adapter, journal = FileAdapter(), Journal()
    delivery = ChannelDelivery({"console": adapter}, media=media)
    output = delivery.open_run(Target("console", "c1"), RunOptions(journal=journal))
    a, b = str(outbound / "a.png"), str(outbound / "b.ogg")
    long_text = "A long report. " * 100  # 1,500 characters: over the 1,000 a caption takes
    output.block(BlockReply(long_text, media_urls=[a, b], reply_to_id="m1"))
    output.block(BlockReply("Short caption.", media_urls=[a]))
    await output.close()
    assert journal.pieces == [
        (1, long_text, []),
        (2, "", [a]),
        (3, "", [b]),
        (4, "Short caption.", [a]),
    ]
    assert journal.confirmed == [1, 2, 3, 4]
    assert adapter.texts == [long_text]
    assert adapter.files == [
        ("a.png", PNG, ""),
        ("b.ogg", OGG, ""),
        ("a.png", PNG, "Short caption."),
    ]


async def test_an_unconfirmed_file_is_uploaded_at_start_and_a_confirmed_one_never(
    tmp_path: Path,
) -> None:
    outbound, media = outbound_files(tmp_path)
    target = Target("console", "c1")
    with SqliteStore.open(tmp_path / "state") as store:
        # A crash after the first upload was confirmed and before the second one was.
        done = await store.outbox_add(
            None, 1, "block", target, "A", media=[str(outbound / "a.png")]
        )
        store.outbox_sent(done, ["f1"])
        await store.outbox_add(
            None, 2, "block", target, "", media=[str(outbound / "b.ogg")], audio_as_voice=True
        )
        [pending] = store.outbox_pending()
        assert (pending.media, pending.audio_as_voice) == ((str(outbound / "b.ogg"),), True)
        adapter = FileAdapter()
        delivery = ChannelDelivery({"console": adapter}, media=media)
        manager = Conversations(store, ScriptedProvider(), delivery, settings())
        async with dispatching(manager, store) as dispatcher:
            await asyncio.wait_for(dispatcher.drain(), HANG_GUARD)
        await asyncio.wait_for(manager.close(grace=0.0), HANG_GUARD)
        assert adapter.files == [("b.ogg", OGG, "")]
        assert adapter.texts == []
        assert store.outbox_pending() == []


# --- references to files ----------------------------------------------------------------------


async def test_local_references_resolve_inside_the_outbound_dir_only(tmp_path: Path) -> None:
    outbound, media = outbound_files(tmp_path)
    (outbound / "sub").mkdir()
    relative = await load("./a.png", media)
    assert (relative.filename, relative.data, relative.kind) == ("a.png", PNG, "photo")
    voice = await load(str(outbound / "b.ogg"), media, as_voice=True)
    assert (voice.kind, voice.as_voice, voice.source) == ("audio", True, str(outbound / "b.ogg"))
    for reference, reason in [
        ("./missing.png", "no such file"),
        (str(outbound / "sub"), "not a file"),
        ("../escape.png", r"outside media\.outbound_dir"),
        (str(tmp_path / "out" / ".." / "out" / ".." / "x"), r"outside media\.outbound_dir"),
    ]:
        with pytest.raises(MediaUnavailable, match=reason):
            await load(reference, media)
    (tmp_path / "escape.png").write_bytes(PNG)
    with pytest.raises(MediaUnavailable, match=r"outside media\.outbound_dir"):
        await load("../escape.png", media)
    with pytest.raises(MediaUnavailable, match=r"larger than media\.max_bytes"):
        await load("a.png", MediaSettings(outbound_dir=outbound, max_bytes=10))


async def test_a_fetched_file_over_max_bytes_is_posted_as_its_link(tmp_path: Path) -> None:
    adapter = FileAdapter()
    async with FileServer({"big.png": ("image/png", PNG)}) as server:
        settings = MediaSettings(allow_hosts=("127.0.0.1",), max_bytes=100)
        delivery = ChannelDelivery({"console": adapter}, media=settings)
        url = server.url("big.png")
        await delivery.deliver(Target("console", "c1"), BlockReply("Big.", media_urls=[url]))
    assert adapter.files == []
    assert adapter.texts == [f"Big.\n\n{url}"]


def test_what_is_posted_instead_of_a_file() -> None:
    assert shown_instead(" https://x.example/a.png ", "refused") == "https://x.example/a.png"
    assert shown_instead("/srv/out/report.pdf", "no such file") == (
        "report.pdf (not sent: no such file)"
    )


async def test_edit_mode_finishes_the_preview_then_uploads_the_files(tmp_path: Path) -> None:
    outbound, media = outbound_files(tmp_path)
    adapter = FileAdapter()
    delivery = ChannelDelivery({"console": adapter}, {"console": "edit"}, media=media)
    target = Target("console", "c1")
    output = delivery.open_run(target)
    output.partial(PartialReply("Here", [], lambda: "Here"))
    output.final(BlockReply("Here it is.", media_urls=[str(outbound / "a.png")]))
    await output.close()
    assert adapter.texts == ["Here it is."]  # the preview, finished in place
    assert adapter.files == [("a.png", PNG, "")]


async def test_text_too_long_for_a_caption_goes_first_as_its_own_message(tmp_path: Path) -> None:
    outbound, media = outbound_files(tmp_path)
    adapter = FileAdapter()
    long_text = "word " * 300  # 1500 characters, over the caption limit of 1000
    delivery = ChannelDelivery({"console": adapter}, media=media)
    await delivery.deliver(
        Target("console", "c1"), BlockReply(long_text, media_urls=[str(outbound / "a.png")])
    )
    assert adapter.texts == [long_text]
    assert adapter.files == [("a.png", PNG, "")]


async def test_the_console_prints_what_it_cannot_upload(tmp_path: Path) -> None:
    outbound, media = outbound_files(tmp_path)
    printed = io.StringIO()
    console = ConsoleAdapter(output=printed)
    delivery = ChannelDelivery({"console": console}, media=media)
    await delivery.deliver(
        Target("console", "local"), BlockReply("See:", media_urls=[str(outbound / "a.png")])
    )
    assert printed.getvalue() == f"See:\n[file: {outbound / 'a.png'}]\n"
