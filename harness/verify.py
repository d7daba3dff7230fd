"""Verify a run directory (`nvrx-qual verify`).

Reads only the run directory (it works on a directory produced by a user's own sbatch
script and copied off a cluster), checks the recovery criteria and further checks, times the recovery and
writes timeline.png (with matplotlib), verdict.json and report.md into the run directory.

The command (`nvrx-qual verify`: options, lines printed, exit status) is harness.cli.verify.

Library use: `verify_run(run_dir, fault=None, write=False)` -> Verdict (pytest fixtures);
`verify_read(read, fault, baseline)` for a harness.history.RunRead already in hand (`nvrx-qual
run` reads its run once, with the watcher's reader); `verify_timeline(timeline, fault)` for a
bare Timeline.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

from harness import __version__, criteria, end_state, evidence, findings, goodput, metrics, picture
from harness import events as ev
from harness.events import Timeline
from harness import safeio
from harness.history import RunDirError, RunRead, check_run_dir, read_run
from harness.faults import CAMPAIGN
from harness.layout import MARKER_NAME
from harness.render.diagnosis import render_markdown
from harness.report import write_outputs
from harness.triage import Triage, diagnose
from harness.verdict import BaselineRef, Deadlines, EpisodeVerdict, EvidenceDigest, Goodput, Launcher, Verdict

__all__ = ["RunDirError", "Verdict", "check_baseline", "compare_end_states", "judge_run", "read_baseline", "stored_verdict", "triage", "verify_read",
           "verify_run", "verify_timeline"]


def verify_timeline(timeline: Timeline, fault: str | None = None,
                    progress: Sequence[Sequence[ev.ProgressPoint]] | None = None) -> Verdict:
    """The verdict of a bare Timeline (writes nothing); see verify_read."""
    return verify_read(RunRead(timeline, tuple(tuple(p) for p in progress) if progress is not None else None), fault)


def verify_read(read: RunRead, fault: str | None = None, baseline: RunRead | None = None,
                end_state: ev.StateComparison | None = None, *, baseline_how: str = "given",
                baseline_problem: tuple[str, str] | None = None,
                evidence_digest: EvidenceDigest | None = None) -> Verdict:
    """The verdict of one read of a run (writes nothing, reads nothing). With the read of a
    baseline run (an uninterrupted run of the same configuration, read with its losses:
    read_baseline) and the comparison of the two final checkpoints (compare_end_states) loss
    continuity and end-state equivalence are checked too. With the sampled progress of its
    starts the verdict carries what timeline.png shows. `baseline_how` says how the baseline
    came (verdict.json's baseline.how); `baseline_problem` (its run directory, why) makes both
    baseline checks unknown: the baseline meant for them is unusable. `evidence_digest`
    (harness.evidence.digest of the run directory, taken just before the read) is recorded in
    the verdict with the suite version and the criteria it was judged with."""
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
                               baseline_problem[1] if baseline_problem is not None else None)
    results = judgement.results
    ref = None
    if baseline is not None:
        theirs, ours = baseline.timeline.run.config_hash, timeline.run.config_hash
        matches = None if theirs is None or ours is None else theirs == ours
        ref = BaselineRef(str(baseline.run_dir), baseline_how, theirs, matches)
    elif baseline_problem is not None:
        ref = BaselineRef(baseline_problem[0], baseline_how, problem=baseline_problem[1])
    times = metrics.compute(timeline, analysis)
    try:  # as check_safe for a criterion: a crash in the pricing is no verdict, and goodput decides nothing
        worth = goodput.compute(timeline, analysis.episodes, baseline.timeline if baseline is not None else None,
                                baseline_problem[1] if baseline_problem is not None else None)
    except Exception as exc:  # noqa: BLE001
        worth = Goodput(reason=f"goodput could not be computed: {type(exc).__name__}: {str(exc)[:160]}")
    notes = [*timeline.notes, *analysis.notes]
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
                          judged.results, judged.superseded, analysis.kind_name(ep), ep.marker.rank)


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
    tensor by tensor, read offline (harness.end_state; reads the checkpoints, writes nothing)."""
    return end_state.compare_final(read.timeline, baseline.timeline)


def read_baseline(baseline: str | os.PathLike, read_dirs: Sequence[str | os.PathLike] = ()) -> RunRead:
    """Check (check_baseline) and read a baseline run directory, with its losses."""
    check_baseline(Path(baseline))
    return read_run(baseline, inspect_checkpoints=False, losses=True, progress=False, read_dirs=read_dirs)


def known_defects(verdict: Verdict, read: RunRead | None) -> tuple[findings.KnownMatch, ...]:
    """The known defects of the software under test (harness.findings) this run's failure matches."""
    return findings.known_defects(verdict, read.timeline.run) if read is not None else ()


def triage(verdict: Verdict, read: RunRead | None = None) -> tuple[Triage | None, tuple[str, ...]]:
    """A run that did not qualify gets the cross-rank failure triage as a report section,
    after the known defect it matches, if any. `read`, the read the verdict was made from,
    gives triage the run's facts (run.json, launch.json, the markers) so that it only scans the
    log lines itself."""
    if verdict.qualified and not any(c.id == criteria.LOOP_STOPPED for c in verdict.criteria):
        return None, ()  # a stopped restart loop qualifies and still gets its triage: the repeating error
    found = diagnose(Path(verdict.run_dir), history=read)
    known = findings.markdown(known_defects(verdict, read))
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
    triage(verdict, read)); writes nothing. Raises as verify_run."""
    if fault is not None and fault not in criteria.FAULTS:
        raise ValueError(f"fault {fault!r} is not one of {', '.join(criteria.FAULTS)}: pass one of them")
    base = read_baseline(baseline, read_dirs) if baseline is not None else None
    digest = evidence.digest(run_dir)  # before the read: what the read could have seen
    read = read_run(run_dir, inspect_checkpoints=inspect_checkpoints, losses=base is not None, progress=picture,
                    read_dirs=read_dirs)
    state = compare_end_states(read, base) if base is not None else None
    return verify_read(read, fault, base, state, evidence_digest=digest), read


def stored_verdict(run_dir: Path) -> dict | None:
    """The verdict.json already in the run directory (a regular file, not a link), or None."""
    path = run_dir / "verdict.json"
    try:
        doc = safeio.read_json(path, limit=16 << 20)  # no link or FIFO followed; strings checked (ignored if odd)
    except (OSError, ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None
