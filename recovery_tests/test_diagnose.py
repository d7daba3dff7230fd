"""Cross-rank failure triage (harness/triage) on realistic multi-rank logs.

The logs are built here in the shapes the real tools print: Megatron's arguments table and
stamped lines, torch's `[rankN]: ` tracebacks and ProcessGroupNCCL watchdog lines (glog
stamps), NVRx's per-cycle `<rank>: ` files, 0.4.1's `[default<N>]:` console capture with the
harness's ISO prefix, torch elastic's per-rank logs and ChildFailedError summary, Slurm's
.err/.out. Real NVRx launcher output lives in data/samples/.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tracemalloc
from datetime import timedelta
from pathlib import Path

import pytest

from fixtures.processes import run_in_session

from harness.cli import diagnose as cmd_diagnose
from harness.report.diagnosis import render_markdown
from harness.judge.triage import Triage, diagnose
from harness.judge.triage import scan
from harness.read import history

DATA = Path(__file__).parent / "data" / "samples"  # real NVRx launcher output (see its README.md)
MEGATRON = "/workspace/Megatron-LM"

# ----------------------------------------------------------------------------- log builders


def write(run: Path, rel: str, lines: list[str] | list[bytes], *, newline_at_end: bool = True) -> Path:
    path = run / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    chunks = [line if isinstance(line, bytes) else line.encode() for line in lines]
    data = b"\n".join(chunks) + (b"\n" if newline_at_end else b"")
    path.write_bytes(data)
    return path


def write_json(run: Path, rel: str, value: dict) -> None:
    (run / rel).write_text(json.dumps(value))


SHAPE_8 = dict(
    micro_batch_size=1, global_batch_size=32, seq_length=4096, tensor_model_parallel_size=2,
    pipeline_model_parallel_size=2, context_parallel_size=1, data_parallel_size=2, world_size=8,
    num_attention_heads=32, num_layers=24,
)  # fmt: skip


def args_table(values: dict) -> list[str]:
    """Megatron's `_print_args`, with rows that mention nccl (not failures)."""
    rows = {
        "distributed_backend": "nccl", "nccl_communicator_config_path": "None", "train_iters": 100,
        "save_interval": 5, "no_load_optim": False, "lr": 0.0001, "bf16": True, **values,
    }  # fmt: skip
    lines = ["  {} {} {}".format(k, "." * (48 - len(k)), v) for k, v in rows.items()]
    return [
        "------------------------ arguments ------------------------",
        *sorted(lines, key=str.lower),
        "-------------------- end of arguments ---------------------",
    ]


def tb_lines(frames: list[tuple[str, int, str, str]], exception: str) -> list[str]:
    out = ["Traceback (most recent call last):"]
    for path, line, fn, src in frames:
        out += [f'  File "{path}", line {line}, in {fn}', f"    {src}", "    " + "^" * len(src)]
    out.append(exception)
    return out


OOM_BACKWARD_FRAMES = [
    (f"{MEGATRON}/pretrain_gpt.py", 324, "<module>", "pretrain("),
    (f"{MEGATRON}/megatron/training/training.py", 790, "pretrain", "iteration, num_floating_point_operations_so_far = train("),
    (f"{MEGATRON}/megatron/training/training.py", 2305, "train", ") = train_step("),
    (f"{MEGATRON}/megatron/training/training.py", 1420, "train_step", "losses_reduced = forward_backward_func("),
    (f"{MEGATRON}/megatron/core/pipeline_parallel/schedules.py", 1980,
     "forward_backward_pipelining_without_interleaving", "input_tensor_grad = backward_step("),
    (f"{MEGATRON}/megatron/core/pipeline_parallel/schedules.py", 412, "backward_step",
     "custom_backward(output_tensor[0], output_tensor_grad[0])"),
    (f"{MEGATRON}/megatron/core/pipeline_parallel/schedules.py", 160, "custom_backward",
     "Variable._execution_engine.run_backward("),
]  # fmt: skip


def oom_message(gpu: int, tried: str = "2.00 GiB") -> str:
    return (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried}. GPU {gpu} has a total capacity "
        "of 79.11 GiB of which 1.23 GiB is free. Including non-PyTorch memory, this process has 77.87 GiB memory "
        "in use. Of the allocated memory 74.52 GiB is allocated by PyTorch, and 1.85 GiB is reserved by PyTorch "
        "but unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
        "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


def nccl_watchdog(rank: int, stamp: str) -> list[str]:
    """What a rank blocked in an all-reduce with a dead peer prints (torch >= 2.4);
    `stamp` is glog's `MMDD HH:MM:SS.fffffffff`."""
    work = "WorkNCCL(SeqNum=1873, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000)"
    p = f"[rank{rank}]:"
    return [
        f"{p}[E{stamp} ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught collective operation timeout: "
        f"{work} ran for 600083 milliseconds before timing out.",
        f"{p}[E{stamp} ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank {rank}] Exception (either an "
        "error or timeout) detected by watchdog at work: 1873, last enqueued NCCL work: 1873, last completed NCCL work: 1872.",
        f"{p}[E{stamp} ProcessGroupNCCL.cpp:630] [Rank {rank}] Some NCCL operations have failed or timed out. Due to "
        "the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
        f"{p}[E{stamp} ProcessGroupNCCL.cpp:636] [Rank {rank}] To avoid data inconsistency, we are taking the entire "
        "process down.",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        f"  what():  [PG ID 0 PG GUID 0(default_pg) Rank {rank}] Process group watchdog thread terminated with "
        f"exception: [Rank {rank}] Watchdog caught collective operation timeout: {work} ran for 600083 milliseconds "
        "before timing out.",
        "Exception raised from checkTimeout at /opt/pytorch/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:618 "
        "(most recent call first):",
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f0c5a36e446 in "
        "/usr/local/lib/python3.12/dist-packages/torch/lib/libc10.so)",
    ]


def iteration_line(stamp: str, it: int) -> str:
    return (
        f" [{stamp}] iteration {it:8d}/     100 | consumed samples:        {it * 32:5d} | elapsed time per iteration "
        "(ms): 1234.5 | learning rate: 1.000000E-04 | global batch size:    32 | lm loss: 8.123456E+00 | loss scale: "
        "1.0 | grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |"
    )


def run_json(run: Path, **spec) -> None:
    write_json(run, "run.json", {
        "schema": 1, "created_at": "2026-11-29T16:00:00.000Z", "utc_offset_s": spec.pop("utc_offset_s", 0),
        "nvrx_version": "0.7.0", "spec": {"workload": "megatron", "fault": "none", **spec}, "commands": [],
    })  # fmt: skip


def prefixed(prefix: str, lines: list[str]) -> list[str]:
    return [f"{prefix}{line}" for line in lines]


def symptom_ranks(triage: Triage, kind: str) -> set[int]:
    return {s.rank for s in triage.symptoms if s.kind == kind and s.rank is not None}


# ----------------------------------------------------------------------------- OOM + NCCL


