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
# The batch step runs on the first node: ports free on it (rendezvous, NVRx log server), outside the
# range its OS hands out by itself, so no srun socket takes one before the launcher binds it.
read -r RDZV_PORT NVRX_LOG_SERVER_PORT < <(<PYTHON> - 2 <<'NVRX_QUAL_PORTS'
def pick_ports(count, host="", hold=None):
    """`count` distinct TCP ports that bind on `host` now, outside the OS's ephemeral range
    (10000 up to the range, or above it, where there is room; port 0's choice otherwise).
    Self-contained: its source is what Slurm nodes run (FREE_PORTS_SNIPPET). `hold`, a list,
    receives the abstract Unix sockets that mark the picks for other pickers of this host."""
    import random
    import socket
    import sys
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(w) for w in f.read().split()[:2])
    except (OSError, ValueError):
        low, high = 32768, 60999
    spans = [s for s in ((10000, low - 1), (high + 1, 65535)) if s[1] - s[0] >= 1000]
    rng, bound, marks = random.SystemRandom(), [], []
    try:
        for _ in range(100 * count):
            if len(bound) == count:
                break
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind((host, rng.randint(*rng.choice(spans)) if spans else 0))
                if sys.platform.startswith("linux"):  # abstract names are Linux's
                    mark = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    try:
                        mark.bind("\0nvrx-qual-port-%d" % sock.getsockname()[1])  # taken: another's pick
                    except OSError:
                        mark.close()
                        raise
                    marks.append(mark)
            except OSError:
                sock.close()
                continue
            bound.append(sock)
        if len(bound) < count:
            raise OSError("no %d free port(s) on %r after %d tries" % (count, host, 100 * count))
        if hold is not None:
            hold.extend(marks)
            marks = []
        return [b.getsockname()[1] for b in bound]
    finally:
        for s in bound + marks:
            s.close()
import sys
print(*pick_ports(int(sys.argv[1])))
NVRX_QUAL_PORTS
)
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
