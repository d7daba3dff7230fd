"""The launch budget and launching side by side (fixtures/budget.py, fixtures/pool.py,
fixtures/launching.py): the ledger every launch writes, the budget table of docs/testing.md and
its check, the guards (a launch without the `launch` marker, a scenario not declared), the launch
slots, the prefetcher, the fuzz sample, the load factor. The inner sessions launch nothing real:
a stand-in launcher named `ft_launcher` (a launch of NVRx's launcher to the ledger) or the
synthetic run directories of test_repeat_plugin.py."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from fixtures import budget, launching, pool
from pytest_nvrx_qual import runs
from pytest_nvrx_qual.runs import Scenario
from harness.launch import job as launch
from harness.machine.nvrx import NvrxTarget
from harness.plan.commands import Command, Plan
from harness.plan.spec import RunSpec
from harness.vocab.topology import ConnectionsPolicy

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------- the table and the classes


def test_the_budget_table_of_docs_testing_md_reads_and_names_existing_modules():
    rows = budget.read_table()
    assert len(rows) >= 40 and all(r.launches >= 1 for r in rows.values())
    assert rows["reference-kill-nvrx{nvrx}"].per_launcher and rows["baseline-reference"].launches >= 1
    for row in rows.values():  # the modules a row names exist: a row cannot outlive its test silently
        for word in row.where.replace(",", " ").split():
            if word.endswith(".py"):
                assert (ROOT / "recovery_tests" / word).is_file(), (row.scenario, word)


@pytest.mark.parametrize(("run_id", "cls"), [
    ("reference-kill-nvrx0.7.0-1a2b3c", "reference-kill-nvrx{nvrx}"),
    ("reference-kill-nvrx0.4.1-r2-1a2b3c", "reference-kill-nvrx{nvrx}"),  # a ScenarioRunner repeat
    ("test_two_real_repeats_qualify-5660ec-r1", "test_two_real_repeats_qualify"),  # the CLI's repeat of a fresh run
    ("baseline-reference-0c5c68367f33-9f8e7d", "baseline-reference"),
    ("no-load-optim-0.4.1-abcdef", "no-load-optim-{nvrx}"),
    ("reference-kill-20261205T050147Z-6b15", "reference-kill"),  # the CLI's own run ID
    ("baseline-auto-drop-baseline", "baseline-auto-drop-baseline"),
    ("leftovers-kill", "leftovers-kill"),
])
def test_the_class_of_a_run_id(run_id, cls):
    assert budget.class_of_run_id(run_id) == cls


ROWS = budget.parse_table(f"""# x
{budget.BUDGET_MARKER}
| scenario | where | what only it proves | launches | cost |
|---|---|---|---|---|
| `kill-nvrx{{nvrx}}` | a.py | a kill | 1 per launcher | R |
| `baseline-reference` | a.py | twins | 2 | R |
| `gpu-*` | b.py | the GPU tier | 3 | G |

