"""`nvrx-qual run` and the pytest fixtures share this: prepare the run directory, launch
with the watcher, verify with the same code as `nvrx-qual verify`, triage a failure.
Progress goes to the TextIO given as `out` (None: silent); the command layer prints the rest."""

from __future__ import annotations

import io
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, TextIO

from harness.launch import baseline as baselinemod
from harness.launch import contract as contractmod
from harness.machine import discovery, nvrx, ports, slurm, tmpfs
from harness.read import evidence, history
from harness.launch import job as launch
from harness.report import picture as picturemod
from harness.plan import commands as planmod
from harness.plan.commands import Plan
from harness.launch.prepare import prepare, release, settle_baseline
from harness.report.outputs import Verdict, write_outputs
from harness.vocab.faults import FAULT_KINDS
from harness.plan.spec import RunSpec, SpecError
from harness.read.history import HistoryReader
from harness.judge.triage import Triage
from harness.judge.findings import KnownMatch
from harness.report.verify import compare_end_states, known_defects, read_baseline, triage, verify_read
from harness.launch.watch import Watcher


@dataclass(frozen=True)
class Outcome:
    plan: Plan
    launch: launch.LaunchResult
    verdict: Verdict
    triage: Triage | None  # only for a run that did not qualify
    picture_problem: str | None = None  # why timeline.png was not drawn (matplotlib missing)
    known: tuple[KnownMatch, ...] = ()  # known defects of the software under test its failure matches
    baseline_used: "BaselineUsed | None" = None  # how its baseline came, when it was given one as such

    @property
    def run_dir(self) -> Path:
        return self.plan.layout.root


def default_deadline(spec: RunSpec) -> float:
    """An upper bound no healthy run reaches: every allowed cycle spends its whole setup,
    out-of-section and checkpointing deadlines, plus a full step deadline per iteration."""
    sections = dict(spec.section_timeouts)
    per_cycle = sections.get("setup", 0) + spec.out_of_section_timeout + sections.get("checkpointing", 0)
    return (spec.max_restarts + 1) * per_cycle + spec.train_iters * sections.get("step", 0)


# What a restart costs on top of the deadlines (stated in harness.machine.nvrx).
RESTART_ALLOWANCE_S = nvrx.RESTART_ALLOWANCE_S
# The iterations, saves and the end of the job, which no deadline bounds as a whole.
TRAINING_MARGIN_S = 300.0
# verify, report, timeline and the cleanup after the launcher stopped.
VERIFY_GRACE_S = 120.0


def planned_episodes(spec: RunSpec) -> int:
    """The recovery episodes a qualifying run of `spec` has: one per planned fault (its schedule:
    in-restore plans two, a campaign --faults), none without a fault."""
    if spec.fault == "none":
        return 0
    return len(spec.schedule) or 1


def scenario_deadline(spec: RunSpec) -> float:
    """An upper bound for a run that can still qualify: its cycles (the first, and one more
    per planned episode) each spend at most the setup deadline; each episode's fault is
    detected within the longest section or out-of-section deadline plus one check interval (a
    stop can land in any of them) and costs one restart; a margin for the training itself. A
    run that needs longer has failed already (a qualifying run has exactly one failed cycle
    per episode). The pytest fixtures stop a scenario there; `nvrx-qual run` keeps the looser
    default_deadline."""
    sections = dict(spec.section_timeouts)
    episodes = planned_episodes(spec)
    total = (1 + episodes) * sections.get("setup", 0.0) + TRAINING_MARGIN_S
    if episodes:
        # a stop lands after a committed checkpoint: in a step, a save or between them, never in setup
        running = [v for name, v in sections.items() if name != "setup"] + [spec.out_of_section_timeout]
        check = nvrx.check_interval(spec.workload_check_interval)
        kinds = [FAULT_KINDS.get(f.kind) for f in spec.schedule] or [FAULT_KINDS.get(spec.fault)]
        detected = sum(1 for k in kinds if k is not None and k.monitor_detects)  # each planned fault by its own kind
        total += detected * max(running) + episodes * (check + RESTART_ALLOWANCE_S)
        # a campaign trains longer: its iterations beyond the workload's own default, a step deadline each at worst
        own = spec.workload_type.defaults.get("train_iters", spec.train_iters)
        total += max(0, spec.train_iters - own) * sections.get(
            "step", 0.0) if spec.fault == "campaign" else 0.0
    return total


