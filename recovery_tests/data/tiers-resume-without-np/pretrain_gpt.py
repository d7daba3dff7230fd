"""A user's job script (MEGATRON_PATH/pretrain_gpt.py) whose restarts run without Megatron's
non-persistent flags: test_tiers_megatron_cpu.py's replacement that restores an older tier."""

import os
import sys

if __name__ == "__main__":  # Megatron's checkpoint worker imports this file again
    if os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        argv, skip = [], False
        for arg in sys.argv:
            if skip:
                skip = False
            elif arg.startswith("--non-persistent-"):
                skip = "=" not in arg
            else:
                argv.append(arg)
        sys.argv = argv
    from harness.workloads.megatron_pretrain import main

    main()
