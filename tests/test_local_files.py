"""Local files out: only what lies beneath ``media.outbound_dir`` is read, and no link, hard
link, ``..`` or swapped directory leads out of it.

Every test runs twice: with ``openat2(2)`` (the kernel confines the lookup) and with the
component-by-component walk a system without it gets (``MediaSettings(openat2=False)``).
Real files, real syscalls; the races are real threads renaming real directories.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import platform
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from botd.delivery.media import MediaSettings, MediaUnavailable, load
from botd.safe_open import openat2_available
from botd.workspace import conversation_dir
from tests.support.waiting import HANG_GUARD

libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
RENAME_EXCHANGE = 2

SECRET = b"the secret, never to be sent"
INNOCENT = b"an innocent file"


@pytest.fixture(params=[True, False], ids=["openat2", "walk"])
def openat2(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.fixture
def outbound(tmp_path: Path) -> Path:
    """``out/`` with ``report.txt`` and ``sub/chart.png``; ``secret/secret.txt`` beside it."""
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    (out / "report.txt").write_bytes(b"the report")
    (out / "sub" / "chart.png").write_bytes(b"a chart")
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "secret.txt").write_bytes(SECRET)
    return out


async def refused(reference: str, settings: MediaSettings) -> str:
    """The reason ``reference`` is not sent (fails if it is)."""
    with pytest.raises(MediaUnavailable) as caught:
        await load(reference, settings)
    return str(caught.value)


def test_the_kernel_way_is_the_one_taken_where_the_kernel_has_it() -> None:
    # Without this, a broken openat2 call would quietly fall back and every "openat2" test
    # below would test the walk twice.
    if sys.platform != "linux":
        pytest.skip("openat2 is Linux's")
    release = tuple(int(part) for part in platform.release().split(".")[:2] if part.isdigit())
    if release < (5, 6):
        pytest.skip("openat2 came with Linux 5.6")
    assert openat2_available()


async def test_a_file_and_a_file_in_a_subdirectory_are_sent(outbound: Path, openat2: bool) -> None:
    settings = MediaSettings(outbound_dir=outbound, openat2=openat2)
    for reference, data in [
        ("report.txt", b"the report"),
        ("./sub/chart.png", b"a chart"),
        (str(outbound / "sub" / "chart.png"), b"a chart"),
        (f"file://{outbound / 'report.txt'}", b"the report"),
    ]:
        file = await load(reference, settings)
        assert (file.data, file.filename) == (data, Path(reference).name)


async def test_a_hard_link_to_a_file_outside_is_refused(outbound: Path, openat2: bool) -> None:
    os.link(outbound.parent / "secret" / "secret.txt", outbound / "notes.txt")
    settings = MediaSettings(outbound_dir=outbound, openat2=openat2)
    assert await refused("notes.txt", settings) == "more than one hard link"
    assert await refused(str(outbound / "notes.txt"), settings) == "more than one hard link"


async def test_a_symlink_anywhere_beneath_the_directory_is_refused(
    outbound: Path, openat2: bool
) -> None:
    secret_dir = outbound.parent / "secret"
    (outbound / "last.txt").symlink_to(secret_dir / "secret.txt")
    (outbound / "middle").symlink_to(secret_dir)
    (outbound / "inside.txt").symlink_to(outbound / "report.txt")  # a link inside: refused too
    (outbound / "sub" / "up").symlink_to("..")
    settings = MediaSettings(outbound_dir=outbound, openat2=openat2)
    for reference in [
        "last.txt",
        "middle/secret.txt",
        str(outbound / "middle" / "secret.txt"),
        "inside.txt",
        "sub/up/report.txt",
    ]:
        assert await refused(reference, settings) == "a link", reference


async def test_dot_dot_and_absolute_paths_outside_are_refused(
    outbound: Path, openat2: bool
) -> None:
    settings = MediaSettings(outbound_dir=outbound, openat2=openat2)
    secret = outbound.parent / "secret" / "secret.txt"
    for reference in [
        "../secret/secret.txt",
        "sub/../../secret/secret.txt",
        "sub/../report.txt",  # lands inside, but `..` is refused wherever it is
        str(outbound / ".." / "secret" / "secret.txt"),
        str(secret),
        "/proc/self/environ",
        "~/.bashrc",
        f"{outbound}-other/report.txt",  # starts with the directory's text, not its path
    ]:
        assert await refused(reference, settings) == "outside media.outbound_dir", reference


async def test_missing_files_directories_and_oversized_files_are_refused(
    outbound: Path, openat2: bool
) -> None:
    settings = MediaSettings(outbound_dir=outbound, openat2=openat2)
    assert await refused("missing.txt", settings) == "no such file"
    assert await refused("report.txt/below", settings) == "no such file"
    assert await refused("sub", settings) == "not a file"
    assert await refused(".", settings) == "not a file"
    assert await refused("bad\0name", settings) == "no such file"
    small = MediaSettings(outbound_dir=outbound, max_bytes=5, openat2=openat2)
    assert await refused("report.txt", small) == "larger than media.max_bytes (5 bytes)"


async def test_a_fifo_is_refused_without_hanging(outbound: Path, openat2: bool) -> None:
    fifo = outbound / "pipe"
    os.mkfifo(fifo)
    settings = MediaSettings(outbound_dir=outbound, openat2=openat2)
    loading = asyncio.ensure_future(load("pipe", settings))
    try:
        done, _ = await asyncio.wait({loading}, timeout=HANG_GUARD)
    finally:
        if not loading.done():
            # Free the thread blocked in open() so the test can end, then fail.
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert done, "loading a FIFO hung"
    with pytest.raises(MediaUnavailable, match=r"^not a file$"):
        loading.result()


async def test_an_outbound_dir_configured_as_a_link_is_followed_once(
    tmp_path: Path, outbound: Path, openat2: bool
) -> None:
    # The operator's own link is resolved when the settings are made; a reference may use
    # either name. Swapping the directory for a link afterwards gains nothing.
    configured = tmp_path / "configured"
    configured.symlink_to(outbound)
    settings = MediaSettings(outbound_dir=configured, openat2=openat2)
    assert (await load(str(configured / "report.txt"), settings)).data == b"the report"
    assert (await load(str(outbound / "report.txt"), settings)).data == b"the report"
    outbound.rename(tmp_path / "moved")
    outbound.symlink_to(tmp_path / "secret")
    (tmp_path / "secret" / "report.txt").write_bytes(SECRET)
    reason = await refused("report.txt", settings)
    assert reason == "media.outbound_dir cannot be opened (a link)"


def exchange(a: Path, b: Path) -> None:
    """Swap the names ``a`` and ``b`` in one step: ``renameat2(2)`` with RENAME_EXCHANGE."""
    if libc.renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE):
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(a))


@pytest.fixture
def swapping(tmp_path: Path, outbound: Path) -> Iterator[Path]:
    """A thread that keeps swapping ``out/link-or-dir`` between a real directory holding
    ``file`` (innocent) and a symlink to a directory holding ``file`` (the secret), until the
    test ends; each swap is atomic, so the name is always one of the two."""
    if not hasattr(libc, "renameat2"):
        pytest.skip("needs renameat2(2) to swap a directory and a link atomically")
    swapped = outbound / "link-or-dir"
    swapped.mkdir()
    (swapped / "file").write_bytes(INNOCENT)
    (tmp_path / "secret" / "file").write_bytes(SECRET)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "secret")
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            exchange(swapped, link)

    thread = threading.Thread(target=swap, name="swapper")
    thread.start()
    try:
        yield swapped
    finally:
        stop.set()
        thread.join()


async def test_a_directory_swapped_for_a_link_never_leaks_the_file_behind_it(
    outbound: Path, swapping: Path, openat2: bool
) -> None:
    settings = MediaSettings(outbound_dir=outbound, openat2=openat2)
    outcomes: set[bytes | str] = set()
    for reference in ["link-or-dir/file", str(swapping / "file")] * 500:
        try:
            outcomes.add((await load(reference, settings)).data)
        except MediaUnavailable as exc:
            outcomes.add(str(exc))
    assert SECRET not in outcomes
    # Each outcome is the innocent file or a refusal. Which refusal depends on the moment:
    # the walk may find the name changed between a refused step and its look at it, and the
    # kernel checks at the end of openat2 that what it found is still beneath the directory
    # (the innocent directory may have been swapped out of it meanwhile).
    assert outcomes <= {INNOCENT, "a link", "no such file", "outside media.outbound_dir"}


async def test_once_the_swapping_stops_each_side_gives_its_answer(
    tmp_path: Path, outbound: Path, openat2: bool
) -> None:
    # The race's two sides, held still: the directory is read, the link refused.
    settings = MediaSettings(outbound_dir=outbound, openat2=openat2)
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "file").write_bytes(INNOCENT)
    (tmp_path / "real").rename(outbound / "link-or-dir")
    assert (await load("link-or-dir/file", settings)).data == INNOCENT
    (outbound / "link-or-dir").rename(tmp_path / "real")
    (outbound / "link-or-dir").symlink_to(tmp_path / "secret")
    (tmp_path / "secret" / "file").write_bytes(SECRET)
    assert await refused("link-or-dir/file", settings) == "a link"


@pytest.fixture
def workspaces(tmp_path: Path) -> Path:
    """The directory of workspaces: conversation ``telegram:1``'s holds ``report.txt``,
    ``telegram:2``'s ``theirs.txt``; ``secret/secret.txt`` lies beside it."""
    root = tmp_path / "workspaces"
    for key, name, data in [
        ("telegram:1", "report.txt", b"the report"),
        ("telegram:2", "theirs.txt", b"another chat's file"),
    ]:
        conversation_dir(root, key).mkdir(parents=True)
        (conversation_dir(root, key) / name).write_bytes(data)
    (tmp_path / "secret").mkdir(exist_ok=True)
    (tmp_path / "secret" / "secret.txt").write_bytes(SECRET)
    return root


