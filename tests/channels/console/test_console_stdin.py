"""``botd run`` with the embedded default config (the console, the scripted provider echoing
"You said: …") on every kind of stdin: a pipe, a regular file, /dev/null, a closed stdin, very
long lines, ``\"\"\"`` blocks, and a terminal (a pty) for the banner and the log level."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import pytest

from botd.channels.console.adapter import MAX_MESSAGE_BYTES
from tests.support.daemon_process import BOTD, HANG_GUARD, daemon_env


def _run(
    cwd: Path, input: bytes | None = None, stdin: IO[bytes] | int | None = None
) -> subprocess.CompletedProcess[bytes]:
    """``botd run`` in ``cwd``, fed ``input`` through a pipe or reading ``stdin``."""
    return subprocess.run(
        [*BOTD, "run"],
        input=input,
        stdin=stdin,
        capture_output=True,
        cwd=cwd,
        env=daemon_env(),
        timeout=HANG_GUARD,
    )


def _answers(result: subprocess.CompletedProcess[bytes]) -> str:
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    return result.stdout.decode()


def test_a_pipe_is_answered_line_by_line(tmp_path: Path) -> None:
    assert _answers(_run(tmp_path, input=b"hello\n")) == "You said: hello\n"


def test_a_regular_file_is_read_to_its_end_and_answered(tmp_path: Path) -> None:
    questions = tmp_path / "questions.txt"
    questions.write_bytes(
        b"first question\r\n\n   \nnot \xff UTF-8\nlast question without a newline"
    )
    with questions.open("rb") as stdin:
        printed = _answers(_run(tmp_path, stdin=stdin))
    # Lines arriving together may be answered by one run (collect mode): each once, in order.
    assert printed.startswith("You said: first question")
    assert printed.count("first question") == 1
    assert printed.count("last question without a newline") == 1
    assert printed.count("not \ufffd UTF-8") == 1
    assert printed.index("first question") < printed.index("last question")


def test_dev_null_ends_the_daemon_with_status_0(tmp_path: Path) -> None:
    result = _run(tmp_path, stdin=subprocess.DEVNULL)
    assert _answers(result) == ""
    assert b"Traceback" not in result.stderr


def test_a_closed_stdin_is_an_input_that_already_ended(tmp_path: Path) -> None:
    # Python then has no sys.stdin, and fd 0 is free: the first file botd opens gets it,
    # which the console must never read.
    script = (
        "import os, subprocess, sys; os.close(0); sys.exit(subprocess.run(sys.argv[1:]).returncode)"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, *BOTD, "run"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        cwd=tmp_path,
        env=daemon_env(),
        timeout=HANG_GUARD,
    )
    assert _answers(result) == ""
    stderr = result.stderr.decode()
    assert "stdin is closed" in stderr and "Traceback" not in stderr
    assert (tmp_path / "var" / "botd.sqlite3").exists()  # it started, then stopped


def test_a_100_kib_line_is_answered(tmp_path: Path) -> None:
    line = "x" * (100 * 1024)
    printed = _answers(_run(tmp_path, input=f"{line}\nafter\n".encode()))
    assert printed.replace("\n", "").count("x") == len(line)
    assert "You said: after" in printed


def test_a_line_over_the_limit_is_refused_in_one_line_and_reading_goes_on(tmp_path: Path) -> None:
    too_long = b"y" * (MAX_MESSAGE_BYTES + 1)
    result = _run(tmp_path, input=b"before\n" + too_long + b"\nafter\n")
    printed = _answers(result)
    assert "y" not in printed
    assert printed.count("before") == 1 and printed.count("after") == 1
    refusals = [line for line in result.stderr.decode().splitlines() if "limit" in line]
    assert len(refusals) == 1
    assert f"line 2 is {MAX_MESSAGE_BYTES + 1} bytes" in refusals[0]


def test_a_block_between_triple_quotes_is_one_message(tmp_path: Path) -> None:
    printed = _answers(_run(tmp_path, input=b'"""\nfirst line\n  indented\n\nlast\n"""\n'))
    assert printed == "You said: first line\n  indented\n\nlast\n"


def test_a_block_left_open_at_the_end_of_input_is_still_sent(tmp_path: Path) -> None:
    printed = _answers(_run(tmp_path, input=b'"""\nunfinished\nblock'))
    assert printed == "You said: unfinished\nblock\n"


def test_an_info_line_needs_an_explicit_level_while_the_console_runs(tmp_path: Path) -> None:
    quiet = _run(tmp_path, input=b"hi\n")
    assert _answers(quiet) == "You said: hi\n"
    assert b" INFO " not in quiet.stderr
    config = tmp_path / "botd.yaml"
    config.write_text(
        f"state_dir: {tmp_path / 'state'}\nchannels:\n  console: {{enabled: true}}\n"
        "logging:\n  level: INFO\nhealth: {enabled: false}\n",
        encoding="utf-8",
    )
    asked = subprocess.run(
        [*BOTD, "run", "--config", str(config)],
        input=b"hi\n",
        capture_output=True,
        cwd=tmp_path,
        env=daemon_env(),
        timeout=HANG_GUARD,
    )
    assert _answers(asked) == "You said: hi\n"
    assert b" INFO " in asked.stderr


