"""Classify: the scanned records of a run -> one Triage (the root cause, its category, the symptoms)."""

from __future__ import annotations

import dataclasses
import signal
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from functools import cmp_to_key
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Sequence, Union

from harness.vocab import events as ev_types
from harness.safe import safeio
from harness import workloads
from harness.vocab.dialect import LogLine, check_readable_dir, discover, record_number, utc_offset_problem
from harness.read.history import read_injections, refused_record, unusable_path
from harness.vocab.layout import MARKER_NAME, RunLayout, marker_name
from harness.vocab.faults import FAULT_KINDS
from harness.judge.triage.advice import _advice
from harness.judge.triage.model import HANG, ROOT_TRACEBACK_KINDS, ParallelConfig, Symptom, Triage, _rank_ranges, _short
from harness.judge.triage.scan import (_TB_START, _TEARDOWN_SIGNALS, _Context, _Event, _Frame, _Scanner, _Traceback,
                                 _headline_exception, _oom_memory, _phase, _signal_name)

if TYPE_CHECKING:
    from harness.read.history import RunRead

_EVIDENCE_CAP = 16


# ============================================================================ the decision


@dataclass(frozen=True)
class _Candidate:
    kind: str  # the category it would give
    time: float | None  # UTC epoch seconds
    cycle: int | None
    file: str
    file_rank: int
    lineno: int
    priority: int  # where order cannot be told: tracebacks, then exits, then hangs
    item: object


def _compare(a: _Candidate, b: _Candidate) -> int:
    if a.time is not None and b.time is not None and a.time != b.time:
        return -1 if a.time < b.time else 1
    if a.cycle is not None and b.cycle is not None and a.cycle != b.cycle:
        return -1 if a.cycle < b.cycle else 1
    if a.file == b.file and a.lineno != b.lineno:
        return -1 if a.lineno < b.lineno else 1
    for x, y in ((a.priority, b.priority), (a.file_rank, b.file_rank), (a.lineno, b.lineno)):
        if x != y:
            return -1 if x < y else 1
    return 0


_earliest_key = cmp_to_key(_compare)


def _tb_candidate(tb: _Traceback) -> _Candidate:
    return _Candidate(tb.kind, tb.time, tb.cycle, tb.start.file, tb.file_rank, tb.start.lineno, 0, tb)


def _event_candidate(ev: _Event, priority: int) -> _Candidate:
    kind = HANG if ev.kind == HANG else "collective" if ev.kind.startswith("collective") else "exit"
    return _Candidate(kind, ev.time, ev.cycle, ev.line.file, ev.file_rank, ev.line.lineno, priority, ev)


@dataclass(frozen=True)
class _RunFacts:
    """What run.json, launch.json and fault_injected.json say, all optional: read from the
    files (`_run_facts`) or taken from history's Timeline (`_timeline_facts`)."""

    utc_offset_s: int
    ref: datetime  # when the run was made: the date a log's glog stamps (no year) are near until it states a full date
    nnodes: int | None
    spec: dict
    marker: dict | None
    markers: tuple[dict, ...] = ()  # every planned fault's marker (fault_injected.json, fault_injected.2.json, ...)
    launcher_failed: bool = False  # launch.json: the launcher exited non-zero
    stopped_early: str | None = None  # launch.json: why the harness stopped the job, if it did
    backend: str = "NCCL"  # the collective backend: collective_backend() of run.json's command


def collective_backend(argv: Sequence[str], extra_args: Sequence[str] = (), workload: str | None = None) -> str:
    """'gloo' or 'NCCL': what the run's ranks talk through, from its own command line
    (Megatron's --distributed-backend, else the CPU workloads, which run over gloo); NCCL,
    Megatron's default on GPUs, when nothing says otherwise."""
    words = [*argv, *extra_args]
    for i, word in enumerate(words):
        value = words[i + 1] if word == "--distributed-backend" and i + 1 < len(words) else (
            word.split("=", 1)[1] if word.startswith("--distributed-backend=") else None)
        if value:
            return "gloo" if value.strip().lower() == "gloo" else "NCCL"
    known = workloads.find(workload)
    if known is not None:
        return known.backend
    cpu = any(w.replace("\\", "/").endswith(("workloads/reference.py", "entrypoints/pretrain_gpt_cpu.py")) for w in words)
    return "gloo" if cpu else "NCCL"


