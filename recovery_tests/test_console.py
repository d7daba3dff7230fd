"""The console of `nvrx-qual run` is a transcript of the run's own record.

Real run directories recorded by `nvrx-qual run` (recovery_tests/data/runs/: a kill, a hang,
and a campaign of an exception, a segfault and a GIL hang) are replayed write by write in the
order of their own stamps (recovery_tests.recorded) while a Watcher polls them as
harness.launch.job does: after every write, every 0.5 s of the run (the launch's tick) and every
2 s (a tick late on a loaded machine, when several facts land between two polls). Whatever
the cadence, the console's lines must equal the run directory's record, read once at the
end: every committed checkpoint, every injection, every detection, every restart and every
load, in order, each once; and the watcher is never silent for longer than a heartbeat (plus
one tick) while it waits."""

from __future__ import annotations

import hashlib
import io
import re
from pathlib import Path

import pytest

from harness.vocab import events as ev
from harness.judge.criteria import analyze
from harness.read.history import HistoryReader
from harness.launch.watch import HEARTBEAT_S, Watcher
from recovery_tests import recorded

CADENCES = {"every-write": None, "tick-0.5s": 0.5, "tick-2s": 2.0}
LINE = re.compile(r"^  \[\s*([\d.]+)s\] (.*)$")


def console(name: str, tmp_path: Path, tick_s: float | None) -> list[tuple[float, str]]:
    """(seconds since the launch, text) of every line a Watcher says over the recorded run."""
    source = recorded.recorded(name)
    clock = recorded.Clock(recorded.started_at(source))
    out = io.StringIO()
    watcher = Watcher(recorded.spec_of(source, tmp_path), tmp_path / "live", out=out, clock=clock)
    reasons = []
    recorded.replay(source, tmp_path / "live", lambda: reasons.append(watcher()), clock, tick_s=tick_s)
    assert [r for r in reasons if r] == [], "the watcher stopped a run that qualified"
    lines = []
    for line in out.getvalue().splitlines():
        m = LINE.match(line)
        assert m, line
        lines.append((float(m.group(1)), m.group(2)))
    return lines


def record(name: str):
    """The run directory's own record, read once as verify reads it."""
    tl = HistoryReader(recorded.recorded(name), inspect_checkpoints=False).poll(final=True)
    return tl, analyze(tl)


def _texts(lines, pattern: str) -> list[tuple[str, ...]]:
    rx = re.compile(pattern)
    return [m.groups() for _, text in lines if (m := rx.fullmatch(text))]


@pytest.mark.parametrize("cadence", sorted(CADENCES))
@pytest.mark.parametrize("name", ["reference-kill", "reference-hang", "reference-campaign"])
def test_the_console_is_the_run_directorys_record(name, cadence, tmp_path):
    lines = console(name, tmp_path, CADENCES[cadence])
    tl, a = record(name)
    starts = sorted(tl.starts, key=lambda s: (s.cycle, s.index))
    # every commit, in order: the logs' save lines of every start
    commits = [str(e.iteration) for s in starts for e in s.of(ev.SaveCommitted)]
    assert commits == [f"{n}" for n in range(5, 35, 5)]
    assert [c for (c,) in _texts(lines, r"checkpoint (\d+) committed \(iteration \d+/30\)")] == commits, lines
    # every injection, with its checkpoint, in marker order
    assert [(str(i.rank), str(i.iteration)) for i in tl.injections] == _texts(
        lines, r"fault injected: .* on rank (\d+) (?:after|during the save of) checkpoint (\d+)(?:, fault \d of 3)?")
    # every failed cycle the launcher recorded, every restart, every load, in order
    assert [str(c) for c in a.failures] == [c for c, _ in _texts(
        lines, r"the launcher detected the failure of cycle (\d+)( \(fault \d of 3: \w+\))?")], lines
    assert [str(c) for c in a.workers_started] == [c for (c,) in _texts(
        lines, r"cycle (\d+): workers started \(launcher record\)")]
    loads = [(str(s.cycle), str(s.first(ev.CheckpointLoaded).iteration)) for s in starts
             if s.first(ev.CheckpointLoaded) is not None]
    assert loads == _texts(lines, r"replacement workers \(cycle (\d+)\) loaded checkpoint (\d+) with optimizer "
                                  r"state(?: \(after fault \d of 3: \w+\))?"), lines
    assert len(a.failures) == len(a.episodes) == len(loads) == (3 if name == "reference-campaign" else 1)
    # a fact is told once
    facts = [text for _, text in lines if not text.startswith(("waiting for", "training at iteration"))]
    assert len(facts) == len(set(facts)), lines


