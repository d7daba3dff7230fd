"""CUDA -> CPU shim for the `megatron-cpu` workload's worker processes.

Megatron's training loop assumes CUDA everywhere: it asserts a device is present, seeds the
CUDA generator, creates tensors with `device='cuda'` or `torch.cuda.current_device()`, moves
batches with `.cuda()`, waits on streams and events, and the DistributedOptimizer checks
`param.type()` strings. On a machine without a GPU (CPU build of torch, gloo) every one of
those calls is mapped to its CPU meaning, and nothing else changes: this module maps CUDA to
CPU, it does not touch Megatron's code or repair its behaviour.

Loaded only into the workers of `--workload megatron-cpu` (and the checkpoint worker they
spawn): the `sitecustomize.py` that tools/install-megatron-cpu.sh writes calls
`install_for_worker()`, which acts only when NVRX_QUAL_CUDA_CPU_SHIM=1 (set by that
workload's plan) and LOCAL_RANK (set by the launcher for its workers, never for itself) are
both in the environment. On a machine where torch sees a GPU it refuses to install.

Each patch is one function registered with `@patch(reason)`; the reason is its one-line
why. Importing this module changes nothing; `install()` applies every patch once.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable

ENV_FLAG = "NVRX_QUAL_CUDA_CPU_SHIM"


@dataclass(frozen=True)
class Patch:
    name: str
    reason: str
    apply: Callable[[Any], None]


PATCHES: list[Patch] = []
_installed: list[str] = []


def patch(reason: str) -> Callable[[Callable[[Any], None]], Callable[[Any], None]]:
    def register(fn: Callable[[Any], None]) -> Callable[[Any], None]:
        PATCHES.append(Patch(fn.__name__.lstrip("_"), reason, fn))
        return fn
    return register


class ShimError(RuntimeError):
    """The shim refuses to run (a real GPU is present)."""


# ---------------------------------------------------------------- device mapping


def _is_cuda(device: Any) -> bool:
    """A CUDA device in any spelling torch accepts: 'cuda', 'cuda:1', torch.device('cuda'),
    or a bare ordinal (torch reads an int device as a CUDA index)."""
    import torch

    if device is None or isinstance(device, bool):
        return False
    if isinstance(device, int):
        return True
    if isinstance(device, str):
        return device.split(":", 1)[0] == "cuda"
    if isinstance(device, torch.device):
        return device.type == "cuda"
    return False


def _map_device(device: Any) -> Any:
    import torch

    return torch.device("cpu") if _is_cuda(device) else device


def _wrap_device_kwarg(fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if "device" in kwargs:
            kwargs["device"] = _map_device(kwargs["device"])
        return fn(*args, **kwargs)
    wrapper.__name__ = getattr(fn, "__name__", "wrapper")
    wrapper.__doc__ = getattr(fn, "__doc__", None)
    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


TENSOR_FACTORIES = (
    "empty", "zeros", "ones", "full", "tensor", "as_tensor", "arange", "range", "linspace", "logspace", "eye",
    "rand", "randn", "randint", "randperm", "empty_like", "zeros_like", "ones_like", "full_like", "rand_like",
    "randn_like", "randint_like", "empty_strided", "scalar_tensor", "tril_indices", "triu_indices",
)
TENSOR_NEW_METHODS = ("new_empty", "new_zeros", "new_ones", "new_full", "new_tensor", "new_empty_strided")
CUDA_TYPE_NAMES = {
    "torch.FloatTensor": "torch.cuda.FloatTensor",
    "torch.HalfTensor": "torch.cuda.HalfTensor",
    "torch.BFloat16Tensor": "torch.cuda.BFloat16Tensor",
    "torch.DoubleTensor": "torch.cuda.DoubleTensor",
    "torch.LongTensor": "torch.cuda.LongTensor",
    "torch.IntTensor": "torch.cuda.IntTensor",
    "torch.ByteTensor": "torch.cuda.ByteTensor",
    "torch.BoolTensor": "torch.cuda.BoolTensor",
}


# ---------------------------------------------------------------- the patches


@patch("torch.compile/Triton would build kernels with gcc inside the first monitored step; eager mode is what runs on CPU")
def _dynamo_disabled(torch: Any) -> None:
    os.environ["TORCHDYNAMO_DISABLE"] = "1"  # torch.compile reads it at every call and then returns the function


@patch("Megatron asserts 'Megatron requires CUDA.' and seeds the CUDA generator only when a device is counted")
def _device_present(torch: Any) -> None:
    cuda = torch.cuda
    cuda.is_available = lambda: True
    cuda.device_count = lambda: 1
    cuda.current_device = lambda: 0
    cuda.set_device = lambda device: None
    cuda.synchronize = lambda device=None: None
    cuda._lazy_init = lambda: None  # megatron.core.tensor_parallel.random imports and calls it


# The compute capability the stand-in device reports: an Ampere GPU's, so Megatron applies its
# pre-Blackwell rules (the megatron-cpu plan sets CUDA_DEVICE_MAX_CONNECTIONS=1 for TP/CP > 1).
CAPABILITY = (8, 0)


@patch("Megatron reads the device name, capability and memory size from its properties")
def _device_properties(torch: Any) -> None:
    class CpuStandInProperties:
        name = "CPU (nvrx-qual CUDA->CPU shim)"
        major, minor = CAPABILITY
        total_memory = 64 << 30
        multi_processor_count = 1
        uuid = "00000000-0000-0000-0000-000000000000"

    torch.cuda.get_device_properties = lambda device=None: CpuStandInProperties()
    torch.cuda.get_device_capability = lambda device=None: CAPABILITY
    torch.cuda.get_device_name = lambda device=None: CpuStandInProperties.name


@patch("Megatron seeds and checkpoints the CUDA RNG (model-parallel tracker); on CPU that generator is the CPU one")
def _rng_is_cpu_generator(torch: Any) -> None:
    cuda = torch.cuda
    generator = torch.default_generator
    cuda.default_generators = (generator,)
    cuda._lazy_call = lambda callable, **kwargs: callable()  # torch.cuda.random queues calls until init
    cuda.get_rng_state = lambda device="cuda": generator.get_state()
    cuda.set_rng_state = lambda new_state, device="cuda": generator.set_state(new_state)
    # onto the generator itself: torch.manual_seed calls torch.cuda.manual_seed_all (recursion)
    cuda.manual_seed = lambda seed: generator.manual_seed(int(seed))
    cuda.manual_seed_all = lambda seed: generator.manual_seed(int(seed))
    for name in ("get_rng_state", "set_rng_state", "manual_seed", "manual_seed_all"):
        setattr(cuda.random, name, getattr(cuda, name))


@patch("Megatron overlaps work on CUDA streams and orders it with events; on CPU all work is already in order")
def _streams_and_events(torch: Any) -> None:
    class Stream:
        def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
            self.device = torch.device("cpu")
            self.priority = priority

        def wait_stream(self, stream: Any) -> None:
            return None

        def wait_event(self, event: Any) -> None:
            return None

        def record_event(self, event: Any = None) -> Any:
            return event if event is not None else Event()

        def synchronize(self) -> None:
            return None

        def query(self) -> bool:
            return True

        def __enter__(self) -> "Stream":
            return self

        def __exit__(self, *exc: Any) -> None:
            return None

    class Event:
        def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
            self._time: float | None = None

        def record(self, stream: Any = None) -> None:
            import time

            self._time = time.perf_counter()

        def wait(self, stream: Any = None) -> None:
            return None

        def synchronize(self) -> None:
            return None

        def query(self) -> bool:
            return True

        def elapsed_time(self, end: "Event") -> float:
            if self._time is None or end._time is None:
                return 0.0
            return (end._time - self._time) * 1000.0

    default = Stream()
    cuda = torch.cuda
    cuda.Stream = Stream
    cuda.Event = Event
    cuda.current_stream = lambda device=None: default
    cuda.default_stream = lambda device=None: default
    cuda.set_stream = lambda stream: None
    cuda.stream = lambda stream=None: contextlib.nullcontext(stream)
    cuda.is_current_stream_capturing = lambda: False
    cuda.streams.Stream = Stream
    cuda.streams.Event = Event


@patch("Megatron marks ranges for Nsight (NVTX); the CPU build has no NVTX library")
def _nvtx_noop(torch: Any) -> None:
    nvtx = torch.cuda.nvtx
    nvtx.range_push = lambda msg: 0
    nvtx.range_pop = lambda: 0
    nvtx.range = lambda msg, *args, **kwargs: contextlib.nullcontext()


@patch("Megatron allocates with device='cuda' or device=torch.cuda.current_device(); those tensors belong on the CPU")
def _factories_on_cpu(torch: Any) -> None:
    for name in TENSOR_FACTORIES:
        fn = getattr(torch, name, None)
        if fn is not None:
            setattr(torch, name, _wrap_device_kwarg(fn))
    for name in TENSOR_NEW_METHODS:
        fn = getattr(torch.Tensor, name, None)
        if fn is not None:
            setattr(torch.Tensor, name, _wrap_device_kwarg(fn))


@patch("Megatron moves batches and buffers with .cuda() / .to('cuda') and pins host memory for copies; on CPU they stay put")
def _moves_are_identity(torch: Any) -> None:
    original_to = torch.Tensor.to

    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        if args and _is_cuda(args[0]):
            args = (torch.device("cpu"), *args[1:])
        if "device" in kwargs:
            kwargs["device"] = _map_device(kwargs["device"])
        return original_to(self, *args, **kwargs)

    def cuda(self: Any, device: Any = None, non_blocking: bool = False, **kwargs: Any) -> Any:
        return self

    torch.Tensor.to = to
    torch.Tensor.cuda = cuda
    torch.Tensor.pin_memory = lambda self, *args, **kwargs: self
    torch.nn.Module.cuda = lambda self, device=None: self
    original_module_to = torch.nn.Module.to

    def module_to(self: Any, *args: Any, **kwargs: Any) -> Any:
        if args and _is_cuda(args[0]):
            args = (torch.device("cpu"), *args[1:])
        if "device" in kwargs:
            kwargs["device"] = _map_device(kwargs["device"])
        return original_module_to(self, *args, **kwargs)

    torch.nn.Module.to = module_to


@patch("the DistributedOptimizer and clip_grads accept only 'torch.cuda.*Tensor' type strings")
def _type_strings_cuda(torch: Any) -> None:
    original_type = torch.Tensor.type

    def type_(self: Any, dtype: Any = None, non_blocking: bool = False, **kwargs: Any) -> Any:
        if dtype is None and not kwargs:
            name = original_type(self)
            return CUDA_TYPE_NAMES.get(name, name)
        if isinstance(dtype, str) and dtype.startswith("torch.cuda."):
            dtype = "torch." + dtype[len("torch.cuda."):]
        return original_type(self, dtype, non_blocking, **kwargs)

    torch.Tensor.type = type_


@patch("Megatron passes a CUDA device_id to init_process_group, which gloo on CPU cannot bind")
def _process_group_without_device(torch: Any) -> None:
    import torch.distributed as dist

    original = dist.init_process_group

    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        if _is_cuda(kwargs.get("device_id")):
            kwargs.pop("device_id")
        return original(*args, **kwargs)

    dist.init_process_group = init_process_group
    if hasattr(dist, "distributed_c10d"):
        dist.distributed_c10d.init_process_group = init_process_group


# ---------------------------------------------------------------- entry points


def install() -> list[str]:
    """Apply every patch once (idempotent); the names applied. ShimError on a real GPU."""
    if _installed:
        return list(_installed)
    os.environ["TORCHDYNAMO_DISABLE"] = "1"  # read by torch._dynamo at import
    import torch

    if torch.cuda.is_available():
        raise ShimError("torch sees a CUDA device: the CUDA->CPU shim is for machines without a GPU; "
                        "run --workload megatron on a GPU node")
    for p in PATCHES:
        p.apply(torch)
        _installed.append(p.name)
    return list(_installed)


# The command line multiprocessing starts its resource tracker with (`python [flags] -c "from
# multiprocessing.resource_tracker import main;main(FD)"`): a worker's child that only unlinks
# shared memory and semaphores, never touches torch.
_RESOURCE_TRACKER = "from multiprocessing.resource_tracker import"


def wanted(env: dict[str, str] | os._Environ = os.environ, argv: list[str] | None = None) -> bool:
    """This process is a worker (or a child of one) of the megatron-cpu workload, other than
    multiprocessing's resource tracker: every worker and the checkpoint worker it spawns start
    one, and the shim (torch's import, 1.4 s of CPU) would be its whole cost. `argv`: the
    process's command line as the interpreter got it (sys.orig_argv)."""
    if env.get(ENV_FLAG) != "1" or "LOCAL_RANK" not in env:
        return False
    argv = list(getattr(sys, "orig_argv", ())) if argv is None else argv
    code = argv[argv.index("-c") + 1] if "-c" in argv[:-1] else ""
    return not code.startswith(_RESOURCE_TRACKER)


def install_for_worker() -> list[str]:
    """The sitecustomize hook: installs only in the megatron-cpu workload's workers."""
    if not wanted():
        return []
    try:
        return install()
    except ShimError as exc:
        print(f"nvrx-qual CUDA->CPU shim: error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