after the table
""")


def _launch(run_id: str, ft: bool = True, test: str = "t.py::test_x") -> budget.Launch:
    return budget.Launch(run_id, "reference", "kill", "0.7.0", ft, test)


def test_the_budget_check_names_a_launch_without_a_row_and_a_class_over_its_row():
    ok = [_launch("kill-nvrx0.7.0-aaaaaa"), _launch("kill-nvrx0.4.1-bbbbbb"), _launch("gpu-kill-1x8-cccccc"),
          _launch("x-ddddd1", ft=False)]  # a stand-in launcher is no launch of NVRx's
    assert budget.problems(ok, ROWS, {}, launchers=2, repeats=1) == []
    assert budget.problems(ok * 2, ROWS, {}, launchers=2, repeats=2) == []  # --repeat 2
    over = budget.problems(ok * 2, ROWS, {}, launchers=2, repeats=1)
    assert len(over) == 1 and over[0].startswith("`kill-nvrx{nvrx}` launched 4 times, its budget row allows 2 "
                                                 "(1 per launcher) (first in t.py::test_x)"), over
    missing = budget.problems([_launch("new-scenario-eeeeee", test="t.py::test_new")], ROWS, {}, launchers=1,
                              repeats=1)
    assert len(missing) == 1 and "new-scenario-eeeeee (scenario class `new-scenario`, started in t.py::test_new) " \
        "has no row in docs/testing.md's launch budget" in missing[0]
    # the class a ScenarioRunner gave a launch wins over its run ID
    classed = budget.problems([_launch("reference-none-nvrx0.7.0-ffffff")], ROWS,
                              {"reference-none-nvrx0.7.0-ffffff": "baseline-reference"}, launchers=1, repeats=1)
    assert classed == []


def test_a_test_name_longer_than_a_run_id_label_finds_its_row():
    """fresh_run labels a run with its test's name cut to LABEL_MAX characters; the row carries
    the whole name (the CI run of 2026-12-05 failed on `test_min_max_nodes_on_nvrx_070_...`)."""
    from pytest_nvrx_qual.runs import LABEL_MAX, RunAllocator
    name = "test_min_max_nodes_on_nvrx_070_is_active_plus_standby_not_a_job_that_shrinks"
    run_id = RunAllocator(Path("/nonexistent")).new_run_id(name)
    cls = budget.class_of_run_id(run_id)
    assert len(cls) == LABEL_MAX and name.startswith(cls)
    rows = budget.parse_table(f"""{budget.BUDGET_MARKER}
| scenario | where | what only it proves | launches | cost |
|---|---|---|---|---|
| `{name}` | a.py | standby | 1 | M |
""")
    assert budget.problems([_launch(run_id)], rows, {}, launchers=1, repeats=1) == []
    # a cut name that two rows begin with is no row of either: the row must be told apart
    rows2 = budget.parse_table(f"""{budget.BUDGET_MARKER}
