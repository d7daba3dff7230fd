"""Every file the suite reads from a run directory or writes anywhere goes through here.

A run directory may come from someone else (a tarball off a cluster, verified as root), so:

- reading: opened with O_NOFOLLOW | O_NONBLOCK and refused unless it is a regular file (a
  symlink, FIFO, socket or device is never read: a FIFO would block for ever, a link could
  point at a secret), of bounded size for whole-file reads (`read_bytes`, `read_text`,
  `read_json`); logs are streamed from `open_log`: buffered reads of large chunks (never a
  system call per byte), ending at the size the file had when it was opened (a log that keeps
  growing does not keep its reader reading);
- writing a new file: `create_new` / `open_new` (O_CREAT | O_EXCL | O_NOFOLLOW): an existing
  file or link is never overwritten or followed;
- replacing one of the suite's own files (run.json, launch.json, verdict.json, report.md,
  timeline.png, summaries): written to a temporary file with an unpredictable name, created
  exclusively beside it, then renamed over it; a symlink or non-regular file at the final
  name is refused, so nothing is ever written through a link;
- appending to the suite's own logs: `open_append` (O_NOFOLLOW, regular files only);
- directories the suite creates: `make_dirs` refuses a symlink or non-directory on the way;
- strings: every string of a JSON record (`read_json`, `parse_record`: keys and values) is
  checked for what no system call can take (a NUL byte, a character the file system encoding
  cannot hold) and refused with UnusableRecord naming the field; `path_problem` and
  `name_problem` add the lengths the OS takes (PATH_MAX, NAME_MAX) for a string that is to
  name a path or one name.

Errors are OSError (with errno), so every caller's existing OSError handling applies.
"""

from __future__ import annotations

import errno
import io
import json
import os
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator, TextIO

RECORD_LIMIT = 4 << 20  # run.json, launch.json, the marker, cycle infos, verdict.json: a few KiB in practice
TRACKER_LIMIT = 64  # Megatron's tracker holds an iteration number

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_APPEND_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def kind_of(mode: int) -> str:
    """'a symlink', 'a FIFO', ... for messages."""
    for test, name in ((stat.S_ISLNK, "a symlink"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISDIR, "a directory"), (stat.S_ISREG, "a regular file")):
        if test(mode):
            return name
    return "not a regular file"


def _refused(path: str | os.PathLike, why: str, code: int = errno.EINVAL) -> OSError:
    return OSError(code, f"refused: {why}", str(path))


def open_regular(path: str | os.PathLike) -> int:
    """A read-only descriptor of `path` if it is a regular file (not followed through a
    symlink, never blocking on a FIFO); OSError otherwise."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW on a symlink
            raise _refused(path, "it is a symlink; links in a run directory are never followed", errno.ELOOP) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refused(path, f"it is {kind_of(st.st_mode)}, not a regular file")
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_binary(path: str | os.PathLike) -> BinaryIO:
    """An unbuffered binary reader of a regular file (for streaming logs)."""
    return os.fdopen(open_regular(path), "rb", buffering=0)


LOG_BUFFER = 1 << 16  # bytes per read system call of a streamed log


class _UpToSize(io.RawIOBase):
    """The bytes of a descriptor up to the size the file had when it was opened."""

    def __init__(self, fd: int, size: int) -> None:
        super().__init__()
        self._fd = fd
        self._left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # noqa: ANN001 - any writable buffer
        if self._left <= 0:
            return 0
        view = memoryview(buffer).cast("B")
        want = min(len(view), self._left)
        got = os.readv(self._fd, [view[:want]])
        self._left -= got
        return got

    def fileno(self) -> int:
        return self._fd

    def close(self) -> None:
        if not self.closed:
            try:
                os.close(self._fd)
            finally:
                super().close()


def open_log(path: str | os.PathLike, buffer_size: int = LOG_BUFFER) -> io.BufferedReader:
    """A buffered binary reader of a regular file (a log): `buffer_size` bytes per system
    call, and no further than the file's size at opening (what is appended later is left for
    the next read, so a log written without end cannot keep the reader reading)."""
    fd = open_regular(path)
    try:
        raw = _UpToSize(fd, os.fstat(fd).st_size)
    except BaseException:
        os.close(fd)
        raise
    try:
        return io.BufferedReader(raw, buffer_size)
    except BaseException:
        raw.close()  # it owns the descriptor now: closing fd as well would close it twice
        raise


def read_bytes(path: str | os.PathLike, limit: int = RECORD_LIMIT) -> bytes:
    """The whole of a regular file of at most `limit` bytes."""
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise _refused(path, f"it holds {size} bytes, more than the {limit} such a file can hold", errno.EFBIG)
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(limit + 1 - total, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # grew while being read
                raise _refused(path, f"it grew past {limit} bytes while being read", errno.EFBIG)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path: str | os.PathLike, limit: int = RECORD_LIMIT, errors: str = "replace") -> str:
    return read_bytes(path, limit).decode("utf-8", errors)


def read_json(path: str | os.PathLike, limit: int = RECORD_LIMIT) -> object:
    """The JSON value of a regular file; OSError when unreadable, ValueError when not JSON
    (including numbers too long to convert), UnusableRecord (a ValueError) when one of its
    strings holds what no system call takes (parse_record)."""
    return parse_record(read_text(path, limit))


# ---------------------------------------------------------------- strings the OS can take

PATH_MAX = 4096  # Linux: a path the kernel takes is shorter than this, in bytes (its NUL included)
NAME_MAX = 255  # bytes of one name in a path


class UnusableRecord(ValueError):
    """A JSON record holds a string no system call takes: `where` names the field
    (`spec.work_dir`, `commands[0].argv[2]`, a key: `{...}`), `why` says what it holds."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(f"{where} holds {why}")
        self.where = where
        self.why = why


