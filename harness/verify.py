"""`nvrx-qual verify RUN_DIR [--json PATH] [--fault none|kill|hang] [--no-write]`.

Reads only the run directory (it works on a directory produced by a user's own sbatch
script and copied off a cluster), checks the five recovery criteria, times the recovery and
writes timeline.png (with matplotlib), verdict.json and report.md into the run directory.

Exit status (harness.exitcodes): 0 qualified, 1 a criterion failed (or could not be decided),
2 the path is not a readable run directory or an output is refused (the message says why),
3 an internal error of the suite.

Library use: `verify_run(run_dir, fault=None, write=False)` -> Verdict (pytest fixtures);
`verify_read(read, fault, baseline)` for a harness.history.RunRead already in hand (`nvrx-qual
run` reads its run once, with the watcher's reader); `verify_timeline(timeline, fault)` for a
bare Timeline.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

from harness import criteria, diagnose, metrics, picture
from harness import events as ev
from harness.events import Timeline
from harness import safeio
from harness.history import RunDirError, RunRead, check_run_dir, read_run
from harness.layout import MARKER_NAME
from harness.exitcodes import ExitStatus, guarded
from harness.report import Verdict, write_outputs

EXIT_QUALIFIED, EXIT_FAILED, EXIT_UNREADABLE = ExitStatus.QUALIFIED, ExitStatus.NOT_QUALIFIED, ExitStatus.REFUSED

__all__ = ["RunDirError", "Verdict", "add_arguments", "main", "read_baseline", "run", "verify_read", "verify_run",
           "verify_timeline"]


def verify_timeline(timeline: Timeline, fault: str | None = None,
                    progress: Sequence[Sequence[ev.ProgressPoint]] | None = None) -> Verdict:
    """The verdict of a bare Timeline (writes nothing); see verify_read."""
    return verify_read(RunRead(timeline, tuple(tuple(p) for p in progress) if progress is not None else None), fault)


def verify_read(read: RunRead, fault: str | None = None, baseline: RunRead | None = None) -> Verdict:
    """The verdict of one read of a run (writes nothing, reads nothing). With the read of a
    baseline run (an uninterrupted run of the same configuration, read with its losses:
    read_baseline) loss continuity is checked too. With the sampled progress of its starts the
    verdict carries what timeline.png shows."""
    timeline, progress = read.timeline, read.progress
    analysis = criteria.analyze(timeline, fault)
    losses = None
    if baseline is not None:
        losses = criteria.LossComparison(read.losses or {}, baseline.losses or {}, str(baseline.run_dir))
        if read.losses is None:
            raise ValueError("loss continuity needs this run's losses: read it with losses=True")
    results = criteria.evaluate(timeline, analysis, losses)
    times = metrics.compute(timeline, analysis)
    notes = [*timeline.notes, *analysis.notes]
    if timeline.starts and any(s.source == timeline.starts[0].source for s in timeline.starts[1:]):
        notes.append(f"one application log ({timeline.starts[0].source}) holds several starts: cycles were "
                     "numbered by its starts (argument tables, FT: initialized, checkpoint loads)")
    launch = timeline.launch
    launcher = {
        "log_format": timeline.launcher_dialect,
        "nvrx_version": timeline.run.nvrx_version or (launch.nvrx_version if launch else None),
        "exit_code": launch.exit_code if launch else None,
        "utc_offset_s": timeline.utc_offset_s,
        "utc_offset_source": timeline.offset_how,
    }
    qualified = criteria.qualified(results)
    shown = picture.build(timeline, analysis, times, results, progress, qualified) if progress is not None else None
    return Verdict(
        run_dir=str(timeline.run_dir), fault=analysis.fault, fault_how=analysis.fault_how,
        qualified=qualified, criteria=results, metrics=times, launcher=launcher, picture=shown,
        deadlines=_deadlines(timeline.run),
        notes=tuple(notes), verified_at=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
    )


def _deadlines(run: ev.RunConfig) -> dict:
    """{"profile": ..., "setup": s, ...} from run.json; empty when it declares none."""
    if run.deadline_profile is None and not run.deadlines:
        return {}
    return {"profile": run.deadline_profile, **dict(run.deadlines)}


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


def read_baseline(baseline: str | os.PathLike) -> RunRead:
    """Check (check_baseline) and read a baseline run directory, with its losses."""
    check_baseline(Path(baseline))
    return read_run(baseline, inspect_checkpoints=False, losses=True, progress=False)


def triage(verdict: Verdict, read: RunRead | None = None) -> tuple["diagnose.Triage | None", tuple[str, ...]]:
    """A run that did not qualify gets the cross-rank failure triage as a report section.
    `read`, the read the verdict was made from, gives triage the run's facts (run.json,
    launch.json, the markers) so that it only scans the log lines itself."""
    if verdict.qualified and not any(c.id == criteria.LOOP_STOPPED for c in verdict.criteria):
        return None, ()  # a stopped restart loop qualifies and still gets its triage: the repeating error
    found = diagnose.diagnose(Path(verdict.run_dir), history=read)
    return found, (diagnose.render_markdown(found),)


def verify_run(run_dir: str | os.PathLike, fault: str | None = None, *, write: bool = False,
               json_path: str | os.PathLike | None = None, inspect_checkpoints: bool = True,
               extra_sections: Sequence[str] = (), baseline: str | os.PathLike | None = None,
               picture: bool = True) -> Verdict:
    """Read the run directory and judge it. Raises RunDirError for a path that is not a
    readable run directory and ValueError for an unknown fault. With write=True,
    timeline.png, verdict.json and report.md go into the run directory; json_path gets the JSON too.
    picture=False skips sampling the progress curve (a caller that will not draw it)."""
    if fault is not None and fault not in criteria.FAULTS:
        raise ValueError(f"fault {fault!r} is not one of {', '.join(criteria.FAULTS)}: pass one of them")
    base = read_baseline(baseline) if baseline is not None else None
    read = read_run(run_dir, inspect_checkpoints=inspect_checkpoints, losses=base is not None, progress=picture)
    verdict = verify_read(read, fault, base)
    if write or json_path is not None:
        write_outputs(verdict, run_dir if write else None, json_path, extra_sections)
    return verdict


# ---------------------------------------------------------------- command line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Check the five recovery criteria of a run directory from its files alone and time the "
                          "recovery. Exit status: 0 qualified, 1 a criterion failed, 2 not a readable run directory.")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run directory ($NVRX_WORK_DIR/runs/<run-id>)")
    parser.add_argument("--json", metavar="PATH", dest="json_path",
                        help="also write the verdict JSON to PATH, a new file (never overwritten; '-': standard output)")
    parser.add_argument("--fault", choices=criteria.FAULTS, default=None,
                        help="the fault the run was meant to survive (default: run.json, else the injection marker, "
                             "else none)")
    parser.add_argument("--baseline", metavar="RUN_DIR",
                        help="an uninterrupted run of the same configuration: also check that every lm loss after the "
                             "restored checkpoint equals its (loss_continuity; needs deterministic training)")
    parser.add_argument("--no-write", action="store_true",
                        help="do not write timeline.png, verdict.json and report.md into the run directory")
    parser.add_argument("--force", action="store_true",
                        help="replace a stored verdict.json that was judged for another fault (without it, verify "
                             "refuses to change the fault a run was judged for)")
    parser.add_argument("--quiet", action="store_true", help="print nothing but errors")


def _summary(verdict: Verdict) -> str:
    lines = [f"nvrx-qual verify: {verdict.run_dir} (fault {verdict.fault}: {verdict.fault_how})"]
    width = max(len(c.id) for c in verdict.criteria)
    for c in verdict.criteria:
        lines.append(f"  {c.status:<14} {c.id:<{width}}  {c.detail}")
    m = verdict.metrics
    if m.failure_to_first_step_s is not None or m.detection_s is not None:
        def s(v: float | None) -> str:
            return "?" if v is None else f"{v:.2f}s"
        lines.append(f"  failure -> first committed step {s(m.failure_to_first_step_s)} (detection {s(m.detection_s)}, "
                     f"restart {s(m.restart_s)}, restore {s(m.restore_s)}, first step {s(m.first_step_s)}); "
                     f"lost iterations {m.lost_iterations if m.lost_iterations is not None else '?'}")
    lines += [f"  warning: {w}" for w in m.warnings]
    lines.append(criteria.headline(verdict.qualified, verdict.fault))
    return "\n".join(lines)


def stored_verdict(run_dir: Path) -> dict | None:
    """The verdict.json already in the run directory (a regular file, not a link), or None."""
    path = run_dir / "verdict.json"
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 16 << 20:
            return None
        doc = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _stored_fault_conflict(run_dir: Path, verdict: Verdict) -> str | None:
    """Why writing this verdict would silently change the fault the run was judged for."""
    stored = stored_verdict(run_dir)
    fault = stored.get("fault") if stored else None
    if not isinstance(fault, str) or fault == verdict.fault:
        return None
    return (f"{run_dir / 'verdict.json'} records the run judged for fault {fault}; this verification is for fault "
            f"{verdict.fault} ({verdict.fault_how}): pass --force to replace it, or --no-write (or --json PATH with "
            "--no-write) to judge without changing the stored verdict")


def _what_was_written(paths: Sequence[Path], run_dir: Path, before: dict | None) -> str:
    names = [str(p.relative_to(run_dir)) if p.is_relative_to(run_dir) else str(p) for p in paths]
    if not names:
        return ""
    text = f"nvrx-qual verify: wrote {', '.join(names)} in {run_dir}"
    if before is not None and any(p.name == "verdict.json" and p.parent == run_dir for p in paths):
        earlier = "QUALIFIED" if before.get("qualified") is True else "NOT QUALIFIED"
        text += f" (replacing the earlier verdict.json: {earlier}, fault {before.get('fault', '?')})"
    return text


def run(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    if args.json_path not in (None, "-") and os.path.lexists(args.json_path):
        print(f"nvrx-qual verify: error: --json {args.json_path} already exists: choose a new file name; existing "
              "files (a run's own fault_injected.json above all) are never overwritten", file=sys.stderr)
        return EXIT_UNREADABLE
    try:
        verdict = verify_run(run_dir, args.fault, baseline=args.baseline, picture=not args.no_write)
    except RunDirError as exc:
        print(f"nvrx-qual verify: error: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    quiet = getattr(args, "quiet", False)
    before = None if args.no_write else stored_verdict(run_dir)
    if not args.no_write and not getattr(args, "force", False):
        conflict = _stored_fault_conflict(run_dir, verdict)
        if conflict:
            print(f"nvrx-qual verify: error: {conflict}", file=sys.stderr)
            return EXIT_UNREADABLE
    written_note = None
    try:
        _found, sections = triage(verdict)
        written = write_outputs(verdict, None if args.no_write else run_dir, args.json_path, sections)
        written_note = _what_was_written(written.paths, run_dir, before)
        if written.picture_problem and not quiet:
            print(f"nvrx-qual verify: note: timeline.png not drawn: {written.picture_problem}", file=sys.stderr)
    except OSError as exc:
        print(f"nvrx-qual verify: warning: could not write the verdict ({exc}); pass --no-write for a read-only "
              "run directory, or --json PATH", file=sys.stderr)
    if not quiet:
        if written_note:
            print(written_note, file=sys.stdout if args.json_path != "-" else sys.stderr)
        if args.json_path != "-":
            print(_summary(verdict))
    return verdict.exit_status


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.verify")
    add_arguments(parser)
    args = parser.parse_args(argv)
    return guarded(lambda: run(args), "nvrx-qual verify", debug=False)


if __name__ == "__main__":
    sys.exit(main())
