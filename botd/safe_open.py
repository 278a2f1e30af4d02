"""Reading a file beneath a directory without following any link on the way there.

Resolving a path and then opening it by name leaves a gap: a directory on the way can be
swapped for a symlink between the two, and ``O_NOFOLLOW`` guards only the last component.
Here the file is opened *relative to a descriptor of the directory* and every component is
refused if it is a symlink, so what is read always lies beneath that directory:

* on Linux 5.6 and later, in one call to ``openat2(2)`` with ``RESOLVE_BENEATH``,
  ``RESOLVE_NO_SYMLINKS`` and ``RESOLVE_NO_MAGICLINKS`` (Python has no wrapper: it is called
  through ``ctypes``);
* elsewhere, or when the kernel or a seccomp filter refuses the call (``ENOSYS``, ``EPERM``),
  one component at a time from the directory's descriptor: ``O_NOFOLLOW | O_DIRECTORY`` for
  each directory, ``O_NOFOLLOW | O_NONBLOCK`` for the file.

A path that names ``..`` is refused before anything is opened. The file, once open, is
checked on its descriptor: a regular file (``O_NONBLOCK`` keeps a FIFO from hanging the open;
a FIFO or device is then refused), one hard link only (a second link inside the directory
could lead to any file of the same filesystem), no larger than the limit; its bytes are read
from that descriptor.

One gap remains by nature: the link count is read after the open, so a process that removes
an extra hard link in between is not seen. Only a directory on a filesystem of its own rules
hard links out entirely.
"""

from __future__ import annotations

import ctypes
import enum
import errno
import os
import platform
import stat
import sys
from collections.abc import Callable
from pathlib import Path, PurePosixPath

__all__ = [
    "NotRead",
    "Refusal",
    "open_beneath",
    "open_directory",
    "openat2_available",
    "read_beneath",
]


class Refusal(enum.Enum):
    """Why a file was not read; the value is the short reason."""

    OUTSIDE = "outside the directory"
    LINK = "a link"
    HARD_LINKS = "more than one hard link"
    MISSING = "no such file"
    NOT_A_FILE = "not a file"
    TOO_LARGE = "too large"
    UNREADABLE = "cannot be read"


class NotRead(Exception):
    """A file that was not read: the ``refusal`` and, for ``UNREADABLE``, the system's words."""

    def __init__(self, refusal: Refusal, detail: str = "") -> None:
        self.refusal = refusal
        self.detail = detail
        super().__init__(f"{refusal.value} ({detail})" if detail else refusal.value)


_FILE_FLAGS = (
    os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
)
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC

# openat2(2): its number is 437 on every architecture with the shared syscall table (all but
# alpha and mips); struct open_how and the RESOLVE_* bits are from <linux/openat2.h>.
_SYS_OPENAT2 = 437
_SHARED_TABLE = {"x86_64", "i686", "i386", "aarch64", "armv7l", "armv8l", "riscv64", "ppc64le"}
_SHARED_TABLE |= {"s390x", "loongarch64"}
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_RESOLVE = _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS
_OPENAT2_RETRIES = 4
"""``EAGAIN``: a rename raced the lookup; it is tried again this many times."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _load_syscall() -> Callable[..., int] | None:
    """libc's ``syscall(2)``, where openat2 has the shared number."""
    if sys.platform != "linux" or platform.machine() not in _SHARED_TABLE:
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_long
    function.argtypes = [
        ctypes.c_long,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.POINTER(_OpenHow),
        ctypes.c_size_t,
    ]
    syscall: Callable[..., int] = function
    return syscall


_syscall = _load_syscall()


class _Unsupported(Exception):
    """openat2 is not there (an old kernel, another system) or a seccomp filter refused it."""


def _openat2(directory: int, relative: PurePosixPath, flags: int) -> int:
    """``openat2(directory, relative)`` confined beneath ``directory`` with no link followed."""
    if _syscall is None:
        raise _Unsupported
    # RESOLVE_NO_SYMLINKS refuses a link at the last component too, with ELOOP; O_NOFOLLOW
    # beside O_DIRECTORY would say ENOTDIR instead, as if no directory were there.
    how = _OpenHow(flags & ~os.O_NOFOLLOW, 0, _RESOLVE)
    name = os.fsencode(str(relative))
    for _ in range(_OPENAT2_RETRIES):
        descriptor = _syscall(_SYS_OPENAT2, directory, name, ctypes.byref(how), ctypes.sizeof(how))
        if descriptor >= 0:
            return int(descriptor)
        code = ctypes.get_errno()
        if code != errno.EAGAIN:
            break
    if code in (errno.ENOSYS, errno.EPERM, errno.EINVAL, errno.E2BIG):
        # Not the answer to this path but to the call: the walk does the same job.
        raise _Unsupported
    if code == errno.ELOOP:
        raise NotRead(Refusal.LINK)
    if code == errno.EXDEV:
        raise NotRead(Refusal.OUTSIDE)
    if code in (errno.ENOENT, errno.ENOTDIR):
        raise NotRead(Refusal.MISSING)
    raise NotRead(Refusal.UNREADABLE, os.strerror(code))