def _read_json(path: Path) -> dict | None:
    try:
        data = safeio.read_json(path)
    except safeio.UnusableRecord as exc:  # a string no path or argument can hold: refused, as history refuses it
        raise refused_record(path, path.name, exc) from None
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _offset(given: int | None, recorded: object) -> int:
    if given is not None:
        return given
    # a received run.json may say anything: an offset no time zone has is ignored, as history does
    return recorded if utc_offset_problem(recorded) is None else 0  # type: ignore[return-value]


def _newest_log(files: Sequence[Path]) -> datetime:
    """glog stamps carry no year: without a recorded date, take the logs' own."""
    mtimes = []
    for path in files:
        try:
            mtimes.append(path.stat().st_mtime)
        except OSError:
            pass
    return datetime.fromtimestamp(max(mtimes)) if mtimes else datetime.now()


def _run_facts(layout: RunLayout, files: Sequence[Path], utc_offset_s: int | None) -> _RunFacts:
    run = _read_json(layout.run_json) or {}
    if (unusable := unusable_path(run)) is not None:  # the paths it names, as history checks them
        raise refused_record(layout.run_json, "run.json", unusable)
    launch = _read_json(layout.launch_json) or {}
    spec = run.get("spec") if isinstance(run.get("spec"), dict) else {}
    offset = _offset(utc_offset_s, run.get("utc_offset_s"))
    ref = None
    for stamp in (run.get("created_at"), launch.get("started_at")):
        if isinstance(stamp, str):
            try:
                ref = datetime.fromisoformat(stamp.replace("Z", "+00:00")).replace(tzinfo=None)
                break
            except ValueError:
                pass
    if ref is None:
        ref = _newest_log(files)
    nnodes = record_number(spec.get("nnodes"), "world")
    injections, _notes = read_injections(layout.root)  # every marker the layout allows, read as history reads them
    markers = tuple(_marker_record(inj) for inj in injections)
    marker = next((m for m in markers if m["fault_index"] == 1), None)
    code = launch.get("launcher_exit_code")
    stopped = launch.get("stopped_early")
    commands = run.get("commands") if isinstance(run.get("commands"), list) else []
    argv = commands[0].get("argv") if commands and isinstance(commands[0], dict) else None
    extra = spec.get("extra_args")
    backend = collective_backend([str(a) for a in argv] if isinstance(argv, list) else [],
                                 [str(a) for a in extra] if isinstance(extra, list) else [],
                                 spec.get("workload") if isinstance(spec.get("workload"), str) else None)
    return _RunFacts(offset, ref, nnodes, spec, marker, markers,
                     launcher_failed=record_number(code, "exit_code") not in (None, 0),
                     stopped_early=str(stopped)[:200] if stopped else None, backend=backend)


def _marker_record(inj: ev_types.Injection) -> dict:
    """A marker as triage matches it, from history's reading of it."""
    record = {"fault": inj.fault, "rank": inj.rank, "local_rank": inj.local_rank, "cycle": inj.cycle,
              "fault_index": inj.fault_index}
    if inj.signal is not None:
        record["signal"] = inj.signal
    return record


