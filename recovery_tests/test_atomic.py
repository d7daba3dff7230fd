"""harness.safe.atomic: a file is replaced whole or not at all, and no temporary is left behind."""

from __future__ import annotations

import pytest

from harness.safe import atomic


def test_write_text_replaces_the_file(tmp_path):
    target = tmp_path / "verdict.json"
    target.write_text("old")
    atomic.write_text(target, "new\n")
    assert target.read_text() == "new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["verdict.json"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "timeline.png"
    target.write_bytes(b"old picture")
    with pytest.raises(RuntimeError):
        with atomic.replacing(target) as tmp:
            assert tmp.parent == tmp_path and tmp.suffix == ".png" and tmp != target
            tmp.write_bytes(b"half a pict")
            raise RuntimeError("matplotlib failed midway")
    assert target.read_bytes() == b"old picture"
    assert [p.name for p in tmp_path.iterdir()] == ["timeline.png"]