def openat2_available() -> bool:
    """Whether ``open_beneath`` can use ``openat2(2)`` here (else it always walks)."""
    top = os.open("/", _DIRECTORY_FLAGS)
    try:
        os.close(_openat2(top, PurePosixPath("."), _DIRECTORY_FLAGS))
    except (_Unsupported, NotRead):
        return False
    finally:
        os.close(top)
    return True


def _walk(directory: int, relative: PurePosixPath, flags: int) -> int:
    """Open ``relative`` one component at a time from ``directory``, none followed if a link."""
    parts = relative.parts
    current = directory
    try:
        for index, name in enumerate(parts):
            last = index == len(parts) - 1
            try:
                opened = os.open(name, flags if last else _DIRECTORY_FLAGS, dir_fd=current)
            except OSError as exc:
                raise _walk_refusal(exc, current, name) from None
            if current != directory:
                os.close(current)
            current = opened
    except BaseException:
        if current != directory:
            os.close(current)
        raise
    return current


def _walk_refusal(error: OSError, parent: int, name: str) -> NotRead:
    """What a failed step of the walk means. ``O_NOFOLLOW`` refuses a link with ``ELOOP``,
    but beside ``O_DIRECTORY`` with ``ENOTDIR``, as for a file where a directory should be:
    a look at the name tells which (a name changing meanwhile may get either answer)."""
    if error.errno == errno.ELOOP:
        return NotRead(Refusal.LINK)
    if error.errno == errno.ENOTDIR:
        try:
            found = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except OSError:
            return NotRead(Refusal.MISSING)
        return NotRead(Refusal.LINK if stat.S_ISLNK(found.st_mode) else Refusal.MISSING)
    if error.errno == errno.ENOENT:
        return NotRead(Refusal.MISSING)
    return NotRead(Refusal.UNREADABLE, error.strerror or str(error))


def open_beneath(
    directory: int, relative: PurePosixPath, *, is_directory: bool = False, openat2: bool = True
) -> int:
    """A new descriptor of ``relative`` beneath the open ``directory``, with no component a
    link; raises ``NotRead``. ``is_directory`` opens a directory (for a later
    ``open_beneath``) instead of a file. ``openat2=False`` always walks component by
    component, as on a system without ``openat2(2)`` (tests use it to cover that path)."""
    if relative.is_absolute() or ".." in relative.parts:
        raise NotRead(Refusal.OUTSIDE)
    if "\0" in str(relative):
        raise NotRead(Refusal.MISSING)
    if not relative.parts:
        if not is_directory:
            raise NotRead(Refusal.NOT_A_FILE)
        return os.dup(directory)
    flags = _DIRECTORY_FLAGS if is_directory else _FILE_FLAGS
    if openat2:
        try:
            return _openat2(directory, relative, flags)
        except _Unsupported:
            pass
    return _walk(directory, relative, flags)


def _read_open_file(descriptor: int, max_bytes: int) -> bytes:
    """The bytes of the open ``descriptor`` if it is a regular file with one link and at most
    ``max_bytes`` long."""
    found = os.fstat(descriptor)
    if not stat.S_ISREG(found.st_mode):
        raise NotRead(Refusal.NOT_A_FILE)
    if found.st_nlink > 1:
        raise NotRead(Refusal.HARD_LINKS)
    if found.st_nlink == 0:
        raise NotRead(Refusal.MISSING)  # removed since it was opened
    if found.st_size > max_bytes:
        raise NotRead(Refusal.TOO_LARGE)
    data = bytearray()
    while len(data) <= max_bytes:
        chunk = os.read(descriptor, max_bytes + 1 - len(data))
        if not chunk:
            break
        data += chunk
    if len(data) > max_bytes:
        raise NotRead(Refusal.TOO_LARGE)  # it grew after the fstat
    return bytes(data)


def open_directory(root: Path, *, openat2: bool = True) -> int:
    """A descriptor of the absolute directory ``root``, opened from ``/`` like
    ``open_beneath`` with no component a link; raises ``NotRead``. ``root`` is expected
    resolved already (``Path.resolve``), so a link found in it now was put there since."""
    top = os.open("/", _DIRECTORY_FLAGS)
    try:
        return open_beneath(
            top, PurePosixPath(root).relative_to("/"), is_directory=True, openat2=openat2
        )
    finally:
        os.close(top)


def read_beneath(
    directory: int, relative: PurePosixPath, max_bytes: int, *, openat2: bool = True
) -> bytes:
    """The bytes of the file ``relative`` beneath the open ``directory`` (see the module
    docstring for what is refused); raises ``NotRead``. ``openat2`` as for ``open_beneath``."""
    descriptor = open_beneath(directory, relative, openat2=openat2)
    try:
        return _read_open_file(descriptor, max_bytes)
    except OSError as exc:
        raise NotRead(Refusal.UNREADABLE, exc.strerror or str(exc)) from None
    finally:
        os.close(descriptor)
