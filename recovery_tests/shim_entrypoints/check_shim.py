"""Exercise every CUDA call the shim maps, with the shim installed (`with`) or not
(`without`), and print one JSON object {patch name: {"ok": bool, "detail": str}}.
Run in a subprocess: the shim patches torch for the life of the process."""

from __future__ import annotations

import json
import os
import sys
import traceback


def checks(torch):
    cuda = torch.cuda

    def dynamo_disabled():
        def f(x):
            return x

        assert torch.compile(f) is f, "torch.compile wrapped the function: dynamo is on"

    def device_present():
        assert cuda.is_available() and cuda.device_count() == 1 and cuda.current_device() == 0
        cuda.set_device(0)
        cuda.synchronize()
        cuda._lazy_init()

    def device_properties():
        assert cuda.get_device_properties(0).total_memory > 0
        assert cuda.get_device_capability() == (8, 0)
        assert "CPU" in cuda.get_device_name()

    def rng_is_cpu_generator():
        assert cuda.default_generators[0] is torch.default_generator
        cuda.manual_seed(7)
        a = torch.rand(3)
        cuda.manual_seed_all(7)
        assert torch.equal(a, torch.rand(3)), "cuda.manual_seed did not seed the CPU generator"
        state = cuda.get_rng_state()
        b = torch.rand(3)
        cuda.set_rng_state(state)
        assert torch.equal(b, torch.rand(3)), "cuda.set_rng_state did not restore the CPU generator"
        ran = []
        cuda._lazy_call(lambda: ran.append(1))
        assert ran == [1], "_lazy_call did not run at once"

    def streams_and_events():
        s = cuda.Stream()
        with cuda.stream(s):
            cuda.current_stream().wait_stream(s)
        e, f = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        e.record()
        f.record()
        f.synchronize()
        assert e.elapsed_time(f) >= 0.0 and not cuda.is_current_stream_capturing()
        cuda.default_stream().synchronize()

    def nvtx_noop():
        cuda.nvtx.range_push("x")
        cuda.nvtx.range_pop()
        with cuda.nvtx.range("y"):
            pass

    def factories_on_cpu():
        assert torch.empty(2, device="cuda").device.type == "cpu"
        assert torch.zeros(2, device=0).device.type == "cpu"
        assert torch.arange(3, device=torch.device("cuda", 0)).device.type == "cpu"
        assert torch.ones(1).new_zeros(2, device="cuda:0").device.type == "cpu"

    def moves_are_identity():
        t = torch.ones(2)
        assert t.cuda() is t and t.to("cuda").device.type == "cpu" and t.pin_memory() is t
        assert t.to(torch.device("cuda"), dtype=torch.float64).dtype == torch.float64
        m = torch.nn.Linear(2, 2)
        assert m.cuda() is m and m.to("cuda").weight.device.type == "cpu"

    def type_strings_cuda():
        assert torch.ones(1).type() == "torch.cuda.FloatTensor"
        assert torch.ones(1, dtype=torch.bfloat16).type() == "torch.cuda.BFloat16Tensor"
        assert torch.ones(1).type(torch.float64).dtype == torch.float64
        assert torch.ones(1).type("torch.cuda.HalfTensor").dtype == torch.float16

    def process_group_without_device():
        import torch.distributed as dist

        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1,
                                device_id=torch.device("cuda", 0))
        try:
            t = torch.ones(1)
            dist.all_reduce(t)
            assert t.item() == 1.0
        finally:
            dist.destroy_process_group()

    return {name: fn for name, fn in locals().items() if callable(fn)}


def main() -> None:
    mode = sys.argv[1]
    if mode == "with":
        from harness.workloads import cuda_cpu_shim

        cuda_cpu_shim.install()
    import torch

    out = {}
    for name, fn in checks(torch).items():
        try:
            fn()
            out[name] = {"ok": True, "detail": ""}
        except Exception as exc:  # noqa: BLE001 - every failure is a result here
            out[name] = {"ok": False, "detail": f"{type(exc).__name__}: {exc}"[:300] or traceback.format_exc()[-300:]}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