def pytest_timeout(spec: RunSpec) -> float:
    """The pytest-timeout of a test that launches `spec`: the launch's own deadline fires
    first, and verify still has time to write the verdict."""
    return scenario_deadline(spec) + VERIFY_GRACE_S


def preflight(plan: Plan, env: Mapping[str, str]) -> None:
    """What the machine must offer before anything is launched (SpecError otherwise)."""
    spec, problems = plan.spec, []
    installed = nvrx.installed_version(plan.nvrx.path)
    if installed != plan.nvrx.version:
        where = f" in {plan.nvrx.path}" if plan.nvrx.path else ""
        problems.append(f"the plan is for NVRx {plan.nvrx.version} but {installed or 'none'} is installed{where}: "
                        "--nvrx-version is for dry runs prepared for another machine; drop it, or point "
                        "--nvrx-path at that version")
    if spec.nnodes > 1 and not plan.local:
        if not env.get("SLURM_JOB_ID"):
            problems.append(f"{spec.say('nnodes')} runs srun inside a Slurm allocation: run inside salloc/sbatch, "
                            "or render a batch script with nvrx-qual sbatch")
        if shutil.which("srun") is None:
            problems.append("srun is not on PATH: run inside the Slurm allocation's environment")
    elif env.get("SLURM_JOB_ID") and not env.get("SLURM_PROCID") and plan.nvrx.has_no_restart_exit_code:
        problems.append(f"NVRx {plan.nvrx.version} exits at once when SLURM_JOB_ID is set without SLURM_PROCID: "
                        "run under srun --ntasks=1, or unset SLURM_JOB_ID for a single-node run")
    # a port the harness picked and found taken since is picked again at launch (repicked)
    rdzv_port = (ports.local_port(spec.rdzv_endpoint) if spec.nnodes == 1 and not spec.was_picked("rdzv_endpoint")
                 else None)
    taken = ports.in_use(rdzv_port) if rdzv_port else None
    if taken:
        problems.append(f"{spec.say('rdzv_endpoint')}: {taken}: the launcher would wait on it for ever; leave "
                        f"{spec.knob('rdzv_endpoint')} out for a single node (a free port is chosen), or free the port")
    problems += spec.workload_type.machine_problems(spec, tuple(discovery.nvidia_smi_gpus() or ()))
    kind = FAULT_KINDS.get(spec.fault)
    if kind is not None and kind.fills_filesystem:  # disk-full: a tmpfs mounted here, on the run's checkpoints/
        if spec.nnodes > 1 and not plan.local:
            problems.append(f"{spec.say('fault')} mounts its tmpfs on this machine only: run it on one node "
                            f"({spec.say('nnodes', 1)}, or --local-nodes 1)")
        problems.extend(tmpfs.problems())
    if problems:
        raise SpecError(problems)


_PICKED_PORT = {"rdzv_endpoint": "rendezvous", "log_server_port": "NVRx log server"}


def repicked(plan: Plan) -> tuple[Plan, str | None]:
    """`plan` with every local port the harness picked for it (RunSpec.picked: the rendezvous
    endpoint, NVRx's log server) picked again when something else holds it by now, and a line
    that says so (None when nothing changed). A pick is free when made, not reserved: a launch
    that waited (for a slot of the suite's pool, for a twin run first) may find it taken, and
    the launcher would then wait on a stranger. A port the user gave is preflight's to refuse."""
    spec, moved = plan.spec, {}
    endpoint = ports.local_port(spec.rdzv_endpoint) if plan.srun is None else None
    if endpoint is not None and spec.was_picked("rdzv_endpoint") and ports.in_use(endpoint):
        moved["rdzv_endpoint"] = (endpoint, f"127.0.0.1:{ports.free_port()}")
    if spec.log_server_port is not None and spec.was_picked("log_server_port") and ports.in_use(spec.log_server_port):
        moved["log_server_port"] = (spec.log_server_port, ports.free_port())
    if not moved:
        return plan, None
    fresh = spec.with_picked(**{field: new for field, (_old, new) in moved.items()})
    said = "; ".join(f"the {_PICKED_PORT[field]} port {old} picked for this run was taken meanwhile: "
                     f"{spec.knob(field)}={new} instead" for field, (old, new) in moved.items())
    return planmod.build(fresh, plan.nvrx), said


PASSED_OVER_SHOWN = 3  # earlier baselines of the configuration named with why they are not reused


