"""The reading worker: one file read in a process of its own, under limits it sets itself.

botd runs ``python -m botd.media.worker JOB CPU_SECONDS MEMORY_BYTES [OPTION]`` (see
``sandbox``),
writes the file's bytes to its stdin and reads the answer from its stdout: one line of
JSON, then the payload.

* ``pdf``: the payload is the text of the pages read (UTF-8), the line ``{"pages": n,
  "pages_read": k}`` (``documents.pdf_text``, which stops once it has enough text);
* ``image``: the payload is the image to give the model, the line ``{"mime_type": …,
  "width": …, "height": …}`` (``images.fit_image``);
* ``html``: the payload is a web page's text as markdown, the line ``{"title": …}``
  (``pages.page_markdown``); the page's charset, when its server named one, is one more
  argument.

A file that cannot be read is the line ``{"unreadable": phrase, "detail": …}`` and no
payload; ``{"missing": "pdf"}`` says pypdfium2 is not installed.

Before it reads anything, the process limits itself: its CPU time to CPU_SECONDS (the kernel
ends it with SIGXCPU, also when botd is no longer there to), its address space to
MEMORY_BYTES (an allocation past it fails: exit status ``EXIT_NO_MEMORY``), and no core file.
This module imports nothing of botd at start beyond the readers it runs, so that a worker
starts quickly.
"""

from __future__ import annotations

import json
import resource
import sys
from collections.abc import Callable
from typing import Any

EXIT_NO_MEMORY = 3
"""The exit status of a worker that ran out of its memory limit."""

Job = Callable[[bytes, str], tuple[dict[str, Any], bytes]]
"""A reading: the file's bytes and the job's option ('' when none) to header and payload."""


def read_pdf(data: bytes, _option: str) -> tuple[dict[str, Any], bytes]:
    from .documents import DocumentUnreadable, PdfSupportMissing, pdf_text

    try:
        pdf = pdf_text(data)
    except PdfSupportMissing:
        return {"missing": "pdf"}, b""
    except DocumentUnreadable as exc:
        return {"unreadable": str(exc), "detail": repr(exc.__context__ or exc)}, b""
    return {"pages": pdf.pages, "pages_read": pdf.pages_read}, pdf.text.encode()


def read_image(data: bytes, _option: str) -> tuple[dict[str, Any], bytes]:
    from .images import ImageUnreadable, fit_image

    try:
        image = fit_image(data)
    except ImageUnreadable as exc:
        return {"unreadable": str(exc), "detail": repr(exc.__cause__ or exc)}, b""
    return {"mime_type": image.mime_type, "width": image.width, "height": image.height}, image.data


def read_page(data: bytes, charset: str) -> tuple[dict[str, Any], bytes]:
    from .pages import page_markdown

    try:
        title, text = page_markdown(data, charset or None)
    except RecursionError:  # a page nested deeper than the converter can walk
        return {"unreadable": "the page is nested too deeply to read", "detail": ""}, b""
    return {"title": title}, text.encode()


JOBS: dict[str, Job] = {"pdf": read_pdf, "image": read_image, "html": read_page}


def limit_self(cpu_seconds: int, memory_bytes: int) -> None:
    """Lower this process's CPU time, address space and core file size limits."""
    _lower(resource.RLIMIT_CORE, 0, 0)
    # Past the soft limit the kernel sends SIGXCPU (which ends the process); a second later,
    # should that signal be ignored, SIGKILL.
    _lower(resource.RLIMIT_CPU, cpu_seconds, cpu_seconds + 1)
    _lower(resource.RLIMIT_AS, memory_bytes, memory_bytes)


def _lower(which: int, soft: int, hard: int) -> None:
    _, current_hard = resource.getrlimit(which)
    if current_hard != resource.RLIM_INFINITY:
        hard = min(hard, current_hard)
        soft = min(soft, hard)
    resource.setrlimit(which, (soft, hard))


def main(argv: list[str]) -> int:
    job_name, cpu_seconds, memory_bytes, *option = argv
    job = JOBS[job_name]
    limit_self(int(cpu_seconds), int(memory_bytes))
    answer = sys.stdout.buffer
    sys.stdout = sys.stderr  # whatever a library prints does not mix with the answer
    try:
        header, payload = job(sys.stdin.buffer.read(), option[0] if option else "")
    except MemoryError:
        return EXIT_NO_MEMORY
    answer.write(json.dumps(header).encode() + b"\n" + payload)
    answer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
