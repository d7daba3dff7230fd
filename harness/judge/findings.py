"""Known defects of the software under test, keyed by version and configuration.

A run that does not qualify because of a defect somebody already found (and documented in
docs/) should say so, and say which configuration qualifies, instead of leaving the user to
rediscover it. Each row of KNOWN_DEFECTS names the component and the versions it was seen in,
the configuration it needs, and the failure it produces (a criterion's status and words); a
verdict that shows that failure in that configuration gets the row as a KnownMatch:
"known defect in Megatron 0.19.2: ...; qualifying configuration: ...". A row whose failure the
criteria alone cannot tell apart (a worker that could not listen on its port fails the same
criteria as any extra failed cycle) also names the root cause the cross-rank triage must have
found (`root`); without a triage such a row never matches.

A match is advice, never a verdict: the criteria still fail, the run is still NOT QUALIFIED.
Pure: a Verdict, the run's RunConfig and its Triage in, matches out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from harness.vocab.events import RunConfig
from harness.vocab.verdict import Status, Verdict

if TYPE_CHECKING:
    from harness.judge.triage.model import Triage


@dataclass(frozen=True)
class KnownDefect:
    id: str
    component: str  # "Megatron" (megatron-core) or "NVRx"
    versions: tuple[str, ...]  # version prefixes it was seen in ("0.19.": every 0.19.x)
    configuration: str  # the configuration that meets it, in words
    defect: str  # what goes wrong, in one sentence
    qualifying: str  # the configuration that qualifies instead
    doc: str  # where it is written up, with the evidence
    applies: Callable[[RunConfig], bool]  # the run's configuration is the defect's
    shows: Callable[[Verdict], bool]  # the verdict shows the defect's failure
    # the triage's root cause is the defect's (None: the verdict alone tells; else no triage, no match)
    root: "Callable[[Triage], bool] | None" = None

    def version_of(self, run: RunConfig) -> str | None:
        return run.megatron_version if self.component == "Megatron" else run.nvrx_version

    def version_matches(self, version: str | None) -> bool:
        """Unknown versions match (the run did not record one; the match says so)."""
        return version is None or any(version.startswith(p) for p in self.versions)


@dataclass(frozen=True)
class KnownMatch:
    defect: KnownDefect
    version: str | None  # the version the run recorded; None: not recorded

    @property
    def where(self) -> str:
        """'known defect in Megatron 0.19.2' (the versions it was seen in when the run recorded none)."""
        d = self.defect
        seen = ", ".join(p.rstrip(".") + (".x" if p.endswith(".") else "") for p in d.versions)
        return (f"known defect in {d.component} {self.version}" if self.version
                else f"known defect in {d.component} {seen} (this run did not record its {d.component} version)")

    @property
    def sentence(self) -> str:
        d = self.defect
        return f"{self.where}: {d.defect}; qualifying configuration: {d.qualifying} (see {d.doc})"

    @property
    def brief(self) -> str:
        """The defect and the configuration that meets it, without the explanation: for a first line."""
        return f"a {self.where}, met by {self.defect.configuration}"


def _failed(verdict: Verdict, cid: str, *words: str) -> bool:
    for c in verdict.criteria:
        if c.id == cid and c.status == Status.FAIL and all(w in c.detail for w in words):
            return True
    return False


def _torch_adam(run: RunConfig) -> bool:
    """Megatron's optimizer falls back to torch's Adam without Transformer Engine and apex."""
    return run.transformer_engine is False and run.apex in (False, None)


def _has_arg(run: RunConfig, flag: str) -> bool:
    return flag in run.extra_args or flag in run.argv


def _any_failed(verdict: Verdict) -> bool:
    return any(c.status == Status.FAIL for c in verdict.criteria)


def _master_port_taken(found: "Triage") -> bool:
    """The root cause is a worker's TCPStore that could not listen (torch's DistNetworkError,
    `name: EADDRINUSE`), not the fault the harness injected."""
    text = found.exception or ""
    return not found.injected and "EADDRINUSE" in text and "DistNetworkError" in text


# The row a test-suite launch spoiled by chance is relaunched for (pytest_nvrx_qual.runs).
MASTER_PORT_RACE = "torch-master-port-taken"

KNOWN_DEFECTS: tuple[KnownDefect, ...] = (
    KnownDefect(
        id="megatron-distopt-adam-step",
        component="Megatron",
        versions=("0.19.",),
        configuration="the distributed optimizer (--use-distributed-optimizer) on torch's Adam (no Transformer "
                      "Engine, no apex)",
        defect="the distributed optimizer on torch's Adam does not restore Adam's step counter (the load "
               "template's step is copied over the restored one and shared by every parameter), so Adam's bias "
               "correction after the restore differs from an uninterrupted run's",
        qualifying="Megatron's plain optimizer (--distributed-optimizer 0, i.e. without "
                   "--use-distributed-optimizer), or Transformer Engine / apex's fused Adam",
        doc="docs/megatron-cpu.md#what-it-found",
        applies=lambda run: run.distributed_optimizer is True and _torch_adam(run)
        and not _has_arg(run, "--dist-ckpt-optim-fully-reshardable"),
        shows=lambda v: _failed(v, "optimizer_state", "Adam's step counter")
        or _failed(v, "loss_continuity"),
    ),
    KnownDefect(
        id="megatron-fully-reshardable-keyerror",
        component="Megatron",
        versions=("0.19.",),
        configuration="--dist-ckpt-optim-fully-reshardable with the distributed optimizer on torch's Adam",
        defect="--dist-ckpt-optim-fully-reshardable cannot restore on torch's Adam: the load raises "
               "KeyError: 'step' in _set_main_param_and_optimizer_states",
        qualifying="leave out --dist-ckpt-optim-fully-reshardable (the default dp_reshardable format) with the "
                   "plain optimizer (--distributed-optimizer 0)",
        doc="docs/megatron-cpu.md#what-it-found",
        applies=lambda run: _has_arg(run, "--dist-ckpt-optim-fully-reshardable") and _torch_adam(run),
        shows=lambda v: any(c.id in ("optimizer_reload", "later_checkpoint", "replacement_cycle", "clean_finish")
                            and c.status == Status.FAIL for c in v.criteria),
    ),
    KnownDefect(
        id="megatron-tracker-written-in-place",
        component="Megatron",
        versions=("0.19.",),
        configuration="a stop of rank 0 while its save finishes (an in-save fault on the rank that writes "
                      "latest_checkpointed_iteration.txt, the moment it writes it)",
        defect="Megatron writes latest_checkpointed_iteration.txt in place (opened for writing, then written) and "
               "ends with exit status 0 on a tracker it cannot read ('ERROR: Invalid metadata file ... Exiting'): a "
               "stop between the two leaves the tracker empty, and the replacement workers end at once while the "
               "launcher reports success, without training",
        qualifying="none with this Megatron (a tracker written to a temporary file and renamed could not be left "
                   "empty); a fault that misses the tracker's write, after-commit or on a rank other than 0, recovers",
        doc="docs/megatron-cpu.md#what-it-found",
        applies=lambda run: run.megatron_version is not None,  # Megatron's own checkpointing wrote the tracker
        shows=lambda v: _failed(v, "pre_fault_checkpoint", "latest_checkpointed_iteration.txt holds ''",
                                "not an iteration number"),
    ),
    KnownDefect(
        id=MASTER_PORT_RACE,
        component="NVRx",
        versions=("0.4.", "0.7."),
        configuration="NVRx's c10d rendezvous, whose rank-0 agent picks the workers' master port each round "
                      "with torch's get_free_port (a bind to port 0, released at once) instead of sharing its own "
                      "store",
        defect="rank 0's worker could not listen on the master port torch elastic picked for it (DistNetworkError, "
               "EADDRINUSE): another process took the port between the agent's pick and the worker's bind, so a "
               "cycle failed that no fault caused and the launcher restarted once more",
        qualifying="the same one, run again (the race is chance, likelier with many jobs or gloo process groups "
                   "binding ports on one host)",
        doc="docs/nvrx.md#the-master-port-race",
        applies=lambda run: True,
        shows=_any_failed,
        root=_master_port_taken,
    ),
)


def known_defects(verdict: Verdict, run: RunConfig, table: tuple[KnownDefect, ...] = KNOWN_DEFECTS, *,
                  triage: "Triage | None" = None) -> tuple[KnownMatch, ...]:
    """The rows of the table whose configuration and version this run has and whose failure
    its verdict shows (and, for a row with a `root`, whose root cause its triage found);
    nothing for a qualified run."""
    if verdict.qualified:
        return ()
    out = []
    for defect in table:
        version = defect.version_of(run)
        if defect.root is not None and (triage is None or not defect.root(triage)):
            continue
        if defect.version_matches(version) and defect.applies(run) and defect.shows(verdict):
            out.append(KnownMatch(defect, version))
    return tuple(out)


def markdown(matches: tuple[KnownMatch, ...]) -> str:
    """The report.md section (empty without a match)."""
    if not matches:
        return ""
    lines = ["## Known defect", ""]
    lines += [f"- {m.sentence}." for m in matches]
    lines += ["", "The run is still not qualified: a known defect is a finding about the software under test, "
              "not a pass."]
    return "\n".join(lines) + "\n"