def build_oom_rank5_run(run: Path) -> None:
    """NVRx per-cycle log of an 8-rank job: rank 5 OOMs in backward at 16:32, the other
    ranks' NCCL watchdogs fire ten minutes later."""
    lines = prefixed("0: ", args_table(SHAPE_8))
    lines += ["0:  [2026-11-29 16:30:00.100000] training ..."]
    lines += ["5: [Rank 5] (after 1 iterations) memory (MB) | allocated: 61234.5 | max allocated: 74012.3 | "
              "reserved: 76000.0 | max reserved: 77800.0"]  # fmt: skip
    lines += ["7: " + iteration_line(f"2026-11-29 16:31:{50 + i:02d}.123456", 8 + i) for i in range(2)]
    lines += prefixed("5: [rank5]: ", tb_lines(OOM_BACKWARD_FRAMES, oom_message(5)))
    for rank in (0, 1, 2, 3, 4, 6, 7):
        lines += prefixed(f"{rank}: ", nccl_watchdog(rank, f"1129 16:42:{10 + rank:02d}.123456789"))
    write(run, "logs/train_cycle_cycle0.log", lines)
    write(run, "logs/launcher.log", [
        "2026-11-29 16:29:50,000 [INFO] [node01] [workload:?(?) infra:?(?)] profiling.py:93   - Cycle: 0 Event: "
        "worker_start_completed Node: node01_1_0 Rank: 0 Time: 2026-11-29 16:29:50.000 UTC",
        "E1129 16:32:11.000000 4100 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) "
        "local_rank: 5 (pid: 4242) of binary: /usr/bin/python3",
    ])  # fmt: skip
    run_json(run, nnodes=1, gpus_per_node=8)


def test_oom_on_rank5_is_the_root_cause_not_the_later_nccl_timeouts(tmp_path: Path) -> None:
    build_oom_rank5_run(tmp_path)
    t = diagnose(tmp_path)
    assert t.category == "oom"
    assert (t.rank, t.cycle, t.phase) == (5, 0, "backward")
    assert t.exception is not None and t.exception.startswith("torch.OutOfMemoryError: CUDA out of memory")
    c = t.config
    assert (c.micro_batch_size, c.global_batch_size, c.seq_length) == (1, 32, 4096)
    assert (c.tensor_model_parallel_size, c.pipeline_model_parallel_size, c.context_parallel_size,
            c.data_parallel_size, c.world_size) == (2, 2, 1, 2, 8)  # fmt: skip
    assert c.source is not None and c.source.startswith("logs/train_cycle_cycle0.log:")
    m = t.memory
    assert m is not None
    assert (m.tried_to_allocate, m.gpu, m.total_capacity, m.free) == ("2.00 GiB", 5, "79.11 GiB", "1.23 GiB")
    assert (m.process_in_use, m.allocated_by_pytorch, m.reserved_unallocated) == ("77.87 GiB", "74.52 GiB", "1.85 GiB")
    assert m.peak is not None and "max allocated 74012.3 MB" in m.peak
    assert t.location == f"{MEGATRON}/megatron/core/pipeline_parallel/schedules.py:160 in custom_backward"
    assert symptom_ranks(t, "collective") == {0, 1, 2, 3, 4, 6, 7}
    assert all(s.rank != 5 for s in t.symptoms)
    assert any(e.startswith("logs/train_cycle_cycle0.log:") and "OutOfMemoryError" in e for e in t.evidence)
    assert "Record" in t.advice or "record" in t.advice
    assert t.failed


def test_markdown_section_names_the_root_cause_and_groups_downstream_ranks(tmp_path: Path) -> None:
    build_oom_rank5_run(tmp_path)
    md = render_markdown(diagnose(tmp_path))
    assert md.startswith("## Failure triage\n")
    assert "**oom**" in md and "rank 5" in md and "- Phase: backward" in md
    assert "tried to allocate 2.00 GiB" in md
    assert "micro batch 1, global batch 32, seq 4096, TP 2, PP 2, CP 1, DP 2, world 8" in md
    assert "| 0-4,6-7 | collective |" in md
    assert "~~~text" in md and "custom_backward" in md


def test_triage_json_round_trips(tmp_path: Path) -> None:
    build_oom_rank5_run(tmp_path)
    doc = json.loads(json.dumps(diagnose(tmp_path).to_json()))
    assert doc["category"] == "oom" and doc["rank"] == 5 and doc["failed"] is True
    assert doc["config"]["tensor_model_parallel_size"] == 2
    assert doc["memory"]["tried_to_allocate"] == "2.00 GiB"
    assert {s["rank"] for s in doc["symptoms"]} == {0, 1, 2, 3, 4, 6, 7}


def build_timestamps_vs_file_order(run: Path, *, rank5_stamp: bool) -> None:
    """A Slurm .err of two nodes where node 1's buffered output (ranks 0-3, NCCL timeouts
    and a later CUDA error on rank 2) lands in the file before node 2's (rank 5's OOM).
    Rank 5's only stamp is torch's exit warning right after its traceback."""
    lines: list[str] = []
    for rank in (0, 1, 2, 3):
        lines += nccl_watchdog(rank, f"1129 16:42:{10 + rank:02d}.123456789")
    lines += prefixed("[rank2]: ", tb_lines([
        (f"{MEGATRON}/pretrain_gpt.py", 324, "<module>", "pretrain("),
        (f"{MEGATRON}/megatron/training/training.py", 1455, "train_step", "torch.cuda.synchronize()"),
    ], "RuntimeError: CUDA error: an illegal memory access was encountered"))  # fmt: skip
    for rank in (4, 6, 7):
        lines += nccl_watchdog(rank, f"1129 16:42:{10 + rank:02d}.123456789")
    lines += prefixed("[rank5]: ", tb_lines(OOM_BACKWARD_FRAMES, oom_message(5)))
    if rank5_stamp:
        lines.append("[rank5]:[W1129 16:32:10.456789012 ProcessGroupNCCL.cpp:1250] Warning: WARNING: process group "
                     "has NOT been destroyed before we destruct ProcessGroupNCCL. On normal program exit, the "
                     "application should call destroy_process_group to ensure that any pending NCCL operations have "
                     "finished in this process.")  # fmt: skip
    write(run, "logs/megatron-4242.err", lines)
    write(run, "logs/megatron-4242.out", [
        "using world size: 8, data-parallel size: 2, context-parallel size: 1, hierarchical context-parallel "
        "sizes: None, tensor-model-parallel size: 2, pipeline-model-parallel size: 2",
        *args_table(SHAPE_8),
        iteration_line("2026-11-29 16:31:55.000000", 9),
    ])  # fmt: skip