def _timeline_facts(tl: ev_types.Timeline, files: Sequence[Path], utc_offset_s: int | None) -> _RunFacts:
    """The same facts as `_run_facts`, from what history already read: RunConfig (run.json),
    LaunchRecord (launch.json) and the Injections (every marker); no file is opened again."""
    run, launch = tl.run, tl.launch
    stamp = run.created_at if run.created_at is not None else (launch.started_at if launch else None)
    ref = datetime.fromtimestamp(stamp, timezone.utc).replace(tzinfo=None) if stamp is not None else _newest_log(files)
    markers = tuple(_marker_record(inj) for inj in tl.injections)
    marker = next((m for m in markers if m["fault_index"] == 1), None)
    code = launch.exit_code if launch else None
    return _RunFacts(_offset(utc_offset_s, run.utc_offset_s), ref, run.nnodes, dict(run.shape), marker, markers,
                     launcher_failed=code is not None and code != 0,
                     stopped_early=launch.stopped_early if launch else None,
                     backend=collective_backend(run.argv, run.extra_args))


def _log_files(layout: RunLayout) -> list[Path]:
    """The run directory's logs (dialect.discover: everything under logs/, plus the files
    named like logs elsewhere); ordered so that, without times, per-cycle application logs of
    the earliest cycle come first, then torch elastic's per-rank logs, Slurm outputs, the
    console, the launcher."""
    rank = {"cycle": 0, "attempt": 1, "other": 2, "console": 3, "launcher": 4}
    found = discover(layout.root)
    found.sort(key=lambda f: (rank[f.kind], f.cycle or 0, f.rel))
    return [f.path for f in found]


def diagnose(run_dir: Path, *, utc_offset_s: int | None = None,
             history: Union["RunRead", ev_types.Timeline, None] = None) -> Triage:
    """Triage the failure of one run directory. `utc_offset_s` overrides run.json's
    local-minus-UTC offset used to compare local-time log stamps with UTC ones. `history`,
    the read of this run directory a caller already has (harness.read.history), gives the run's
    facts (run.json, launch.json, the markers) without reading those files again; the log
    lines are scanned here either way (tracebacks are triage's own)."""
    root = Path(run_dir)
    check_readable_dir(root)
    layout = RunLayout.of_dir(root)
    files = _log_files(layout)
    if history is None:
        facts = _run_facts(layout, files, utc_offset_s)
    else:
        timeline = history if isinstance(history, ev_types.Timeline) else history.timeline
        facts = _timeline_facts(timeline, files, utc_offset_s)
    ctx = _Context(facts.utc_offset_s, (facts.ref.year, facts.ref.month))
    scanner = _Scanner(root, ctx)
    scanner.scan(files)
    return _stopped_by_harness(facts, _decide(root, scanner, facts))


def triage_run(read: Union["RunRead", ev_types.Timeline], *, utc_offset_s: int | None = None) -> Triage:
    """Triage the run history has read (its run directory's logs, its facts)."""
    timeline = read if isinstance(read, ev_types.Timeline) else read.timeline
    return diagnose(timeline.run_dir, utc_offset_s=utc_offset_s, history=timeline)


def _stopped_by_harness(facts: _RunFacts, triage: Triage) -> Triage:
    """Signal deaths after the harness stopped a doomed job are its doing, not a root cause."""
    reason = facts.stopped_early
    if not reason or triage.category not in ("exit", "none"):
        return triage
    return dataclasses.replace(
        triage, summary=f"The harness stopped the job early: {reason}. The signal exits that follow are its doing.",
        advice="Act on the reason the harness stopped the job (see the failed criteria); nothing crashed on its own.")


def _single_node(scanner: _Scanner, facts: _RunFacts) -> bool:
    return facts.nnodes == 1 or (facts.nnodes is None and scanner.world_of_nodes == 1)


RankResolver = Callable[[Optional[int], Optional[int]], Optional[int]]


def _rank_resolver(scanner: _Scanner, facts: _RunFacts) -> RankResolver:
    """Global rank from (global, local): the same on one node; elsewhere only where torch
    elastic's summary paired them ("rank : 5 (local_rank: 1)") without ambiguity."""
    single = _single_node(scanner, facts)
    local_map: dict[int, set[int]] = {}
    for ev in scanner.events:
        if ev.kind == "exit" and ev.rank is not None and ev.local_rank is not None:
            local_map.setdefault(ev.local_rank, set()).add(ev.rank)

    def resolve(rank: int | None, local: int | None) -> int | None:
        if rank is not None or local is None:
            return rank
        if single:
            return local
        known = local_map.get(local, set())
        return next(iter(known)) if len(known) == 1 else None

    return resolve