def string_problem(text: str) -> str | None:
    """What in `text` no path, name, argument or environment value can hold (a NUL byte, a
    character the file system encoding cannot hold, as a lone surrogate from a JSON escape);
    None when it has nothing of the kind."""
    if "\x00" in text:
        return "a NUL byte, which no path, name or argument can hold"
    try:
        os.fsencode(text)
    except UnicodeEncodeError:
        return "a character no file name can hold (a lone UTF-16 surrogate)"
    return None


def path_problem(text: str) -> str | None:
    """Why `text` cannot name a path (string_problem, empty, PATH_MAX bytes or more, a name
    longer than NAME_MAX bytes); None when the OS would take it."""
    problem = string_problem(text)
    if problem is not None:
        return problem
    raw = os.fsencode(text)
    if not raw:
        return "an empty path"
    if len(raw) >= PATH_MAX:
        return f"a path of {len(raw)} bytes, longer than any the OS takes ({PATH_MAX - 1})"
    longest = max(len(part) for part in raw.split(b"/"))
    if longest > NAME_MAX:
        return f"a name of {longest} bytes, longer than any the OS takes ({NAME_MAX})"
    return None


def name_problem(text: str) -> str | None:
    """Why `text` cannot be one name in a path (path_problem, or a '/' in it, or . or ..)."""
    problem = path_problem(text)
    if problem is not None:
        return problem
    if "/" in text or text in (".", ".."):
        return f"{text!r}, which is not one name"
    return None