| scenario | where | what only it proves | launches | cost |
|---|---|---|---|---|
| `{name}` | a.py | standby | 1 | M |
| `{name}_too` | a.py | other | 1 | M |
""")
    assert "has no row" in budget.problems([_launch(run_id)], rows2, {}, launchers=1, repeats=1)[0]


@pytest.mark.parametrize("text", ["no marker here", f"{budget.BUDGET_MARKER}\n| a | b |\n|---|---|\n| x | y |\n",
                                  f"{budget.BUDGET_MARKER}\n| s | w | p | l | c |\n|---|---|---|---|---|\n"
                                  "| `a` | w | p | many | c |\n"])
def test_a_budget_table_that_cannot_be_read_is_an_error(text):
    with pytest.raises(ValueError):
        budget.parse_table(text)


# ---------------------------------------------------------------- the ledger


def _plan(tmp_path: Path, program: Path, run_id: str) -> Plan:
    spec = RunSpec(workload="reference", work_dir=tmp_path / "work", run_id=run_id, gpus_per_node=2)
    return Plan(spec=spec, nvrx=NvrxTarget("0.7.0"),
                launcher=Command(argv=(sys.executable, str(program)), cwd=tmp_path),
                srun=None, connections=ConnectionsPolicy(None, "not applicable"))


def _stand_in(where: Path, name: str = "ft_launcher") -> Path:
    where.mkdir(parents=True, exist_ok=True)
    program = where / name
    program.write_text("import sys\nsys.exit(0)\n")
    return program


def test_every_launch_appends_its_line_to_the_ledger_and_never_through_a_link(tmp_path, monkeypatch):
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(launch.LEDGER_ENV, str(ledger))
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "recovery_tests/t.py::test_x (call)")
    result = launch.launch(_plan(tmp_path, _stand_in(tmp_path / "bin"), "ledger-1"), deadline_s=60)
    assert result.launcher_exit_code == 0
    launch.launch(_plan(tmp_path, _stand_in(tmp_path / "bin", "fake.py"), "ledger-2"), deadline_s=60)
    lines = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert [(d["run_id"], d["ft_launcher"], d["test"]) for d in lines] == [
        ("ledger-1", True, "recovery_tests/t.py::test_x (call)"),
        ("ledger-2", False, "recovery_tests/t.py::test_x (call)")]
    link = tmp_path / "link.jsonl"
    link.symlink_to(tmp_path / "elsewhere.jsonl")
    monkeypatch.setenv(launch.LEDGER_ENV, str(link))
    with pytest.raises(OSError):  # refused before anything is launched
        launch.launch(_plan(tmp_path, _stand_in(tmp_path / "bin"), "ledger-3"), deadline_s=60)
    assert not (tmp_path / "elsewhere.jsonl").exists() and not (tmp_path / "work" / "runs" / "ledger-3").exists()


def test_a_session_ledger_hands_its_lines_to_the_outer_one(tmp_path, monkeypatch):
    outer = tmp_path / "outer.jsonl"
    outer.write_text('{"run_id": "before", "ft_launcher": true}\n')
    monkeypatch.setenv(launch.LEDGER_ENV, str(outer))
    inner = budget.Ledger(tmp_path / "inner.jsonl")
    assert os.environ[launch.LEDGER_ENV] == str(tmp_path / "inner.jsonl")
    budget.record_job("job-1", "reference", "kill", "0.7.0")
    budget.record_class("job-1", "srun-kill")
    assert [x.run_id for x in inner.read()] == ["job-1"] and inner.classes() == {"job-1": "srun-kill"}
    inner.close()
    assert os.environ[launch.LEDGER_ENV] == str(outer)
    assert [json.loads(line).get("run_id", "class") for line in outer.read_text().splitlines()] == \
        ["before", "job-1", "class"]


# ---------------------------------------------------------------- the guards, in a session of their own

GUARDED = '''
import sys
from pathlib import Path

import pytest

from harness.launch import job as launch
from harness.machine.nvrx import NvrxTarget
from harness.plan.commands import Command, Plan
from harness.plan.spec import RunSpec
from harness.vocab.topology import ConnectionsPolicy

PROGRAM = Path(__file__).parent / "bin" / "ft_launcher"


def start(tmp_path, run_id):
    PROGRAM.parent.mkdir(exist_ok=True)
    PROGRAM.write_text("import sys\\nsys.exit(0)\\n")
    spec = RunSpec(workload="reference", work_dir=tmp_path / "work", run_id=run_id, gpus_per_node=2)
    plan = Plan(spec=spec, nvrx=NvrxTarget("0.7.0"), launcher=Command(argv=(sys.executable, str(PROGRAM)),
                cwd=tmp_path), srun=None, connections=ConnectionsPolicy(None, "not applicable"))
    assert launch.launch(plan, deadline_s=60).launcher_exit_code == 0


def test_unmarked(tmp_path):
    start(tmp_path, "leftovers-kill")


@pytest.mark.launch
def test_marked(tmp_path):
    start(tmp_path, "leftovers-kill")


@pytest.mark.launch
def test_unbudgeted(tmp_path):
    start(tmp_path, "a-launch-nobody-budgeted")
'''


def test_a_launch_without_the_launch_marker_fails_its_test_and_one_without_a_row_fails_the_session(pytester,
                                                                                                   monkeypatch):
    monkeypatch.delenv(launch.LEDGER_ENV, raising=False)  # these stand-in launches are not this session's
    pytester.makeconftest('pytest_plugins = ["fixtures.plugin"]\n')
    pytester.makepyfile(test_guarded=GUARDED)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-o", "addopts=", "-rA", timeout=300)
    result.assert_outcomes(passed=2, failed=1)
    out = result.stdout.str()
    assert "test_unmarked launched NVRx's launcher (leftovers-kill) without the `launch` marker" in out, out[-3000:]
    # leftovers-kill's row allows 1 launch: two here; the other has no row at all
    assert "`leftovers-kill` launched 2 times, its budget row allows 1 (first in test_guarded.py::test_unmarked)" \
        in out, out[-3000:]
    assert "a-launch-nobody-budgeted (scenario class `a-launch-nobody-budgeted`, started in " \
           "test_guarded.py::test_unbudgeted) has no row" in out, out[-3000:]
    assert "launches of NVRx's launcher: 3" in out
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    # -m "not launch": the quick tier starts nothing, and the unmarked test is what would break that
    quick = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-o", "addopts=", "-m", "not launch", timeout=300)
    quick.assert_outcomes(failed=1, deselected=2)


def test_on_two_xdist_workers_each_launch_is_counted_once_and_the_budget_is_the_session_s(pytester, monkeypatch):
    """Each worker launches the stand-in once: the controller's count is 2 (not its ledger's
    lines plus its workers' counts), its budget check sees both (the row allows 1, each worker
    alone stays within it), and the outer ledger (.ci/run's) gets each line once."""
    outer = pytester.path / "outer.jsonl"
    monkeypatch.setenv(launch.LEDGER_ENV, str(outer))
    safe = GUARDED.split("def test_unmarked")[0] + "@pytest.mark.launch\ndef test_marked(tmp_path):\n" \
        "    start(tmp_path, 'leftovers-kill')\n"
    pytester.makeconftest('pytest_plugins = ["fixtures.plugin"]\n')
    pytester.makepyfile(test_one=safe, test_two=safe)
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-o", "addopts=", "-n", "2", "--dist",
                                           "loadgroup", timeout=300)
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert "launches of NVRx's launcher: 2 " in out, out[-3000:]
    assert "`leftovers-kill` launched 2 times, its budget row allows 1" in out, out[-3000:]
    lines = [json.loads(line) for line in outer.read_text().splitlines()]
    assert sorted(d["test"].split(" ")[0] for d in lines if d.get("ft_launcher")) == [
        "test_one.py::test_marked", "test_two.py::test_marked"], lines