@dataclass
class _Findings:
    """Everything the scan found, deduplicated; what the root cause is chosen from."""

    tracebacks: list[_Traceback]
    events: list[_Event]
    failure_signs: list[LogLine]
    launcher_failed: bool
    global_rank: RankResolver

    def in_cycles_after(self, cycle: int) -> "_Findings":
        def later(c: int | None) -> bool:
            return c is not None and c > cycle

        return _Findings(
            [tb for tb in self.tracebacks if later(tb.cycle)], [ev for ev in self.events if later(ev.cycle)],
            [line for line in self.failure_signs if later(line.cycle)], False, self.global_rank,
        )  # fmt: skip

    def of(self, kind: str) -> list[_Event]:
        return [e for e in self.events if e.kind == kind]


def _unexplained_exit(ev: _Event, found: _Findings) -> bool:
    """A rank that died with no traceback, NCCL error or rank monitor timeout of its own:
    a root cause in itself (a SIGKILL, a segfault). Teardown signals never are, nor an
    abort while NCCL errors are about, nor what torch elastic saw after its root cause."""
    code = ev.exitcode
    if ev.secondary or code is None or code == 0 or (ev.rank is None and ev.local_rank is None):
        return False
    name = _signal_name(code)
    if name and signal.Signals.__members__.get(name) in _TEARDOWN_SIGNALS:
        return False
    comm_seen = bool(found.of("collective")) or any(tb.kind == "collective" for tb in found.tracebacks)
    if name == "SIGABRT" and comm_seen:
        return False
    rank = found.global_rank(ev.rank, ev.local_rank)
    if rank is not None:
        own = [found.global_rank(tb.rank, tb.local_rank) for tb in found.tracebacks]
        own += [found.global_rank(e.rank, e.local_rank) for e in found.events
                if e.kind in ("collective", "collective-weak", HANG)]  # fmt: skip
        return rank not in own
    return not found.tracebacks and (code > 0 or not comm_seen)


def _choose_root(found: _Findings) -> tuple[object, str] | None:
    """(the root cause, its category): the earliest non-NCCL traceback, unexplained death
    or rank monitor timeout; else NCCL; else whatever exit or teardown is left."""
    candidates = [_tb_candidate(tb) for tb in found.tracebacks if tb.kind in ROOT_TRACEBACK_KINDS]
    candidates += [_event_candidate(ev, 1) for ev in found.of("exit") if _unexplained_exit(ev, found)]
    candidates += [_event_candidate(ev, 2) for ev in found.of(HANG)]
    if candidates:
        chosen = min(candidates, key=_earliest_key)
        return chosen.item, chosen.kind
    comm_tbs = [tb for tb in found.tracebacks if tb.kind == "collective"]
    strong, weak = found.of("collective"), found.of("collective-weak")
    if comm_tbs or strong or (weak and (found.failure_signs or found.launcher_failed)):
        # a plain `NCCL WARN` names no rank; the errors that follow it do
        pool = [_tb_candidate(tb) for tb in comm_tbs] + [_event_candidate(e, 1) for e in strong]
        pool = pool or [_event_candidate(e, 1) for e in weak]
        return min(pool, key=_earliest_key).item, "collective"
    if found.of("exit"):
        return min((_event_candidate(e, 1) for e in found.of("exit")), key=_earliest_key).item, "exit"
    if found.tracebacks:  # only teardown tracebacks: someone stopped the job
        return min((_tb_candidate(tb) for tb in found.tracebacks), key=_earliest_key).item, "exit"
    return None


def _injected_signal(marker: dict) -> str | None:
    """The signal the nemesis sent for this marker: the marker's own word, else the one the
    fault vocabulary (faults.FAULT_KINDS) gives its kind; None for a fault it does not know."""
    signal_ = marker.get("signal")
    if isinstance(signal_, str) and signal_:
        return signal_
    kind = FAULT_KINDS.get(marker.get("fault"))  # type: ignore[arg-type]
    return kind.signal if kind is not None else None


