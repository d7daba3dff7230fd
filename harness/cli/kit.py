"""`nvrx-qual kit DIR [--megatron-path PATH]`: assemble the offline GPU kit (harness.plan.kit).

Exit status: 0 the kit was written, 2 refused (the message names the value and the fix).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from harness.vocab.exitcodes import ExitStatus
from harness.plan.kit import PROJECT, SCRIPT_NAME, KitError, assemble


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dest", metavar="DIR", help="new directory for the kit")
    parser.add_argument("--megatron-path", default=os.environ.get("MEGATRON_PATH"),
                        help="Megatron-LM checkout (core_r0.19.0) [env MEGATRON_PATH]")


def run(args: argparse.Namespace) -> int:
    megatron = Path(args.megatron_path).expanduser().absolute() if args.megatron_path else None
    try:
        kit = assemble(Path(args.dest).expanduser().absolute(), megatron, project=PROJECT)
    except KitError as exc:
        for line in str(exc).splitlines():
            print(f"nvrx-qual: error: {line}", file=sys.stderr)
        return ExitStatus.REFUSED
    size = sum((kit.root / rel).stat().st_size for rel, _ in kit.files)
    print(f"nvrx-qual kit: {len(kit.files)} files, {size / 1e6:.1f} MB in {kit.root}\n"
          f"  MANIFEST.json sha256 {kit.manifest_sha256}: keep it apart from the kit; the script prints it on the "
          "node, compare the two\n"
          f"  copy it to the GPU node and run: {kit.root / SCRIPT_NAME} [OUT_DIR]")
    return ExitStatus.QUALIFIED
