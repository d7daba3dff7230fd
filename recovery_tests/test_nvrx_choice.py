"""Which NVRx a run uses when the user says nothing: the newest this machine has (the one pip
installed, or a side-by-side `.nvrx/VERSION` install), not whichever pip happened to resolve."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import nvrx
from harness.resolve import resolve_spec


def fake_install(root: Path, version: str) -> Path:
    directory = root / ".nvrx" / version
    (directory / "nvidia_resiliency_ext").mkdir(parents=True)
    info = directory / f"nvidia_resiliency_ext-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: nvidia-resiliency-ext\nVersion: {version}\n")
    return directory


def test_the_newest_side_by_side_install_beats_an_older_pip_one(tmp_path):
    pip = nvrx.installed_version(None)
    assert pip is not None
    newer = fake_install(tmp_path, "99.0.0")
    fake_install(tmp_path, "0.0.1")
    (tmp_path / ".nvrx" / "empty").mkdir()  # no NVRx in it: ignored
    chosen = nvrx.newest((tmp_path,))
    assert (chosen.version, chosen.path) == ("99.0.0", newer.resolve())


def test_pip_wins_when_nothing_newer_is_beside_it(tmp_path):
    fake_install(tmp_path, "0.0.1")
    chosen = nvrx.newest((tmp_path,))
    assert (chosen.version, chosen.path) == (nvrx.installed_version(None), None)


@pytest.mark.parametrize("flags, expected_path", [
    ({}, "newest"),
    ({"nvrx_path": ""}, None),  # --nvrx-path '': the one pip installed
])
def test_run_takes_the_newest_unless_told(tmp_path, monkeypatch, flags, expected_path):
    newer = fake_install(tmp_path, "99.0.0")
    monkeypatch.chdir(tmp_path)
    spec, target, _ = resolve_spec({"workload": "reference", "work_dir": str(tmp_path / "w"), **flags}, (), {})
    if expected_path == "newest":
        assert (target.version, target.path, spec.nvrx_path) == ("99.0.0", newer.resolve(), newer.resolve())
    else:
        assert (target.version, target.path, spec.nvrx_path) == (nvrx.installed_version(None), None, None)
