"""The one vocabulary of a verdict: what a criterion says (`Status`, `CriterionResult`), which
fault a run was judged for (`Fault`), what the recovery cost (`Metrics`, `Recovery`) and the
whole verdict of one run (`Verdict`), with `to_json` / `from_json` for verdict.json
(docs/contracts.md; the JSON is exactly today's schema, round trip included).

Statuses merge as Jepsen's checkers do: fail beats unknown beats pass, and not_applicable is
the identity (a criterion whose premise is absent says nothing either way). A run qualifies
when the merge of its criteria is pass or not_applicable, and it has criteria at all.

Pure values: nothing here reads a file or renders.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from harness.events import iso_utc
from harness.spec import FAULTS

if TYPE_CHECKING:
    from harness.picture import TimelinePicture

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
class CriterionResult:
    """One criterion's answer: its status, one sentence a person can act on, the evidence lines
    (`file:line: text`). `final`: a failure no later line of the run can undo (the watcher
    stops the job on it); not part of verdict.json."""

    id: str
    status: Status
    detail: str
    evidence: tuple[str, ...] = ()
    final: bool = False

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
    from harness.history import parse_iso_utc  # the one reader of the harness's stamps

    return parse_iso_utc(value)


_MAX_NUMBER = 2 ** 53  # every count, code, iteration or second a verdict records is far below


def _num(value: object) -> float | None:
    """A finite JSON number of plausible size, else None (inf, NaN, 1e308 read as not measured)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if -_MAX_NUMBER <= value <= _MAX_NUMBER else None  # NaN fails both comparisons


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and abs(value) <= _MAX_NUMBER else None


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
    # what timeline.png shows (harness.picture); not part of verdict.json
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
        from harness.exitcodes import ExitStatus

        return ExitStatus.of_verdict(self.qualified)

    def to_json(self) -> dict:
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
        )


def verdict_json(verdict: Verdict) -> str:
    return json.dumps(verdict.to_json(), indent=2, ensure_ascii=False) + "\n"