# ---------------------------------------------------------------- the prefetch, with synthetic launches

PREFETCHED = '''
import json
import os
import threading
import time

import pytest

from pytest_nvrx_qual import runs
from pytest_nvrx_qual.runs import Scenario
from fixtures.launching import launches
from harness.machine.nvrx import NvrxTarget, installed_version

TARGET = NvrxTarget(installed_version())


def kill(n):
    return Scenario("kill", TARGET, name=f"kill-{n}")  # one configuration: one baseline for all


def note(what):
    with open(os.environ["NOTES"], "a") as f:
        f.write(json.dumps([what, threading.current_thread().name, time.monotonic()]) + "\\n")


@pytest.mark.parametrize("n", range(4))
@launches(lambda n: kill(n))
def test_each(n, scenarios):
    note(f"asks kill-{n}")
    assert scenarios.outcome(kill(n)).verdict.criterion("clean_finish").status == "pass"


@launches(lambda: kill(0))
def test_undeclared(scenarios):
    scenarios.outcome(kill(9))
'''

# The inner session's launches: a synthetic run directory after a wait (what a launch mostly
# does), noted with the thread that made it, as they start and end. Patched for the whole session, not per test:
# a background launch may start between two tests.
SYNTHETIC = '''
import json
import os
import threading
import time

from harness.launch import runner
from harness.launch.job import LaunchResult
from harness.report.verify import verify_run
from recovery_tests import rundirs

pytest_plugins = ["fixtures.plugin"]


def note(what):
    with open(os.environ["NOTES"], "a") as f:
        f.write(json.dumps([what, threading.current_thread().name, time.monotonic()]) + "\\n")


def execute(plan, *, deadline_s=None, fail_fast=True, out=None, base_env=None, baseline=None):
    note(f"launch {plan.spec.run_id}" + (" PATCHED" if os.environ.get("PATCHED") else ""))
    if os.environ.get("PAIRS") and plan.spec.fault != "none" and not plan.spec.run_id.startswith("kill-9"):
        # wait (at most 20 s) for a second launch to start beside this one: with two slots and the
        # prefetch it does at once, so the two overlap whatever the machine's load
        end = time.monotonic() + 20
        while time.monotonic() < end:
            with open(os.environ["NOTES"]) as f:
                if sum(line.startswith('["launch kill-') for line in f) % 2 == 0:
                    break
            time.sleep(0.05)
    time.sleep(0.5)
    root = plan.layout.root
    rundirs.build(root, rundirs.Scenario(fault=plan.spec.fault))
    result = LaunchResult(0, "2026-11-29T16:31:59.900Z", "2026-11-29T16:32:30.000Z", None, plan.nvrx.version, 0)
    note(f"ended {plan.spec.run_id}")
    return runner.Outcome(plan, result, verify_run(root), None)


runner.execute = execute
'''


