"""Judging a checkpoint imports no PyTorch (bench/harness_overhead.py: importing
torch.distributed.checkpoint cost the harness seconds of CPU on every verdict), and reads the
same values PyTorch would: the DCP metadata, the optimizer's step counters and every tensor of
state_equivalence, bf16 included, from checkpoints PyTorch wrote here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")

ROOT = Path(__file__).resolve().parent.parent
DIST = "optimizer.distributed.dp_group_idx_0.gbuf_idx_0.dtype_(torch.float32, torch.float32).bucket_idx_0"
FC1 = "decoder.layers.0.mlp.linear_fc1.weight"

JUDGE = """
import json, sys
from pathlib import Path
from harness.read import end_state, history
from harness.read.optimizer_record import read_optimizer_record
run, base = Path(sys.argv[1]), Path(sys.argv[2])
c = end_state.compare_checkpoints(run, base, shown="run", baseline_shown="base", iteration=30)
record = read_optimizer_record(run)
keys = history.dcp_optimizer_keys(run)
print(json.dumps({"torch": sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.")),
                  "note": c.note, "compared": dict(c.compared), "differing": c.differing_count,
                  "worst": dict(c.max_abs_diff), "diffs": [[d.key, d.dtype, d.max_abs_diff] for d in c.differing],
                  "steps": list(record.steps), "record_note": record.note, "keys": list(keys)}))
"""


def _state(fc1: "torch.Tensor", param: "torch.Tensor") -> dict:
    return {FC1: fc1, "embedding.word_embeddings.weight": torch.linspace(-1, 1, 24).reshape(6, 4),
            f"{DIST}.param": param, f"{DIST}.exp_avg": torch.full((40,), 1e-3),
            f"{DIST}.exp_avg_sq": torch.full((40,), 1e-6),
            "optimizer.distributed.dp_group_idx_0.optimizer": ({"param_groups": [{"step": 30.0}]},)}


def _save(directory: Path, values: dict) -> Path:
    directory.mkdir(parents=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(values, storage_writer=dcp.FileSystemWriter(str(directory)))
    return directory


def test_a_checkpoint_is_judged_without_importing_torch_and_reads_what_torch_reads(tmp_path):
    fc1 = torch.arange(16.0).reshape(4, 4).to(torch.bfloat16)
    fc1_changed = fc1.clone()
    fc1_changed[1, 2] = 7.25  # exactly representable in bf16: 6.0 -> 7.25
    param, param_changed = torch.linspace(0, 1, 40), torch.linspace(0, 1, 40) * (1 + 1e-3)
    run = _save(tmp_path / "run" / "iter_0000030", _state(fc1_changed, param_changed))
    base = _save(tmp_path / "base" / "iter_0000030", _state(fc1, param))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    out = subprocess.run([sys.executable, "-c", JUDGE, str(run), str(base)], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["torch"] == [], "judging a checkpoint imported PyTorch"
    assert got["note"] is None and got["record_note"] is None
    assert got["compared"] == {"model": 2, "optimizer.param": 1, "optimizer.exp_avg": 1, "optimizer.exp_avg_sq": 1}
    assert got["differing"] == 2 and got["steps"] == [30.0]
    expected = {FC1: ("bfloat16", float((fc1_changed.double() - fc1.double()).abs().max())),
                f"{DIST}.param": ("float32", float((param_changed.double() - param.double()).abs().max()))}
    assert {k: (dtype, diff) for k, dtype, diff in got["diffs"]} == expected
    assert got["keys"][:2] == [2, 6]  # exp_avg and exp_avg_sq of the 6 keys