def _injected_rank(category: str, ev: _Event, rank: int | None, marker: dict) -> tuple[bool, int | None]:
    """Whether the event is the fault the nemesis injected (a marker): same cycle and what
    the injected signal does, for every fault kind of the vocabulary: a stopped rank (SIGSTOP)
    is a hang the rank monitor times out on; any other signal is that rank's death by it.
    Also the rank to name."""
    marker_rank, marker_local = record_number(marker.get("rank"), "rank"), record_number(marker.get("local_rank"), "rank")
    marker_cycle = record_number(marker.get("cycle"), "cycle")
    if marker_cycle is not None and ev.cycle is not None and marker_cycle != ev.cycle:
        return False, rank
    sent = _injected_signal(marker)
    kind = FAULT_KINDS.get(marker.get("fault"))  # type: ignore[arg-type]
    if category == HANG and (sent == "SIGSTOP" or (kind is not None and kind.monitor_detects)):
        return True, marker_rank  # a rank kept alive (stopped, or frozen with the GIL held): the monitor's timeout
    died_of_it = (sent not in (None, "SIGSTOP") and _signal_name(ev.exitcode) == sent) or \
        (kind is not None and ev.exitcode in kind.exit_codes)  # e.g. exception's exit status 1
    if category == "exit" and died_of_it:
        if (rank is not None and rank == marker_rank) or (rank is None and ev.local_rank == marker_local):
            return True, marker_rank if marker_rank is not None else rank
    return False, rank


def _marker_file(marker: dict) -> str:
    """The marker file a record was read from (a multi-fault plan numbers its faults)."""
    index = marker.get("fault_index")
    return marker_name(index) if isinstance(index, int) and 1 <= index < 100 else MARKER_NAME


def _decide(root: Path, scanner: _Scanner, facts: _RunFacts) -> Triage:
    global_rank = _rank_resolver(scanner, facts)
    found = _Findings(_dedupe(scanner.tracebacks, global_rank), scanner.events, scanner.failure_signs,
                      facts.launcher_failed, global_rank)  # fmt: skip
    chosen = _choose_root(found)
    files, unreadable = tuple(scanner.scanned), tuple(scanner.unreadable)
    marker = facts.marker or {}
    markers = facts.markers or ((marker,) if marker else ())
    after_injection = None
    while chosen is not None and markers:
        item, category = chosen
        if isinstance(item, _Event):  # the fault rank's own end, as the marker's kind ends it
            hit = next((m for m in markers if _injected_rank(category, item, global_rank(item.rank, item.local_rank),
                                                              m)[0]), None)
        else:  # a traceback in the cycle a fault hit (a disk-full save's ENOSPC, an injected exception, a
            # survivor's error): that cycle was bound to fail
            hit = next((m for m in markers if item.cycle is not None
                        and record_number(m.get("cycle"), "cycle") == item.cycle), None)
        if hit is None or item.cycle is None:
            break
        marker = hit
        # the injected fault is expected: what broke in the cycles after it is the story
        later = _choose_root(found.in_cycles_after(item.cycle))
        if later is None:
            break
        after_injection, chosen = item, later
    config = _config(scanner, facts, chosen[0] if chosen else None)
    if chosen is None:
        summary = f"No failure found in {len(files)} log file(s)."
        if not files:
            summary = "No log files found under logs/ or as *.log/*.err/*.out in the run directory."
        return Triage(str(root), "none", summary, config=config, advice=_advice("none", None, config, None, False),
                      files_scanned=files, unreadable=unreadable)  # fmt: skip
    item, category = chosen
    if isinstance(item, _Traceback):
        triage = _traceback_triage(root, category, item, scanner, found, config, files, unreadable)
    else:
        assert isinstance(item, _Event)
        triage = _event_triage(root, category, item, found, marker, config, files, unreadable)
    if after_injection is not None:
        note = (f"After the fault the harness injected in cycle {after_injection.cycle} ({MARKER_NAME}), "
                f"a later cycle failed: ")  # fmt: skip
        triage = replace(triage, summary=note + triage.summary[0].lower() + triage.summary[1:])
    return triage


