"""The digest of the evidence a verdict judged (verdict.json's `evidence_digest`).

Cheap and honest: every entry of the run directory except the verdict's own outputs,
walked without following a link, as (name, kind, size, modification time); nothing is
opened. Two digests: one over names, kinds, sizes and times, one over names, kinds and
sizes only, so that a copy that did not keep the times is told apart from changed
evidence. A checkpoint directory outside the run directory is not covered (the method
says so). The walk is iterative and bounded (MAX_ENTRIES, MAX_DEPTH); a digest of a walk
that stopped there says `complete: false`.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from harness.vocab.layout import CLAIM_NAME, EXPECTATION_NAME, REPORT_NAME, TIMELINE_NAME, VERDICT_NAME
from harness.vocab.verdict import EvidenceDigest

METHOD = "run-dir entries: name, kind, size, mtime_ns (outputs excluded, links not followed)"
MAX_ENTRIES = 200_000
MAX_DEPTH = 32
# Written after (or about) the judgment, never read as evidence: the verdict's own outputs,
# the claim lock, the fixtures' expectation of a negative scenario.
NOT_EVIDENCE = frozenset({VERDICT_NAME, REPORT_NAME, TIMELINE_NAME, CLAIM_NAME, EXPECTATION_NAME})


def _is_output(name: str, top: bool) -> bool:
    if not top:
        return False
    # an output itself, or the temporary file an atomic replace of one leaves for a moment
    return name in NOT_EVIDENCE or any(name.startswith(f".{out}.") for out in NOT_EVIDENCE)


def digest(run_dir: str | os.PathLike) -> EvidenceDigest | None:
    """The digest of the run directory as it is now; None when it is not a directory."""
    root = Path(run_dir)
    try:
        if not stat.S_ISDIR(os.lstat(root).st_mode):
            return None
    except OSError:
        return None
    full, sizes = hashlib.sha256(), hashlib.sha256()
    entries = total = 0
    complete = True
    stack: list[tuple[Path, str, int]] = [(root, "", 0)]
    rows: list[tuple[str, str, int, int]] = []
    while stack:
        directory, rel, depth = stack.pop()
        try:
            with os.scandir(directory) as it:
                found = list(it)
        except OSError as exc:
            rows.append((rel or ".", f"unreadable {exc.errno}", 0, 0))
            continue
        for entry in found:
            if _is_output(entry.name, depth == 0):
                continue
            name = f"{rel}/{entry.name}" if rel else entry.name
            if entries >= MAX_ENTRIES:
                complete = False
                break
            entries += 1
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                rows.append((name, "vanished", 0, 0))
                continue
            if stat.S_ISDIR(st.st_mode):
                if depth + 1 < MAX_DEPTH:
                    stack.append((Path(entry.path), name, depth + 1))
                else:
                    complete = False
                rows.append((name, "d", 0, 0))  # its mtime changes whenever an output is written
                continue
            kind = "f" if stat.S_ISREG(st.st_mode) else ("l" if stat.S_ISLNK(st.st_mode) else "o")
            rows.append((name, kind, st.st_size, st.st_mtime_ns))
            total += st.st_size if kind == "f" else 0
    for name, kind, size, mtime in sorted(rows):
        key = name.encode("utf-8", "surrogateescape")
        sizes.update(b"%s\0%s\0%d\n" % (key, kind.encode(), size))
        full.update(b"%s\0%s\0%d\0%d\n" % (key, kind.encode(), size, mtime))
    return EvidenceDigest(METHOD, entries, total, full.hexdigest(), sizes.hexdigest(), complete)
