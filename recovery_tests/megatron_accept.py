"""Hold planned pretrain_gpt.py argument lists against Megatron-core's own code.

Run as a script in its own interpreter with megatron-core 0.19.2 on PYTHONPATH (Megatron
keeps its arguments in module globals, so it never runs inside pytest's process):

    PYTHONPATH=.megatron-cpu python recovery_tests/megatron_accept.py CASES.json

CASES.json is a list of {"id", "argv" (without the entrypoint), "world_size", "env" (the
plan's environment for the workers), "device_major" (the GPU architecture the plan is for:
validate_args asks torch.cuda.get_device_properties for it, answered with this number and
nothing else), "components" (the component stages to run, below)}.
Megatron is imported once; each case runs in a forked child (fresh globals, same imports)
and prints one JSON line {"id", "ok", "stage", "error"}: the stage that failed and
Megatron's own exception text. Stages, in the order pretrain() meets them:

- parse_args: Megatron's argparse (unknown or malformed flags);
- validate_args: its consistency checks (pretrain_gpt.py's args_defaults);
- num_samples: get_train_valid_test_num_samples(), the first thing pretrain() computes;
- the components asked for, on the TransformerConfig Megatron derives from the arguments
  (core_transformer_config_from_args), in this order:
  - layernorm: the local GPT spec's input layer norm built by build_module (apex or torch);
  - softmax: the first bf16 core-attention softmax, FusedScaleMaskSoftmax constructed as
    DotProductAttention constructs it, on a causal [1, heads, seq, seq] bf16 score tensor;
  - grad_accum_fusion: ColumnParallelLinear's own condition (the config's
    gradient_accumulation_fusion against tensor_parallel.layers._grad_accum_fusion_available);
  - fusions: the bias-dropout and bias-activation fusions the config enables (torch.compile).
"""

from __future__ import annotations

import json
import os
import sys
import traceback


def _error(exc: BaseException) -> str:
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return text.splitlines()[-1] if text else type(exc).__name__


def _components(args, wanted: list[str]) -> None:
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.tensor_parallel import layers
    from megatron.core.transformer.spec_utils import build_module
    from megatron.training.argument_utils import core_transformer_config_from_args

    global _STAGE
    _STAGE = "config"
    config = core_transformer_config_from_args(args)
    if "layernorm" in wanted:
        _STAGE = "layernorm"
        spec = get_gpt_layer_local_spec()
        build_module(spec.submodules.input_layernorm, config=config, hidden_size=config.hidden_size,
                     eps=config.layernorm_epsilon)
    if "softmax" in wanted:
        _STAGE = "softmax"
        _softmax(args, config)
    if "grad_accum_fusion" in wanted:
        _STAGE = "grad_accum_fusion"
        if config.gradient_accumulation_fusion and not layers._grad_accum_fusion_available:
            raise RuntimeError("ColumnParallelLinear: gradient_accumulation_fusion is on but the CUDA extension "
                               "fused_weight_gradient_mlp_cuda is not importable")
    if "model" in wanted:
        _model(args)
    if "fusions" in wanted:
        _STAGE = "fusions"
        enabled = [name for name in ("bias_dropout_fusion", "bias_activation_fusion") if getattr(config, name)]
        if enabled:
            raise RuntimeError(f"{', '.join(enabled)} on: torch.compile builds kernels inside the first step")