@dataclass(frozen=True)
class BaselineUsed:
    """The baseline a run is judged against (find_baseline, Twin.result). how: `ran` (the
    twin, run just now: beside the run, or before it), `reused` (found in the work directory by
    its configuration hash), `given` (--baseline RUN_DIR) or `none` (`why` says why). `problem`: the twin ran and did not
    qualify, so nothing can be judged against it. `twin`: the twin's Outcome when it ran."""

    path: Path | None
    how: str
    config_hash: str
    why: str | None = None
    problem: str | None = None
    twin: "Outcome | None" = None
    seconds: float | None = None  # how long obtaining it took (the twin's whole run when it ran)

    @property
    def name(self) -> str | None:
        """The baseline's run directory name (its run ID), as a Path's name."""
        return self.path.name if self.path is not None else None


def find_baseline(plan: Plan, *, out: TextIO | None = None) -> BaselineUsed | None:
    """The baseline `plan.spec.baseline` asks for (harness.launch.baseline.choose) when nothing
    has to run for it: none, the one given, or with auto the newest qualified uninterrupted run of
    the same configuration hash in the work directory (those passed over named with why). None:
    auto found none, so the twin must run (Twin). Progress lines go to `out`. SpecError
    when a given baseline is not an uninterrupted run directory."""
    started = time.monotonic()
    choice = baselinemod.choose(plan.spec)
    h = baselinemod.short(choice.config_hash)
    say = _sayer(out)
    if choice.mode == baselinemod.NONE:
        return BaselineUsed(None, "none", choice.config_hash, why=choice.why)
    if choice.mode == "path":
        say(f"baseline: {choice.path} (given; this run's config hash {h})")
        return BaselineUsed(choice.path, "given", choice.config_hash)
    seen = baselinemod.candidates(plan.spec.work_dir, choice.config_hash, exclude=(plan.spec.run_id,))
    found = next((c.path for c in seen if c.problem is None), None)
    for c in seen[:PASSED_OVER_SHOWN]:
        if c.path == found:
            break
        say(f"baseline: passing over {c.path.name} (config hash {h}): {c.problem}")  # the newer ones first
    if found is not None:
        say(f"baseline: reusing {found.name} (config hash {h})")
        return BaselineUsed(found, "reused", choice.config_hash, seconds=time.monotonic() - started)
    return None


def _sayer(out: TextIO | None):
    def say(text: str) -> None:
        if out is not None:
            out.write(text + "\n")  # one write: a whole line, whichever thread writes beside it
            out.flush()

    return say


def execute_with_baseline(plan: Plan, *, deadline_s: float | None = None, out: TextIO | None = None,
                          base_env: dict[str, str] | None = None) -> Outcome:
    """One planned run as `nvrx-qual run` makes it (its preflight passed): the baseline it asks
    for (find_baseline), and when the twin must run, the twin (Twin): beside the run where the
    two can share the machine (baseline.twin_beside: both in flight at once, since they mostly wait
    on NVRx's start-up, rendezvous, detection timeouts and restarts; the twin launching with the
    fault run or once its workers have started, baseline.twin_start; their progress lines are
    prefixed with `twin` and the run's fault), else first. Either way the run is judged once
    both have ended, against the twin when the twin qualified. SpecError when the machine
    cannot run the twin (before anything is launched)."""
    used = find_baseline(plan, out=out)
    if used is not None:
        return execute_preflighted(plan, deadline_s=deadline_s, fail_fast=True, out=out, base_env=base_env,
                                   baseline=used)
    with Twin(plan, deadline_s=deadline_s, out=out, base_env=base_env) as twin:
        return execute_preflighted(plan, deadline_s=deadline_s, fail_fast=True, out=twin.run_out, base_env=base_env,
                                   baseline=twin if twin.beside else twin.result())


class LabelledLines(io.TextIOBase):
    """A text stream that writes whole lines to `out`, each after `label`, under a lock that the
    streams of one screen share: the progress lines of two launches side by side interleave
    line by line, each saying whose it is. A write holds its text until its line ends."""

    def __init__(self, out: TextIO, label: str, lock: threading.Lock):
        super().__init__()
        self._out, self._label, self._lock = out, label, lock
        self._pending = threading.local()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        held = getattr(self._pending, "text", "") + text
        *lines, rest = held.split("\n")
        self._pending.text = rest
        if lines:
            with self._lock:
                self._out.write("".join(f"{self._label}{line}\n" for line in lines))
                self._out.flush()
        return len(text)

    def flush(self) -> None:
        pass  # whole lines are flushed as they are written


