"""Files others read while a run goes on (run.json, launch.json, verdicts, summaries, the
picture) appear whole or not at all: written beside their final name, then renamed over it."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def replacing(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path beside `path` (same suffix, so writers that go by it still can) for
    the block to write; renamed over `path` when the block succeeds, removed when it fails."""
    final = Path(path)
    tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp{final.suffix}")
    try:
        yield tmp
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)  # only left when the block or the rename failed


def write_text(path: str | os.PathLike, text: str) -> None:
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
