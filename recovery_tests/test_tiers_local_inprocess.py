"""Megatron's local checkpoints (NVRx's LocalCheckpointManager with replication) and NVRx's
in-process restart, judged on built run directories (harness.vocab.tiers, docs/tiers.md). Neither
runs on megatron-cpu (tiers.CPU_REFUSALS), so the runs are rundirs' built ones with the exact
lines Megatron 0.19 and NVRx 0.7.0 print for them put in:

- local: Megatron's `saving checkpoint at iteration N to <local dir> in torch format` and
  `successfully saved local checkpoint from iteration N`, NVRx's `Renaming <f>.dirty.pt to
  <f>.pt` (local_manager.py), `Successfully saved local checkpoint from iteration N` and
  `Failure during saving local checkpoint ...` (base_manager.py finalize_fn), and its DEBUG
  `Finish loading (N, R, '')` (base_manager.py _load_fn, one per shard a rank reads from its
  own local directory: its own, or a replica it then sends to R);
- in-process: the Wrapper's `[<UTC>] rank=R fn_ex|term_ex|restart_ex|finalize_ex: ...`
  (inprocess/wrap.py through utils.log_exc, in NVRx's log format), then Megatron's reload.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from harness.vocab import events as ev
from harness.vocab import tiers
from harness.judge.criteria import FAIL, PASS
from harness.read.history import match_rule, read_history
from harness.report.verify import verify_run
from recovery_tests import rundirs
from recovery_tests.rundirs import Scenario

LOCAL_DIR = "/local_nvme/ckpt"
NVRX = "2026-11-29 17:32:04,{ms:03d} [{level}] [vm] [workload:{rank}({rank}) infra:{rank}({rank})] wrap.py:{line} "


def _criteria(run_dir: Path) -> dict:
    return {c.id: c for c in verify_run(run_dir).criteria}


def _edit(log: Path, after: str | None, lines: list[str], *, drop: tuple[str, ...] = (),
          replace: tuple[tuple[str, str], ...] = ()) -> None:
    """Insert `lines` after the first line holding `after` (None: nowhere), drop lines holding
    any of `drop`, and apply `replace` to every line."""
    out, done = [], after is None
    for line in log.read_text(errors="surrogateescape").split("\n"):
        if any(d in line for d in drop):
            continue
        for a, b in replace:
            line = line.replace(a, b)
        out.append(line)
        if not done and after in line:
            out.extend(lines)
            done = True
    assert done, f"{after!r} not in {log}"
    log.write_text("\n".join(out), errors="surrogateescape")


def _args(log: Path, **values: object) -> None:
    _edit(log, "  load ....", [f"0: {rundirs._arg(k, v)}" for k, v in values.items()])


# ---------------------------------------------------------------- local checkpoints


def _local_run(tmp_path: Path, *, validated: bool = True, failed: bool = False, load: int | None = 11,
               copies: tuple[tuple[int, int], ...] = ((0, 0), (0, 1))) -> Path:
    """Persistent saves every 5, the fault after persistent 10; a local save of iteration 11
    (replication factor 2: each rank holds its own shard and its peer's) before the fault; the
    replacement loads local `load` (None: keeps persistent 10), reading `copies` ((reader, owner))."""
    run = rundirs.build(tmp_path / "run", Scenario(save_interval=5, fault_at=10)).run_dir
    c0, c1 = run / "logs/train_cycle_cycle0.log", run / "logs/train_cycle_cycle1.log"
    for log in (c0, c1):
        _args(log, non_persistent_ckpt_type="local", non_persistent_local_ckpt_dir=LOCAL_DIR, replication=True)
    save = [f"0: [2026-11-29 17:32:04.140000] saving checkpoint at iteration      11 to {LOCAL_DIR} in torch format"]
    for rank in (0, 1):
        for owner in (rank, 1 - rank):
            f = f"{LOCAL_DIR}/iter_0000011_{owner}_local"
            save.append(f"{rank}: INFO:root:Renaming {f}.dirty.pt to {f}.pt")
    if failed:
        save.append("0: nvidia_resiliency_ext.checkpointing.local.ckpt_managers.base_manager.CheckpointingException: "
                    "Failure during saving local checkpoint from iteration 11 (last valid iteration is -1)")
    elif validated:
        save += [f"{rank}: INFO:root:Successfully saved local checkpoint from iteration 11" for rank in (0, 1)]
        save.append("0:   [2026-11-29 17:32:04.145000] successfully saved local checkpoint from iteration      11")
    _edit(c0, "iteration       11/", save)
    if load is not None:
        read = [f"{reader}: DEBUG:nvidia_resiliency_ext.checkpointing.local.ckpt_managers.base_manager:Finish loading "
                f"({load}, {owner}, '')" for reader, owner in copies]
        _edit(c1, "FT: initialized", read, drop=(" loading distributed checkpoint from",),
              replace=(("] at iteration 10", f"] at iteration {load}"),))
    return run


def test_megatrons_and_nvrxs_local_lines_are_read():
    for line, kind in [
        ("  [2026-11-29 17:32:04.145000] successfully saved local checkpoint from iteration      11", ev.LocalSaveCommitted),
        ("INFO:root:Successfully saved local checkpoint from iteration 11", ev.LocalSaveValidated),
        ("CheckpointingException: Failure during saving local checkpoint from iteration 2 (last valid iteration is -1)",
         ev.LocalSaveFailed),
        (f"INFO:root:Renaming {LOCAL_DIR}/iter_0000011_1_local.dirty.pt to {LOCAL_DIR}/iter_0000011_1_local.pt",
         ev.LocalCopyWritten),
        ("DEBUG:nvidia_resiliency_ext.checkpointing.local.ckpt_managers.base_manager:Finish loading (11, 1, '')",
         ev.LocalCopyRead),
        (f"INFO:root:File {LOCAL_DIR}/iter_0000011_1_local.pt does not exist!", ev.LocalCopyMissing),
        ("NoReplicasAvailableError: No replicated copies for id=(11, 1, '') found!", ev.LocalCopyMissing),
    ]:
        rule, _m = match_rule(line)
        assert rule is not None and rule.event is kind, (line, rule)


def test_a_local_restore_from_a_peers_replica_names_the_copies_and_passes(tmp_path):
    run = _local_run(tmp_path)
    tl = read_history(run)
    saves = tiers.local_saves(tl, 0)
    assert saves.newest == 11 and saves.holders[(11, 1)] == (0, 1)
    replacement = next(s for s in tl.starts if s.cycle == 1)
    assert tiers.loaded(replacement).tier == tiers.LOCAL
    reload = _criteria(run)["optimizer_reload"]
    assert reload.status == PASS, reload.detail
    assert "loaded local checkpoint 11" in reload.detail
    assert "rank 0's shard from its own copy; rank 1's shard from rank 0's replica" in reload.detail, reload.detail
    assert any("Finish loading (11, 1" in e for e in reload.evidence), reload.evidence


def test_a_local_restore_without_nvrxs_debug_lines_says_which_copy_is_unknown(tmp_path):
    reload = _criteria(_local_run(tmp_path, copies=()))["optimizer_reload"]
    assert reload.status == PASS and "--logging-level 10" in reload.detail, reload.detail


def test_a_local_checkpoint_nvrx_never_validated_fails(tmp_path):
    reload = _criteria(_local_run(tmp_path, validated=False))["optimizer_reload"]
    assert reload.status == FAIL and reload.final, reload.detail
    assert "whose save NVRx never validated" in reload.detail and "#5281" in reload.detail
    assert "rank 1: 0, 1" in reload.detail, reload.detail  # who held rank 1's shard


def test_a_local_checkpoint_whose_save_failed_fails_quoting_nvrx(tmp_path):
    reload = _criteria(_local_run(tmp_path, failed=True))["optimizer_reload"]
    assert reload.status == FAIL, reload.detail
    assert "Failure during saving local checkpoint from iteration 11 (last valid iteration is -1)" in reload.detail


def test_a_persistent_restore_older_than_the_newest_local_one_fails_naming_both(tmp_path):
    reload = _criteria(_local_run(tmp_path, load=None))["optimizer_reload"]
    assert reload.status == FAIL and reload.final, reload.detail
    assert "restored persistent checkpoint 10" in reload.detail and "older than local checkpoint 11" in reload.detail


# ---------------------------------------------------------------- in-process restart


def _wrapper(rank: int, name: str, text: str, ms: int, level: str = "INFO", line: int = 628) -> str:
    return (f"{rank}: " + NVRX.format(ms=ms, level=level, rank=rank, line=line)
            + f"[2026-11-29 16:32:04.{ms:03d}000] rank={rank} {name}: {text}")


def _inprocess_run(tmp_path: Path, *, restarts: int = 1, reload: int | None = 10, limit: int = 3) -> Path:
    """An uninterrupted run (one launcher cycle) whose rank 1 raised after checkpoint 10 and
    NVRx's Wrapper restarted `restarts` times inside the same processes; Megatron then reloaded
    `reload` (None: found nothing, a start from random)."""
    faulted = rundirs.build(tmp_path / "faulted", Scenario(fault="exception", fault_at=10)).run_dir
    run = rundirs.build(tmp_path / "run", Scenario(fault="none")).run_dir
    marker = json.loads((faulted / "fault_injected.json").read_text())
    marker["tracker"] = str(run / "checkpoints/latest_checkpointed_iteration.txt")
    (run / "fault_injected.json").write_text(json.dumps(marker))
    spec = json.loads((run / "run.json").read_text())
    spec["spec"]["fault"] = "exception"
    (run / "run.json").write_text(json.dumps(spec))
    log = run / "logs/train_cycle_cycle0.log"
    _args(log, inprocess_restart=True, inprocess_max_iterations=limit)
    lines = ["1: [nemesis] rank 1 injecting None after checkpoint iteration 10 (baseline 0)",
             _wrapper(1, "fn_ex", "RuntimeError('nemesis: exception in the training step')", 200, "ERROR", 582)]
    for n in range(restarts):
        for rank in (0, 1):
            lines.append(_wrapper(rank, "term_ex", "RankShouldRestart('Interruption.EXCEPTION')", 300 + n, "WARNING", 598))
            lines.append(_wrapper(rank, "restart_ex", "HealthCheckPassed()", 400 + n))
    ckpt = run / "checkpoints"
    if reload is None:
        lines += [f"0: WARNING: could not find the metadata file {ckpt}/latest_checkpointed_iteration.txt",
                  "0:     will not load any checkpoints and will start from random"]
    else:
        lines += [f"0:  loading distributed checkpoint from {ckpt} at iteration {reload}",
                  "0: INFO:megatron.core.optimizer.distrib_optimizer:Loading distributed optimizer sharded state of "
                  "type dp_reshardable",
                  f"0:   successfully loaded checkpoint from {ckpt} [ t 1/1, gtp_remat 1/1, p 1/1 ] at iteration {reload}",
                  "0: [after model, optimizer, and learning rate scheduler are built] datetime: 2026-11-29 17:32:05.100000 "]
    _edit(log, "successfully saved checkpoint from iteration      10", lines)
    shutil.rmtree(faulted)
    return run


def test_nvrxs_wrapper_lines_are_read_with_their_own_utc_stamp():
    rule, m = match_rule(_wrapper(1, "restart_ex", "HealthCheckPassed()", 400).split(": ", 1)[1])
    assert rule is not None and rule.event is ev.InprocessEvent and m.group("name") == "restart_ex"


def test_an_in_process_restart_is_told_from_a_launcher_restart_and_passes(tmp_path):
    run = _inprocess_run(tmp_path)
    tl = read_history(run)
    ip = tiers.inprocess(tl.starts[0])
    assert ip is not None and ip.restarts == 1 and ip.reload.iteration == 10 and ip.max_iterations == 3
    results = _criteria(run)
    cycle = results["replacement_cycle"]
    assert cycle.status == PASS, cycle.detail
    assert "in-process restart, not a launcher restart" in cycle.detail and "pid 17412" in cycle.detail, cycle.detail
    assert "RuntimeError('nemesis: exception in the training step')" in cycle.detail
    reload = results["optimizer_reload"]
    assert reload.status == PASS and "loaded checkpoint 10" in reload.detail and "in-process" in reload.detail, \
        reload.detail
    # the restarted function's own lines (after the first restart, in the same cycle's log) are the
    # replacement the later checks judge: its saves, its optimizer record, its end
    for cid in ("later_checkpoint", "optimizer_state", "clean_finish"):
        assert results[cid].status == PASS, (cid, results[cid].detail)
    verdict = verify_run(run)
    assert verdict.qualified
    # the latency split of an in-process restart: the Wrapper's own UTC stamps, then the model built
    m = verdict.metrics
    assert (m.detection_s, m.restart_s, m.restore_s) == (0.01, 0.2, 0.7), m.to_json()
    assert m.lost_iterations is None and any("in-process restart" in n for n in m.notes)
    assert (m.recoveries[0].detection_s, m.recoveries[0].restart_s) == (0.01, 0.2)


def test_an_in_process_restart_that_starts_over_fails(tmp_path):
    reload = _criteria(_inprocess_run(tmp_path, reload=None))["optimizer_reload"]
    assert reload.status == FAIL and reload.final and "#2774" in reload.detail, reload.detail
    reload = _criteria(_inprocess_run(tmp_path / "zero", reload=0))["optimizer_reload"]
    assert reload.status == FAIL and "started over from iteration 0" in reload.detail, reload.detail


def test_in_process_restarts_past_the_limit_fail(tmp_path):
    reload = _criteria(_inprocess_run(tmp_path, restarts=4, limit=3))["optimizer_reload"]
    assert reload.status == FAIL and "past --inprocess-max-iterations 3" in reload.detail, reload.detail


def test_a_failed_in_process_restart_recovered_by_the_launcher_is_named_a_launcher_restart(tmp_path):
    run = rundirs.build(tmp_path / "run", Scenario(fault="exception", fault_at=10)).run_dir
    _edit(run / "logs/train_cycle_cycle0.log", "injecting None after checkpoint", [
        _wrapper(1, "fn_ex", "RuntimeError('nemesis: exception in the training step')", 200, "ERROR", 582),
        _wrapper(1, "finalize_ex", "RuntimeError('CUDA is not initialized')", 300, "ERROR", 607)])
    cycle = _criteria(run)["replacement_cycle"]
    assert cycle.status == PASS, cycle.detail
    assert "did not recover it first" in cycle.detail and "finalize_ex: RuntimeError('CUDA is not initialized')" \
        in cycle.detail and "launcher restart" in cycle.detail, cycle.detail
