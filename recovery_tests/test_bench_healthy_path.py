"""bench/healthy_path.py compares like with like: its three commands are the plan's launcher
command with only the resilience parts taken away (the nemesis wrapper always; asynchronous
saves for monitor-only and plain; ft_launcher, its options and the workload's NVRx client for
plain), every other option kept."""

from __future__ import annotations

import importlib.util
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("bench_healthy_path", ROOT / "bench" / "healthy_path.py")
healthy_path = sys.modules.setdefault("bench_healthy_path", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(healthy_path)

PLAN = ("cd /w/runs/r && PYTHONUNBUFFERED=1 PYTHONPATH=/n${PYTHONPATH:+:$PYTHONPATH} /v/python -m "
        "nvidia_resiliency_ext.fault_tolerance.launcher --nnodes 1 --nproc-per-node 2 --rdzv-backend c10d "
        "--rdzv-endpoint 127.0.0.1:4000 --rdzv-id r --max-restarts 2 --ft-rank-section-timeouts setup:60,step:10 "
        "--ft-rank-out-of-section-timeout 10 --monitor-interval 0.3 --ft-workload-check-interval 1 "
        "--ft-per-cycle-applog-prefix /w/runs/r/logs/train_cycle.log --ft-nvrx-logfile /w/runs/r/logs/launcher.log "
        "--ft-log-server-port 5000 --ft-no-restart-exit-code 93 -m harness.nemesis --fault none --run-dir /w/runs/r "
        "-- /h/reference.py --train-iters 40 --save /w/runs/r/checkpoints --save-interval 10 --async-save "
        "--enable-ft-package --ft-num-warmup-iters 0 --use-persistent-ckpt-worker --async-strategy nvrx --seed 7")


def words(config: str) -> list[str]:
    return shlex.split(healthy_path.rewrite(PLAN, config).split(" -m ", 1)[1])


def test_resilient_is_the_plan_without_the_nemesis():
    w = words("resilient")
    assert w[0] == "nvidia_resiliency_ext.fault_tolerance.launcher" and "harness.nemesis" not in w
    assert w[w.index("--ft-rank-section-timeouts") + 1] == "setup:60,step:10"
    assert {"--async-save", "--enable-ft-package", "--ft-per-cycle-applog-prefix"} <= set(w)
    assert w[w.index("/h/reference.py"):][-2:] == ["--seed", "7"]


def test_monitor_only_saves_synchronously_under_the_same_launcher():
    w = words("monitor-only")
    assert w[0] == "nvidia_resiliency_ext.fault_tolerance.launcher" and "--ft-rank-out-of-section-timeout" in w
    assert not {"--async-save", "--use-persistent-ckpt-worker", "--async-strategy", "nvrx"} & set(w)
    assert {"--enable-ft-package", "--save-interval"} <= set(w)


def test_plain_is_torchs_launcher_without_nvrx():
    w = words("plain")
    assert w[0] == "torch.distributed.run"
    assert not [x for x in w if x.startswith("--ft-") or x in ("--async-save", "--enable-ft-package", "nvrx", "93")]
    for kept in ("--nproc-per-node", "--rdzv-endpoint", "--max-restarts", "--monitor-interval", "--save-interval"):
        assert kept in w, kept
    assert w[-2:] == ["--seed", "7"] and healthy_path.rewrite(PLAN, "plain").startswith("cd /w/runs/r && ")


def test_iteration_and_save_lines_are_read_with_their_stamps():
    line = ("1:  [2026-12-02 00:30:05.810851] iteration        3/      12 | consumed samples:            6 | "
            "elapsed time per iteration (ms): 402.0 | learning rate: 1.0E-05 |")
    m = healthy_path.ITERATION_RE.search(line)
    assert m and (m.group(1), m.group(2), m.group(4)) == ("2026-12-02 00:30:05.810851", "3", "402.0")
    assert healthy_path.SAVED_RE.search("  successfully saved checkpoint from iteration       8 to /c").group(1) == "8"
    assert healthy_path._pct([1.0, 2.0, 3.0, 4.0, 100.0], 0.95) == 100.0