async def refused_for(reference: str, settings: MediaSettings, conversation: str | None) -> str:
    """The reason ``reference`` is not sent for ``conversation`` (fails if it is)."""
    with pytest.raises(MediaUnavailable) as caught:
        await load(reference, settings, conversation=conversation)
    return str(caught.value)


async def test_a_workspace_file_is_sent_for_its_own_conversation_only(
    workspaces: Path, openat2: bool
) -> None:
    settings = MediaSettings(workspaces=workspaces, openat2=openat2)
    own = conversation_dir(workspaces, "telegram:1")
    for reference in ["/workspace/report.txt", str(own / "report.txt")]:
        file = await load(reference, settings, conversation="telegram:1")
        assert (file.data, file.filename) == (b"the report", "report.txt")
    other = conversation_dir(workspaces, "telegram:2") / "theirs.txt"
    for reference, conversation in [
        (str(other), "telegram:1"),
        (str(own / "report.txt"), "telegram:2"),
        (str(workspaces / ".." / "secret" / "secret.txt"), "telegram:1"),
        ("/workspace/report.txt", None),  # a send made for no conversation
    ]:
        said = await refused_for(reference, settings, conversation)
        assert said == "not this conversation's workspace", reference
    for reference in [
        "/workspace/../secret/secret.txt",
        str(own / ".." / other.parent.name / "theirs.txt"),
    ]:
        assert await refused_for(reference, settings, "telegram:1") == "outside the workspace"
    assert await refused_for("/workspace/theirs.txt", settings, "telegram:1") == "no such file"
    assert await refused_for("/workspace/a.txt", settings, "telegram:3") == "no such file"
    shared = MediaSettings(workspaces=workspaces, shared_workspace=True, openat2=openat2)
    assert await refused_for("/workspace/report.txt", shared, "telegram:1") == "no such file"


async def test_a_link_out_of_the_workspace_is_not_sent(workspaces: Path, openat2: bool) -> None:
    own = conversation_dir(workspaces, "telegram:1")
    secret = workspaces.parent / "secret" / "secret.txt"
    (own / "escape.txt").symlink_to(secret)
    (own / "up").symlink_to(secret.parent)
    os.link(secret, own / "hard.txt")
    settings = MediaSettings(workspaces=workspaces, openat2=openat2)
    for name, reason in [
        ("escape.txt", "a link"),
        ("up/secret.txt", "a link"),
        ("hard.txt", "more than one hard link"),
    ]:
        assert await refused_for(f"/workspace/{name}", settings, "telegram:1") == reason