def _read_until(fd: int, wanted: bytes) -> bytes:
    import select

    seen = b""
    while wanted not in seen:
        ready, _, _ = select.select([fd], [], [], HANG_GUARD)
        assert ready, f"nothing more after {seen!r}"
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the other side is closed
            break
        if not chunk:
            break
        seen += chunk
    return seen


class _Terminal:
    """The controlling side of the pty botd reads: what is written here is typed."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def type(self, data: bytes) -> None:
        assert self._fd is not None
        os.write(self._fd, data)

    def hang_up(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@contextmanager
def _on_a_terminal(cwd: Path) -> Iterator[tuple[subprocess.Popen[bytes], _Terminal]]:
    """``botd run`` in ``cwd`` with a pty as its stdin; yields it and the terminal it reads,
    hung up on the way out, killing botd if it still runs."""
    pty = pytest.importorskip("pty")
    try:
        controller, stdin = pty.openpty()
    except OSError as exc:
        pytest.skip(f"no pty here: {exc}")
    process = subprocess.Popen(
        [*BOTD, "run"],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=daemon_env(),
    )
    os.close(stdin)
    terminal = _Terminal(controller)
    try:
        yield process, terminal
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        terminal.hang_up()


def test_a_terminal_gets_a_banner_and_no_info_lines(tmp_path: Path) -> None:
    with _on_a_terminal(tmp_path) as (process, terminal):
        assert process.stderr is not None
        banner = _read_until(process.stderr.fileno(), b"quit.")
        assert b"scripted provider (model scripted)" in banner
        assert b"Ctrl-D to quit" in banner and b'"""' in banner
        terminal.type(b"hello from a terminal\n")
        terminal.type(b'"""\ntwo\nlines\n"""\n')
        terminal.type(b"\x04")  # Ctrl-D at the start of a line: end of input
        stdout, stderr = process.communicate(timeout=HANG_GUARD)
    assert process.returncode == 0, stderr.decode(errors="replace")
    printed = stdout.decode()
    assert printed.count("hello from a terminal") == 1
    assert "two\nlines" in printed
    assert b" INFO " not in banner + stderr
    assert b"Traceback" not in stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_a_console_waiting_on_its_terminal(tmp_path: Path, sig: int) -> None:
    # The reading thread stays blocked in read(): the daemon still stops and exits 0.
    with _on_a_terminal(tmp_path) as (process, terminal):
        assert process.stderr is not None
        _read_until(process.stderr.fileno(), b"quit.")
        terminal.type(b"are you there?\n")
        assert process.stdout is not None
        assert b"You said: are you there?" in _read_until(process.stdout.fileno(), b"?\n")
        process.send_signal(sig)
        _, stderr = process.communicate(timeout=HANG_GUARD)
    assert process.returncode == 0, stderr.decode(errors="replace")
    assert b"Fatal Python error" not in stderr and b"Traceback" not in stderr


def test_a_terminal_that_hangs_up_is_the_end_of_input(tmp_path: Path) -> None:
    # Reading a pty whose other side is closed fails (EIO): botd answers what it read, then
    # stops as at Ctrl-D.
    with _on_a_terminal(tmp_path) as (process, terminal):
        assert process.stderr is not None and process.stdout is not None
        _read_until(process.stderr.fileno(), b"quit.")
        terminal.type(b"last words\n")
        answered = _read_until(process.stdout.fileno(), b"words\n")
        terminal.hang_up()
        stdout, stderr = process.communicate(timeout=HANG_GUARD)
    assert process.returncode == 0, stderr.decode(errors="replace")
    assert (answered + stdout).decode() == "You said: last words\n"
    assert b"Traceback" not in stderr


def test_a_closed_stdout_drops_replies_with_one_warning(tmp_path: Path) -> None:
    script = (
        "import os, subprocess, sys; os.close(1); sys.exit(subprocess.run(sys.argv[1:]).returncode)"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, *BOTD, "run"],
        input=b"one\ntwo\n",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env=daemon_env(),
        timeout=HANG_GUARD,
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    assert result.stderr.decode().count("stdout is closed") == 1
    assert b"Traceback" not in result.stderr


def test_a_reader_that_goes_away_does_not_stop_the_answers(tmp_path: Path) -> None:
    # `botd run < questions | head -1`: the first answer is read, then the pipe closes.
    process = subprocess.Popen(
        [*BOTD, "run"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env=daemon_env(),
    )
    try:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(b"first\n")
        process.stdin.flush()
        assert b"You said: first" in _read_until(process.stdout.fileno(), b"first\n")
        process.stdout.close()
        process.stdin.write(b"second\nthird\n")
        process.stdin.close()
        assert process.stderr is not None
        stderr = process.stderr.read()
        process.wait(timeout=HANG_GUARD)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, stderr.decode(errors="replace")
    assert stderr.decode().count("stdout is closed") == 1
    assert b"Traceback" not in stderr and b"Exception ignored" not in stderr
