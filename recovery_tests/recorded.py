"""Real run directories recorded by `nvrx-qual run` (recovery_tests/data/runs/), replayed into a
live directory as the run wrote them, so that a test can watch a real run poll by poll
without launching anything.

A run's writes are its log lines, its markers, its cycle records and its JSON records. Each
log line is replayed at the time stamped on it, or, when it carries none (a traceback, an
arguments table, Megatron's load lines), at the time of the stamped line before it in the
same file (after it, at a file's top); a marker at its `injected_at`, a cycle record at its
`cycle_start_time`, run.json first and launch.json last. The order within a file is the
file's own; between files it is the order of their stamps, to the resolution of the stamps.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from harness.vocab.dialect import LogClock, megatron_datetime, parse_iso_utc, read_line
from harness.plan.spec import RunSpec

RUNS = Path(__file__).resolve().parent / "data" / "runs"

@dataclass(frozen=True)
class Write:
    """Append `data` to `rel` at `t` (UTC seconds), or (data None) copy `rel` whole from the
    recorded run at `t`."""

    t: float
    seq: int  # the order of writes of the same time: the file's own, then the files'
    rel: str
    data: bytes | None = None


def _lines(path: Path, rel: str, utc_offset_s: int, seq: int) -> list[Write]:
    """The file's lines, each at its own stamp read by the readers' line model (harness.vocab.dialect:
    the console capture's UTC stamp, a full-date or glog stamp, Megatron's `datetime:`), else
    at the stamp before it; never before a line above it (a whole-second stamp is floored)."""
    clock = LogClock()
    lines = path.read_bytes().splitlines(keepends=True)
    stamps: list[float | None] = []
    for i, raw in enumerate(lines, start=1):
        line = read_line(rel, i, raw.decode("utf-8", "replace").rstrip("\r\n"), labels_are_ranks=True)
        local = clock.read(line.body)
        if local is None and (found := megatron_datetime(line.body)) is not None:
            local = found.ts
        stamps.append(line.console if line.console is not None else None if local is None else local - utc_offset_s)
    carried = next((t for t in stamps if t is not None), None)
    out = []
    for i, (raw, t) in enumerate(zip(lines, stamps)):
        if t is not None and (carried is None or t > carried):
            carried = t
        if carried is not None:
            out.append(Write(carried, seq + i, rel, raw))
    return out


def writes(run_dir: Path) -> list[Write]:
    """Every write of the recorded run, in the order the run made them."""
    spec = json.loads((run_dir / "run.json").read_text())
    launch = json.loads((run_dir / "launch.json").read_text())
    offset = int(spec.get("utc_offset_s") or 0)
    started, ended = parse_iso_utc(launch["started_at"]), parse_iso_utc(launch["ended_at"])
    assert started is not None and ended is not None
    out = [Write(started - 1.0, 0, "run.json")]  # written before the launch
    for n, log in enumerate(sorted((run_dir / "logs").glob("*.log"))):
        out += _lines(log, f"logs/{log.name}", offset, (n + 1) << 20)
    for marker in sorted(run_dir.glob("fault_injected*.json")):
        out.append(Write(parse_iso_utc(json.loads(marker.read_text())["injected_at"]), 0, marker.name))
    for info in sorted((run_dir / "cycle_infos").glob("cycle_info..0.*")):
        out.append(Write(parse_iso_utc(json.loads(info.read_text())["cycle_start_time"]), 0, f"cycle_infos/{info.name}"))
    out.sort(key=lambda w: (w.t, w.seq))
    out.append(Write(ended, 1 << 40, "launch.json"))  # the harness writes it after the launcher ended
    return out


def apply(write: Write, source: Path, live: Path) -> None:
    target = live / write.rel
    target.parent.mkdir(parents=True, exist_ok=True)
    if write.data is not None:
        with open(target, "ab") as f:  # one write per call, as a process flushing its line
            f.write(write.data)
        return
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.copyfile(source / write.rel, tmp)
    os.replace(tmp, target)


class Clock:
    """The watcher's clock during a replay: seconds of the recorded run, from its launch."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def at(self, t: float) -> None:
        self.now = max(self.now, t - self.started)


def started_at(run_dir: Path) -> float:
    t = parse_iso_utc(json.loads((run_dir / "launch.json").read_text())["started_at"])
    assert t is not None
    return t


def replay(run_dir: Path, live: Path, poll: Callable[[], object], clock: Clock, *, tick_s: float | None,
           until: Callable[[Write], bool] | None = None) -> list[Write]:
    """Write the recorded run into `live` and call `poll` as harness.launch.job calls its watcher:
    every `tick_s` seconds of the run's time (what lands between two ticks is found together),
    or (tick_s None) after every write; stop before the first write `until` holds for. The
    writes made."""
    planned = writes(run_dir)
    if until is not None:
        planned = planned[:next((i for i, w in enumerate(planned) if until(w)), len(planned))]
    (live / "logs").mkdir(parents=True, exist_ok=True)
    if tick_s is None:
        for w in planned:
            apply(w, run_dir, live)
            clock.at(w.t)
            poll()
        return planned
    t = clock.started
    pending = list(planned)
    while pending:
        t += tick_s
        while pending and pending[0].t <= t:
            apply(pending.pop(0), run_dir, live)
        clock.at(t)
        poll()
    return planned


def recorded(name: str) -> Path:
    return RUNS / name


def names() -> Iterable[str]:
    return sorted(p.name for p in RUNS.iterdir() if p.is_dir())


def spec_of(run_dir: Path, work_dir: Path) -> RunSpec:
    """The recorded run's plan as the watcher was given it (run.json's spec: the fault, its
    schedule's seed, the sizes and the deadlines)."""
    s = json.loads((run_dir / "run.json").read_text())["spec"]
    return RunSpec(workload=s["workload"], work_dir=work_dir, run_id=s["run_id"], fault=s["fault"],
                   fault_rank=s["fault_rank"], fault_at=s["fault_at"], faults=s["faults"], seed=s["seed"],
                   train_iters=s["train_iters"], save_interval=s["save_interval"],
                   section_timeouts=tuple(s["section_timeouts"].items()),
                   out_of_section_timeout=s["out_of_section_timeout"],
                   workload_check_interval=s["workload_check_interval"], max_restarts=s["max_restarts"])
