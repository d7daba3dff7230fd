#!/bin/bash
# nvrx-qual: run gold-sbatch: megatron, fault kill on rank 1, 2 node(s) x 4 GPU(s), TP=2 PP=2, NVRx 0.7.0
#SBATCH --job-name=nvrx-qual-gold-sbatch
#SBATCH --account=acct
#SBATCH --partition=batch
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=4
#SBATCH --time=00:30:00
#SBATCH --output=<WORK>/runs/gold-sbatch/logs/slurm-%x-%j.out
#SBATCH --error=<WORK>/runs/gold-sbatch/logs/slurm-%x-%j.err

set -euo pipefail
cd <MEGATRON>

RUN_DIR=<WORK>/runs/gold-sbatch
# Every test needs a fresh run ID: a marker (one per planned fault) stops replacement workers from
# injecting again.
for marker in "$RUN_DIR"/fault_injected*.json; do
  case "${marker##*/}" in
    fault_injected.json|fault_injected.[2-9].json|fault_injected.[1-9][0-9].json)
      echo "nvrx-qual: $RUN_DIR already holds ${marker##*/}: plan a new run ID" >&2
      exit 2;;
  esac
done

export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
# The batch step runs on the first node: ask its OS for free ports (rendezvous, NVRx log server).
read -r RDZV_PORT NVRX_LOG_SERVER_PORT < <(<PYTHON> -c 'import socket, sys; ss = [socket.socket() for _ in range(int(sys.argv[1]))]; [s.bind(("", 0)) for s in ss]; print(*(s.getsockname()[1] for s in ss))' 2)
export RDZV_ENDPOINT="${MASTER_ADDR}:${RDZV_PORT}"
export NNODES=${SLURM_NNODES}
export GPUS_PER_NODE=4
export PYTHONUNBUFFERED=1
# TP=2, CP=1 without FSDP on pre-Blackwell (hopper): Megatron asserts it is 1
export CUDA_DEVICE_MAX_CONNECTIONS=1

set +e
srun \
    --ntasks="${NNODES}" \
    --ntasks-per-node=1 \
    --gpus-per-node=4 \
    --job-name=nvrx-qual-gold-sbatch \
    --container-image=nvcr.io/nvidia/pytorch:25.09-py3 \
    --container-mounts=/lustre:/lustre \
    <PYTHON> \
    -m nvidia_resiliency_ext.fault_tolerance.launcher \
    --nnodes 2 \
    --nproc-per-node 4 \
    --rdzv-backend c10d \
    --rdzv-endpoint "${RDZV_ENDPOINT}" \
    --rdzv-id gold-sbatch \
    --max-restarts 2 \
    --ft-rank-section-timeouts setup:900,step:120,checkpointing:600 \
    --ft-rank-out-of-section-timeout 180 \
    --ft-per-cycle-applog-prefix <WORK>/runs/gold-sbatch/logs/train_cycle.log \
    --ft-nvrx-logfile <WORK>/runs/gold-sbatch/logs/launcher.log \
    --ft-log-server-port "${NVRX_LOG_SERVER_PORT}" \
    --ft-cycle-info-dir <WORK>/runs/gold-sbatch/cycle_infos \
    --ft-checkpoint-iteration-file <WORK>/runs/gold-sbatch/checkpoints/latest_checkpointed_iteration.txt \
    --ft-no-restart-exit-code 93 \
    -m harness.nemesis \
    --fault kill \
    --fault-rank 1 \
    --run-dir <WORK>/runs/gold-sbatch \
    --checkpoint-dir <WORK>/runs/gold-sbatch/checkpoints \
    -- <MEGATRON>/pretrain_gpt.py \
    --tensor-model-parallel-size 2 \
    --pipeline-model-parallel-size 2 \
    --num-layers 4 \
    --hidden-size 512 \
    --num-attention-heads 8 \
    --seq-length 1024 \
    --max-position-embeddings 1024 \
    --micro-batch-size 1 \
    --global-batch-size 8 \
    --train-iters 100 \
    --lr 1e-4 \
    --min-lr 1e-5 \
    --lr-decay-style cosine \
    --lr-warmup-iters 10 \
    --bf16 \
    --use-distributed-optimizer \
    --mock-data \
    --tokenizer-type NullTokenizer \
    --vocab-size 32000 \
    --save <WORK>/runs/gold-sbatch/checkpoints \
    --load <WORK>/runs/gold-sbatch/checkpoints \
    --save-interval 5 \
    --ckpt-format torch_dist \
    --async-save \
    --log-interval 1 \
    --eval-iters 0 \
    --enable-ft-package \
    --ft-num-warmup-iters 0 \
    --use-persistent-ckpt-worker \
    --eval-interval 100 \
    --no-gradient-accumulation-fusion
launcher_status=$?
set -e
echo "nvrx-qual: launcher exit status ${launcher_status}; verifying $RUN_DIR"
# The verdict, not the launcher's exit status, decides: 0 qualified, 1 a criterion failed.
<PYTHON> -m harness verify "$RUN_DIR"