@pytest.mark.parametrize("cadence", ["tick-0.5s", "tick-2s"])
@pytest.mark.parametrize("name", ["reference-kill", "reference-hang", "reference-campaign"])
def test_the_console_is_never_silent_longer_than_a_heartbeat(name, cadence, tmp_path):
    """From the launch to the launcher's exit, a line at least every HEARTBEAT_S (plus the
    tick that notices it): a hang waiting for its rank monitor, a replacement loading, the
    workers' setup all say what they wait for."""
    tick = CADENCES[cadence]
    lines = console(name, tmp_path, tick)
    times = [0.0, *(t for t, _ in lines)]
    gaps = [(b - a, text) for a, b, (_, text) in zip(times, times[1:], lines)]
    assert max(g for g, _ in gaps) <= HEARTBEAT_S + tick + 1e-6, [g for g in gaps if g[0] > HEARTBEAT_S + tick]


def test_a_hang_names_what_it_waits_for_at_once(tmp_path):
    lines = console("reference-campaign", tmp_path, 0.5)
    texts = [text for _, text in lines]
    gil = texts.index("fault injected: gil on rank 1 during the save of checkpoint 20, fault 3 of 3")
    assert texts[gil + 1] == ("waiting for the rank monitor's step timeout (10 s + a 1 s check interval) to notice "
                              "the hung rank 1")
    assert texts[gil + 2].startswith("waiting for the rank monitor's step timeout (10 s + a 1 s check interval), ")


def test_the_recordings_are_the_captures_unmodified():
    """The recorded runs are real output: SHA256SUMS was taken when they were copied from the
    run directories `nvrx-qual run` left; an edit that would make the watcher's life easier
    shows up here."""
    listed = {}
    for line in (recorded.RUNS / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        listed[name.removeprefix("./")] = digest
    present = {str(p.relative_to(recorded.RUNS)) for p in recorded.RUNS.rglob("*")
               if p.is_file() and not p.is_symlink() and p.name not in ("README.md", "SHA256SUMS")}
    assert set(listed) == present
    for name, digest in listed.items():
        assert hashlib.sha256((recorded.RUNS / name).read_bytes()).hexdigest() == digest, name


# ---------------------------------------------------------------- per-episode words (issue 31 item 6)


def test_every_sentence_of_a_campaign_names_its_own_fault():
    """A campaign of an exception, a segfault and a GIL hang: replacement_cycle tells each
    fault's own kind, moment and way of being noticed (only the GIL hang by a rank monitor's
    timeout); a check whose sentence is one fault's says which fault; the latency the console
    shows says whose it is, and each fault's own follows."""
    from harness.report import verify
    from harness.cli import terminal

    v = verify.verify_run(recorded.recorded("reference-campaign"), picture=False)
    assert v.qualified, [(c.id, c.status, c.detail) for c in v.criteria]
    detail = v.criterion("replacement_cycle").detail
    assert detail.startswith("The launcher recorded the failures of all 3 injected faults and started replacement "
                             "workers after each: fault 1 "), detail
    each = detail.split(": ", 1)[1].split("; ")
    assert len(each) == 3, each
    assert each[0].startswith("fault 1 (exception, after-commit) failed cycle 0 (rank 1's worker ended with exitcode 1")
    assert each[1].startswith("fault 2 (segfault, after-commit) failed cycle 1 (rank 0's worker ended with exitcode -11")
    assert each[2].startswith("fault 3 (gil, in-save) failed cycle 2 after a section timeout naming the hung rank 1")
    assert not any("timeout" in fragment for fragment in each[:2]), each
    kinds = {e.number: (e.fault, e.rank, e.fault_at) for e in v.episodes}
    episode_checks = {c.id for e in v.episodes for c in e.criteria} - {"replacement_cycle"}
    for c in v.criteria:
        if c.id in episode_checks:
            m = re.match(r"\[fault (\d) of 3: (\w+) on rank (\d), ([\w-]+)\] ", c.detail)
            assert m, (c.id, c.detail)
            assert (m.group(2), int(m.group(3)), m.group(4)) == kinds[int(m.group(1))], (c.id, c.detail)
    text = terminal.verification(v)
    assert "failure -> first committed step of fault 3 of 3 (gil, in-save; each fault's is below) 19.68s" in text
    for n, kind in ((1, "exception"), (2, "segfault"), (3, "gil")):
        assert re.search(rf"^  fault {n} of 3: {kind} on rank \d, [\w-]+, cycle {n - 1}: pass; detection \d+\.\d\d s, "
                         rf"restart \d+\.\d\d s, restore \d+\.\d\d s, first step \d+\.\d\d s, failure → first "
                         rf"committed step \d+\.\d\d s$", text, re.M), text