class Twin:
    """The uninterrupted twin of `plan` (harness.launch.baseline.twin_spec: fault none, fresh run
    ID and ports), run through execute_preflighted (its own watcher, fail-fast stop, verdict). A
    `with` block; on entry it is preflighted (SpecError before anything is launched) and says so.

    `beside` (harness.launch.baseline.twin_beside): it starts in a thread of its own and the run
    launches beside it, the twin at once or once the fault run's workers have started (`start`,
    harness.launch.baseline.twin_start: the fault run's ticks call workers_started()), the one that
    launches at once at a lower CPU priority (`nice`, harness.launch.baseline.twin_nice); the block
    takes the process's stop signals for both launches (harness.launch.job.SignalHold: Ctrl-C
    stops both), and on any exit that is not result()'s a
    twin still running is cancelled (stopped the normal way, launch.json ended_by `cancelled`)
    and awaited. `result()`, once the run's own launch ended, awaits it. Progress lines:
    `twin_out` and `run_out`, prefixed. Otherwise it runs to its end on entry, before the run,
    its lines and the run's unprefixed.

    `result()`: the BaselineUsed the run is judged against (a twin that did not qualify is a
    `problem`, as a failed baseline is)."""

    def __init__(self, plan: Plan, *, deadline_s: float | None, out: TextIO | None,
                 base_env: dict[str, str] | None):
        self.config_hash = baselinemod.choose(plan.spec).config_hash
        self.nice = baselinemod.twin_nice(plan)
        self.plan = planmod.build(baselinemod.twin_spec(plan.spec, lowered=self.nice > 0), plan.nvrx)
        self.beside = baselinemod.twin_beside(plan)
        self._for = plan.spec.run_id
        self._deadline_s, self._base_env = deadline_s, base_env
        self.twin_out, self.run_out = out, out
        lock = threading.Lock()
        if out is not None and self.beside:
            labels = ("twin", plan.spec.fault)
            width = max(map(len, labels))
            self.twin_out, self.run_out = (LabelledLines(out, label.ljust(width), lock) for label in labels)
        self._say = _sayer(LabelledLines(out, "", lock) if out is not None else None)
        self._hold = launch.SignalHold()
        self._thread = threading.Thread(target=self._run, name="nvrx-qual-twin", daemon=True)
        self.start = baselinemod.twin_start(plan) if self.beside else baselinemod.AT_ONCE
        self._go = threading.Event()  # set: the twin may launch (twin_start)
        if self.start == baselinemod.AT_ONCE:
            self._go.set()
        self._cancel: str | None = None
        self._outcome: Outcome | None = None
        self._error: BaseException | None = None
        self._started = 0.0
        self._seconds: float | None = None
        self._used: BaselineUsed | None = None

    @property
    def path(self) -> Path:
        return self.plan.layout.root

    def promise(self) -> contractmod.BaselinePromise:
        """What the run's contract records before its launch while the twin runs beside it: the
        twin, by run ID and configuration hash."""
        return contractmod.BaselinePromise(contractmod.RAN, self.path, config_hash=self.config_hash, beside=True)

    def __enter__(self) -> "Twin":
        preflight(self.plan, os.environ if self._base_env is None else self._base_env)
        spec = self.plan.spec
        where = (("beside the fault run" + ("" if self.start == baselinemod.AT_ONCE else f", {self.start}")
                  + (f", at a lower CPU priority (nice {self.nice})" if self.nice else ""))
                 if self.beside else "before the fault run")
        self._say(f"baseline: running the uninterrupted twin {spec.run_id} (config hash "
                  f"{baselinemod.short(self.config_hash)}) {where}: fault none, {spec.train_iters} iterations"
                  + ("; the lines of each begin with its name" if self.beside and self.twin_out is not None else ""))
        self._started = time.monotonic()
        if not self.beside:
            self._run()
            self._thread = None
            if self._error is not None:
                raise self._error
            return self
        self._hold.enter()
        try:
            self._thread.start()
        except BaseException:
            self._hold.release(raising=True)
            raise
        return self

    def workers_started(self) -> None:
        """The fault run's workers have started (its watcher said so): a twin waiting for that
        (AFTER_START) launches now. result() and a cancelling exit release it too."""
        self._go.set()

    def _run(self) -> None:
        self._go.wait()
        if self._cancel is not None:  # the fault run ended by an error before it launched: nothing to stop
            self._seconds = time.monotonic() - self._started
            return
        try:
            self._outcome = execute_preflighted(self.plan, deadline_s=self._deadline_s, fail_fast=True,
                                                out=self.twin_out, base_env=self._base_env,
                                                cancel=lambda: self._cancel, shown_from=self._started,
                                                nice=self.nice)
        except BaseException as exc:  # noqa: BLE001 - raised in the run's thread by result() (or on entry)
            self._error = exc
        finally:
            self._seconds = time.monotonic() - self._started
        outcome = self._outcome
        if outcome is not None and outcome.verdict.qualified:
            then = ", beside the fault run" if self.beside else "; now the fault run"
            self._say(f"baseline: {self.plan.spec.run_id} BASELINE QUALIFIED in {self._seconds:.0f} s{then}")
        elif outcome is not None:
            self._say(f"baseline: {self._problem(outcome)}: loss_continuity and state_equivalence cannot be judged")

    def _problem(self, outcome: Outcome) -> str:
        failing = ", ".join(f"{c.id} {c.status}" for c in outcome.verdict.criteria if not c.held) or "no criteria"
        return (f"the uninterrupted twin {self.plan.spec.run_id} did not qualify ({failing}; see "
                f"{outcome.run_dir / 'report.md'})")

    def result(self) -> BaselineUsed:
        """The twin awaited (beside: the stop signals still held for it, then released); what the
        run is judged against. Raises what the twin's launch raised (Interrupted: a signal
        stopped both)."""
        if self._used is not None:
            return self._used
        self._go.set()  # the run's launch has ended: a twin still waiting for its workers launches now
        if self._thread is not None:
            self._thread.join()
            self._hold.release(raising=self._error is not None)
        if self._error is not None:
            raise self._error
        outcome = self._outcome
        assert outcome is not None
        problem = None if outcome.verdict.qualified else self._problem(outcome)
        self._used = BaselineUsed(outcome.run_dir, "ran", self.config_hash, problem=problem, twin=outcome,
                                  seconds=self._seconds)
        return self._used

    def __exit__(self, exc_type, _exc, _tb) -> None:
        if self._thread is None:
            return
        if self._thread.is_alive():
            self._cancel = (f"cancelled: the fault run {self._for} it was launched beside ended by "
                            f"{exc_type.__name__ if exc_type is not None else 'its own end'}")
            self._go.set()  # a twin still waiting to launch reads the cancel and launches nothing
            self._thread.join()
        self._hold.release(raising=exc_type is not None)