def _prefetched(pytester, monkeypatch, *args: str, pairs: bool = False):
    monkeypatch.delenv(launch.LEDGER_ENV, raising=False)
    if pairs:
        monkeypatch.setenv("PAIRS", "1")
    pytester.makeconftest(SYNTHETIC)
    pytester.makepyfile(test_prefetched=PREFETCHED)
    pytester.makeini("[pytest]\nnvrx_qual_declared_launches = true\n")
    notes = pytester.path / "notes.jsonl"
    monkeypatch.setenv("NOTES", str(notes))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--work-dir", str(pytester.path / "work"),
                                           *args, timeout=300)
    return result, [json.loads(line) for line in notes.read_text().splitlines()]


def test_declared_scenarios_are_launched_ahead_in_the_background_and_an_undeclared_one_fails(pytester, monkeypatch):
    result, notes = _prefetched(pytester, monkeypatch, "--launch-slots", "2", pairs=True)
    result.assert_outcomes(passed=4, failed=1)
    result.stdout.fnmatch_lines(["*test_undeclared asked for scenario kill-9 that its @pytest.mark.launches(...) "
                                 "does not declare*"])
    launched = [(what.split()[1].rsplit("-", 1)[0], thread) for what, thread, _ in notes if what.startswith("launch")]
    # the shared baseline first, every declared scenario once, and kill-9 too (undeclared: launched
    # when asked, then the test fails)
    assert launched[0][0].startswith("baseline-reference-"), launched
    assert sorted(r for r, _ in launched[1:]) == ["kill-0", "kill-1", "kill-2", "kill-3", "kill-9"], launched
    background = {r for r, thread in launched if thread.startswith("nvrx-qual-prefetch-")}
    assert {"kill-1", "kill-2", "kill-3"} <= background, launched  # launched before their tests asked
    assert _most_at_once(notes) == 2, notes  # two at once, never more


def _most_at_once(notes: list) -> int:
    running = most = 0
    for what, _, _ in sorted(notes, key=lambda n: n[2]):
        running += what.startswith("launch ") - what.startswith("ended ")
        most = max(most, running)
    return most


def test_no_prefetch_and_one_slot_is_the_serial_suite(pytester, monkeypatch):
    result, notes = _prefetched(pytester, monkeypatch, "--launch-slots", "1", "--no-prefetch")
    result.assert_outcomes(passed=4, failed=1)
    launched = [(what, thread) for what, thread, _ in notes if what.startswith("launch")]
    assert all(thread == "MainThread" for _, thread in launched), launched
    assert _most_at_once(notes) == 1, notes
    order = [what for what, _, _ in notes]
    for n in range(4):  # each launched only when its test asked
        assert order.index(f"asks kill-{n}") < next(i for i, w in enumerate(order) if w.startswith(f"launch kill-{n}-"))
    assert sum(w.startswith("launch baseline-reference-") for w in order) == 1, order


