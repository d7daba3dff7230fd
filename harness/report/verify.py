"""Verify a run directory (`nvrx-qual verify`).

Reads only the run directory (it works on a directory produced by a user's own sbatch
script and copied off a cluster), checks the recovery criteria and further checks, times the recovery and
writes timeline.png (with matplotlib), verdict.json and report.md into the run directory.

The command (`nvrx-qual verify`: options, lines printed, exit status) is harness.cli.verify.

Library use: `verify_run(run_dir, fault=None, write=False)` -> Verdict (pytest fixtures);
`verify_read(read, fault, baseline)` for a harness.read.history.RunRead already in hand (`nvrx-qual
run` reads its run once, with the watcher's reader); `verify_timeline(timeline, fault)` for a
bare Timeline.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

from harness import __version__
from harness.judge import criteria, findings, goodput, metrics
from harness.read import end_state, evidence
from harness.report import picture
from harness.vocab import events as ev
from harness.vocab.events import Timeline
from harness.safe import safeio
from harness.read.history import HistoryReader, RunDirError, RunRead, check_run_dir, read_run, run_config
from harness.judge.sentences import render, sentence
from harness.vocab.faults import CAMPAIGN
from harness.vocab.layout import MARKER_NAME
from harness.report.diagnosis import render_markdown
from harness.report.outputs import write_outputs
from harness.judge.triage import Triage, diagnose
from harness.vocab.verdict import BaselineRef, Deadlines, EpisodeVerdict, EvidenceDigest, Goodput, Launcher, Verdict

__all__ = ["SKIP", "BaselineFound", "RunDirError", "Verdict", "check_baseline", "compare_end_states", "judge_run",
           "read_baseline", "recorded_baseline", "skipped_baseline", "stored_verdict", "triage", "verify_read",
           "verify_run", "verify_timeline"]

SKIP = "none"  # verify --baseline none: judge without the recorded baseline, by request


def verify_timeline(timeline: Timeline, fault: str | None = None,
                    progress: Sequence[Sequence[ev.ProgressPoint]] | None = None) -> Verdict:
    """The verdict of a bare Timeline (writes nothing); see verify_read."""
    return verify_read(RunRead(timeline, tuple(tuple(p) for p in progress) if progress is not None else None), fault)


def verify_read(read: RunRead, fault: str | None = None, baseline: RunRead | None = None,
                end_state: ev.StateComparison | None = None, *, baseline_how: str = "given",
                baseline_problem: tuple[str, str] | None = None,
                evidence_digest: EvidenceDigest | None = None,
                baseline_skipped: tuple[str, str] | None = None, notes: Sequence[str] = ()) -> Verdict:
    """The verdict of one read of a run (writes nothing, reads nothing). With the read of a
    baseline run (an uninterrupted run of the same configuration, read with its losses:
    read_baseline) and the comparison of the two final checkpoints (compare_end_states) loss
    continuity and end-state equivalence are checked too. With the sampled progress of its
    starts the verdict carries what timeline.png shows. `baseline_how` says how the baseline
    came (verdict.json's baseline.how); `baseline_problem` (its run directory, why) makes both
    baseline checks unknown: the baseline meant for them is unusable; `baseline_skipped` (its
    run directory, why) makes them not applicable, saying they were skipped by request.
    `evidence_digest` (harness.read.evidence.digest of the run directory, taken just before the
    read) is recorded in the verdict with the suite version and the criteria it was judged
    with; `notes` are added to the verdict's."""
    timeline, progress = read.timeline, read.progress
    analysis = criteria.analyze(timeline, fault)
    losses = None
    if baseline is not None:
        losses = criteria.LossComparison(read.losses or {}, baseline.losses or {}, str(baseline.run_dir))
        if read.losses is None:
            raise ValueError("loss continuity needs this run's losses: read it with losses=True")
        if end_state is None:
            raise ValueError("state_equivalence needs the comparison of the final checkpoints: "
                             "compare_end_states(read, baseline)")
    judgement = criteria.judge(timeline, analysis, losses, end_state,
                               baseline_problem[1] if baseline_problem is not None else None,
                               baseline_skipped[1] if baseline_skipped is not None else None)
    results = tuple(render(r) for r in judgement.results)  # the sentences, rendered here from the checkers' facts
    ref = None
    if baseline is not None:
        theirs, ours = baseline.timeline.run.config_hash, timeline.run.config_hash
        matches = None if theirs is None or ours is None else theirs == ours
        ref = BaselineRef(str(baseline.run_dir), baseline_how, theirs, matches)
    elif baseline_problem is not None:
        ref = BaselineRef(baseline_problem[0], baseline_how, problem=baseline_problem[1])
    elif baseline_skipped is not None:
        ref = BaselineRef(baseline_skipped[0], "none", skipped=baseline_skipped[1])
    times = metrics.compute(timeline, analysis)
    try:  # as check_safe for a criterion: a crash in the pricing is no verdict, and goodput decides nothing
        worth = goodput.compute(timeline, analysis.episodes, baseline.timeline if baseline is not None else None,
                                baseline_problem[1] if baseline_problem is not None else None)
    except Exception as exc:  # noqa: BLE001
        worth = Goodput(reason=f"goodput could not be computed: {type(exc).__name__}: {str(exc)[:160]}")
    notes = [*timeline.notes, *analysis.notes, *notes]
    if ref is not None and ref.matches_run is False:
        notes.append(f"the baseline {baseline.run_dir if baseline is not None else ''} was run with another "
                     f"configuration (config hash {ref.config_hash[:12] if ref.config_hash else '?'}, this run's "
                     f"{(timeline.run.config_hash or '?')[:12]}): loss_continuity and state_equivalence compare "
                     "unlike runs")
    if timeline.starts and any(s.source == timeline.starts[0].source for s in timeline.starts[1:]):
        notes.append(f"one application log ({timeline.starts[0].source}) holds several starts: cycles were "
                     "numbered by its starts (argument tables, FT: initialized, checkpoint loads)")
    launch = timeline.launch
    launcher = Launcher(
        log_format=timeline.launcher_dialect,
        nvrx_version=timeline.run.nvrx_version or (launch.nvrx_version if launch else None),
        exit_code=launch.exit_code if launch else None,
        utc_offset_s=timeline.utc_offset_s,
        utc_offset_source=timeline.offset_how,
    )
    qualified = criteria.qualified(results)
    shown = picture.build(timeline, analysis, times, results, progress, qualified, worth) if progress is not None else None
    return Verdict(
        run_dir=str(timeline.run_dir), fault=analysis.fault, fault_how=analysis.fault_how,
        qualified=qualified, criteria=results, metrics=times, launcher=launcher, picture=shown,
        deadlines=_deadlines(timeline.run),
        notes=tuple(notes), verified_at=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
        baseline=ref,
        suite_version=__version__, criteria_set=tuple(r.id for r in results), evidence_digest=evidence_digest,
        episodes=tuple(_episode_verdict(timeline, analysis, e) for e in judgement.episodes),
        campaign=_campaign(timeline.run, analysis), goodput=worth,
    )


def _episode_verdict(timeline: Timeline, analysis: criteria.Analysis, judged: criteria.EpisodeJudgement) -> EpisodeVerdict:
    ep = judged.episode
    return EpisodeVerdict(ep.number, ep.marker.fault_at, ep.cycle, str(ep.marker.src), ev.iso_utc(timeline.utc(ep.marker)),
                          tuple(render(r) for r in judged.results), judged.superseded, analysis.kind_name(ep),
                          ep.marker.rank)


def _campaign(run: ev.RunConfig, analysis: criteria.Analysis) -> dict | None:
    """A campaign's replay key for verdict.json: the seed, the number of faults, the schedule."""
    if analysis.fault != CAMPAIGN:
        return None
    return {"seed": run.seed, "faults": len(analysis.schedule),
            "schedule": [f.to_json(i) for i, f in enumerate(analysis.schedule, start=1)]}


def _deadlines(run: ev.RunConfig) -> Deadlines:
    """The profile and seconds per section run.json declares; empty when it declares none."""
    return Deadlines(run.deadline_profile, tuple(dict(run.deadlines).items()))


def check_baseline(baseline: Path) -> None:
    """Raise RunDirError unless `baseline` is a readable run directory of an uninterrupted
    run: a baseline that itself had a fault would make loss continuity compare two
    recoveries, not a recovery against the truth."""
    try:
        check_run_dir(baseline)
    except RunDirError as exc:
        raise RunDirError(f"--baseline: {exc}") from None
    if os.path.lexists(baseline / MARKER_NAME):
        raise RunDirError(f"--baseline {baseline} had a fault ({MARKER_NAME} is there): give the run directory of an "
                          "uninterrupted run of the same configuration (--fault none)")
    try:
        run = safeio.read_json(baseline / "run.json")
    except FileNotFoundError:
        return
    except (OSError, ValueError, RecursionError) as exc:
        raise RunDirError(f"--baseline {baseline}: run.json is unreadable ({exc}): give an uninterrupted run "
                          "directory") from None
    spec = run.get("spec") if isinstance(run, dict) else None
    fault = spec.get("fault") if isinstance(spec, dict) else None
    if fault not in (None, "none"):
        raise RunDirError(f"--baseline {baseline} was planned with fault {str(fault)[:20]!r}: give the run directory of "
                          "an uninterrupted run of the same configuration (--fault none)")


def compare_end_states(read: RunRead, baseline: RunRead) -> ev.StateComparison:
    """This run's final committed checkpoint against the baseline's of the same iteration,
    tensor by tensor, read offline (harness.read.end_state; reads the checkpoints, writes nothing)."""
    return end_state.compare_final(read.timeline, baseline.timeline)


def read_baseline(baseline: str | os.PathLike, read_dirs: Sequence[str | os.PathLike] = ()) -> RunRead:
    """Check (check_baseline) and read a baseline run directory, with its losses."""
    check_baseline(Path(baseline))
    return read_run(baseline, inspect_checkpoints=False, losses=True, progress=False, read_dirs=read_dirs)


def known_defects(verdict: Verdict, read: RunRead | None, found: Triage | None = None
                  ) -> tuple[findings.KnownMatch, ...]:
    """The known defects of the software under test (harness.judge.findings) this run's failure
    matches; `found`, the run's triage (triage below), for the rows told by their root cause."""
    return findings.known_defects(verdict, read.timeline.run, triage=found) if read is not None else ()


def triage(verdict: Verdict, read: RunRead | None = None) -> tuple[Triage | None, tuple[str, ...]]:
    """A run that did not qualify gets the cross-rank failure triage as a report section,
    after the known defect it matches, if any. `read`, the read the verdict was made from,
    gives triage the run's facts (run.json, launch.json, the markers) so that it only scans the
    log lines itself."""
    if verdict.qualified and not any(c.id == criteria.LOOP_STOPPED for c in verdict.criteria):
        return None, ()  # a stopped restart loop qualifies and still gets its triage: the repeating error
    found = diagnose(Path(verdict.run_dir), history=read)
    known = findings.markdown(known_defects(verdict, read, found))
    return found, ((known,) if known else ()) + (render_markdown(found),)


def verify_run(run_dir: str | os.PathLike, fault: str | None = None, *, write: bool = False,
               json_path: str | os.PathLike | None = None, inspect_checkpoints: bool = True,
               extra_sections: Sequence[str] = (), baseline: str | os.PathLike | None = None,
               picture: bool = True, read_dirs: Sequence[str | os.PathLike] = ()) -> Verdict:
    """Read the run directory and judge it. Raises RunDirError for a path that is not a
    readable run directory and ValueError for an unknown fault. With write=True,
    timeline.png, verdict.json and report.md go into the run directory; json_path gets the JSON too.
    picture=False skips sampling the progress curve (a caller that will not draw it). The
    directories the run's records name are read only inside it or inside `read_dirs`."""
    verdict, _read = judge_run(run_dir, fault, inspect_checkpoints=inspect_checkpoints, baseline=baseline,
                               picture=picture, read_dirs=read_dirs)
    if write or json_path is not None:
        write_outputs(verdict, run_dir if write else None, json_path, extra_sections)
    return verdict


def judge_run(run_dir: str | os.PathLike, fault: str | None = None, *, inspect_checkpoints: bool = True,
              baseline: str | os.PathLike | None = None, picture: bool = True,
              read_dirs: Sequence[str | os.PathLike] = ()) -> tuple[Verdict, RunRead]:
    """The verdict of the run directory and the one read it was made from (for the triage:
    triage(verdict, read)); writes nothing. The baseline: None, the one run.json's contract
    names (recorded_baseline: beside the run, by its run ID; missing or changed since makes the
    baseline checks unknown, never dropped); SKIP ("none") judges without it, by request; a run
    directory is given (RunDirError when it is no uninterrupted run). Every reader of a run
    directory (verify, report, the fixtures) judges through here. Raises as verify_run."""
    if fault is not None and fault not in criteria.FAULTS:
        raise ValueError(f"fault {fault!r} is not one of {', '.join(criteria.FAULTS)}: pass one of them")
    reader = HistoryReader(run_dir, inspect_checkpoints=inspect_checkpoints, read_dirs=read_dirs)
    if baseline is None:
        found = recorded_baseline(run_dir, reader.planned())  # run.json is read once: this read is the history's
    elif os.fspath(baseline) == SKIP:
        found = skipped_baseline(run_dir, reader.planned())
    else:
        found = BaselineFound(Path(baseline), "given")
    base = None
    if found.path is not None and found.problem is None and found.skipped is None:
        try:
            base = read_baseline(found.path, read_dirs)
        except RunDirError as exc:
            if found.how == "given":
                raise
            found = BaselineFound(found.path, found.how, problem=sentence("baseline", "unusable", {
                "run_id": found.path.name, "error": str(exc)}))
    digest = evidence.digest(run_dir)  # before the read: what the read could have seen
    reader.losses = base is not None
    read = reader.read(progress=picture)
    state = compare_end_states(read, base) if base is not None else None
    where = str(found.path) if found.path is not None else ""
    return verify_read(read, fault, base, state, baseline_how=found.how, evidence_digest=digest,
                       baseline_problem=(where, found.problem) if found.problem is not None else None,
                       baseline_skipped=(where, found.skipped) if found.skipped is not None else None,
                       notes=found.notes), read


@dataclass(frozen=True)
class BaselineFound:
    """The baseline a reader judges a run against: its run directory (None: none), how it came
    (ran, reused, given; none), and why it cannot be used (`problem`: both baseline checks
    unknown) or was skipped by request (`skipped`: both not applicable, saying so)."""

    path: Path | None
    how: str
    problem: str | None = None
    skipped: str | None = None
    notes: tuple[str, ...] = ()


def recorded_baseline(run_dir: str | os.PathLike, run: ev.RunConfig) -> BaselineFound:
    """The baseline run.json's contract names, looked up by its run ID in the runs/ folder the
    run lies in (RUN_DIR/../<run id>; never a path taken from run.json, never through a link),
    and still what the run was judged against: its configuration hash and the digest of its
    checkpoints as the contract recorded them. No contract, or one that names no baseline:
    none (the run promised none). Missing, a link, no uninterrupted run, another configuration,
    changed checkpoints: a problem naming it and the fix."""
    planned = run.contract.baseline if run.contract is not None else None
    if planned is None or planned.how in ("none", "auto"):
        return BaselineFound(None, "none")
    runs = Path(os.path.abspath(run_dir)).parent
    if planned.run_id is None:
        return BaselineFound(None, planned.how, problem=planned.problem or sentence("baseline", "missing", {
            "run_id": "?", "how": planned.how, "runs": runs}))
    where = runs / planned.run_id
    facts = {"run_id": planned.run_id, "how": planned.how, "runs": runs, "path": where}
    if planned.problem:  # unusable already when the run was judged (the twin did not qualify)
        return BaselineFound(where, planned.how, problem=planned.problem)
    try:
        st = os.lstat(where)
    except FileNotFoundError:
        return BaselineFound(where, planned.how, problem=sentence("baseline", "missing", facts))
    except OSError as exc:
        return BaselineFound(where, planned.how, problem=sentence("baseline", "unusable", {
            **facts, "error": exc.strerror or str(exc)}))
    if not stat.S_ISDIR(st.st_mode):
        return BaselineFound(where, planned.how, problem=sentence("baseline", "not_a_dir", {
            **facts, "what": "a link" if stat.S_ISLNK(st.st_mode) else safeio.kind_of(st.st_mode)}))
    try:
        check_baseline(where)
    except RunDirError as exc:
        return BaselineFound(where, planned.how, problem=sentence("baseline", "unusable", {**facts, "error": str(exc)}))
    now_hash = run_config(where).config_hash
    if planned.config_hash is not None and now_hash is not None and now_hash != planned.config_hash:
        return BaselineFound(where, planned.how, problem=sentence("baseline", "other_config", {
            **facts, "now": now_hash[:12], "then": planned.config_hash[:12]}))
    notes: tuple[str, ...] = ()
    if planned.has_digest:
        then = EvidenceDigest(planned.checkpoints_method or "", planned.checkpoints_entries or 0,
                              planned.checkpoints_bytes or 0, planned.checkpoints_sha256 or "",
                              planned.checkpoints_sizes_sha256 or "")
        now = evidence.digest(where / "checkpoints")
        if now is None:
            return BaselineFound(where, planned.how, problem=sentence("baseline", "checkpoints_gone", {
                **facts, "entries": then.entries}))
        if then.sha256 != now.sha256:
            if then.method == now.method and then.sizes_sha256 == now.sizes_sha256:
                notes = (sentence("baseline", "copied", facts),)
            else:
                change = sentence("baseline", "change", {"then_entries": then.entries, "then_bytes": then.bytes,
                                                         "now_entries": now.entries, "now_bytes": now.bytes})
                return BaselineFound(where, planned.how, problem=sentence("baseline", "changed", {
                    **facts, "change": change}))
    return BaselineFound(where, planned.how, notes=notes)


def skipped_baseline(run_dir: str | os.PathLike, run: ev.RunConfig) -> BaselineFound:
    """verify --baseline none: the baseline checks are skipped by request, and say so (naming
    the baseline the contract records, if any)."""
    planned = run.contract.baseline if run.contract is not None else None
    if planned is not None and planned.run_id is not None and planned.how not in ("none", "auto"):
        where = Path(os.path.abspath(run_dir)).parent / planned.run_id
        return BaselineFound(where, "none", skipped=sentence("baseline", "skipped", {
            "run_id": planned.run_id, "how": planned.how}))
    return BaselineFound(None, "none", skipped=sentence("baseline", "skipped_none_recorded", {}))


def stored_verdict(run_dir: Path) -> dict | None:
    """The verdict.json already in the run directory (a regular file, not a link), or None."""
    path = run_dir / "verdict.json"
    try:
        doc = safeio.read_json(path, limit=16 << 20)  # no link or FIFO followed; strings checked (ignored if odd)
    except (OSError, ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None
