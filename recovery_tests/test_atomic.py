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


@pytest.mark.parametrize("binary", [False, True])
def test_a_replaced_file_closes_its_descriptor_once(tmp_path, monkeypatch, binary):
    """A descriptor closed twice closes, the second time, whatever descriptor took its number
    meanwhile: in a process with other threads (the pytest plugin's launch pool) that was a
    launch thread's subprocess pipe (CI, 2026-12-06: EBADF in Popen while a verdict was
    written). Every close must find its descriptor open."""
    import os

    closed_twice = []
    real_close = os.close

    def close_once(fd):
        try:
            os.fstat(fd)
        except OSError:
            closed_twice.append(fd)
        real_close(fd)

    monkeypatch.setattr(os, "close", close_once)
    with atomic.replacing_file(tmp_path / "verdict.json", binary=binary) as f:
        f.write(b"{}" if binary else "{}")
    monkeypatch.undo()
    assert closed_twice == [], f"descriptors closed after they were closed: {closed_twice}"
    assert (tmp_path / "verdict.json").read_text() == "{}"
