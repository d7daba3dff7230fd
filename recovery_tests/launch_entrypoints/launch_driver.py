"""A harness process for the signal tests: `launch()` of the fake launcher, exactly as
`nvrx-qual run` drives a launch (exit status through harness.cli.guard.guarded).

    launch_driver.py WORK_DIR [--disk-full] [--grace=S] [FAKE_LAUNCHER_ARGS...]

--disk-full: the plan is a disk-full run, so launch() mounts its tmpfs on the run's checkpoints/.
--grace=S: the SIGTERM-to-SIGKILL grace of the stop (default 10 s, `nvrx-qual run`'s); a test
that must wait it out shortens it.

The test signals or SIGKILLs this process and then checks what is left.
"""

from __future__ import annotations

import sys
from pathlib import Path

from harness.launch import job as launch
from harness.cli.guard import guarded
from harness.machine.nvrx import NvrxTarget
from harness.plan.commands import Command, Plan
from harness.plan.spec import RunSpec
from harness.vocab.topology import ConnectionsPolicy

FAKE_LAUNCHER = Path(__file__).parent / "fake_launcher.py"


def main(argv: list[str]) -> int:
    work = Path(argv[0])
    grace = [float(a.partition("=")[2]) for a in argv[1:] if a.startswith("--grace=")]
    rest = [a for a in argv[1:] if not a.startswith("--grace=")]
    fault = {"fault": "disk-full", "fault_at": "in-save"} if "--disk-full" in rest else {}
    rest = [a for a in rest if a != "--disk-full"]
    spec = RunSpec(workload="reference", work_dir=work, run_id="signal-test", gpus_per_node=2, **fault)
    if fault:
        spec.layout.checkpoints.mkdir(parents=True)  # what prepare() makes: a fresh, empty checkpoints/
    command = Command(argv=(sys.executable, str(FAKE_LAUNCHER), *rest), cwd=work)
    plan = Plan(spec=spec, nvrx=NvrxTarget("0.7.0"), launcher=command, srun=None,
                connections=ConnectionsPolicy(None, "not applicable"))
    def acknowledge(text: str) -> None:  # as `nvrx-qual run` shows it (a progress line), here on stderr
        print(f"launch_driver: {text}", file=sys.stderr, flush=True)

    return guarded(lambda: launch.launch(plan, deadline_s=60.0, tick_s=0.05, term_grace_s=grace[-1] if grace else 10.0,
                                         on_signal=acknowledge).launcher_exit_code or 0, "launch_driver", debug=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