def _event_triage(
    root: Path, category: str, ev: _Event, found: _Findings, marker: dict, config: ParallelConfig,
    files: tuple[str, ...], unreadable: tuple[str, ...],
) -> Triage:  # fmt: skip
    rank = found.global_rank(ev.rank, ev.local_rank)
    injected = False
    if category in ("exit", HANG) and marker:
        injected, rank = _injected_rank(category, ev, rank, marker)
    if category == HANG and not injected:
        rank = None  # every rank blocked with the stuck one times out: the monitor cannot say which
    family = ("collective", "collective-weak") if ev.kind.startswith("collective") else (ev.kind,)
    evidence = [ev.line.evidence()]
    evidence += [e.line.evidence() for e in found.events if e is not ev and e.kind in family][: _EVIDENCE_CAP - 1]
    symptoms = _symptoms(found, exclude=ev, root_rank=rank)
    if rank is not None:
        who = f"rank {rank}"
    else:
        who = f"local rank {ev.local_rank}" if ev.local_rank is not None else "a process"
    if category == "exit" and rank is None and ev.local_rank is None:
        summary = f"{ev.what[0].upper()}{ev.what[1:]}, and no rank left a Python traceback"
    elif category == "exit":
        summary = f"{who[0].upper()}{who[1:]} {ev.what}, without a Python traceback"
    elif category == HANG:
        summary = f"No rank crashed: the NVRx rank monitor timed out ({ev.what.split(': ', 1)[-1]})"
        timed_out = {found.global_rank(e.rank, e.local_rank) for e in found.of(HANG) if e.cycle == ev.cycle}
        if None not in timed_out:
            summary += f"; monitors of rank(s) {_rank_ranges(sorted(timed_out))} timed out"  # type: ignore[arg-type]
        if rank is not None:
            summary += f"; rank {rank} is the one the harness stopped"
    else:
        b = config.backend
        summary = f"{b} failure without a non-{b} Python traceback on {who}: {ev.what}"
    if ev.cycle is not None:
        summary += f" (cycle {ev.cycle})"
    if injected:
        fault = marker.get("signal", marker.get("fault"))
        summary += f"; this is the fault the harness injected ({_marker_file(marker)}: {fault})"
    return Triage(
        str(root), category, summary + ".", rank=rank, local_rank=ev.local_rank, cycle=ev.cycle,
        evidence=tuple(evidence), config=config, advice=_advice(category, rank, config, ev, injected),
        injected=injected, symptoms=symptoms, files_scanned=files, unreadable=unreadable,
    )  # fmt: skip


def _dedupe(tracebacks: list[_Traceback], global_rank) -> list[_Traceback]:
    """The same traceback reaches several files (console capture, per-cycle log, torch
    elastic's summary): keep its earliest, best attributed copy."""
    groups: dict[tuple, list[_Traceback]] = {}
    for tb in tracebacks:
        key = (global_rank(tb.rank, tb.local_rank), tb.cycle, (tb.exception or "")[:300])
        groups.setdefault(key, []).append(tb)
    ranked_exceptions = {(k[2]) for k in groups if k[0] is not None}
    kept = []
    for key, group in groups.items():
        if key[0] is None and key[2] and key[2] in ranked_exceptions:
            continue  # an anonymous copy (the launcher's) of a rank's traceback
        best = min(group, key=lambda tb: _earliest_key(_tb_candidate(tb)))
        if best.time is None:
            best.time = min((tb.time for tb in group if tb.time is not None), default=None)
        kept.append(best)
    return kept


