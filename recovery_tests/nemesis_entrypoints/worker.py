"""Stand-in training worker for the nemesis tests and benchmark (stdlib only).

Reports how it was started (argv, __name__, sys.path[0], live threads) in
<control>/record.json, then idles until <control>/exit appears and exits with
--exit-code. With --advance it also writes Megatron's tracker itself, the way Megatron
does (open 'w' + write, not atomic), every --every seconds.
"""

import argparse
import json
import os
import sys
import threading
import time

SAFETY_DEADLINE_S = 120  # never outlive a test that forgot us


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--control", required=True)
    parser.add_argument("--exit-code", type=int, default=0)
    parser.add_argument("--exit-now", action="store_true", help="exit right after reporting")
    parser.add_argument("--advance", help="tracker file to advance")
    parser.add_argument("--every", type=float, default=0.3)
    parser.add_argument("--step", type=int, default=5)
    parser.add_argument("--spawn", action="store_true", help="run report_child in a spawned process first")
    parser.add_argument("--train-iters", type=int, help="Megatron's flag; the nemesis reads it, the worker ignores it")
    parser.add_argument("--read", action="append", default=[], help="read this file after reporting (a load)")
    return parser.parse_args()


def report_child(control: str) -> None:
    """Runs in a multiprocessing 'spawn' child, as Megatron's persistent checkpoint worker does."""
    with open(os.path.join(control, "spawned.json"), "w") as f:
        json.dump({"name": __name__, "argv": sys.argv, "threads": [t.name for t in threading.enumerate()]}, f)


def report(control: str) -> None:
    record = {
        "argv": sys.argv,
        "name": __name__,
        "path0": sys.path[0],
        "file": __file__,
        "pid": os.getpid(),
        "threads": sorted(t.name for t in threading.enumerate()),
    }
    tmp = os.path.join(control, "record.json.tmp")
    with open(tmp, "w") as f:
        json.dump(record, f)
    os.replace(tmp, os.path.join(control, "record.json"))


def main() -> int:
    print("entrypoint started", flush=True)
    args = parse_args()
    if args.spawn:
        import multiprocessing

        child = multiprocessing.get_context("spawn").Process(target=report_child, args=(args.control,))
        child.start()
        child.join()
    report(args.control)
    for path in args.read:
        with open(path, "rb") as f:
            f.read()
    if args.exit_now:
        return args.exit_code
    exit_file = os.path.join(args.control, "exit")
    deadline = time.monotonic() + SAFETY_DEADLINE_S
    iteration, next_save = 0, time.monotonic() + args.every
    while not os.path.exists(exit_file):
        if time.monotonic() > deadline:
            return 99
        if args.advance and time.monotonic() >= next_save:
            iteration += args.step
            with open(args.advance, "w") as f:
                f.write(str(iteration))
            next_save += args.every
        time.sleep(0.01)
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