# A test that changes the process (monkeypatch) between tests whose scenarios are prefetched: it
# waits (at most 1.5 s) for a launch to start while its change is in force. Background launches take
# 1 s longer (BACKGROUND_SLOW), so one runs whenever a test starts.
PATCHING = PREFETCHED.split("@pytest.mark.parametrize")[0] + '''
def wait_for(prefix, within_s):
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        with open(os.environ["NOTES"]) as f:
            if any(json.loads(line)[0].startswith(prefix) for line in f):
                return
        time.sleep(0.05)


@launches(lambda: kill(0))
def test_first(scenarios):
    assert scenarios.outcome(kill(0)).verdict.qualified


def test_patches(monkeypatch):
    monkeypatch.setenv("PATCHED", "1")
    note("patched")
    wait_for("launch kill-2-", 1.5)
    note("unpatching")


@launches(lambda: kill(1))
def test_after(scenarios):
    assert scenarios.outcome(kill(1)).verdict.qualified
    wait_for("launch kill-3-", 10)  # the prefetch resumed: a later test's launch starts in the background


@pytest.mark.parametrize("n", [2, 3])
@launches(lambda n: kill(n))
def test_last(n, scenarios):
    assert scenarios.outcome(kill(n)).verdict.qualified
'''

BACKGROUND_SLOW = '''
import threading
import time

_synthetic = runner.execute


def slower_in_the_background(plan, **kw):
    if threading.current_thread().name.startswith("nvrx-qual-prefetch-"):
        time.sleep(1)
    return _synthetic(plan, **kw)


runner.execute = slower_in_the_background
'''


def test_a_test_that_changes_the_process_runs_while_no_background_launch_does(pytester, monkeypatch):
    """test_patches sets an environment variable with monkeypatch while the prefetcher, one slot,
    runs the next tests' scenarios: no background launch may run (let alone start, seeing the
    variable) from its setup to its teardown, and the prefetch goes on after it."""
    monkeypatch.delenv(launch.LEDGER_ENV, raising=False)
    pytester.makeconftest(SYNTHETIC + BACKGROUND_SLOW)
    pytester.makepyfile(test_patching=PATCHING)
    pytester.makeini("[pytest]\nnvrx_qual_declared_launches = true\n")
    notes_file = pytester.path / "notes.jsonl"
    monkeypatch.setenv("NOTES", str(notes_file))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--work-dir", str(pytester.path / "work"),
                                           "--launch-slots", "1", timeout=300)
    result.assert_outcomes(passed=5)
    notes = [json.loads(line) for line in notes_file.read_text().splitlines()]
    assert not [what for what, _, _ in notes if what.endswith(" PATCHED")], notes
    patched, unpatched = (next(t for what, _, t in notes if what == w) for w in ("patched", "unpatching"))
    running = set()
    for what, _, at in sorted(notes, key=lambda n: n[2]):
        if at > unpatched:
            break
        if what.startswith("launch "):
            running.add(what.split()[1])
        elif what.startswith("ended "):
            running.discard(what.split()[1])
        if at >= patched:
            assert not running, (running, notes)
    assert [thread for what, thread, at in notes if what.startswith("launch kill-3-") and at > unpatched
            ] == ["nvrx-qual-prefetch-0"], notes  # the prefetch went on


# ---------------------------------------------------------------- the parts


