"""A small pretrain_gpt equivalent written against megatron.training 0.19's own API.

The `megatron-cpu` workload runs this when no Megatron-LM checkout is given (MEGATRON_PATH
unset): megatron-core's wheel ships `megatron.training` but not `pretrain_gpt.py`. It is
Megatron's loop, unchanged: `parse_and_validate_args` -> `gpt_config_from_args` ->
`pretrain_cfg_container_from_args` -> `pretrain(...)`, Megatron's mock GPT dataset, Megatron's
own GPT model builder, a forward step and loss shaped like pretrain_gpt.py's, for any tensor,
pipeline and data parallel layout (the batch reaches each stage and TP rank as Megatron's own
`dummy_train_step` hands it out). With MEGATRON_PATH the unmodified
`pretrain_gpt.py` of that checkout runs instead.

Importing this module has no side effect and does not import Megatron: every function
imports what it needs, so the GPU tier's acceptance tests can do

    from harness.workloads.megatron_pretrain import build_gpt_model, gpt_model_config

after Megatron has parsed its arguments and initialized its process groups.

    python harness/workloads/entrypoints/pretrain_gpt_cpu.py <pretrain_gpt.py arguments>
"""

from __future__ import annotations

import sys
from functools import partial
from typing import Any


def gpt_model_config(args: Any) -> Any:
    """Megatron's GPTModelConfig for parsed arguments (`megatron.training.get_args()`)."""
    from megatron.training.argument_utils import gpt_config_from_args

    return gpt_config_from_args(args)


def build_gpt_model(model_config: Any, pg_collection: Any = None, pre_process: bool | None = None,
                    post_process: bool | None = None, vp_stage: int | None = None) -> Any:
    """One GPTModel stage built by Megatron's own GPTModelBuilder (the builder `pretrain`
    uses for a GPTModelConfig). `pg_collection` defaults to the initialized model-parallel
    groups (`ProcessGroupCollection.use_mpu_process_groups()`)."""
    from megatron.training.models.gpt import GPTModelBuilder

    if pg_collection is None:
        from megatron.core.process_groups_config import ProcessGroupCollection

        pg_collection = ProcessGroupCollection.use_mpu_process_groups()
    return GPTModelBuilder(model_config).build_model(pg_collection, pre_process=pre_process,
                                                     post_process=post_process, vp_stage=vp_stage)


def loss_func(loss_mask: Any, output_tensor: Any) -> tuple[Any, Any, dict[str, Any]]:
    """Summed token loss, token count, and the `lm loss` report (as pretrain_gpt.py)."""
    import torch

    losses = output_tensor.view(-1).float()
    mask = loss_mask.view(-1).float()
    loss = torch.sum(losses * mask)
    num_tokens = mask.sum().clone().detach().to(torch.int)
    return loss, num_tokens, {"lm loss": torch.cat([loss.clone().detach().view(1), num_tokens.view(1)])}


def get_batch(data_iterator: Any) -> tuple[Any, Any, Any, Any, Any]:
    """tokens, labels, loss_mask, attention_mask, position_ids of the next micro batch, the
    way pretrain_gpt.py and Megatron's own `dummy_train_step` get them: a middle pipeline stage
    gets none (its input comes from the previous stage), tensor-parallel rank 0 reads the
    batch and `get_batch_on_this_tp_rank` broadcasts what its stage needs to the other TP
    ranks, `get_batch_on_this_cp_rank` slices it along the sequence for context parallelism."""
    from megatron.core import mpu
    from megatron.core.utils import get_batch_on_this_cp_rank, get_batch_on_this_tp_rank
    from megatron.training import get_args

    args = get_args()
    first, last = mpu.is_pipeline_first_stage(), mpu.is_pipeline_last_stage()
    if not (first or last):
        return None, None, None, None, None
    tp_rank = mpu.get_tensor_model_parallel_rank()
    batch: dict[str, Any] = {}
    if tp_rank == 0:
        batch = {k: (v.cuda(non_blocking=True) if v is not None else None) for k, v in next(data_iterator).items()}
        batch.setdefault("attention_mask", None)
    batch = get_batch_on_this_tp_rank(
        batch, has_cu_seqlens=False, is_hybrid_cp=False,
        create_attention_mask_in_dataloader=args.create_attention_mask_in_dataloader,
        broadcast_src_rank=mpu.get_tensor_model_parallel_src_rank(),
        broadcast_group=mpu.get_tensor_model_parallel_group(), cp_size=args.context_parallel_size,
        tp_rank=tp_rank, micro_batch_size=args.micro_batch_size, seq_length=args.seq_length,
        mtp_on_this_rank=False, pipeline_model_parallel_size=args.pipeline_model_parallel_size,
        is_pipeline_first_stage=first, is_pipeline_last_stage=last)
    batch = get_batch_on_this_cp_rank(batch, is_hybrid_cp=False, cp_group=mpu.get_context_parallel_group())
    return (batch["tokens"], batch["labels"], batch["loss_mask"], batch.get("attention_mask"),
            batch["position_ids"])


def forward_step(data_iterator: Any, model: Any) -> tuple[Any, Any]:
    from megatron.training import get_timers

    timers = get_timers()
    timers("batch-generator", log_level=2).start()
    tokens, labels, loss_mask, attention_mask, position_ids = get_batch(data_iterator)
    timers("batch-generator").stop()
    output_tensor = model(tokens, position_ids, attention_mask, labels=labels, loss_mask=loss_mask)
    return output_tensor, partial(loss_func, loss_mask)


def train_valid_test_datasets_provider(train_val_test_num_samples: list[int]) -> tuple[Any, Any, Any]:
    """Megatron's MockGPTDataset (nothing is read or downloaded)."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDatasetConfig, MockGPTDataset
    from megatron.core.tokenizers.utils.build_tokenizer import build_tokenizer
    from megatron.training import get_args, print_rank_0

    args = get_args()
    if not args.mock_data:
        raise SystemExit("megatron_pretrain: only --mock-data is supported; give MEGATRON_PATH to run "
                         "Megatron-LM's pretrain_gpt.py on real data")
    config = GPTDatasetConfig(
        random_seed=args.seed, sequence_length=args.seq_length, blend=None, blend_per_split=None,
        split=args.split, tokenizer=build_tokenizer(args), reset_position_ids=args.reset_position_ids,
        reset_attention_mask=args.reset_attention_mask, eod_mask_loss=args.eod_mask_loss,
        create_attention_mask=args.create_attention_mask_in_dataloader,
        num_dataset_builder_threads=args.num_dataset_builder_threads, path_to_cache=args.data_cache_path,
    )
    print_rank_0("> building train, validation, and test datasets for GPT ...")
    datasets = BlendedMegatronDatasetBuilder(MockGPTDataset, train_val_test_num_samples, lambda: True,
                                             config).build()
    print_rank_0("> finished creating GPT datasets ...")
    return datasets


def main(argv: list[str] | None = None) -> None:
    from megatron.core.enums import ModelType
    from megatron.training import pretrain
    from megatron.training.argument_utils import pretrain_cfg_container_from_args
    from megatron.training.arguments import parse_and_validate_args

    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    train_valid_test_datasets_provider.is_distributed = True  # type: ignore[attr-defined]
    args = parse_and_validate_args(args_defaults={"tokenizer_type": "NullTokenizer"})
    args_model_cfg = gpt_model_config(args)
    pretrain(pretrain_cfg_container_from_args(args, args_model_cfg), train_valid_test_datasets_provider,
             ModelType.encoder_or_decoder, forward_step)


if __name__ == "__main__":
    main()
