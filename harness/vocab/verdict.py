"""The one vocabulary of a verdict: what a criterion says (`Status`, `CriterionResult`), which
fault a run was judged for (`Fault`), what the recovery cost (`Metrics`, `Recovery`) and the
whole verdict of one run (`Verdict`), with `to_json` / `from_json` for verdict.json
(docs/contracts.md; the JSON is exactly today's schema, round trip included).

A verdict records what judged it: the suite version, the set of criteria and a digest of
the evidence files (`EvidenceDigest`), so that a reader can tell a verdict of an earlier
release or of other evidence from a current one (`stale_reasons`); a reader of a received
verdict.json re-judges the evidence instead of trusting the stored statuses
(harness.report.stats.load_run).

Statuses merge as Jepsen's checkers do: fail beats unknown beats pass, and not_applicable is
the identity (a criterion whose premise is absent says nothing either way). A run qualifies
when the merge of its criteria is pass or not_applicable, and it has criteria at all.

Pure values: nothing here reads a file or renders.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from harness.vocab.dialect import record_number  # the one JSON number reader (bound: BOUNDS['record'])
from harness.vocab.events import iso_utc
from harness.vocab.faults import FAULTS

if TYPE_CHECKING:
    from harness.vocab.picture_data import TimelinePicture

SCHEMA = 1


class Status(str, enum.Enum):
    """A criterion's status; a `str` so verdict.json and every comparison with "pass" stay as they are."""

    PASS = "pass"
    FAIL = "fail"
    NOT_APPLICABLE = "not_applicable"
    UNKNOWN = "unknown"

    __str__ = str.__str__
    __format__ = str.__format__

    @property
    def held(self) -> bool:
        """Did not stand in the way of qualification."""
        return self in (Status.PASS, Status.NOT_APPLICABLE)

    @classmethod
    def parse(cls, value: object) -> "Status":
        """A status as stored; anything else (missing, misspelt) is unknown."""
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


# Jepsen's order: the higher wins a merge; not_applicable (0) is the identity.
_RANK = {Status.NOT_APPLICABLE: 0, Status.PASS: 1, Status.UNKNOWN: 2, Status.FAIL: 3}


def merge(statuses: Iterable[Status | str]) -> Status:
    """The status of several: fail beats unknown beats pass; not_applicable is the identity
    (the merge of nothing, or of only not_applicable, is not_applicable)."""
    return max((Status.parse(s) for s in statuses), key=_RANK.__getitem__, default=Status.NOT_APPLICABLE)


# The fault kinds a run can be judged for: spec.FAULTS (its FAULT_KINDS and "none") is the one
# definition; this enum names them.
Fault = enum.Enum("Fault", {name.upper().replace("-", "_"): name for name in FAULTS}, type=str)
Fault.__str__ = str.__str__  # type: ignore[method-assign]
Fault.__format__ = str.__format__  # type: ignore[method-assign]


@dataclass(frozen=True)
class Phrase:
    """A sentence or a fragment of one, not rendered yet: the check it belongs to ("*": any), its
    reason key in harness.judge.sentences' table and the facts it names, which may hold phrases
    themselves. A checker returns its facts with phrases in them; the one renderer
    (harness.judge.sentences.render) turns them into words where a result is shown. The facts
    are copied when the phrase is made: a checker that goes on filling its own facts does not
    change what an earlier phrase says."""

    cid: str
    reason: str
    values: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", dict(self.values))


@dataclass(frozen=True)
class Joined:
    """Phrases (or plain values) said one after the other, `sep` between them."""

    parts: tuple[Any, ...]
    sep: str = ""