def record_problem(value: object) -> UnusableRecord | None:
    """The first string of a decoded JSON value (keys included) that string_problem refuses,
    as an UnusableRecord naming where it is; None when every string is usable. Iterative: no
    nesting exhausts the stack."""
    stack: list[tuple[str, object]] = [("", value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            problem = string_problem(item)
            if problem is not None:
                return UnusableRecord(where or "the record", problem)
        elif isinstance(item, dict):
            for key, sub in reversed(list(item.items())):
                named = f"{where}.{key}" if where else str(key)
                if isinstance(key, str) and (problem := string_problem(key)) is not None:
                    return UnusableRecord(f"the name of a field in {where or 'the record'}", problem)
                stack.append((named, sub))
        elif isinstance(item, list):
            stack.extend((f"{where}[{i}]", sub) for i, sub in reversed(list(enumerate(item))))
    return None


def parse_record(text: str) -> object:
    """json.loads of a record's text, every string of it checked (record_problem): ValueError
    when not JSON, UnusableRecord when a string cannot reach the OS."""
    value = json.loads(text)
    problem = record_problem(value)
    if problem is not None:
        raise problem
    return value


def is_regular(path: str | os.PathLike) -> bool:
    """A regular file itself (a symlink to one is not)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def is_real_dir(path: str | os.PathLike) -> bool:
    """A directory itself (a symlink to one is not)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


# ---------------------------------------------------------------- writing


def make_dirs(path: str | os.PathLike, *, below: str | os.PathLike) -> Path:
    """mkdir -p of `path`, refusing a symlink or a non-directory at any component under
    `below` (that part is the user's own path, followed as given)."""
    path, top = Path(path), Path(below)
    rel = path.relative_to(top)  # ValueError: not under it
    top.mkdir(parents=True, exist_ok=True)
    current = top
    for name in rel.parts:
        current = current / name
        try:
            os.mkdir(current)
        except FileExistsError:
            pass
        mode = os.lstat(current).st_mode
        if not stat.S_ISDIR(mode):
            raise _refused(current, f"it is {kind_of(mode)}, not a directory the suite can write into", errno.ENOTDIR)
    return path


def create_new(path: str | os.PathLike, data: str | bytes, mode: int = 0o644) -> Path:
    """Write a file that must not exist yet (FileExistsError otherwise, also for a symlink)."""
    with open_new(path, binary=isinstance(data, bytes), mode=mode) as f:
        f.write(data)
    return Path(path)


def open_new(path: str | os.PathLike, *, binary: bool = False, mode: int = 0o644) -> TextIO | BinaryIO:
    fd = os.open(path, _NEW_FLAGS, mode)
    return os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"}))


def open_append(path: str | os.PathLike) -> TextIO:
    """Append to one of the suite's own logs: never through a link, regular files only."""
    try:
        fd = os.open(path, _APPEND_FLAGS, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refused(path, "it is a symlink; the suite never writes through one", errno.ELOOP) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise _refused(path, f"it is {kind_of(st.st_mode)}, not a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "a", encoding="utf-8")


def _check_replaceable(final: Path) -> None:
    try:
        mode = os.lstat(final).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise _refused(final, f"it is {kind_of(mode)}; the suite only replaces regular files it writes",
                       errno.ELOOP if stat.S_ISLNK(mode) else errno.EINVAL)


@contextmanager
def replacing_file(path: str | os.PathLike, *, binary: bool = False) -> Iterator[TextIO | BinaryIO]:
    """A new file with an unpredictable name beside `path`, open for writing; renamed over
    `path` when the block succeeds, removed when it fails. A symlink, FIFO or directory at
    `path` is refused before anything is written."""
    with replacing(path) as (fd, _tmp):
        # closefd=False: `replacing` closes the descriptor, once. Closing it here too closed, in a
        # process with other threads, whatever descriptor had taken its number meanwhile (CI,
        # 2026-12-06: a launch thread's subprocess pipe, EBADF in Popen, while another thread
        # wrote a verdict).
        with os.fdopen(fd, "wb" if binary else "w", closefd=False,
                       **({} if binary else {"encoding": "utf-8"})) as f:
            yield f


@contextmanager
def replacing(path: str | os.PathLike) -> Iterator[tuple[int, Path]]:
    """(descriptor, path) of a new file created exclusively (mkstemp: O_EXCL, unpredictable
    name, same suffix) beside `path`; renamed over `path` when the block succeeds. The
    descriptor is closed here, once: the block must not close it."""
    final = Path(path)
    _check_replaceable(final)
    fd, name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=f".tmp{final.suffix}", dir=final.parent)
    tmp = Path(name)
    try:
        try:
            yield fd, tmp
        finally:
            os.close(fd)  # the one close of this descriptor (the block never closes it)
        os.chmod(tmp, 0o644)
        _check_replaceable(final)
        os.replace(tmp, final)  # rename never follows a link at the destination
    finally:
        tmp.unlink(missing_ok=True)  # only left when the block or the rename failed


def write_text(path: str | os.PathLike, text: str) -> None:
    """Replace one of the suite's own files atomically (readers see the old or the new)."""
    with replacing_file(path) as f:
        f.write(text)
