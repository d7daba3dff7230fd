"""Files others read while a run goes on (run.json, launch.json, verdicts, summaries, the
picture) appear whole or not at all. The implementation, and every other file access of the
suite, lives in harness.safe.safeio; this module keeps the writer's historical names."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from harness.safe import safeio
from harness.safe.safeio import replacing_file, write_text

__all__ = ["replacing", "replacing_file", "write_text"]


@contextmanager
def replacing(path: str | os.PathLike) -> Iterator[Path]:
    """For writers that only take a file name: a new, unpredictably named file beside `path`
    (same suffix, created exclusively) for the block to write by name; renamed over `path`
    when the block succeeds. Prefer `replacing_file`, which hands over the open file."""
    with safeio.replacing(path) as (_fd, tmp):
        yield tmp