def test_timestamps_decide_when_nccl_lines_come_first_in_the_file(tmp_path: Path) -> None:
    build_timestamps_vs_file_order(tmp_path, rank5_stamp=True)
    t = diagnose(tmp_path)
    assert (t.category, t.rank, t.phase) == ("oom", 5, "backward")
    assert (t.config.micro_batch_size, t.config.seq_length, t.config.data_parallel_size) == (1, 4096, 2)
    assert t.config.source is not None and t.config.source.startswith("logs/megatron-4242.out:")
    later = [s for s in t.symptoms if s.rank == 2 and s.kind == "traceback"]
    assert later and "illegal memory access" in later[0].what
    assert symptom_ranks(t, "collective") == {0, 1, 2, 3, 4, 6, 7}


def test_without_a_stamp_on_rank5_file_order_decides(tmp_path: Path) -> None:
    """The control of the test above: the same lines without rank 5's stamp."""
    build_timestamps_vs_file_order(tmp_path, rank5_stamp=False)
    t = diagnose(tmp_path)
    assert (t.category, t.rank) == ("traceback", 2)
    assert "illegal memory access" in (t.exception or "")
    assert any(s.rank == 5 and s.kind == "oom" for s in t.symptoms)


def test_utc_offset_puts_local_stamps_and_utc_console_stamps_on_one_clock(tmp_path: Path) -> None:
    """console.log is UTC; Megatron's stamps are the node's local time (UTC+1 here)."""
    write(tmp_path, "logs/console.log", [
        "2026-11-29T16:00:03.000Z err [default1]:[rank1]: Traceback (most recent call last):",
        '2026-11-29T16:00:03.000Z err [default1]:[rank1]:   File "/w/train.py", line 9, in <module>',
        "2026-11-29T16:00:03.000Z err [default1]:[rank1]:     load()",
        "2026-11-29T16:00:03.001Z err [default1]:[rank1]: ValueError: late error on rank 1",
    ])  # fmt: skip
    write(tmp_path, "logs/job-7.err", [
        "[rank0]: [2026-11-29 17:00:01.000000] loading checkpoint",
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "/w/train.py", line 5, in <module>',
        "[rank0]:     start()",
        "[rank0]: KeyError: 'early error on rank 0'",
    ])  # fmt: skip
    run_json(tmp_path, utc_offset_s=3600)
    assert diagnose(tmp_path).rank == 0  # 17:00:01 local = 16:00:01 UTC, before 16:00:03Z
    assert diagnose(tmp_path, utc_offset_s=0).rank == 1


# ----------------------------------------------------------------------------- shape / import


def test_shape_error_heads_not_divisible_by_tp(tmp_path: Path) -> None:
    shape = dict(SHAPE_8, tensor_model_parallel_size=8, pipeline_model_parallel_size=1, data_parallel_size=1,
                 num_attention_heads=12)  # fmt: skip
    frames = [
        (f"{MEGATRON}/pretrain_gpt.py", 324, "<module>", "pretrain("),
        (f"{MEGATRON}/megatron/training/training.py", 650, "pretrain", "model, optimizer, opt_param_scheduler = setup_model_and_optimizer("),
        (f"{MEGATRON}/gpt_builders.py", 30, "gpt_builder", "config = core_transformer_config_from_args(args)"),
        ("<string>", 380, "__init__", ""),
        (f"{MEGATRON}/megatron/core/transformer/transformer_config.py", 801, "__post_init__",
         "raise ValueError("),
    ]  # fmt: skip
    exc = "ValueError: num_attention_heads (12) must be a multiple of tensor_model_parallel_size (8)."
    lines = prefixed("0: ", args_table(shape))
    for rank in range(8):
        lines += prefixed(f"{rank}: [rank{rank}]: ", tb_lines(frames, exc))
    write(tmp_path, "logs/train_cycle_cycle0.log", lines)
    t = diagnose(tmp_path)
    assert (t.category, t.rank) == ("shape", 0)
    assert t.exception == exc
    assert "WORLD_SIZE = TP × DP × CP × PP" in t.advice
    assert "num_attention_heads 12 % TP 8 = 4 (must be 0)" in t.advice
    assert symptom_ranks(t, "shape") == set(range(1, 8))


def test_shape_error_bare_assert_on_world_size_uses_run_json_shape(tmp_path: Path) -> None:
    write(tmp_path, "megatron-31.err", tb_lines([
        (f"{MEGATRON}/pretrain_gpt.py", 324, "<module>", "pretrain("),
        (f"{MEGATRON}/megatron/training/initialize.py", 70, "initialize_megatron", "validate_args(args, args_defaults)"),
        (f"{MEGATRON}/megatron/training/arguments.py", 390, "validate_args",
         "assert args.world_size % (args.tensor_model_parallel_size * args.pipeline_model_parallel_size) == 0"),
    ], "AssertionError"))  # fmt: skip
    run_json(tmp_path, nnodes=1, gpus_per_node=8, world=8, tp=3, pp=1, cp=1, dp=None, num_attention_heads=12)
    t = diagnose(tmp_path)
    assert t.category == "shape"
    assert t.exception == "AssertionError"
    assert t.config.source == "run.json"
    assert "WORLD_SIZE 8 by TP × CP × PP = 3: NOT divisible" in t.advice


def test_import_error_in_torch_elastic_per_rank_logs(tmp_path: Path) -> None:
    frames = [(f"{MEGATRON}/pretrain_gpt.py", 8, "<module>", "from megatron.core import parallel_state")]
    exc = "ModuleNotFoundError: No module named 'megatron'"
    for local in range(8):
        base = f"logs/elastic/megatron_f3a1/attempt_0/{local}"
        write(tmp_path, f"{base}/stderr.log", tb_lines(frames, exc))
        write(tmp_path, f"{base}/stdout.log", [])
    summary = [
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
        "pretrain_gpt.py FAILED",
        "------------------------------------------------------------",
        "Failures:",
    ]
    for idx, rank in enumerate(range(1, 8), start=1):
        summary += [f"[{idx}]:", "  time      : 2026-11-29_16:05:01", "  host      : node01",
                    f"  rank      : {rank} (local_rank: {rank})", f"  exitcode  : 1 (pid: {900 + rank})",
                    "  error_file: <N/A>",
                    "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"]  # fmt: skip
    summary += [
        "------------------------------------------------------------",
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2026-11-29_16:05:01",
        "  host      : node01",
        "  rank      : 0 (local_rank: 0)",
        "  exitcode  : 1 (pid: 900)",
        "  error_file: <N/A>",
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
        "============================================================",
        "srun: error: node01: task 0: Exited with exit code 1",
    ]
    write(tmp_path, "logs/megatron-77.err", summary)
    t = diagnose(tmp_path)
    assert (t.category, t.rank, t.local_rank, t.cycle) == ("import", 0, 0, 0)
    assert t.exception == exc
    for needle in ("uv sync", "PYTHONPATH", "cd <MEGATRON_WORKTREE>", "worktree"):
        assert needle in t.advice
    assert symptom_ranks(t, "import") == set(range(1, 8))
    assert any(e.startswith("logs/elastic/megatron_f3a1/attempt_0/0/stderr.log:") for e in t.evidence)


# ----------------------------------------------------------------------------- NCCL / clean


