"""Which NVRx a Python process imports, found without importing it: the launcher's identity.

A run promises one launcher (run.json's contract: its package directory, version and a digest
of its files, as the plan's search path finds it), and the nemesis, in every node's first
worker, states the one that worker's own `sys.path` finds (one `[nemesis] ... launcher
identity:` line, which harness.read.history reads as events.LauncherImported). `launcher_identity`
(harness.judge.criteria) compares the two: `--nvrx-path` pointing at nothing, a PYTHONPATH that
differs on one node, a container with its own NVRx all show up as another launcher.

- the package is located with importlib's path finder (`importlib.util.find_spec` for the
  running process, `PathFinder.find_spec` over an explicit search path for a plan), which
  never imports it;
- its version is the `Version:` of the `nvidia_resiliency_ext-*.dist-info` beside it (the
  distribution pip installed there), None when there is none;
- its digest covers every regular file below the package directory (every portion of a
  namespace package, the first named as its path) except `__pycache__/`
  (what the interpreter writes itself), sorted by relative path, as (path, size, sha256 of the
  contents); a link is recorded as a link with its target, never followed; the walk is
  bounded (MAX_FILES, MAX_BYTES) and a digest of a walk that stopped there is None.

Stdlib only, and nothing of the harness: the nemesis imports it in every worker.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import re
import stat
from dataclasses import dataclass
from typing import Sequence

PACKAGE = "nvidia_resiliency_ext"
DIST_NAME = "nvidia-resiliency-ext"
MAX_FILES = 20_000
MAX_BYTES = 1 << 30
MAX_DEPTH = 32
MAX_PATH_CHARS = 4096
VERSION_RE = re.compile(r"[0-9][0-9A-Za-z.+_-]{0,63}")
SHA256_RE = re.compile(r"[0-9a-f]{64}")
SKIPPED_DIRS = frozenset({"__pycache__"})
_CHUNK = 1 << 20


@dataclass(frozen=True)
class LauncherIdentity:
    """One NVRx install: its package directory, its distribution's version (None: no dist-info
    beside it), the digest of its files and how many there are (None: the walk hit its bound
    or a file could not be read)."""

    path: str
    version: str | None
    sha256: str | None
    files: int | None

    def to_json(self) -> dict:
        return {"package": PACKAGE, "path": self.path, "version": self.version, "sha256": self.sha256,
                "files": self.files}

    def line(self, rank: int) -> str:
        """The nemesis's line (harness.read.history's rule reads it back; the path last, it may hold spaces)."""
        return (f"rank {rank} launcher identity: {PACKAGE} {self.version or '?'} sha256 {self.sha256 or '?'} "
                f"files {self.files if self.files is not None else '?'} at {self.path}")


def not_found_line(rank: int, why: str) -> str:
    """The nemesis's line when no NVRx is on the worker's path."""
    return f"rank {rank} launcher identity: {PACKAGE} not found ({why})"


def unknown_line(rank: int, why: str) -> str:
    """The nemesis's line when looking for it failed."""
    return f"rank {rank} launcher identity: {PACKAGE} unknown ({why})"


def locate(search: Sequence[str] | None = None) -> LauncherIdentity | None:
    """The NVRx this process (search None: its own sys.path and import hooks) or a process with
    this search path would import, or None when none is there. Imports nothing of it."""
    if search is None:
        spec = importlib.util.find_spec(PACKAGE)
    else:
        spec = importlib.machinery.PathFinder.find_spec(PACKAGE, [str(p) for p in search if p])
    if spec is None:
        return None
    places = [os.path.realpath(p) for p in (spec.submodule_search_locations or ())]
    if not places and spec.origin:
        places = [os.path.realpath(os.path.dirname(spec.origin))]
    if not places:
        return None
    # a namespace package (0.4.1 ships no __init__.py) may join several portions: each is digested
    found = [digest(p) for p in places]
    if len(found) == 1:
        sha, files = found[0]
    elif all(f[0] is not None for f in found):
        sha = hashlib.sha256("\n".join(f"{p}\0{f[0]}" for p, f in zip(places, found)).encode(
            "utf-8", "surrogateescape")).hexdigest()
        files = sum(f[1] or 0 for f in found)
    else:
        sha, files = None, None
    return LauncherIdentity(places[0], dist_version(os.path.dirname(places[0])), sha, files)


def dist_version(site: str) -> str | None:
    """The version of the nvidia-resiliency-ext distribution installed in the directory `site`
    (its dist-info there), or None."""
    try:
        for dist in importlib.metadata.distributions(path=[site]):
            if (dist.metadata["Name"] or "").lower() == DIST_NAME:
                version = dist.version
                return version if isinstance(version, str) and VERSION_RE.fullmatch(version) else None
    except Exception:  # noqa: BLE001 - a damaged dist-info is no version, never a crash of a worker
        return None
    return None


_CACHE: dict[tuple[str, int, int], tuple[str | None, int | None]] = {}


def digest(package_dir: str) -> tuple[str | None, int | None]:
    """(sha256, files) of the package's files (see the module's docstring); (None, None) when
    the walk stopped at a bound or a file could not be read. Cached per directory and its
    modification time within one process."""
    try:
        st = os.stat(package_dir)
    except OSError:
        return None, None
    key = (package_dir, st.st_ino, st.st_mtime_ns)
    if key not in _CACHE:
        _CACHE[key] = _walk(package_dir)
    return _CACHE[key]


def _walk(root: str) -> tuple[str | None, int | None]:
    rows: list[tuple[str, str, int, str]] = []
    total = 0
    stack: list[tuple[str, str, int]] = [(root, "", 0)]
    while stack:
        directory, rel, depth = stack.pop()
        try:
            with os.scandir(directory) as it:
                entries = list(it)
        except OSError:
            return None, None
        for entry in entries:
            name = f"{rel}/{entry.name}" if rel else entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                return None, None
            if stat.S_ISDIR(st.st_mode):
                if entry.name in SKIPPED_DIRS:
                    continue
                if depth + 1 >= MAX_DEPTH:
                    return None, None
                stack.append((entry.path, name, depth + 1))
            elif stat.S_ISLNK(st.st_mode):
                try:
                    rows.append((name, "l", 0, os.readlink(entry.path)))
                except OSError:
                    return None, None
            elif stat.S_ISREG(st.st_mode):
                if entry.name.endswith((".pyc", ".pyo")):
                    continue
                total += st.st_size
                if len(rows) >= MAX_FILES or total > MAX_BYTES:
                    return None, None
                contents = _file_sha256(entry.path)
                if contents is None:
                    return None, None
                rows.append((name, "f", st.st_size, contents))
    whole = hashlib.sha256()
    for name, kind, size, value in sorted(rows):
        whole.update(b"%s\0%s\0%d\0%s\n" % (name.encode("utf-8", "surrogateescape"), kind.encode(), size,
                                             value.encode("utf-8", "surrogateescape")))
    return whole.hexdigest(), len(rows)


def _file_sha256(path: str) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    h = hashlib.sha256()
    try:
        with os.fdopen(fd, "rb") as f:
            while chunk := f.read(_CHUNK):
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()