def _config(scanner: _Scanner, facts: _RunFacts, root_item: object | None) -> ParallelConfig:
    root_file = None
    if isinstance(root_item, _Traceback):
        root_file = root_item.start.file
    elif isinstance(root_item, _Event):
        root_file = root_item.line.file
    order = sorted(scanner.config_order, key=lambda f: f != root_file)
    values: dict[str, int] = {}
    source = None
    for name in order:
        for key, (value, lineno) in scanner.configs[name].items():
            if key not in values:
                values[key] = value
                source = source or f"{name}:{lineno}"
    spec = facts.spec
    fallback = {
        "micro_batch_size": spec.get("micro_batch_size"),
        "global_batch_size": spec.get("global_batch_size") or spec.get("global_batch_size_effective"),
        "seq_length": spec.get("seq_length"),
        "tensor_model_parallel_size": spec.get("tp"),
        "pipeline_model_parallel_size": spec.get("pp"),
        "context_parallel_size": spec.get("cp"),
        "data_parallel_size": spec.get("dp"),
        "world_size": spec.get("world"),
        "num_attention_heads": spec.get("num_attention_heads"),
        "num_layers": spec.get("num_layers"),
    }
    for key, value in fallback.items():
        if key not in values and record_number(value, "count") is not None:
            values[key] = value
            source = source or "run.json"
    world, tp = values.get("world_size"), values.get("tensor_model_parallel_size")
    pp, cp = values.get("pipeline_model_parallel_size"), values.get("context_parallel_size")
    if "data_parallel_size" not in values and world and tp and pp:
        model = tp * pp * (cp or 1)
        if world % model == 0:
            values["data_parallel_size"] = world // model
    return ParallelConfig(source=source, backend=facts.backend, **values)


def _traceback_triage(
    root: Path, category: str, tb: _Traceback, scanner: _Scanner, found: _Findings, config: ParallelConfig,
    files: tuple[str, ...], unreadable: tuple[str, ...],
) -> Triage:  # fmt: skip
    rank = found.global_rank(tb.rank, tb.local_rank)
    exception = _headline_exception(tb)
    innermost = tb.frames[-1] if tb.frames else None
    location = f"{innermost.path}:{innermost.lineno} in {innermost.function}" if innermost else None
    phase = _phase(tb.frames) if category == "oom" else None
    memory = None
    if category == "oom":
        peak = scanner.memory.get(rank) if rank is not None else None
        memory = _oom_memory(exception or "", peak)
    evidence = [tb.start.evidence()]
    if innermost is not None:
        evidence.append(innermost.line)
    if tb.exceptions:
        for text, line in tb.exceptions:
            if text == exception:
                evidence.append(line.evidence())
                break
    else:
        evidence.append(f"{tb.start.file}: the traceback is cut off before its exception line")
    if config.source and config.source != "run.json":
        evidence.append(f"{config.source}: Megatron arguments table ({config.describe()})")
    symptoms = _symptoms(found, exclude=tb, root_rank=rank)
    who = f"rank {rank}" if rank is not None else (
        f"local rank {tb.local_rank}" if tb.local_rank is not None else "an unidentified process")
    cycle = f" in cycle {tb.cycle}" if tb.cycle is not None else ""
    shown = exception or "a traceback cut off before its exception line"
    if category == "oom":
        summary = f"CUDA out of memory on {who}{cycle}" + (f", during {phase}" if phase else "") + "."
    elif category == "shape":
        summary = f"Shape / divisibility error on {who}{cycle}: {_short(shown)}."
    elif category == "import":
        summary = f"Import error on {who}{cycle}: {_short(shown)}."
    elif category == "exit":  # only teardown tracebacks: the job was stopped from outside
        summary = f"{who[0].upper()}{who[1:]} was stopped by a signal{cycle}: {_short(shown)}."
    elif category == "collective":
        summary = (f"{config.backend} / collective failure on {who}{cycle} and no non-{config.backend} traceback on "
                   f"any rank: {_short(shown)}.")
    else:
        summary = f"First non-{config.backend} traceback on {who}{cycle}: {_short(shown)}" + (
            f" at {location}." if location else ".")
    same = sorted({s.rank for s in symptoms if s.rank is not None and s.kind == category})
    later = sorted({s.rank for s in symptoms if s.rank is not None} - set(same))
    if same and category != "exit":
        summary = summary[:-1] + f"; the same error on rank(s) {_rank_ranges(same)}."
    if later and category != "exit":
        summary = summary[:-1] + f"; the failures on rank(s) {_rank_ranges(later)} are downstream symptoms."
    return Triage(
        str(root), category, summary, rank=rank, local_rank=tb.local_rank, cycle=tb.cycle, phase=phase,
        exception=exception, location=location, excerpt=_excerpt(tb, exception), evidence=tuple(evidence),
        config=config, memory=memory, advice=_advice(category, rank, config, tb, False),
        symptoms=symptoms, files_scanned=files, unreadable=unreadable,
    )  # fmt: skip