NCCL_NO_TRACEBACK = [
    "node02:81234:81301 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.1<43521> failed : "
    "Connection refused",
    "node02:81234:81301 [0] NCCL INFO misc/socket.cc:565 -> 2",
    "node02:81234:81301 [0] NCCL INFO bootstrap.cc:274 -> 2",
    "[rank4]:[E1129 16:05:02.123456789 ProcessGroupNCCL.cpp:1500] [PG ID 0 PG GUID 0(default_pg) Rank 4] NCCL error: "
    "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.",
    "terminate called after throwing an instance of 'c10::DistBackendError'",
    "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 4] NCCL error: ncclSystemError: System call (e.g. socket, "
    "malloc) or external library call failed or device error.",
    "E1129 16:05:03.000000 81200 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -6) "
    "local_rank: 0 (pid: 81234) of binary: /usr/bin/python3",
    "srun: error: node02: task 1: Exited with exit code 1",
]


def test_nccl_failure_without_python_traceback(tmp_path: Path) -> None:
    write(tmp_path, "logs/megatron-555.err", NCCL_NO_TRACEBACK)
    t = diagnose(tmp_path)
    assert (t.category, t.rank) == ("collective", 4)
    assert t.exception is None
    for needle in ("allocation", "MASTER_ADDR", "MASTER_PORT is reachable", "identical command"):
        assert needle in t.advice
    assert any("ncclSystemError" in e for e in t.evidence)


@pytest.mark.parametrize("launcher_exit, expected", [(0, "none"), (1, "collective")])
def test_nccl_warn_alone_counts_only_when_the_run_failed(tmp_path: Path, launcher_exit: int, expected: str) -> None:
    write(tmp_path, "logs/job.err", NCCL_NO_TRACEBACK[:3])
    write_json(tmp_path, "launch.json", {"launcher_exit_code": launcher_exit})
    assert diagnose(tmp_path).category == expected


def test_clean_run_is_none(tmp_path: Path) -> None:
    lines = prefixed("0: ", args_table(SHAPE_8))
    lines += ["1: node01:123:456 [1] NCCL INFO Channel 00/0 : 1[1] -> 2[2] via P2P/CUMEM"]
    lines += ["7: " + iteration_line(f"2026-11-29 16:31:{i:02d}.000000", i) for i in range(1, 20)]
    lines += ["0: [after training is done] datetime: 2026-11-29 16:40:00"]
    write(tmp_path, "logs/train_cycle_cycle0.log", lines)
    # the 0.4.1 launcher's health check logs an NVML traceback on hosts without NVML: noise
    write(tmp_path, "logs/launcher.log", (DATA / "nvrx-0.4.1-kill/launcher-console.log").read_text().splitlines()[:70] + [
        "[2026-11-29 17:05:55,846] [INFO] [ft_launcher16897@vm] Agent .run() is OK. No failures in the result.",
        "[2026-11-29 17:05:55,869] [INFO] [ft_launcher16897@vm] Agent exits with exit code = 0.",
    ])  # fmt: skip
    t = diagnose(tmp_path)
    assert t.category == "none" and not t.failed
    assert t.symptoms == ()
    assert set(t.files_scanned) == {"logs/train_cycle_cycle0.log", "logs/launcher.log"}
    assert "No failure" in render_markdown(t)


# ----------------------------------------------------------------------------- interleaving / junk


def test_interleaved_tracebacks_of_8_ranks_are_reassembled_per_rank(tmp_path: Path) -> None:
    """0.4.1 console capture: every line carries the harness's UTC stamp and `[default<N>]:`;
    the eight tracebacks arrive line by line in round robin."""
    per_rank: dict[int, list[str]] = {}
    for rank in range(8):
        if rank == 5:
            per_rank[rank] = tb_lines([
                (f"{MEGATRON}/pretrain_gpt.py", 324, "<module>", "pretrain("),
                (f"{MEGATRON}/pretrain_gpt.py", 180, "forward_step", "output_tensor = model(tokens, position_ids)"),
                (f"{MEGATRON}/megatron/core/models/gpt/gpt_model.py", 310, "forward", "decoder_input = self.embedding("),
            ], "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, "
               "cuda:5 and cpu!")  # fmt: skip
        else:
            per_rank[rank] = tb_lines([
                (f"{MEGATRON}/pretrain_gpt.py", 324, "<module>", "pretrain("),
                (f"{MEGATRON}/megatron/core/distributed/param_and_grad_buffer.py", 460, f"finish_grad_sync_{rank}",
                 "self.communication_handle.wait()"),
            ], f"torch.distributed.DistBackendError: NCCL communicator was aborted on rank {rank}.")  # fmt: skip
    lines = ["2026-11-29T16:32:08.000Z err [2026-11-29 16:32:08,000] [INFO] [ft_launcher1@node01] [default] "
             "starting workers for entrypoint: python3"]  # fmt: skip
    longest = max(len(v) for v in per_rank.values())
    ms = 0
    for i in range(longest):
        for rank in (3, 0, 5, 7, 1, 6, 2, 4):
            if i < len(per_rank[rank]):
                ms += 1
                lines.append(f"2026-11-29T16:32:09.{ms:03d}Z err [default{rank}]:[rank{rank}]: {per_rank[rank][i]}")
        if i == 3:  # the launcher's own lines interleave too
            lines.append("2026-11-29T16:32:09.500Z err [2026-11-29 16:32:09,500] [INFO] [ft_launcher1@node01] note")
    write(tmp_path, "logs/console.log", lines)
    run_json(tmp_path, nnodes=1, gpus_per_node=8)
    t = diagnose(tmp_path)
    assert (t.category, t.rank) == ("traceback", 5)
    assert t.exception is not None and "cuda:5 and cpu" in t.exception
    assert t.location == f"{MEGATRON}/megatron/core/models/gpt/gpt_model.py:310 in forward"
    assert not any("finish_grad_sync" in line for line in t.excerpt)
    nccl = {s.rank: s.what for s in t.symptoms if s.kind == "collective"}
    assert set(nccl) == {0, 1, 2, 3, 4, 6, 7}
    for rank, what in nccl.items():
        assert what == f"torch.distributed.DistBackendError: NCCL communicator was aborted on rank {rank}."


