"""Entrypoint of the megatron-cpu workload without a Megatron-LM checkout: Megatron's own
loop through harness.workloads.megatron_pretrain. It lives in a directory of its own because
a script's directory goes first on sys.path, and harness/workloads/ has a `megatron.py` that
would shadow Megatron's package. The persistent checkpoint worker is spawned and imports
this file again: everything runs under the __main__ guard."""

if __name__ == "__main__":
    from harness.workloads.megatron_pretrain import main

    main()