def _excerpt(tb: _Traceback, exception: str | None) -> tuple[str, ...]:
    """First two and last three frames and the exception: enough to recognise it."""
    def fmt(frame: _Frame) -> list[str]:
        out = [f'  File "{frame.path}", line {frame.lineno}, in {frame.function}']
        if frame.source:
            out.append(f"    {_short(frame.source, 160)}")
        return out

    lines = [_TB_START]
    frames = tb.frames
    if len(frames) > 5:
        for frame in frames[:2]:
            lines += fmt(frame)
        lines.append(f"  ... {len(frames) - 5} frame(s) omitted ...")
        for frame in frames[-3:]:
            lines += fmt(frame)
    else:
        for frame in frames:
            lines += fmt(frame)
    lines.append(_short(exception, 600) if exception else "(cut off before the exception line)")
    return tuple(lines)


def _symptoms(found: _Findings, *, exclude: object, root_rank: int | None) -> tuple[Symptom, ...]:
    """Failures on the other ranks, one per rank and kind, first occurrence kept."""
    tracebacks, events, global_rank = found.tracebacks, found.events, found.global_rank
    found: dict[tuple, tuple[object, Symptom]] = {}
    items: list[tuple[_Candidate, Symptom]] = []
    for tb in tracebacks:
        if tb is exclude:
            continue
        kind = tb.kind
        what = _short(_headline_exception(tb) or "traceback cut off before its exception line", 240)
        rank = global_rank(tb.rank, tb.local_rank)
        items.append((_tb_candidate(tb), Symptom(rank, tb.local_rank, kind, what, tb.start.evidence())))
    for ev in events:
        if ev is exclude:
            continue
        kind = "collective" if ev.kind.startswith("collective") else ev.kind
        if kind == "exit" and ev.exitcode is not None:
            name = _signal_name(ev.exitcode)
            if name and signal.Signals.__members__.get(name) in _TEARDOWN_SIGNALS:
                kind = "teardown"
        rank = global_rank(ev.rank, ev.local_rank)
        symptom = Symptom(rank, ev.local_rank, kind, _short(ev.what, 240), ev.line.evidence())
        items.append((_event_candidate(ev, 1), symptom))
    items.sort(key=lambda pair: _earliest_key(pair[0]))
    attributed_comm = any(s.kind == "collective" and (s.rank is not None or s.local_rank is not None) for _c, s in items)
    for _cand, symptom in items:
        if root_rank is not None and symptom.rank == root_rank:
            continue
        if attributed_comm and symptom.kind == "collective" and symptom.rank is None and symptom.local_rank is None:
            continue  # "terminate called after ... DistBackendError": the ranked lines say it better
        key = (symptom.rank, symptom.local_rank if symptom.rank is None else None, symptom.kind)
        if key not in found:
            found[key] = (_cand, symptom)
    ordered = sorted(
        (s for _c, s in found.values()),
        key=lambda s: (s.rank is None, s.rank if s.rank is not None else -1,
                       s.local_rank if s.local_rank is not None else -1, s.kind),
    )  # fmt: skip
    return tuple(ordered)