def test_junk_binary_noise_padded_prefixes_and_a_cut_off_last_line(tmp_path: Path) -> None:
    """World of 12: NVRx pads ranks to two characters (` 3: `). The process died while
    printing, so the file ends inside the OOM message, without a newline."""
    oom = oom_message(3, "512.00 MiB")
    cut = oom[: oom.index("total capac") + len("total capac")]
    lines: list[bytes | str] = [
        " 0: " + iteration_line("2026-11-29 16:31:00.000000", 1),
        bytes(range(256)),
        b"\x00\x00\x00\xff\xfe garbage \x1b[31m red \x1b[0m",
        " 3: " + "x" * 200_000,  # one over-long line
        "11: \x1b[33mWARNING: colourised\x1b[0m",
        *prefixed(" 3: [rank3]: ", tb_lines(OOM_BACKWARD_FRAMES[:3], "")[:-1]),
        " 7: " + iteration_line("2026-11-29 16:31:05.000000", 2),
        *prefixed(" 3: [rank3]: ", tb_lines(OOM_BACKWARD_FRAMES, "")[-12:-1]),
        f" 3: [rank3]: {cut}",
    ]
    write(tmp_path, "logs/train_cycle_cycle1.log", [bytes(range(32)) * 400] + lines, newline_at_end=False)
    t = diagnose(tmp_path)
    assert (t.category, t.rank, t.cycle, t.phase) == ("oom", 3, 1, "backward")
    assert t.memory is not None and t.memory.tried_to_allocate == "512.00 MiB"
    assert t.memory.free is None  # cut off before it was printed


def test_traceback_cut_off_before_its_exception_line(tmp_path: Path) -> None:
    write(tmp_path, "logs/job-8.err", ["[rank2]: " + line for line in tb_lines(OOM_BACKWARD_FRAMES[:4], "x")[:-1]],
          newline_at_end=False)  # fmt: skip
    t = diagnose(tmp_path)
    assert (t.category, t.rank, t.exception) == ("traceback", 2, None)
    assert t.excerpt[-1] == "(cut off before the exception line)"
    assert "cut off" in t.summary