@dataclass(frozen=True)
class CriterionResult:
    """One criterion's answer: its status, one sentence a person can act on, the evidence lines
    (`file:line: text`). `final`: a failure no later line of the run can undo (the watcher
    stops the job on it); not part of verdict.json.

    A checker returns its `reason` (the key of its sentence in harness.judge.sentences) and its
    `values` (the facts it compared, phrases among them) with `detail` empty; `lead` is a phrase
    said before the sentence (the fault a merged result of several episodes is about).
    harness.judge.sentences.render fills `detail` and turns the phrases of `values` into words,
    where the result is shown (the verdict, the watcher's stop reason). A result read back from
    verdict.json has its detail and no reason."""

    id: str
    status: Status
    detail: str = ""
    evidence: tuple[str, ...] = ()
    final: bool = False
    # the facts the checker compared (JSON values once rendered), from which its sentence is made:
    # shown in verdict.json's per-episode section, not in `criteria`
    values: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    reason: str = field(default="", compare=False)
    lead: Phrase | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.status, Status):
            object.__setattr__(self, "status", Status.parse(self.status))

    @property
    def held(self) -> bool:
        return self.status.held

    def to_json(self) -> dict:
        return {"id": self.id, "status": self.status.value, "detail": self.detail, "evidence": list(self.evidence)}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "CriterionResult":
        evidence = doc.get("evidence")
        return cls(str(doc.get("id")), Status.parse(doc.get("status")), str(doc.get("detail") or ""),
                   tuple(str(e) for e in evidence) if isinstance(evidence, list) else ())


def qualified(results: Iterable[CriterionResult]) -> bool:
    results = tuple(results)
    return bool(results) and merge(r.status for r in results).held


def _ts(value: object) -> float | None:
    from harness.vocab.dialect import parse_iso_utc  # the one reader of the harness's stamps

    return parse_iso_utc(value)


def _num(value: object) -> float | None:
    """A finite JSON number of plausible size, else None (inf, NaN, 1e308 read as not measured)."""
    return record_number(value, "record", fraction=True)


def _int(value: object) -> int | None:
    return record_number(value, "record")  # type: ignore[return-value]


def _list(value: object) -> list:
    return value if isinstance(value, list) else []


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _strs(value: object) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


@dataclass(frozen=True)
class Recovery:
    """The latency split of the recovery from one injected fault (a multi-fault plan has several;
    a phase that never happened, e.g. the load a second fault interrupted, is None)."""

    fault_index: int
    fault_at: str
    cycle: int | None
    injected_at: float | None
    detection_s: float | None
    restart_s: float | None
    restore_s: float | None
    first_step_s: float | None

    def to_json(self) -> dict:
        return {"fault_index": self.fault_index, "fault_at": self.fault_at, "cycle": self.cycle,
                "injected_at": iso_utc(self.injected_at), "detection_s": self.detection_s,
                "restart_s": self.restart_s, "restore_s": self.restore_s, "first_step_s": self.first_step_s}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Recovery":
        return cls(_int(doc.get("fault_index")) or 0, str(doc.get("fault_at") or ""), _int(doc.get("cycle")),
                   _ts(doc.get("injected_at")), _num(doc.get("detection_s")), _num(doc.get("restart_s")),
                   _num(doc.get("restore_s")), _num(doc.get("first_step_s")))


