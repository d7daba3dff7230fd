"""Entrypoint of Megatron-Bridge's pretraining of a tiny GPT (`--workload megatron-bridge`, docs/megatron-bridge.md):
Bridge's own `pretrain` and GPT step through harness.workloads.bridge_pretrain, from
Megatron-LM's flag names. It lives beside pretrain_gpt_cpu.py for the same reason: a script's
directory goes first on sys.path, and harness/workloads/ has a `megatron.py` that would shadow
the `megatron` namespace Bridge and megatron-core share. Everything runs under the __main__
guard (a spawned checkpoint worker imports this file again)."""

if __name__ == "__main__":
    from harness.workloads.bridge_pretrain import main

    main()
