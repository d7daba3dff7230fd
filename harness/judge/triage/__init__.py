"""Cross-rank failure triage: which rank failed first, and why.

scan (a fold of history's line stream, harness.read.history.LineStream, into typed records) ->
classify (the root cause and the symptoms) -> advice; the Markdown of a Triage is
harness.report.diagnosis.

The Slurm guide's "Diagnostic des défaillances" in code: scan every rank's output, not
only rank 0's; the first non-NCCL Python traceback is the root cause and the NCCL
timeouts that follow on the other ranks are downstream symptoms. Classify quickly:

    oom        CUDA out of memory: rank, phase (forward/backward/optimizer), batch, sequence
               length, TP/PP/CP/DP and the memory numbers, recorded before anything is changed
    shape      shape / divisibility errors: WORLD_SIZE = TP x DP x CP x PP, heads % TP == 0
    import     wrong worktree, missing `uv sync`, stale PYTHONPATH
    collective a collective of the run's backend (NCCL, or gloo on CPU) failed and no rank left a
               traceback of another kind: allocation, port reachability, MASTER_ADDR
               resolution, identical commands on every rank; the summary names the backend
    traceback  any other first non-NCCL traceback
    exit       a rank died without a traceback (a signal such as SIGKILL, or an exit code)
    hang       the NVRx rank monitor's section/heartbeat timeout fired, no rank crashed
    none       nothing failed

Sources: every file under RUN_DIR/logs (torch elastic's per-rank stderr.log/error.json
included) and every other *.log/*.err/*.out of the run directory (Slurm outputs copied in),
streamed line by line: logs can be gigabytes, hold binary junk, or end in a line cut off by
a killed process. Lines of several ranks may interleave in one file; each process's
traceback is reassembled from its own prefixed lines (`[rank5]: `, NVRx's `5: `, 0.4.1's
`[default5]:`). "First" means earliest in time where the lines carry a stamp (a line
without one takes its process's nearest stamp), then the earliest cycle, then file order.
"""

from harness.vocab.dialect import RunDirError
from harness.judge.triage.classify import diagnose, triage_run
from harness.judge.triage.model import CATEGORIES, ROOT_TRACEBACK_KINDS, OomMemory, ParallelConfig, Symptom, Triage

__all__ = ["CATEGORIES", "ROOT_TRACEBACK_KINDS", "OomMemory", "ParallelConfig", "RunDirError", "Symptom", "Triage",
           "diagnose", "triage_run"]