def execute(plan: Plan, *, deadline_s: float | None = None, fail_fast: bool = True,
            out: TextIO | None = None, base_env: dict[str, str] | None = None,
            baseline: Path | BaselineUsed | None = None) -> Outcome:
    """Preflight, prepare, launch, watch, verify (with loss continuity and end-state
    equivalence against `baseline`, an uninterrupted run, when given). SpecError before
    anything exists when the machine cannot run the plan. The run directory is kept whatever
    happens. This launches only `plan`: execute_with_baseline finds an automatic baseline or
    runs the twin beside it."""
    preflight(plan, os.environ if base_env is None else base_env)
    return execute_preflighted(plan, deadline_s=deadline_s, fail_fast=fail_fast, out=out, base_env=base_env,
                               baseline=baseline)


def execute_preflighted(plan: Plan, *, deadline_s: float | None = None, fail_fast: bool = True,
                        out: TextIO | None = None, base_env: dict[str, str] | None = None,
                        baseline: Path | BaselineUsed | Twin | None = None,
                        cancel: Callable[[], str | None] | None = None,
                        shown_from: float | None = None, nice: int = 0) -> Outcome:
    """execute() after its preflight passed (the caller announced the run in between). With a
    Twin running beside it for `baseline`, the contract names the twin before the launch, and
    once the launch ended the twin is awaited, its end recorded in the contract
    (prepare.settle_baseline), and the run judged against it as against a twin run first.
    `cancel`: harness.launch.job.launch's. `shown_from`: the time.monotonic() its progress lines
    count their seconds from (a twin's: the fault run's start, so that the two columns agree).
    `nice`: harness.launch.job.launch's (the twin's lower CPU priority, Twin)."""
    plan, moved = repicked(plan)  # the last moment before its command is recorded and launched
    beside = baseline if isinstance(baseline, Twin) else None
    used = baseline if isinstance(baseline, BaselineUsed) else None
    promise = beside.promise() if beside is not None else _promise(plan, baseline)
    if used is not None:
        baseline = used.path if used.problem is None else None
    prepare(plan, dry_run=False, baseline_promise=promise)  # claims the run directory: one run ID, one run
    try:
        # One reader for the whole run: the watcher polls it while the run is live, then the
        # verdict takes its last read (only what was appended since, and the checkpoints).
        # the checkpoint directories the plan itself names are read wherever they are (a received run
        # directory's records are read only inside it: harness.read.history)
        reader = HistoryReader(plan.layout.root, inspect_checkpoints=False, losses=baseline is not None,
                               read_dirs=plan.own_dirs)  # a twin beside it: its losses kept, for when it qualifies
        watcher = Watcher(plan.spec, plan.layout.root, out=out, fail_fast=fail_fast, reader=reader,
                          shown_from=shown_from)
        spec = plan.spec
        if moved:
            watcher.say(moved)
        watcher.say(f"launching ft_launcher: {spec.world} ranks on {spec.nnodes} node(s)")
        result = launch.launch(plan, deadline_s=deadline_s if deadline_s is not None else default_deadline(plan.spec),
                               watch=_warming(watcher, beside, steps_wait=spec.workload_type.steps_wait),
                               base_env=base_env, on_stop=_step_canceller(plan, base_env),
                               on_signal=watcher.say,  # Ctrl-C is acknowledged at once, as a progress line
                               cancel=cancel, nice=nice)
        if beside is not None:  # both launches have ended once this returns
            used = beside.result()
            baseline = used.path if used.problem is None else None
            settle_baseline(plan, contractmod.BaselinePromise(used.how, used.path, problem=used.problem))
        base = read_baseline(baseline) if baseline is not None else None
        digest = evidence.digest(plan.layout.root)  # the launch has ended: what the final read sees
        read = reader.read(final=True, inspect_checkpoints=True)
        state = compare_end_states(read, base) if base is not None else None
        how = used.how if used is not None else "given"
        problem = (str(used.path), used.problem) if used is not None and used.problem is not None else None
        verdict = verify_read(read, baseline=base, end_state=state, baseline_how=how, baseline_problem=problem,
                              evidence_digest=digest)
        found, sections = triage(verdict, read)
        written = write_outputs(verdict, plan.layout.root, extra_sections=sections)
    finally:
        release(plan.layout)
    return Outcome(plan, result, verdict, found, written.picture_problem, known_defects(verdict, read, found), used)


