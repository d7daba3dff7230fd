"""Which NVRx a run uses when the user says nothing: the newest this machine has (the one pip
installed, or a side-by-side `.nvrx/VERSION` install), not whichever pip happened to resolve."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.machine import nvrx
from harness.plan.resolve import resolve_spec
from harness.plan.spec import SpecError


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


@pytest.mark.parametrize("where, said", [
    ("missing", "is not a directory"),
    ("empty", "holds no NVRx install"),
    ("parent", "holds no NVRx install: no nvidia_resiliency_ext/ with its nvidia_resiliency_ext-*.dist-info (an NVRx install "
                "is below it: "),
])
def test_a_launcher_path_without_nvrx_is_refused_not_passed_over(tmp_path, where, said):
    """`--nvrx-path DIR` without an NVRx in DIR once ran the pip-installed one and recorded DIR."""
    fake_install(tmp_path, "99.0.0")
    path = {"missing": tmp_path / "nope", "empty": tmp_path / "empty", "parent": tmp_path / ".nvrx"}[where]
    if where == "empty":
        path.mkdir()
    with pytest.raises(SpecError) as err:
        resolve_spec({"workload": "reference", "work_dir": str(tmp_path / "w"), "nvrx_path": str(path)}, (), {})
    assert f"--nvrx-path={path} {said}" in str(err.value), err.value
    with pytest.raises(SpecError) as err:  # from the environment: named by its variable
        resolve_spec({"workload": "reference", "work_dir": str(tmp_path / "w")}, (), {"NVRX_QUAL_NVRX_PATH": str(path)})
    assert f"NVRX_QUAL_NVRX_PATH={path} {said}" in str(err.value), err.value


def test_a_launcher_path_refusal_comes_with_every_other_problem(tmp_path):
    with pytest.raises(SpecError) as err:
        resolve_spec({"workload": "reference", "work_dir": str(tmp_path / "w"), "nvrx_path": str(tmp_path / "nope"),
                      "train_iters": "-5"}, (), {})
    assert [p.split(" ", 1)[0] for p in err.value.problems] == [f"--nvrx-path={tmp_path / 'nope'}", "--train-iters=-5"]


def test_a_launcher_path_holding_nvrx_is_used(tmp_path):
    directory = fake_install(tmp_path, "99.0.0")
    spec, target, _ = resolve_spec({"workload": "reference", "work_dir": str(tmp_path / "w"),
                                    "nvrx_path": str(directory)}, (), {})
    assert (target.version, target.path, spec.nvrx_path) == ("99.0.0", directory, directory)
