"""A harness process for the overlap tests: `nvrx-qual run`'s first run of a configuration
(harness.launch.runner.execute_with_baseline: the twin beside the fault run), whose two launches
are the fake launcher instead of ft_launcher, driven as the command is (harness.cli.guard.guarded,
progress lines on stdout).

    overlap_driver.py WORK_DIR [--twin-waits] [FAKE_LAUNCHER_ARGS...]

The fake launcher records no start of workers, so the twin launches at once (the reference's
row says it waits for the fault run's workers: harness.launch.baseline.twin_start), unless
--twin-waits: then it waits for a start that never comes.

Each launch runs `fake_launcher.py FAKE_LAUNCHER_ARGS... --record WORK_DIR/<run id>.record.json`
(its pid, tag and orphans), so the test knows both launches' processes. The test signals or
SIGKILLs this process and then checks what is left.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from harness import workloads
from harness.cli.guard import guarded
from harness.launch import runner
from harness.machine import ports
from harness.machine.nvrx import NvrxTarget, installed_version
from harness.plan import commands as planmod
from harness.plan import spec as specmod
from harness.plan.commands import Command

FAKE_LAUNCHER = Path(__file__).parent / "fake_launcher.py"


def main(argv: list[str]) -> int:
    work, fake_args = Path(argv[0]), argv[1:]
    if fake_args[:1] == ["--twin-waits"]:
        fake_args = fake_args[1:]
    else:
        workloads.get("reference").steps_wait = False
    real_build = planmod.build

    def build(spec, target, **kw):  # the plan as planned, its launcher command the fake one
        plan = real_build(spec, target, **kw)
        record = work / f"{spec.run_id}.record.json"
        return dataclasses.replace(plan, launcher=Command(
            argv=(sys.executable, str(FAKE_LAUNCHER), *fake_args, "--record", str(record)), cwd=work))

    runner.planmod.build = build  # the twin's plan is built inside the runner
    rdzv, log_port = ports.free_ports(2)
    spec = specmod.from_sources({"workload": "reference", "fault": "kill", "work_dir": work, "run_id": "overlap-test",
                                 "rdzv_endpoint": f"127.0.0.1:{rdzv}", "log_server_port": log_port}, {}, (),
                                detected={})
    plan = build(spec, NvrxTarget(installed_version()))
    runner.preflight(plan, {})

    def run() -> int:
        outcome = runner.execute_with_baseline(plan, deadline_s=60.0, out=sys.stdout)
        return 0 if outcome.verdict.qualified else 1

    return guarded(run, "overlap_driver", debug=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
