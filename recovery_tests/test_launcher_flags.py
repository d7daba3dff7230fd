"""The generated commands are valid for the tools that will run them: the launcher argv is
parsed by the installed NVRx launcher's own argument parser (a flag that version does not
know fails), and the Megatron argv carries exactly the seed's flags of docs/megatron.md."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.processes import run_in_session

from harness.machine.nvrx import LAUNCHER_MODULE, NvrxTarget
from harness.plan.commands import Command

GOLDEN = Path(__file__).parent / "golden"

# One interpreter parses a batch of argv lists (importing NVRx and torch costs seconds).
PARSE_SNIPPET = (
    "import json, sys\n"
    "from nvidia_resiliency_ext.fault_tolerance.launcher import get_args_parser\n"
    "import importlib.metadata as md\n"
    "out = []\n"
    "for argv in json.load(sys.stdin):\n"
    "    args = get_args_parser().parse_args(argv)\n"
    "    out.append({'version': md.version('nvidia-resiliency-ext'), 'module': args.module,\n"
    "                'script': args.training_script, 'script_args': args.training_script_args})\n"
    "print(json.dumps(out))\n"
)


def launcher_args_from_golden(path: Path) -> list[str]:
    """The launcher's own arguments (after `python -m <launcher module>`) from a golden file."""
    text = path.read_text()
    if path.suffix == ".sh":
        body = text[text.index("\nsrun \\\n") + 1:text.index("\nlauncher_status=")]
        words = shlex.split(body.replace("\\\n", " "))
    else:
        line = next(l for l in text.splitlines() if l.startswith("cd "))
        words = shlex.split(line)
    words = [w.replace("<PORT>", "29500").replace("${RDZV_ENDPOINT}", "node001:29400")
             .replace("${NVRX_LOG_SERVER_PORT}", "50071") for w in words]
    start = words.index(LAUNCHER_MODULE) + 1
    return words[start:]


def golden_versions() -> dict[str, list[Path]]:
    out: dict[str, list[Path]] = {}
    for path in sorted(GOLDEN.glob("nvrx-*")):
        out.setdefault(re.match(r"nvrx-([\d.]+)_", path.name).group(1), []).append(path)
    return out


def parse_with(target: NvrxTarget, batch: list[list[str]]) -> subprocess.CompletedProcess:
    env = Command((), Path("."), (), (str(target.path),) if target.path else ()).environ(dict(os.environ))
    return run_in_session([sys.executable, "-W", "ignore", "-c", PARSE_SNIPPET], input=json.dumps(batch),
                          timeout_s=120, env=env)


@pytest.mark.parametrize("version", sorted(golden_versions()))
def test_golden_launcher_argv_parses_with_that_launcher(version, installed_launchers):
    targets = [t for t in installed_launchers if t.version == version]
    if not targets:
        pytest.skip(f"NVRx {version} is not installed here: tools/install-nvrx-target.sh {version} .nvrx/{version}")
    paths = golden_versions()[version]
    proc = parse_with(targets[0], [launcher_args_from_golden(p) for p in paths])
    assert proc.returncode == 0, f"NVRx {version} launcher refused a golden command:\n{proc.stderr[-3000:]}"
    for path, parsed in zip(paths, json.loads(proc.stdout)):
        assert parsed["version"] == version
        assert parsed["module"] is True and parsed["script"] == "harness.nemesis", path.name
        assert "--" in parsed["script_args"], path.name


def test_070_flags_are_refused_by_041_launcher(installed_launchers):
    """The check can fail: a 0.7.0-only flag set must not parse with the 0.4.1 parser."""
    old = [t for t in installed_launchers if t.version_tuple < (0, 6, 0)]
    if not old:
        pytest.skip("no NVRx < 0.6 installed here")
    proc = parse_with(old[0], [launcher_args_from_golden(GOLDEN / "nvrx-0.7.0_reference_single-node-defaults.txt")])
    assert proc.returncode != 0
    assert "--ft-per-cycle-applog-prefix" in proc.stderr


# docs/megatron.md, "Arguments of the GPU workload" (GBS = world = 2 here).
SEED_MEGATRON_ARGS = """
--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 1024
--max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 2
--train-iters 100 --lr 1e-4 --min-lr 1e-5 --lr-decay-style cosine --lr-warmup-iters 10
--bf16 --use-distributed-optimizer --mock-data --tokenizer-type NullTokenizer --vocab-size 32000
--save CKPT --load CKPT --save-interval 5 --ckpt-format torch_dist --async-save
--use-persistent-ckpt-worker --log-interval 1 --eval-iters 0
--enable-ft-package --ft-num-warmup-iters 0
"""


def pairs(words: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for i, word in enumerate(words):
        if word.startswith("--"):
            nxt = words[i + 1] if i + 1 < len(words) else None
            out[word] = nxt if nxt is not None and not nxt.startswith("--") else None
    return out


def megatron_args_from_golden(name: str) -> list[str]:
    line = next(l for l in (GOLDEN / name).read_text().splitlines() if l.startswith("cd "))
    words = shlex.split(line)
    return words[words.index("<MEGATRON>/pretrain_gpt.py") + 1:]


def test_megatron_argv_is_the_seed_default_run():
    got = pairs(megatron_args_from_golden("nvrx-0.7.0_megatron_single-node-defaults.txt"))
    want = pairs(SEED_MEGATRON_ARGS.split())
    ckpt = got["--save"]
    assert ckpt.endswith("/checkpoints") and got["--load"] == ckpt, "--load must equal --save"
    want["--save"] = want["--load"] = ckpt
    extra = {k: v for k, v in got.items() if k not in want}
    # Beyond the seed: Megatron 0.19 needs --eval-interval; without apex the output layer
    # needs --no-gradient-accumulation-fusion (recovery_tests/test_megatron_acceptance.py).
    assert extra == {"--tensor-model-parallel-size": "1", "--pipeline-model-parallel-size": "1",
                     "--eval-interval": "100", "--no-gradient-accumulation-fusion": None}
    assert {k: got[k] for k in want} == want


def test_megatron_argv_without_transformer_engine():
    got = pairs(megatron_args_from_golden("nvrx-0.7.0_megatron_hang-no-te.txt"))
    assert got["--transformer-impl"] == "local"
    assert {"--no-gradient-accumulation-fusion", "--no-persist-layer-norm", "--no-masked-softmax-fusion",
            "--no-bias-dropout-fusion", "--no-bias-gelu-fusion"} <= set(got)


def test_megatron_argv_with_apex_keeps_megatrons_fused_paths():
    got = pairs(megatron_args_from_golden("nvrx-0.7.0_megatron_with-apex-short-deadlines.txt"))
    assert not {k for k in got if k.startswith("--no-") and "fusion" in k or k == "--no-persist-layer-norm"}


def test_megatron_argv_multinode_tp2_pp2():
    got = pairs(megatron_args_from_golden("nvrx-0.7.0_megatron_two-nodes-tp2-pp2.txt"))
    assert got["--tensor-model-parallel-size"] == "2" and got["--pipeline-model-parallel-size"] == "2"
    assert got["--global-batch-size"] == "8"  # the active GPU count; DP=2 divides it