def _promise(plan: Plan, baseline: Path | BaselineUsed | None) -> contractmod.BaselinePromise:
    """The baseline run.json's contract records for this launch: the one it is judged against."""
    if isinstance(baseline, BaselineUsed):
        return contractmod.BaselinePromise(baseline.how, baseline.path, baseline.why, baseline.problem)
    if baseline is not None:
        return contractmod.BaselinePromise(contractmod.GIVEN, Path(baseline))
    choice = baselinemod.choose(plan.spec)
    why = choice.why if choice.mode == baselinemod.NONE else "this launch was given no baseline run"
    return contractmod.BaselinePromise(contractmod.NONE, why=why)


def _warm_up() -> None:
    history.warm_up()
    picturemod.warm_up()


def _warming(watcher: Watcher, beside: Twin | None = None, *, steps_wait: bool = True):
    """The watcher, whose ticks start importing what the verdict needs after the launch
    (matplotlib for timeline.png, numpy) in the background, while the harness would only wait:
    at the first tick where the workload's ranks mostly wait between steps (`steps_wait`, the
    reference), else once the watcher has told that the workers are done computing (the
    launcher's shutdown waits), so that the import does not take CPU from ranks that compute
    through the run (megatron-cpu on two cores). With a twin `beside`, a tick that finds the fault
    run's workers started tells it (Twin.workers_started). Never before the launch: a thread
    importing while the launcher is forked holds the GIL and delays the job's start
    (bench/harness_overhead.py)."""
    started = False

    def tick() -> str | None:
        nonlocal started
        reason = watcher()
        if not started and (steps_wait or watcher.compute_over or reason):
            started = True
            threading.Thread(target=_warm_up, name="nvrx-qual-warm-up", daemon=True).start()
        if beside is not None and watcher.workers_started:
            beside.workers_started()
        return reason

    return tick


def _step_canceller(plan: Plan, base_env: dict[str, str] | None):
    """For a multi-node run, cancelling the named srun step stops the remote tasks too."""
    if plan.srun is None:
        return None
    job = (base_env or os.environ).get("SLURM_JOB_ID")
    if not job:
        return None
    return lambda: slurm.cancel_step(job, slurm.step_name(plan.spec.run_id))