def test_launch_slots_bound_the_launches_at_once_across_threads(tmp_path):
    slots = pool.LaunchSlots(tmp_path, 2)
    running, most = [0], [0]
    lock = threading.Lock()

    def one() -> None:
        with slots.slot():
            with lock:
                running[0] += 1
                most[0] = max(most[0], running[0])
            with slots.slot():  # nested in the same thread: the slot it holds
                time.sleep(0.3)
            with lock:
                running[0] -= 1

    threads = [threading.Thread(target=one) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 2


def test_the_prefetcher_starts_a_baseline_first_and_never_twice(tmp_path):
    state: dict[str, str] = {}
    deps = {"kill": "twin", "hang": "twin", "solo": None}
    started: list[str] = []
    gate = threading.Event()

    def run(key: str) -> None:
        state[key] = "running"
        started.append(key)
        if key == "twin":
            gate.wait(10)
        state[key] = "done"

    p = pool.Prefetcher(run, threads=2, depends=lambda k: deps.get(k) if state.get(deps.get(k)) != "done" else None,
                        state=lambda k: state.get(k, "new"))
    p.want(["kill", "hang", "solo"])
    deadline = time.monotonic() + 10
    while len(started) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert started == ["twin", "solo"]  # kill and hang wait for their baseline; solo goes ahead
    gate.set()
    while len(started) < 4 and time.monotonic() < deadline:
        p.poke()
        time.sleep(0.01)
    p.close(stop=lambda: None)
    assert started[:2] == ["twin", "solo"] and sorted(started[2:]) == ["hang", "kill"]


def test_the_load_factor_scales_with_the_load_per_core_only_above_one():
    assert runs.load_factor(cpus=2, load=1.0) == 1.0
    assert runs.load_factor(cpus=2, load=5.0) == 2.5
    assert runs.load_factor(cpus=2, load=40.0) == runs.MAX_LOAD_FACTOR


def test_the_fuzz_sample_is_the_same_everywhere_and_about_one_in_four():
    ids = [f"recovery_tests/test_fuzz_rundirs.py::test_x[{i}]" for i in range(2000)]
    kept = [i for i in ids if launching.fuzz_kept(i, "20261201")]
    assert kept == [i for i in ids if launching.fuzz_kept(i, "20261201")]
    assert 400 < len(kept) < 600
    assert kept != [i for i in ids if launching.fuzz_kept(i, "7")]  # another seed, another sample


def test_a_test_using_scenarios_is_marked_launch_and_left_out_of_the_quick_tier(pytester):
    pytester.makeconftest('pytest_plugins = ["fixtures.plugin"]\n')
    pytester.makepyfile(test_tiers='''
def test_asks(scenarios):
    pass


def test_quick():
    pass
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-o", "addopts=", "--co", "-m", "not launch",
                                           timeout=120)
    result.stdout.fnmatch_lines(["*test_quick*", "*1/2 tests collected (1 deselected)*"])


def test_a_declared_builder_naming_an_unknown_fixture_is_a_usage_error(pytester):
    pytester.makeconftest('pytest_plugins = ["fixtures.plugin"]\n')
    pytester.makepyfile(test_bad='''
from fixtures.launching import launches


@launches(lambda no_such_fixture: None)
def test_x(scenarios):
    pass
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-o", "addopts=", "--co", timeout=120)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*builder asks for 'no_such_fixture'*"])


def test_scenarios_compare_by_value_so_a_declaration_matches_the_test_s_own():
    target = NvrxTarget("0.7.0")
    assert Scenario("kill", target, name="x") == Scenario("kill", target, name="x")
    assert hash(Scenario("kill", target, knobs=(("a", 1),))) == hash(Scenario("kill", target, knobs=(("a", 1),)))


# ---------------------------------------------------------------- hygiene: a session that ends early

SLEEPER = '''
import json
import os
import subprocess
import sys
import time

from harness.launch import runner

pytest_plugins = ["fixtures.plugin"]


def execute(plan, **kw):
    """A launch that never ends by itself: one process tagged as harness.launch.job tags its own."""
    env = {**os.environ, "NVRX_QUAL_LAUNCH": f"{plan.spec.run_id}-0123456789ab"}
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env=env, start_new_session=True)
    with open(os.environ["NOTES"], "a") as f:
        f.write(json.dumps(["spawned", proc.pid]) + "\\n")
    proc.wait()
    with open(os.environ["NOTES"], "a") as f:
        f.write(json.dumps(["ended", proc.returncode]) + "\\n")
    raise RuntimeError("the launch was stopped")


runner.execute = execute
'''

ENDS_EARLY = '''
import json
import os
import time

from pytest_nvrx_qual import runs
from pytest_nvrx_qual.runs import Scenario
from fixtures.launching import launches
from harness.machine.nvrx import NvrxTarget, installed_version

LONG = Scenario("kill", NvrxTarget(installed_version()), name="long", knobs=(("baseline", "none"),))


def test_fails_at_once_while_the_next_test_s_launch_runs():
    end = time.monotonic() + 60
    while time.monotonic() < end:
        if os.path.exists(os.environ["NOTES"]):
            break
        time.sleep(0.05)
    assert False, "failing: with -x the session ends now"


@launches(lambda: LONG)
def test_never_reached(scenarios):
    scenarios.outcome(LONG)
'''