@dataclass(frozen=True)
class Metrics:
    detection_s: float | None = None
    restart_s: float | None = None
    restore_s: float | None = None
    first_step_s: float | None = None
    failure_to_first_step_s: float | None = None
    lost_iterations: int | None = None
    injected_at: float | None = None
    detected_at: float | None = None
    workers_started_at: float | None = None
    checkpoint_loaded_at: float | None = None
    first_step_at: float | None = None
    restored_iteration: int | None = None
    last_iteration_before_fault: int | None = None
    first_step_iteration: int | None = None
    evidence: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()  # what makes a value above untrustworthy (a wall-clock jump)
    recoveries: tuple[Recovery, ...] = ()  # one per injected fault, in fault order

    def to_json(self) -> dict:
        return {
            "detection_s": self.detection_s,
            "restart_s": self.restart_s,
            "restore_s": self.restore_s,
            "first_step_s": self.first_step_s,
            "failure_to_first_step_s": self.failure_to_first_step_s,
            "lost_iterations": self.lost_iterations,
            "timestamps": {
                "injected_at": iso_utc(self.injected_at),
                "failure_detected_at": iso_utc(self.detected_at),
                "workers_started_at": iso_utc(self.workers_started_at),
                "checkpoint_loaded_at": iso_utc(self.checkpoint_loaded_at),
                "first_step_at": iso_utc(self.first_step_at),
            },
            "iterations": {
                "restored": self.restored_iteration,
                "last_before_fault": self.last_iteration_before_fault,
                "first_after_restore": self.first_step_iteration,
            },
            "evidence": dict(self.evidence),
            "notes": list(self.notes),
            "warnings": list(self.warnings),
            "recoveries": [r.to_json() for r in self.recoveries],
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Metrics":
        """From verdict.json's `metrics`; a missing or mistyped value reads as not measured."""
        stamps, iterations = _map(doc.get("timestamps")), _map(doc.get("iterations"))
        return cls(
            detection_s=_num(doc.get("detection_s")), restart_s=_num(doc.get("restart_s")),
            restore_s=_num(doc.get("restore_s")), first_step_s=_num(doc.get("first_step_s")),
            failure_to_first_step_s=_num(doc.get("failure_to_first_step_s")),
            lost_iterations=_int(doc.get("lost_iterations")),
            injected_at=_ts(stamps.get("injected_at")), detected_at=_ts(stamps.get("failure_detected_at")),
            workers_started_at=_ts(stamps.get("workers_started_at")),
            checkpoint_loaded_at=_ts(stamps.get("checkpoint_loaded_at")), first_step_at=_ts(stamps.get("first_step_at")),
            restored_iteration=_int(iterations.get("restored")),
            last_iteration_before_fault=_int(iterations.get("last_before_fault")),
            first_step_iteration=_int(iterations.get("first_after_restore")),
            evidence={str(k): str(v) for k, v in _map(doc.get("evidence")).items()},
            notes=_strs(doc.get("notes")), warnings=_strs(doc.get("warnings")),
            recoveries=tuple(Recovery.from_json(r) for r in _list(doc.get("recoveries")) if isinstance(r, Mapping)),
        )


GOODPUT_PARTS = ("startup", "detection", "restart", "restore", "redone", "save_stall", "rest")
EPISODE_GOODPUT_PARTS = ("detection", "restart", "restore", "redone")


def _parts(doc: object, names: tuple[str, ...]) -> tuple[tuple[str, float | None], ...]:
    got = _map(doc)
    return tuple((name, _num(got.get(name))) for name in names)


@dataclass(frozen=True)
class EpisodeGoodput:
    """What one recovery episode cost in seconds (harness.judge.goodput; docs/goodput.md): its
    detection, restart, restore and the iterations it made the job train again, priced at
    `step_s`. A part that is None is unknown; `reason` says why."""

    number: int
    fault_at: str
    cycle: int | None
    injected_at: float | None
    badput_s: tuple[tuple[str, float | None], ...]  # EPISODE_GOODPUT_PARTS in order
    redone_iterations: int | None = None
    step_s: float | None = None
    reason: str | None = None

    def part(self, name: str) -> float | None:
        return dict(self.badput_s).get(name)

    def to_json(self) -> dict:
        return {"episode": self.number, "fault_at": self.fault_at, "cycle": self.cycle,
                "injected_at": iso_utc(self.injected_at), "badput_s": dict(self.badput_s),
                "redone_iterations": self.redone_iterations, "step_s": self.step_s, "reason": self.reason}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "EpisodeGoodput":
        reason = doc.get("reason")
        return cls(_int(doc.get("episode")) or 0, str(doc.get("fault_at") or ""), _int(doc.get("cycle")),
                   _ts(doc.get("injected_at")), _parts(doc.get("badput_s"), EPISODE_GOODPUT_PARTS),
                   _int(doc.get("redone_iterations")), _num(doc.get("step_s")),
                   reason if isinstance(reason, str) else None)


@dataclass(frozen=True)
class Goodput:
    """Productive training time over wall time, and where the rest went (harness.judge.goodput;
    docs/goodput.md). verdict.json's `goodput` holds exactly ratio, wall_s, productive_s,
    badput_s, per_episode and reason; `step_s`, `step_source`, `notes` and the baseline's own
    figures are for the report only. `reason` says why `ratio` is None (None when it is known)."""

    ratio: float | None = None
    wall_s: float | None = None
    productive_s: float | None = None
    badput_s: tuple[tuple[str, float | None], ...] = tuple((p, None) for p in GOODPUT_PARTS)
    per_episode: tuple[EpisodeGoodput, ...] = ()
    reason: str | None = None
    # for the report only (not in verdict.json, so not compared)
    step_s: float | None = field(default=None, compare=False)  # the price of one iteration
    step_source: str | None = field(default=None, compare=False)  # where it was measured
    useful_iterations: int | None = field(default=None, compare=False)
    part_reasons: tuple[tuple[str, str], ...] = field(default=(), compare=False)  # why a part is unknown
    notes: tuple[str, ...] = field(default=(), compare=False)
    baseline_ratio: float | None = field(default=None, compare=False)  # the baseline's own goodput, for comparison
    baseline_startup_s: float | None = field(default=None, compare=False)
    # where the badput parts that are intervals of the wall time lie (part, start, end; UTC):
    # start-up, every episode's detection, restart and restore, every save stall (the picture's band)
    spans: tuple[tuple[str, float, float], ...] = field(default=(), compare=False, repr=False)
    launch: tuple[float, float] | None = field(default=None, compare=False)  # the wall time's start and end (UTC)

    def part(self, name: str) -> float | None:
        return dict(self.badput_s).get(name)

    def biggest(self) -> tuple[str, float] | None:
        """The largest known badput part (the console's one line)."""
        known = [(p, v) for p, v in self.badput_s if v is not None]
        return max(known, key=lambda pv: pv[1]) if known else None

    def to_json(self) -> dict:
        return {"ratio": self.ratio, "wall_s": self.wall_s, "productive_s": self.productive_s,
                "badput_s": dict(self.badput_s), "per_episode": [e.to_json() for e in self.per_episode],
                "reason": self.reason}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Goodput":
        """From verdict.json's `goodput`; a missing or mistyped value reads as unknown, and a
        ratio outside [0, 1] as no ratio (a stranger's file)."""
        ratio = _num(doc.get("ratio"))
        reason = doc.get("reason")
        return cls(ratio if ratio is not None and 0.0 <= ratio <= 1.0 else None, _num(doc.get("wall_s")),
                   _num(doc.get("productive_s")), _parts(doc.get("badput_s"), GOODPUT_PARTS),
                   tuple(EpisodeGoodput.from_json(e) for e in _list(doc.get("per_episode")) if isinstance(e, Mapping)),
                   reason if isinstance(reason, str) else None)


@dataclass(frozen=True)
class Launcher:
    """What verdict.json's `launcher` records of the launcher that ran."""

    log_format: str | None = None
    nvrx_version: str | None = None
    exit_code: int | None = None
    utc_offset_s: float | None = None
    utc_offset_source: str | None = None

    def to_json(self) -> dict:
        return {"log_format": self.log_format, "nvrx_version": self.nvrx_version, "exit_code": self.exit_code,
                "utc_offset_s": self.utc_offset_s, "utc_offset_source": self.utc_offset_source}

    def items(self):
        """(name, value) in verdict.json's order (the report lists them)."""
        return self.to_json().items()

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Launcher":
        text = lambda v: None if v is None else str(v)  # noqa: E731
        return cls(text(doc.get("log_format")), text(doc.get("nvrx_version")), _int(doc.get("exit_code")),
                   _num(doc.get("utc_offset_s")), text(doc.get("utc_offset_source")))


@dataclass(frozen=True)
class Deadlines:
    """The deadline profile run.json declared and its seconds per section; empty when none."""

    profile: str | None = None
    seconds: tuple[tuple[str, float | None], ...] = ()

    def __bool__(self) -> bool:
        return self.profile is not None or bool(self.seconds)

    def get(self, key: str, default: Any = None) -> Any:
        return self.profile if key == "profile" else dict(self.seconds).get(key, default)

    def to_json(self) -> dict:
        return {"profile": self.profile, **dict(self.seconds)} if self else {}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Deadlines":
        if not doc:
            return cls()
        profile = doc.get("profile")
        return cls(None if profile is None else str(profile),
                   tuple((str(k), _num(v)) for k, v in doc.items() if k != "profile"))


@dataclass(frozen=True)
class BaselineRef:
    """The uninterrupted run a verdict's loss_continuity and state_equivalence were judged
    against: how it came (`ran`: the automatic twin, run first; `reused`: found in the work
    directory by its configuration hash; `given`: --baseline RUN_DIR; `none`: skipped), its
    recorded configuration hash and whether it equals this run's (None: one of them not
    recorded), why it could not be used, and why it was skipped by request."""

    run_dir: str
    how: str
    config_hash: str | None = None
    matches_run: bool | None = None
    problem: str | None = None
    skipped: str | None = None  # not judged against it, by request (verify --baseline none): why

    def to_json(self) -> dict:
        return {"run_dir": self.run_dir, "how": self.how, "config_hash": self.config_hash,
                "matches_run": self.matches_run, "problem": self.problem, "skipped": self.skipped}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "BaselineRef":
        text = lambda v: None if v is None else str(v)  # noqa: E731
        matches = doc.get("matches_run")
        return cls(str(doc.get("run_dir") or "?"), str(doc.get("how") or "?"), text(doc.get("config_hash")),
                   matches if isinstance(matches, bool) else None, text(doc.get("problem")), text(doc.get("skipped")))


@dataclass(frozen=True)
class EvidenceDigest:
    """What a verdict judged, cheaply and honestly: every entry of the run directory except the
    verdict's own outputs, walked without following a link, as (name, kind, size, mtime).
    `sha256` covers names, kinds, sizes and modification times; `sizes_sha256` names, kinds and
    sizes only (a copy that did not keep the times changes the first, not the second).
    `complete` is False when the walk stopped at its bound (harness.read.evidence)."""

    method: str
    entries: int
    bytes: int
    sha256: str
    sizes_sha256: str
    complete: bool = True

    def to_json(self) -> dict:
        return {"method": self.method, "entries": self.entries, "bytes": self.bytes, "sha256": self.sha256,
                "sizes_sha256": self.sizes_sha256, "complete": self.complete}

    @classmethod
    def from_json(cls, doc: object) -> "EvidenceDigest | None":
        """None unless every field has its type (a damaged digest proves nothing)."""
        if not isinstance(doc, Mapping):
            return None
        entries, size = _int(doc.get("entries")), _int(doc.get("bytes"))
        method, sha, sizes, complete = doc.get("method"), doc.get("sha256"), doc.get("sizes_sha256"), doc.get("complete")
        if (entries is None or size is None or not all(isinstance(v, str) for v in (method, sha, sizes))
                or not isinstance(complete, bool)):
            return None
        return cls(str(method), entries, size, str(sha), str(sizes), complete)

    def compare(self, now: "EvidenceDigest") -> str | None:
        """None when `now` is the evidence this digest describes; else one sentence of what differs."""
        if self.method != now.method:
            return f"its evidence digest was made another way ({self.method[:40]!r}), so it cannot be compared"
        if self.sha256 == now.sha256:
            return None
        if self.sizes_sha256 == now.sizes_sha256:
            return ("the run directory holds the same files with the same sizes but other modification times "
                    "(copied without keeping times, or rewritten in place)")
        return (f"the run directory changed since it was judged: {self.entries} entries, {self.bytes} bytes then; "
                f"{now.entries} entries, {now.bytes} bytes now")


@dataclass(frozen=True)
class EpisodeVerdict:
    """One recovery episode's own results (verdict.json `episodes[]`): the injection it began
    with and the episode checks as judged for it alone, with the facts each compared. A
    `superseded` check was left to a later episode and stayed out of the run's `criteria`."""

    number: int
    fault_at: str
    cycle: int | None  # the cycle the fault hit
    marker: str  # the marker's evidence line
    injected_at: str | None  # UTC ISO-8601
    criteria: tuple[CriterionResult, ...] = ()
    superseded: tuple[str, ...] = ()
    fault: str = ""  # the kind the plan scheduled for this fault (a campaign's differ per episode)
    rank: int | None = None  # the rank that injected it (the marker's)

    @property
    def status(self) -> Status:
        """The merge of this episode's own results, superseded ones left out."""
        return merge(c.status for c in self.criteria if c.id not in self.superseded)

    def to_json(self) -> dict:
        return {"episode": self.number, "fault": self.fault, "rank": self.rank, "fault_at": self.fault_at,
                "cycle": self.cycle, "marker": self.marker, "injected_at": self.injected_at,
                "criteria": [{**c.to_json(), "values": dict(c.values), "superseded": c.id in self.superseded}
                             for c in self.criteria]}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "EpisodeVerdict":
        items = [c for c in _list(doc.get("criteria")) if isinstance(c, Mapping)]
        results = tuple(dataclasses.replace(CriterionResult.from_json(c), values=dict(_map(c.get("values"))))
                        for c in items)
        return cls(_int(doc.get("episode")) or 0, str(doc.get("fault_at") or ""), _int(doc.get("cycle")),
                   str(doc.get("marker") or ""),
                   doc.get("injected_at") if isinstance(doc.get("injected_at"), str) else None, results,
                   tuple(str(c.get("id")) for c in items if c.get("superseded") is True),
                   str(doc.get("fault") or ""), _int(doc.get("rank")))


@dataclass(frozen=True)
class Verdict:
    run_dir: str
    fault: str  # a Fault's value
    fault_how: str
    qualified: bool
    criteria: tuple[CriterionResult, ...]
    metrics: Metrics
    launcher: Launcher | None = None  # None: verdict.json's `launcher` is {}
    deadlines: Deadlines = field(default_factory=Deadlines)
    notes: tuple[str, ...] = ()
    verified_at: str | None = None
    baseline: BaselineRef | None = None  # verdict.json's `baseline`, present only when one was used
    # what judged it (None / empty: a verdict.json of a release before verdicts recorded them)
    suite_version: str | None = None
    criteria_set: tuple[str, ...] = ()  # the criteria ids the suite judged this run with
    evidence_digest: EvidenceDigest | None = None
    # one entry per recovery episode (per injection), in marker order; `criteria` is their merge
    episodes: tuple[EpisodeVerdict, ...] = ()
    # productive training time over wall time and the badput split (harness.judge.goodput); None: not computed
    goodput: Goodput | None = None
    # a campaign's replay key (verdict.json `campaign`, present only for a campaign): its seed, its
    # number of faults and its schedule as run.json records them (docs/campaigns.md)
    campaign: Mapping[str, Any] | None = None
    # what timeline.png shows (harness.vocab.picture_data; drawn by harness.report.picture); not part of verdict.json
    picture: "TimelinePicture | None" = field(default=None, compare=False, repr=False)

    @property
    def status(self) -> Status:
        """The merge of every criterion (not_applicable when there are none)."""
        return merge(c.status for c in self.criteria)

    def criterion(self, cid: str) -> CriterionResult:
        for c in self.criteria:
            if c.id == cid:
                return c
        raise KeyError(cid)

    @property
    def exit_status(self) -> int:
        from harness.vocab.exitcodes import ExitStatus

        return ExitStatus.of_verdict(self.qualified)

    def to_json(self) -> dict:
        doc = self._to_json()
        if self.baseline is not None:
            doc["baseline"] = self.baseline.to_json()
        if self.goodput is not None:
            doc["goodput"] = self.goodput.to_json()
        if self.campaign is not None:
            doc["campaign"] = dict(self.campaign)
        return doc

    def _to_json(self) -> dict:
        return {
            "schema": SCHEMA,
            "run_dir": self.run_dir,
            "fault": self.fault,
            "fault_source": self.fault_how,
            "qualified": self.qualified,
            "criteria": [c.to_json() for c in self.criteria],
            "metrics": self.metrics.to_json(),
            "launcher": self.launcher.to_json() if self.launcher is not None else {},
            "deadlines": self.deadlines.to_json(),
            "notes": list(self.notes),
            "verified_at": self.verified_at,
            "suite_version": self.suite_version,
            "criteria_set": list(self.criteria_set),
            "evidence_digest": self.evidence_digest.to_json() if self.evidence_digest is not None else None,
            "episodes": [e.to_json() for e in self.episodes],
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Verdict":
        """From verdict.json (or `to_json()`): `from_json(d).to_json() == d` for every verdict
        this suite writes. A value of the wrong type reads as missing; `qualified` is the
        stored flag (a reader that must not trust an edited file recomputes it with
        `qualified(verdict.criteria)`)."""
        criteria = tuple(CriterionResult.from_json(c) for c in _list(doc.get("criteria")) if isinstance(c, Mapping))
        launcher = _map(doc.get("launcher"))
        stated = doc.get("qualified")
        return cls(
            run_dir=str(doc.get("run_dir", "?")),
            fault=str(doc.get("fault") or "?"),
            fault_how=str(doc.get("fault_source") or ""),
            qualified=stated if isinstance(stated, bool) else qualified(criteria),
            criteria=criteria,
            metrics=Metrics.from_json(_map(doc.get("metrics"))),
            launcher=Launcher.from_json(launcher) if launcher else None,
            deadlines=Deadlines.from_json(_map(doc.get("deadlines"))),
            notes=_strs(doc.get("notes")),
            verified_at=None if doc.get("verified_at") is None else str(doc.get("verified_at")),
            baseline=BaselineRef.from_json(doc["baseline"]) if isinstance(doc.get("baseline"), Mapping) else None,
            suite_version=doc.get("suite_version") if isinstance(doc.get("suite_version"), str) else None,
            criteria_set=_strs(doc.get("criteria_set")),
            evidence_digest=EvidenceDigest.from_json(doc.get("evidence_digest")),
            episodes=tuple(EpisodeVerdict.from_json(e) for e in _list(doc.get("episodes")) if isinstance(e, Mapping)),
            goodput=Goodput.from_json(doc["goodput"]) if isinstance(doc.get("goodput"), Mapping) else None,
            campaign=_campaign(doc.get("campaign")),
        )

    def stale_reasons(self, required: Iterable[str], suite_version: str) -> tuple[str, ...]:
        """Why this verdict (read from verdict.json) cannot stand for what this suite would say:
        no record of what judged it (an earlier release), another suite version, a criterion
        this suite judges every run with missing, results that are not the recorded set, or a
        `qualified` flag its own criteria contradict. Empty: current (which is still no proof:
        a file can be edited; only re-judging the evidence is)."""
        reasons: list[str] = []
        if self.suite_version is None or not self.criteria_set:
            reasons.append("it records no suite version or criteria set (written by a release before verdicts "
                           "recorded what judged them)")
        elif self.suite_version != suite_version:
            reasons.append(f"it was judged by nvrx-qual {self.suite_version[:40]}, not by this {suite_version}")
        ids = [c.id for c in self.criteria]
        missing = [cid for cid in required if cid not in ids]
        if missing:
            reasons.append(f"it has no result for {', '.join(missing)}, which every run is judged by now")
        if self.criteria_set and sorted(set(ids)) != sorted(set(self.criteria_set)):
            reasons.append("its criteria are not the set it records judging with")
        if self.qualified != qualified(self.criteria):
            reasons.append(f"it says qualified: {str(self.qualified).lower()}, but its own criteria say otherwise")
        return tuple(reasons)


def _campaign(value: object) -> dict | None:
    """verdict.json's `campaign`: {"seed": int, "faults": int, "schedule": [...]}; None when absent
    or not an object. Numbers of the wrong type or size read as null."""
    if not isinstance(value, Mapping):
        return None
    return {"seed": _int(value.get("seed")), "faults": _int(value.get("faults")),
            "schedule": [dict(e) for e in _list(value.get("schedule")) if isinstance(e, Mapping)]}


def verdict_json(verdict: Verdict) -> str:
    return json.dumps(verdict.to_json(), indent=2, ensure_ascii=False) + "\n"
