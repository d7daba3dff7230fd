"""Which NVRx launcher will run the job, and what its command line can say.

The flag set differs by version (docs/nvrx.md, "Version feature table"): 0.6.0 added per-cycle
application logs, the launcher log file, cycle infos and the progress tracker;
0.7.0 added the no-restart exit code. The version is detected from the installed
package (optionally from an extra directory such as a `pip --target` install) or
declared for a dry run prepared on another machine.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from harness import HOME

DIST_NAME = "nvidia-resiliency-ext"
LAUNCHER_MODULE = "nvidia_resiliency_ext.fault_tolerance.launcher"
# Megatron's --enable-ft-package calls init_workload_monitoring(num_warmup_iters=...), new in 0.6.0.
MEGATRON_MIN_VERSION = (0, 6, 0)
# How often NVRx's rank monitors check their rank when --ft-workload-check-interval is not given
# (FaultToleranceConfig.workload_check_interval, 5.0 in 0.4.1 and 0.7.0): a timeout is noticed
# up to one interval after it expires.
DEFAULT_CHECK_INTERVAL_S = 5.0
# What a restart costs on top of the deadlines: the launcher stops the group (SIGTERM, up to
# --workers-stop-timeout 15 s, SIGKILL), NVRx 0.7 waits up to 50 s for GPU memory to drop,
# then a new rendezvous. The scenario deadline (harness.launch.runner) and the watcher's hang budget
# (harness.launch.watch.stall_budget) both count it.
RESTART_ALLOWANCE_S = 120.0


def check_interval(chosen: float | None) -> float:
    """The rank monitors' check interval of a run: the one it chose, else NVRx's default."""
    return DEFAULT_CHECK_INTERVAL_S if chosen is None else chosen


class NvrxError(ValueError):
    """NVRx is missing or its version string cannot be understood."""


def parse_version(text: str, name: str = "--nvrx-version") -> tuple[int, int, int]:
    """'0.7.0', '0.6.0rc1', '0.4.1.post2' -> (major, minor, patch). `name`: the knob that gave
    it, as the user gave it (the flag, or NVRX_VERSION)."""
    m = re.match(r"\s*(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        raise NvrxError(f"NVRx version {text!r} is not of the form X.Y.Z: use e.g. {name}=0.7.0")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


@dataclass(frozen=True)
class NvrxTarget:
    """The launcher generation a plan is written for."""

    version: str
    # Directory prepended to PYTHONPATH so that this NVRx is imported (a --target install);
    # None: the one installed in the interpreter's environment.
    path: Path | None = None

    @property
    def version_tuple(self) -> tuple[int, int, int]:
        return parse_version(self.version)

    @property
    def routes_logs(self) -> bool:
        """--ft-per-cycle-applog-prefix, --ft-nvrx-logfile, --ft-cycle-info-dir (0.6.0+)."""
        return self.version_tuple >= (0, 6, 0)

    @property
    def has_progress_tracker(self) -> bool:
        return self.version_tuple >= (0, 6, 0)

    @property
    def has_no_restart_exit_code(self) -> bool:
        return self.version_tuple >= (0, 7, 0)

    @property
    def min_nodes_are_active(self) -> bool:
        """`--nnodes MIN:MAX` means MIN active nodes and MAX-MIN standby (hot spares), never a job
        of MAX that shrinks: NVRx's barrier rendezvous (ft_rendezvous_barrier.py, 0.7.0: "Active
        rank (< min_nodes): return to launcher -> start training workers. Standby rank (>=
        min_nodes) ... wait for the next round"), the one this suite's hot spares run on (>= 0.6).
        Older launchers keep torch elastic's rendezvous, where a job of up to MAX may shrink."""
        return self.version_tuple >= (0, 6, 0)

    @property
    def supports_megatron_ft(self) -> bool:
        return self.version_tuple >= MEGATRON_MIN_VERSION


def installed_version(extra_path: Path | None = None) -> str | None:
    """Version of the NVRx distribution Python would import, extra_path first."""
    search = ([str(extra_path)] if extra_path else []) + sys.path
    for dist in importlib.metadata.distributions(path=search):
        if (dist.metadata["Name"] or "").lower() == DIST_NAME:
            return dist.version
    return None


def version_in(directory: Path) -> str | None:
    """The version of the NVRx distribution installed in `directory` itself (a `pip --target`
    install: nvidia_resiliency_ext/ beside its .dist-info), never one found elsewhere on sys.path."""
    if not (directory / "nvidia_resiliency_ext").is_dir():
        return None
    for dist in importlib.metadata.distributions(path=[str(directory)]):
        if (dist.metadata["Name"] or "").lower() == DIST_NAME:
            return dist.version
    return None