def test_a_huge_line_is_never_held_in_memory(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "job.err"
    path.parent.mkdir()
    with open(path, "wb") as fh:
        fh.write(b"[rank1]: " + b"y" * (16 * 1024 * 1024) + b"\n")
        fh.write("\n".join(prefixed("[rank1]: ", tb_lines(OOM_BACKWARD_FRAMES, oom_message(1)))).encode())
    tracemalloc.start()
    try:
        t = diagnose(tmp_path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (t.category, t.rank) == ("oom", 1)
    assert peak < 2 * 1024 * 1024, f"peak {peak} bytes for a 16 MiB line"


def test_an_error_repeated_forever_is_kept_once(tmp_path: Path) -> None:
    """A data loader that logs the same traceback every step must not grow memory."""
    one = prefixed("[rank4]: ", tb_lines(OOM_BACKWARD_FRAMES, "OSError: [Errno 5] Input/output error: '/data/shard'"))
    path = tmp_path / "logs" / "job.err"
    path.parent.mkdir()
    with open(path, "w") as fh:
        for _ in range(500):
            fh.write("\n".join(one) + "\n")
    t = diagnose(tmp_path)
    assert (t.category, t.rank) == ("traceback", 4)
    assert t.evidence[0] == "logs/job.err:1: [rank4]: Traceback (most recent call last):"
    scanner = scan._Scanner(tmp_path, scan._Context(0))  # white box: what is kept
    scanner.scan([path])
    assert len(scanner.tracebacks) == 1


# ----------------------------------------------------------------------------- torch elastic summary


def child_failed_block(root: list[str], others: list[str]) -> list[str]:
    return [
        "Traceback (most recent call last):",
        '  File "/usr/local/bin/torchrun", line 8, in <module>',
        "    sys.exit(main())",
        '  File "/usr/local/lib/python3.12/dist-packages/torch/distributed/launcher/api.py", line 270, in launch_agent',
        "    raise ChildFailedError(",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
        "pretrain_gpt.py FAILED",
        "------------------------------------------------------------",
        "Failures:",
        *(others or ["  <NO_OTHER_FAILURES>"]),
        "------------------------------------------------------------",
        "Root Cause (first observed failure):",
        *root,
        "============================================================",
    ]


def test_elastic_child_failed_summary_with_embedded_traceback(tmp_path: Path) -> None:
    embedded = tb_lines(OOM_BACKWARD_FRAMES, oom_message(1))
    root = [
        "[0]:", "  time      : 2026-11-29_16:32:09", "  host      : node02", "  rank      : 5 (local_rank: 1)",
        "  exitcode  : 1 (pid: 81235)", "  error_file: /tmp/torchelastic_x/none_y/attempt_0/1/error.json",
        "  traceback : " + embedded[0], *["  " + line for line in embedded[1:]], "  ",
    ]  # fmt: skip
    others = [
        "[1]:", "  time      : 2026-11-29_16:32:12", "  host      : node02", "  rank      : 6 (local_rank: 2)",
        "  exitcode  : -6 (pid: 81236) (SIGABRT)", "  error_file: <N/A>",
        "  traceback : Signal 6 (SIGABRT) received by PID 81236",
    ]  # fmt: skip
    write(tmp_path, "logs/megatron-900.err", child_failed_block(root, others))
    t = diagnose(tmp_path)
    assert (t.category, t.rank, t.local_rank, t.phase) == ("oom", 5, 1, "backward")
    assert t.memory is not None and t.memory.gpu == 1
    rank6 = [s for s in t.symptoms if s.rank == 6]
    assert rank6 and rank6[0].kind == "exit" and "SIGABRT" in rank6[0].what
    assert not any("ChildFailedError" in (s.what or "") for s in t.symptoms)


def test_elastic_root_cause_wins_over_listed_failures_of_the_same_second(tmp_path: Path) -> None:
    """Without a finer clock, torch elastic's own "first observed failure" decides."""
    root = [
        "[0]:", "  time      : 2026-11-29_16:32:09", "  host      : node01", "  rank      : 2 (local_rank: 2)",
        "  exitcode  : 1 (pid: 702)", "  error_file: /tmp/e/attempt_0/2/error.json",
        "  traceback : Traceback (most recent call last):",
        '    File "/w/pretrain_gpt.py", line 10, in <module>', "      main()",
        "  ZeroDivisionError: division by zero",
    ]  # fmt: skip
    others = [
        "[1]:", "  time      : 2026-11-29_16:32:09", "  host      : node01", "  rank      : 1 (local_rank: 1)",
        "  exitcode  : -11 (pid: 701) (SIGSEGV)", "  error_file: <N/A>", "  traceback : Signal 11 (SIGSEGV) received by PID 701",
    ]  # fmt: skip
    write(tmp_path, "logs/megatron-902.err", child_failed_block(root, others))
    t = diagnose(tmp_path)
    assert (t.category, t.rank, t.exception) == ("traceback", 2, "ZeroDivisionError: division by zero")
    assert [(s.rank, s.kind) for s in t.symptoms] == [(1, "exit")]


def test_elastic_error_json_of_a_worker(tmp_path: Path) -> None:
    callstack = "\n".join(tb_lines(OOM_BACKWARD_FRAMES, oom_message(2))) + "\n"
    target = tmp_path / "logs/elastic/run_1/attempt_1/2"
    target.mkdir(parents=True)
    (target / "error.json").write_text(json.dumps({"message": {
        "message": "OutOfMemoryError: CUDA out of memory.",
        "extraInfo": {"py_callstack": callstack, "timestamp": "1795969929"},
    }}))  # fmt: skip
    run_json(tmp_path, nnodes=1, gpus_per_node=4)
    t = diagnose(tmp_path)
    assert (t.category, t.rank, t.local_rank, t.cycle, t.phase) == ("oom", 2, 2, 1, "backward")


def test_chained_exception_keeps_the_oom_that_started_it(tmp_path: Path) -> None:
    first = tb_lines(OOM_BACKWARD_FRAMES[-2:], oom_message(0))
    second = tb_lines([(f"{MEGATRON}/megatron/training/training.py", 1430, "train_step", "raise RuntimeError(")],
                      "RuntimeError: step failed")  # fmt: skip
    lines = first + ["", "The above exception was the direct cause of the following exception:", ""] + second
    write(tmp_path, "logs/job.err", prefixed("[rank0]: ", lines))
    t = diagnose(tmp_path)
    assert (t.category, t.rank, t.phase) == ("oom", 0, "backward")
    assert t.exception is not None and t.exception.startswith("torch.OutOfMemoryError")


def test_only_teardown_tracebacks_mean_the_job_was_stopped_from_outside(tmp_path: Path) -> None:
    write(tmp_path, "logs/megatron-903.err", [
        "slurmstepd: error: *** STEP 903.0 ON node01 CANCELLED AT 2026-11-29T16:40:00 DUE TO TIME LIMIT ***",
        *tb_lines([("/usr/local/bin/torchrun", 8, "<module>", "sys.exit(main())"),
                   ("/usr/lib/python3/dist-packages/torch/distributed/elastic/multiprocessing/api.py", 80,
                    "_terminate_process_handler", "raise SignalException(f\"Process {os.getpid()} got signal: {sigval}\", sigval=sigval)")],
                  "torch.distributed.elastic.multiprocessing.api.SignalException: Process 4000 got signal: 15"),
    ])  # fmt: skip
    t = diagnose(tmp_path)
    assert t.category == "exit"
    assert "time limit" in t.summary


def test_elastic_child_failed_summary_with_a_signal_root_cause(tmp_path: Path) -> None:
    root = [
        "[0]:", "  time      : 2026-11-29_16:32:09", "  host      : node01", "  rank      : 3 (local_rank: 3)",
        "  exitcode  : -9 (pid: 777) (SIGKILL)", "  error_file: <N/A>", "  traceback : Signal 9 (SIGKILL) received by PID 777",
    ]  # fmt: skip
    write(tmp_path, "logs/megatron-901.err", child_failed_block(root, []))
    t = diagnose(tmp_path)
    assert (t.category, t.rank, t.local_rank) == ("exit", 3, 3)
    assert "SIGKILL" in t.summary and not t.injected


# ----------------------------------------------------------------------------- real NVRx output


def sample_run(run: Path, sample: str, marker: dict | None) -> None:
    (run / "logs").mkdir(parents=True)
    shutil.copyfile(DATA / sample, run / "logs" / "launcher.log")
    if marker is not None:
        write_json(run, "fault_injected.json", marker)


def test_real_041_kill_is_the_injected_sigkill_not_the_gloo_reset(tmp_path: Path) -> None:
    sample_run(tmp_path, "nvrx-0.4.1-kill/launcher-console.log", {
        "fault": "kill", "signal": "SIGKILL", "rank": 1, "local_rank": 1, "cycle": 0, "iteration": 10,
        "injected_at": "2026-11-29T17:05:47.650Z",
    })  # fmt: skip
    t = diagnose(tmp_path)
    assert (t.category, t.rank, t.injected) == ("exit", 1, True)
    assert "SIGKILL" in t.summary and "injected" in t.summary
    assert [(s.rank, s.kind) for s in t.symptoms] == [(0, "collective")]  # gloo "Connection reset by peer"
    assert "verify" in t.advice


def test_real_041_hang_is_the_injected_hang(tmp_path: Path) -> None:
    sample_run(tmp_path, "nvrx-0.4.1-hang/launcher-console.log", {"fault": "hang", "signal": "SIGSTOP", "rank": 1, "local_rank": 1})
    t = diagnose(tmp_path)
    assert (t.category, t.rank, t.injected) == ("hang", 1, True)
    assert "Section 'step' has been open" in t.summary


def test_real_070_kill_without_a_marker(tmp_path: Path) -> None:
    sample_run(tmp_path, "nvrx-0.7.0-kill/launcher.log", None)
    t = diagnose(tmp_path)
    assert (t.category, t.rank, t.cycle, t.injected) == ("exit", 1, 0, False)
    assert not any(s.kind == "traceback" for s in t.symptoms)  # NVML health-check noise is ignored


def test_a_later_cycle_failure_outranks_the_injected_fault(tmp_path: Path) -> None:
    """The kill was deliberate; the replacement workers then failed to load the checkpoint."""
    sample_run(tmp_path, "nvrx-0.7.0-kill/launcher.log", {"fault": "kill", "signal": "SIGKILL", "rank": 1,
                                                           "local_rank": 1, "cycle": 0})  # fmt: skip
    write(tmp_path, "logs/train_cycle_cycle0.log", ["0:  [2026-11-29 17:09:16.000000] saving checkpoint at iteration 10"])
    write(tmp_path, "logs/train_cycle_cycle1.log", prefixed("0: [rank0]: ", tb_lines([
        (f"{MEGATRON}/megatron/training/checkpointing.py", 1320, "load_checkpoint", "state_dict = dist_checkpointing.load("),
    ], "FileNotFoundError: [Errno 2] No such file or directory: '/ckpt/iter_0000010/.metadata'")))  # fmt: skip
    t = diagnose(tmp_path)
    assert (t.category, t.rank, t.cycle, t.injected) == ("traceback", 0, 1, False)
    assert t.summary.startswith("After the fault the harness injected in cycle 0")
    assert any(s.rank == 1 and s.kind == "exit" for s in t.symptoms)


# ----------------------------------------------------------------------------- phases, files


@pytest.mark.parametrize(
    "frames, phase",
    [
        ([("/w/train.py", 40, "<module>", "main()"), ("/w/train.py", 30, "main", "out = model(batch)"),
          ("/w/torch/nn/modules/module.py", 1750, "_call_impl", "return forward_call(*args, **kwargs)")], "forward"),
        ([("/w/train.py", 31, "main", "optimizer.step()"),
          ("/w/torch/optim/adam.py", 240, "step", "adam(")], "optimizer"),
        ([("/w/train.py", 31, "main", "loss.backward()"),
          ("/w/torch/utils/checkpoint.py", 320, "backward", "outputs = ctx.run_function(*detached_inputs)"),
          ("/w/model.py", 80, "forward", "h = self.mlp(x)")], "backward"),  # recompute runs forward in backward
    ],
)  # fmt: skip
def test_oom_phase_comes_from_the_training_loop_frame(tmp_path: Path, frames, phase: str) -> None:
    write(tmp_path, "logs/a.log", tb_lines(frames, "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 MiB"))
    assert diagnose(tmp_path).phase == phase


def test_which_files_are_read(tmp_path: Path) -> None:
    write(tmp_path, "slurm-123.out", tb_lines([("/w/x.py", 1, "<module>", "import y")], "ImportError: cannot import name 'y'"))
    write(tmp_path, "checkpoints/iter_0000005/notes.log",
          tb_lines([("/w/x.py", 1, "<module>", "z()")], "ValueError: must not be read"))  # fmt: skip
    write(tmp_path, "logs/tensorboard/events.out.tfevents.1", [bytes(range(32)) * 200])
    t = diagnose(tmp_path)
    assert (t.category, t.exception) == ("import", "ImportError: cannot import name 'y'")
    assert "slurm-123.out" in t.files_scanned
    assert not any(f.startswith("checkpoints/") for f in t.files_scanned)
    assert "logs/tensorboard/events.out.tfevents.1" not in t.files_scanned


# ----------------------------------------------------------------------------- CLI


def cli(args: list[str]) -> int:
    parser = argparse.ArgumentParser()
    cmd_diagnose.add_arguments(parser)
    return cmd_diagnose.run(parser.parse_args(args))


def test_cli_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli([str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert "missing" in err and "does not exist" in err and len(err.strip().splitlines()) == 1
    (tmp_path / "file").write_text("x")
    assert cli([str(tmp_path / "file")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    clean = tmp_path / "clean"
    clean.mkdir()
    assert cli([str(clean)]) == 0
    failed = tmp_path / "failed"
    build_oom_rank5_run(failed)
    capsys.readouterr()
    assert cli([str(failed), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["category"] == "oom"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any directory")
def test_cli_unreadable_directory(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0)
    try:
        assert cli([str(locked)]) == 2
    finally:
        locked.chmod(0o755)


def test_nvrx_qual_diagnose_is_wired(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from harness.cli import main

    build_oom_rank5_run(tmp_path)
    assert main(["diagnose", str(tmp_path), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["rank"] == 5


@pytest.mark.e2e
def test_python_dash_m_harness_diagnose(tmp_path: Path) -> None:
    build_oom_rank5_run(tmp_path)
    proc = run_in_session([sys.executable, "-m", "harness", "diagnose", str(tmp_path), "--json"], timeout_s=60)
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["category"], doc["rank"], doc["phase"]) == ("oom", 5, "backward")


def test_cli_exits_0_when_the_only_failure_is_the_injected_fault(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A recovered run failed exactly once, by design: diagnose names it and exits 0."""
    sample_run(tmp_path, "nvrx-0.4.1-kill/launcher-console.log", {
        "fault": "kill", "signal": "SIGKILL", "rank": 1, "local_rank": 1, "cycle": 0, "iteration": 10,
        "injected_at": "2026-11-29T17:05:47.650Z",
    })  # fmt: skip
    assert cli([str(tmp_path)]) == 0
    assert "injected" in capsys.readouterr().out


def test_cli_into_a_closed_pipe_keeps_its_status(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`nvrx-qual diagnose RUN | head`: the reader went away; no traceback, the status stands."""
    build_oom_rank5_run(tmp_path)
    read_end, write_end = os.pipe()
    os.close(read_end)
    closed = os.fdopen(write_end, "w")
    monkeypatch.setattr(sys, "stdout", closed)
    try:
        assert cli([str(tmp_path), "--json"]) == 1
    finally:
        monkeypatch.undo()
        closed.close()


@pytest.mark.parametrize("offset", [10**30, -(10**30), 14 * 3600 + 1, True])
def test_a_received_run_json_with_an_impossible_utc_offset_is_ignored(tmp_path, offset):
    """Found by the fuzz over received run directories: run.json's utc_offset_s went straight
    into a timedelta (OverflowError, exit 3). An offset no time zone has is ignored, as
    history ignores it, and the triage still runs."""
    from recovery_tests import rundirs

    run_dir = rundirs.build(tmp_path / "run", rundirs.Scenario()).run_dir
    doc = json.loads((run_dir / "run.json").read_text())
    doc["utc_offset_s"] = offset
    (run_dir / "run.json").write_text(json.dumps(doc))
    triage = diagnose(run_dir)
    assert triage.injected, render_markdown(triage)


# ----------------------------------------------------------------------------- the harness's own fault, the backend

HARDWARE_WORDS = ("OOM killer", "oom_kill", "Xid", "dmesg", "node or GPU fault")


def test_the_injected_kill_gets_no_hardware_advice(tmp_path: Path) -> None:
    """The harness's own SIGKILL is no OOM kill and no Xid: advising to look for them sends the
    user after a fault that never happened."""
    sample_run(tmp_path, "nvrx-0.4.1-kill/launcher-console.log", {
        "fault": "kill", "signal": "SIGKILL", "rank": 1, "local_rank": 1, "cycle": 0, "iteration": 10,
        "injected_at": "2026-11-29T17:05:47.650Z",
    })  # fmt: skip
    t = diagnose(tmp_path)
    assert t.injected and t.category == "exit"
    assert not [w for w in HARDWARE_WORDS if w in t.advice], t.advice
    assert "injected" in t.advice and "verify" in t.advice


def test_the_injected_hang_gets_no_hunt_for_the_stuck_rank(tmp_path: Path) -> None:
    sample_run(tmp_path, "nvrx-0.4.1-hang/launcher-console.log", {"fault": "hang", "signal": "SIGSTOP", "rank": 1, "local_rank": 1})
    t = diagnose(tmp_path)
    assert t.injected and "py-spy" not in t.advice and "SIGSTOP" in t.advice


def test_a_death_the_harness_did_not_cause_still_gets_hardware_advice(tmp_path: Path) -> None:
    sample_run(tmp_path, "nvrx-0.7.0-kill/launcher.log", None)
    t = diagnose(tmp_path)
    assert not t.injected and "Xid" in t.advice and "OOM killer" in t.advice


GLOO_RESET = [
    "2026-12-01T10:00:00.000Z out [default0]:Traceback (most recent call last):",
    '2026-12-01T10:00:00.000Z out [default0]:  File "/x/reference.py", line 10, in <module>',
    "2026-12-01T10:00:00.000Z out [default0]:    dist.all_reduce(t)",
    "2026-12-01T10:00:00.000Z out [default0]:RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] "
    "Read error [127.0.0.1]:29500: Connection reset by peer",
]


@pytest.mark.parametrize("command, backend", [
    ({"argv": ["python", "-m", "x.launcher", "--", "/r/harness/workloads/reference.py", "--lr", "1"]}, "gloo"),
    ({"argv": ["python", "pretrain_gpt.py", "--distributed-backend", "gloo"]}, "gloo"),
    ({"argv": ["python", "pretrain_gpt.py", "--tensor-model-parallel-size", "2"]}, "NCCL"),
])
def test_the_collective_backend_is_named_from_the_runs_own_command(tmp_path: Path, command, backend) -> None:
    write(tmp_path, "logs/console.log", GLOO_RESET)
    write_json(tmp_path, "run.json", {"spec": {}, "commands": [command]})
    write_json(tmp_path, "launch.json", {"launcher_exit_code": 1})
    t = diagnose(tmp_path)
    assert t.config.backend == backend
    other = {"gloo": "NCCL", "NCCL": "gloo"}[backend]
    assert t.summary.startswith(f"{backend} / collective failure") and f"non-{other}" not in t.summary, t.summary
    assert t.advice.startswith(f"{backend} failure") and other not in t.advice, t.advice
    # the label is the backend's or neutral: a gloo "Connection reset by peer" is no NCCL failure
    assert t.category == "collective"
    if backend == "gloo":
        assert "nccl" not in render_markdown(t).lower() and "nccl" not in json.dumps(t.to_json()).lower()


def _read_syscalls() -> int | None:
    """read(2)-family system calls this process has made so far (Linux /proc/self/io)."""
    try:
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("syscr:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def test_logs_are_read_in_chunks_not_a_system_call_per_byte(tmp_path: Path) -> None:
    """A 2 MiB log costs a few dozen read calls (64 KiB each), not one per byte (issue 24, 3c)."""
    if _read_syscalls() is None:
        pytest.skip("this kernel keeps no per-process I/O accounting (/proc/self/io)")
    line = "[rank0]: " + "x" * 100
    path = write(tmp_path, "logs/job.err", [line] * 20_000 + prefixed("[rank1]: ", tb_lines(OOM_BACKWARD_FRAMES, oom_message(1))))
    size = path.stat().st_size
    before = _read_syscalls()
    t = diagnose(tmp_path)
    calls = _read_syscalls() - before
    assert (t.category, t.rank) == ("oom", 1)
    assert calls < size // 4096, f"{calls} read system calls for a {size}-byte log"


def test_a_log_that_grows_while_read_is_read_up_to_its_size_at_opening(tmp_path: Path, monkeypatch) -> None:
    """A writer that appends a line for each line read cannot keep the scan reading (issue 24, 3c):
    history's line stream, which triage folds over, reads up to the size at opening."""
    lines = [f"[rank0]: step {i}" for i in range(200)]
    path = write(tmp_path, "logs/job.err", lines + prefixed("[rank1]: ", tb_lines(OOM_BACKWARD_FRAMES, oom_message(1))))
    total = len(path.read_text().splitlines())
    seen = 0
    real = history._clean

    def clean_and_grow(chunk: bytes) -> str:
        nonlocal seen
        seen += 1
        if seen > 2 * total:
            raise AssertionError(f"read {seen} lines of a {total}-line log that grows as it is read")
        with open(path, "ab") as fh:
            fh.write(b"[rank0]: appended while the scan reads\n")
        return real(chunk)

    monkeypatch.setattr(history, "_clean", clean_and_grow)
    t = diagnose(tmp_path)
    assert seen == total
    assert (t.category, t.rank) == ("oom", 1)


def test_per_process_state_is_bounded_by_the_number_of_ranks_kept(tmp_path: Path, monkeypatch) -> None:
    """A log naming more writing processes than _MAX_RANKS shares one state for the rest, and
    keeps memory reports of at most that many ranks."""
    made = []

    class CountedStream(scan._Stream):
        def __init__(self) -> None:
            super().__init__()
            made.append(self)

    monkeypatch.setattr(scan, "_MAX_RANKS", 4)
    monkeypatch.setattr(scan, "_Stream", CountedStream)
    lines = [f"[rank{r}]: [Rank {r}] (after 10 iterations) memory (MB) | allocated: 1.0 | max allocated: 2.0"
             for r in range(50)]
    path = write(tmp_path, "logs/job.err", lines)
    scanner = scan._Scanner(tmp_path, scan._Context(0))
    scanner.scan([path])
    assert len(made) == 5  # four processes and the one the others share
    assert len(scanner.memory) == 4


# ----------------------------------------------------------------------------- every fault kind, every marker (issue 26)


def _injected_run(run: Path, fault: str, *, with_signal: bool) -> None:
    """A real 0.7.0 kill run (a real 0.4.1 hang for a stopping fault) whose rank 1 died by
    the signal the fault kind sends, with that kind's marker."""
    import signal as signals

    from harness.vocab.faults import FAULT_KINDS

    kind = FAULT_KINDS[fault]
    sent = kind.signal
    if sent == "SIGSTOP" or kind.monitor_detects:  # kept alive: only the monitor's timeout detects it
        sample_run(run, "nvrx-0.4.1-hang/launcher-console.log", None)
    else:
        sample_run(run, "nvrx-0.7.0-kill/launcher.log", None)
        log = run / "logs" / "launcher.log"
        code = kind.exit_codes[0] if kind.exit_codes else -int(getattr(signals, sent))
        log.write_text(log.read_text().replace("exitcode: -9", f"exitcode: {code}").replace("exitcode=-9", f"exitcode={code}"))
    marker = {"fault": fault, "rank": 1, "local_rank": 1, "cycle": 0, "iteration": 10}
    if with_signal and sent is not None:
        marker["signal"] = sent
    write_json(run, "fault_injected.json", marker)


@pytest.mark.parametrize("with_signal", [True, False], ids=["marker-signal", "vocabulary-signal"])
# disk-full kills no rank itself (the save's ENOSPC does, on whichever rank wrote; triage names that
# traceback as the first failure): no rank dies "of the injected fault" here.
@pytest.mark.parametrize("fault", sorted(k.name for k in __import__("harness.vocab.faults", fromlist=["FAULT_KINDS"]).FAULT_KINDS.values()
                                   if not k.planned and not k.gpu_only and not k.fills_filesystem))
def test_every_fault_kind_of_the_vocabulary_is_recognised_as_the_injected_fault(tmp_path: Path, fault: str,
                                                                                with_signal: bool) -> None:
    """The injected fault is told by what its signal does (a stop: the monitor's timeout; any
    other: the rank's death by it), for each kind of spec.FAULT_KINDS, not for kill and hang only."""
    _injected_run(tmp_path, fault, with_signal=with_signal)
    t = diagnose(tmp_path)
    assert (t.rank, t.injected) == (1, True), t.summary
    assert "fault_injected.json" in t.summary


def test_every_marker_the_layout_allows_is_matched(tmp_path: Path) -> None:
    """A plan's markers are numbered up to the layout's last (layout.marker_index): the one that
    claims the failure may be fault_injected.12.json, past the first nine."""
    from harness.vocab.layout import marker_name

    _injected_run(tmp_path, "kill", with_signal=True)
    claim = json.loads((tmp_path / "fault_injected.json").read_text())
    for index in range(1, 12):  # earlier faults of the plan, in a cycle that did not fail
        write_json(tmp_path, marker_name(index), {**claim, "cycle": 5})
    write_json(tmp_path, marker_name(12), claim)
    t = diagnose(tmp_path)
    assert (t.rank, t.injected) == (1, True), t.summary
    assert "fault_injected.12.json" in t.summary