def test_a_session_that_ends_early_stops_its_background_launches(pytester, monkeypatch):
    import psutil

    monkeypatch.delenv(launch.LEDGER_ENV, raising=False)
    pytester.makeconftest(SLEEPER)
    pytester.makepyfile(test_ends_early=ENDS_EARLY)
    notes = pytester.path / "notes.jsonl"
    monkeypatch.setenv("NOTES", str(notes))
    started = time.monotonic()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-x", "--work-dir", str(pytester.path / "work"),
                                           timeout=300)
    result.assert_outcomes(failed=1)
    done = [json.loads(line) for line in notes.read_text().splitlines()]
    assert done[0][0] == "spawned" and done[-1][0] == "ended", done  # the launch was stopped, then returned
    pid = done[0][1]
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, pid
    assert time.monotonic() - started < 200  # not the sleeper's 600 s


def test_the_running_test_gets_the_next_slot_before_a_background_launch(tmp_path):
    slots = pool.LaunchSlots(tmp_path, 1)
    order: list[str] = []
    holding = threading.Event()
    release = threading.Event()

    def holder() -> None:
        with slots.slot():
            holding.set()
            release.wait(10)

    def background() -> None:
        with slots.slot():
            order.append("background")

    first = threading.Thread(target=holder)
    first.start()
    assert holding.wait(10)
    waiting = threading.Thread(target=background)
    waiting.start()  # a background launch waits for the one slot

    def free_when_the_test_waits() -> None:  # the slot frees while the test's own thread waits too
        end = time.monotonic() + 10
        while slots._main_waiting == 0 and time.monotonic() < end:
            time.sleep(0.01)
        time.sleep(3 * pool.POLL_S)  # the background launch has looked at least once meanwhile
        release.set()

    threading.Thread(target=free_when_the_test_waits).start()
    with slots.slot():
        order.append("test")
    first.join()
    waiting.join()
    assert order == ["test", "background"]


TWO_MODULES = '''
import pytest

from pytest_nvrx_qual import runs
from pytest_nvrx_qual.runs import Scenario
from fixtures.launching import launches
from harness.machine.nvrx import NvrxTarget, installed_version

TARGET = NvrxTarget(installed_version())


def kill(name):
    return Scenario("kill", TARGET, name=name, knobs=(("baseline", "none"),))


@pytest.mark.parametrize("n", range(3))
@launches(lambda n: kill(f"{NAME}-{n}"))
def test_each(n, scenarios):
    assert scenarios.outcome(kill(f"{NAME}-{n}")).verdict.criterion("clean_finish").status == "pass"
'''


def test_on_two_xdist_workers_the_slots_bound_the_launches_of_both(pytester, monkeypatch):
    """`-n 2 --dist loadgroup --launch-slots 1`: each worker prefetches its module's scenarios,
    and the one slot, shared by the workers, lets one launch run at a time in all."""
    monkeypatch.delenv(launch.LEDGER_ENV, raising=False)
    pytester.makeconftest(SYNTHETIC)
    pytester.makepyfile(test_m1="NAME = 'kill-m1'\n" + TWO_MODULES, test_m2="NAME = 'kill-m2'\n" + TWO_MODULES)
    notes = pytester.path / "notes.jsonl"
    monkeypatch.setenv("NOTES", str(notes))
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup",
                                           "--launch-slots", "1", "--work-dir", str(pytester.path / "work"),
                                           timeout=300)
    result.assert_outcomes(passed=6)
    done = [json.loads(line) for line in notes.read_text().splitlines()]
    launched = sorted(what.split()[1].rsplit("-", 1)[0] for what, _, _ in done if what.startswith("launch "))
    assert launched == [f"kill-m{m}-{n}" for m in (1, 2) for n in range(3)], launched  # each once
    assert _most_at_once(done) == 1, done
    assert any(thread.startswith("nvrx-qual-prefetch-") for what, thread, _ in done if what.startswith("launch ")), done