def _model(args) -> None:
    """Megatron's GPT model for the parsed arguments, built by the project's pretrain
    equivalent (Megatron's own GPTModelBuilder), then one bf16 forward pass through it (the
    core attention's softmax included) on the CPU, with the megatron-cpu workload's CUDA->CPU
    shim. Tensor and pipeline parallel size 1, one process."""
    global _STAGE
    _STAGE = "model_import"
    from harness.workloads import cuda_cpu_shim
    from harness.workloads.megatron_pretrain import build_gpt_model, gpt_model_config

    import torch
    import torch.distributed as dist

    cuda_cpu_shim.install()
    from megatron.core import parallel_state, tensor_parallel

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)
    tensor_parallel.model_parallel_cuda_manual_seed(args.seed)
    _STAGE = "model_build"
    model = build_gpt_model(gpt_model_config(args))
    if args.bf16 or args.fp16:  # what pretrain's get_model does: Megatron's own half-precision wrapper
        from megatron.core.transformer.module import Float16Module

        model = Float16Module(model.config, model)
    _STAGE = "forward"
    tokens = torch.randint(0, args.padded_vocab_size if getattr(args, "padded_vocab_size", None) else args.vocab_size,
                           (args.micro_batch_size, args.seq_length))
    position_ids = torch.arange(args.seq_length).unsqueeze(0).expand(args.micro_batch_size, -1)
    with torch.no_grad():
        out = model(tokens, position_ids, None)
    if not torch.isfinite(out.float()).all():
        raise RuntimeError("the forward pass produced non-finite logits")


def _softmax(args, config) -> None:
    import torch
    from megatron.core.fusions.fused_softmax import FusedScaleMaskSoftmax
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.utils import attention_mask_func

    softmax = FusedScaleMaskSoftmax(input_in_fp16=config.fp16, input_in_bf16=config.bf16,
                                    attn_mask_type=AttnMaskType.causal,
                                    scaled_masked_softmax_fusion=config.masked_softmax_fusion,
                                    mask_func=attention_mask_func, softmax_in_fp32=config.attention_softmax_in_fp32,
                                    scale=None)
    heads = config.num_attention_heads // config.tensor_model_parallel_size
    scores = torch.zeros(args.micro_batch_size, heads, args.seq_length, args.seq_length, dtype=torch.bfloat16)
    # The causal mask Megatron would make itself lives on the GPU; the same mask, on the CPU.
    mask = torch.ones(1, 1, args.seq_length, args.seq_length, dtype=torch.bool).triu(diagonal=1)
    softmax(scores, mask)


_STAGE = "import"


def _run(case: dict) -> None:
    global _STAGE
    from megatron.training.arguments import parse_args, validate_args
    from megatron.training.global_vars import set_args
    from megatron.training.training import get_train_valid_test_num_samples

    os.environ["WORLD_SIZE"] = str(case["world_size"])
    os.environ.pop("RANK", None)
    os.environ.update(case.get("env", {}))
    if case.get("device_major") is not None:
        import types

        import torch

        major = int(case["device_major"])
        torch.cuda.get_device_properties = lambda device=None: types.SimpleNamespace(major=major)
    sys.argv = ["pretrain_gpt.py", *case["argv"]]
    _STAGE = "parse_args"
    args = parse_args()
    _STAGE = "validate_args"
    validate_args(args, {"tokenizer_type": "GPT2BPETokenizer"})  # pretrain_gpt.py's args_defaults
    set_args(args)
    _STAGE = "num_samples"
    get_train_valid_test_num_samples()
    if case.get("components"):
        _components(args, list(case["components"]))


def _child(case: dict, write_fd: int) -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    result = {"id": case["id"], "ok": True, "stage": None, "error": None}
    try:
        _run(case)
    except BaseException as exc:  # SystemExit from argparse included
        result.update(ok=False, stage=_STAGE, error=_error(exc))
    os.write(write_fd, json.dumps(result).encode())
    os._exit(0)


def main(path: str) -> int:
    with open(path, encoding="utf-8") as f:
        cases = json.load(f)
    import megatron.training.arguments  # noqa: F401  (imported once, before the forks)
    import megatron.training.training  # noqa: F401
    from megatron.core.models.gpt import gpt_layer_specs  # noqa: F401

    for case in cases:
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_fd)
            _child(case, write_fd)
        os.close(write_fd)
        chunks = []
        while chunk := os.read(read_fd, 65536):
            chunks.append(chunk)
        os.close(read_fd)
        _, status = os.waitpid(pid, 0)
        if chunks:
            print(b"".join(chunks).decode(), flush=True)
        else:
            print(json.dumps({"id": case["id"], "ok": False, "stage": "crash",
                              "error": f"the child exited with wait status {status} without a result"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