def install_problem(directory: Path) -> str | None:
    """Why `directory` is no NVRx install to run (a clause), or None. A directory that holds
    none is never passed over for the NVRx of this Python's environment: the run would
    use another launcher than the one asked for."""
    if not directory.is_dir():
        return "is not a directory" if not directory.exists() else "is not a directory (a file or a device)"
    if version_in(directory) is not None:
        return None
    inside = sorted(str(p) for p in (_children(directory)) if version_in(p) is not None)[:3]
    hint = f" (an NVRx install is below it: {', '.join(inside)})" if inside else ""
    return (f"holds no NVRx install: no nvidia_resiliency_ext/ with its nvidia_resiliency_ext-*.dist-info{hint}, and "
            "the NVRx of this Python's environment would run in its place")


def _children(directory: Path, limit: int = 256) -> list[Path]:
    """The first `limit` subdirectories of `directory` (a hint only: never a long walk)."""
    try:
        return [p for p in itertools.islice(directory.iterdir(), limit) if p.is_dir()]
    except OSError:
        return []


# Side-by-side installs (tools/install-nvrx-target.sh VERSION .nvrx/VERSION), looked for in the
# working directory and in this checkout, as the test suite's ini option nvrx_launcher_dirs does.
SIDE_BY_SIDE_DIR = ".nvrx"


def side_by_side(roots: tuple[Path, ...] | None = None) -> list[tuple[str, Path]]:
    """(version, directory) of every NVRx install under ROOT/.nvrx/* (a directory holding
    nvidia_resiliency_ext and its dist-info), for the working directory and this checkout."""
    if roots is None:
        roots = (Path.cwd(), HOME)
    found: dict[Path, str] = {}
    for root in roots:
        base = root / SIDE_BY_SIDE_DIR
        try:
            candidates = sorted(p for p in base.iterdir() if (p / "nvidia_resiliency_ext").is_dir())
        except OSError:
            continue
        for directory in candidates:
            for dist in importlib.metadata.distributions(path=[str(directory)]):
                if (dist.metadata["Name"] or "").lower() == DIST_NAME:
                    found.setdefault(directory.resolve(), dist.version)
                    break
    return [(version, directory) for directory, version in found.items()]


def installed(roots: tuple[Path, ...] | None = None, extra: tuple[Path, ...] = ()) -> list[NvrxTarget]:
    """Every NVRx launcher this machine has, one per version, oldest first: the one pip installed,
    the side-by-side installs of side_by_side(roots) (the working directory's and this checkout's
    `.nvrx/*`), then the NVRx installs in `extra` (directories the caller names; one that holds
    none is passed over). A version found twice is the first found: pip's wins a tie. The last
    is what `newest` picks, so the pytest plugin's launchers are the command line's."""
    found: list[NvrxTarget] = []
    pip = installed_version(None)
    if pip is not None:
        found.append(NvrxTarget(pip, None))
    found += [NvrxTarget(v, p) for v, p in side_by_side(roots)]
    for directory in extra:
        version = version_in(directory)
        if version is not None:
            found.append(NvrxTarget(version, directory.resolve()))
    one: dict[str, tuple[int, NvrxTarget]] = {}
    for order, target in enumerate(found):
        one.setdefault(target.version, (order, target))
    # newest first among equals: max() below takes the first of the highest version, pip's first
    ranked = sorted(one.values(), key=lambda o: (_sortable(o[1].version), -o[0]))
    return [target for _order, target in ranked]


def newest(roots: tuple[Path, ...] | None = None) -> NvrxTarget | None:
    """The newest NVRx this machine has: the one pip installed, or a side-by-side install
    (`.nvrx/VERSION`); pip's wins a tie. None when there is none."""
    found = installed(roots)
    return found[-1] if found else None


def _sortable(version: str) -> tuple[int, int, int]:
    try:
        return parse_version(version)
    except NvrxError:
        return (0, 0, 0)


def resolve(declared: str | None, extra_path: Path | None, *, version_name: str = "--nvrx-version") -> NvrxTarget:
    """The declared version wins (dry run for another machine); else what is installed.
    `version_name`: the version's knob as the user gave it (the flag, or NVRX_VERSION)."""
    if declared:
        parse_version(declared, version_name)
        return NvrxTarget(version=declared, path=extra_path)
    found = installed_version(extra_path)
    if found is None:
        where = f" in {extra_path} or" if extra_path else ""
        raise NvrxError(
            f"nvidia-resiliency-ext is not installed{where} in this Python ({sys.executable}): "
            "pip install nvidia-resiliency-ext, or declare the cluster's version with --nvrx-version for a dry run"
        )
    return NvrxTarget(version=found, path=extra_path)
