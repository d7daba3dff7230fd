"""What the nemesis does to its own rank for the fault kinds that are not a plain signal.

Each action runs inside the fault rank's process (the nemesis wraps the unmodified
entrypoint), from the nemesis's poller thread or, for `in-restore`, from the audit hook on
the loading thread:

- `exception`: an `InjectedFault` raised asynchronously in the main (training) thread
  (CPython's PyThreadState_SetAsyncExc): it surfaces at the thread's next bytecode, like an
  error of the training step itself (NVRx's ASYNC_EXC);
- `segfault`: a real bad pointer dereference, a read of address 8 through ctypes (SIGSEGV);
- `abort`: libc's `abort()` (SIGABRT), a C++ `std::terminate` or failed assertion;
- `gil`: a native call that never returns, made with the GIL held (a ctypes.PyDLL call, which
  does not release it, locking a plain pthread mutex its thread already holds): every Python
  thread of the rank stops (the training thread, heartbeats, section updates) and Python
  signal handlers never run, while the process stays alive (NVRx's LOCK_GIL). Only a rank
  monitor's timeout can notice it; SIGKILL (NVRx's rank termination signal) ends it.
- `gpu-hang` (GPU tier only): a never-ending CUDA kernel (torch.cuda._sleep, torch's own spin
  kernel, with a cycle count of centuries) enqueued on the rank's GPU's current stream, the
  default stream the training step uses: the step's next synchronize or `.item()` blocks, the
  process stays alive (NVRx's GPU_SLEEP). Only a rank monitor's timeout can notice it.
- `gpu-error` (GPU tier only): an elementwise kernel writing through a tensor that claims
  memory far beyond a real allocation (a `__cuda_array_interface__` of a real pointer with a huge
  stride), then a synchronize: CUDA reports an illegal memory access, a sticky error that every
  later CUDA call of the process meets (NVRx's GPU_ERROR). How the rank then dies is what the
  GPU kit shows; nothing here claims it.

torch is imported inside the two GPU actions only, never at import time.

The checkpoint damage of `poison` and `corrupt` is `damage_checkpoint` (truncate, or flip
bytes in the middle so the size is unchanged); `disk-full`'s filler is `fill_filesystem` (only
on a tmpfs mount point, the one harness.machine.tmpfs mounts for the run) and `free_filesystem`.
Stdlib only at import time, like harness.nemesis.injector.
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading
from pathlib import Path

from harness.vocab.faults import ABORT, EXCEPTION, GIL, GPU_ERROR, GPU_HANG, SEGFAULT

DATA_SUFFIX = ".distcp"
FLIP_BYTES = 4096  # how many bytes `corrupt` inverts, from the middle of the file
SEGFAULT_ADDRESS = 8  # never mapped: the first page of the address space is reserved


class InjectedFault(RuntimeError):
    """The exception the `exception` kind raises in the training thread (its traceback names it)."""


class InjectError(OSError):
    """The action could not be carried out (the nemesis reports it as the fault not happening)."""


def raise_in_main_thread() -> None:
    """Schedule InjectedFault in the main thread; it is raised at its next Python bytecode."""
    ident = threading.main_thread().ident
    if ident is None:
        raise InjectError(errno.ESRCH, "the main thread has no id")
    set_async = ctypes.pythonapi.PyThreadState_SetAsyncExc
    set_async.argtypes = (ctypes.c_ulong, ctypes.py_object)
    set_async.restype = ctypes.c_int
    found = set_async(ident, InjectedFault)
    if found != 1:
        if found > 1:  # never for one id; undo as CPython's documentation asks
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), None)
        raise InjectError(errno.ESRCH, f"no Python thread state for the main thread {ident}")


def segfault() -> None:
    """Dereference an unmapped pointer: the kernel sends SIGSEGV (a crash in native code)."""
    ctypes.string_at(SEGFAULT_ADDRESS, 1)


def abort() -> None:
    """libc abort(): SIGABRT, core-dump disposition unless a handler is installed."""
    ctypes.CDLL(None).abort()


def hold_gil_forever() -> None:
    """Block in native code with the GIL held; never returns. A default pthread mutex locked
    twice by its owner deadlocks in the kernel's futex wait, which a signal does not end (the
    C-level handler runs and the wait resumes); only SIGKILL or a default-action signal does."""
    libc = ctypes.PyDLL(None)  # PyDLL: the call keeps the GIL
    mutex = ctypes.create_string_buffer(64)  # zeroed: PTHREAD_MUTEX_INITIALIZER (40 bytes on x86-64)
    libc.pthread_mutex_lock.argtypes = (ctypes.c_void_p,)
    if libc.pthread_mutex_lock(mutex) != 0:
        raise InjectError(errno.EINVAL, "pthread_mutex_lock failed")
    libc.pthread_mutex_lock(mutex)
    raise InjectError(errno.EDEADLK, "the second pthread_mutex_lock returned: the GIL was not held forever")


GPU_HANG_CYCLES = 1 << 62  # clock64() ticks torch's spin kernel waits for: centuries at any GPU clock
# gpu-error: the bogus element lies this many bytes past a real 1-element allocation (16 TiB:
# beyond any GPU's memory, so no allocation of the process can sit there).
GPU_ERROR_OFFSET = 1 << 44


def _cuda_device():
    """torch and the rank's own GPU. The action runs on the nemesis's poller thread, whose CUDA
    device is not the one the training thread set (device 0): the launcher's LOCAL_RANK names
    it, as Megatron's initialize does (torch.cuda.set_device(local_rank))."""
    try:
        import torch
    except ImportError as exc:
        raise InjectError(errno.ENOSYS, f"torch cannot be imported ({exc}): the GPU kinds run on the GPU tier") \
            from exc
    if not torch.cuda.is_available():
        raise InjectError(errno.ENODEV, "torch sees no CUDA GPU: the GPU kinds run on the GPU tier only")
    try:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    except ValueError:
        local_rank = 0
    count = torch.cuda.device_count()
    return torch, (local_rank if 0 <= local_rank < count else torch.cuda.current_device())


def gpu_hang() -> None:
    """Enqueue torch's spin kernel with GPU_HANG_CYCLES on the rank's GPU's current (default)
    stream and return: the kernel never ends, and the training step's next synchronizing call
    waits on it for good (a GPU hang, the process alive)."""
    torch, device = _cuda_device()
    with torch.cuda.device(device):
        torch.cuda._sleep(GPU_HANG_CYCLES)


class _OutOfBounds:
    """A CUDA array (the `__cuda_array_interface__` protocol) of two float32 elements: the first
    at a real allocation, the second GPU_ERROR_OFFSET bytes past it, where nothing is mapped."""

    def __init__(self, pointer: int) -> None:
        self.__cuda_array_interface__ = {"shape": (2,), "typestr": "<f4", "strides": (GPU_ERROR_OFFSET,),
                                         "data": (pointer, False), "version": 2}


def gpu_error() -> None:
    """Write through an element GPU_ERROR_OFFSET bytes past a real allocation of the rank's GPU,
    then synchronize: CUDA reports an illegal memory access (sticky: the process's CUDA context
    is unusable from then on, and the training step's next CUDA call fails). Returns once the
    error is reported; InjectError when it is not (the fault did not happen)."""
    torch, device = _cuda_device()
    with torch.cuda.device(device):
        anchor = torch.zeros(1, dtype=torch.float32, device=f"cuda:{device}")
        bogus = torch.as_tensor(_OutOfBounds(anchor.data_ptr()), device=f"cuda:{device}")
        try:
            bogus[1].fill_(1.0)
            torch.cuda.synchronize(device)
        except RuntimeError as exc:  # torch's CUDA error: "an illegal memory access was encountered"
            if "illegal memory access" in str(exc) or "illegal address" in str(exc):
                return
            raise InjectError(errno.EIO, f"the out-of-bounds write failed otherwise: {exc}") from exc
    raise InjectError(errno.EIO, f"the write {GPU_ERROR_OFFSET} bytes past an allocation of cuda:{device} was not "
                      "reported as an illegal memory access")


# The in-process actions, by the kind's name (the kinds that inject IN_PROCESS; a signal and a lost node are
# the nemesis's own).
ACTIONS = {
    EXCEPTION: raise_in_main_thread,
    SEGFAULT: segfault,
    ABORT: abort,
    GIL: hold_gil_forever,
    GPU_HANG: gpu_hang,
    GPU_ERROR: gpu_error,
}


def largest_shard(directory: Path) -> tuple[Path, int]:
    candidates = []
    for entry in os.scandir(directory):
        if entry.name.endswith(DATA_SUFFIX) and entry.is_file(follow_symlinks=False):
            candidates.append((entry.stat(follow_symlinks=False).st_size, entry.name))
    if not candidates:
        raise OSError(errno.ENOENT, f"no {DATA_SUFFIX} file in {directory}")
    size, name = max(candidates)
    return directory / name, size


def damage_checkpoint(directory: Path, how: str) -> Path:
    """Damage the largest `.distcp` of a committed checkpoint (the run's own: validation refuses a
    user-given checkpoint dir) and return it. `truncate`: cut to half its size (poison);
    `flip`: invert FLIP_BYTES bytes in its middle, size and names unchanged (corrupt), which only
    a checksum or a value check can notice."""
    path, size = largest_shard(directory)
    fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if how == "truncate":
            os.ftruncate(fd, size // 2)
        elif how == "flip":
            if size == 0:
                raise OSError(errno.EINVAL, f"{path} is empty: nothing to corrupt")
            count = min(FLIP_BYTES, size)
            start = max(0, size // 2 - count // 2)
            data = os.pread(fd, count, start)
            flipped = bytes(b ^ 0xFF for b in data)
            written = os.pwrite(fd, flipped, start)
            if written != len(flipped):
                raise OSError(errno.EIO, f"short write corrupting {path}")
        else:
            raise ValueError(f"unknown checkpoint damage {how!r}")
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


# ---------------------------------------------------------------- disk-full: the filler

FILLER_NAME = ".nvrx-qual-disk-full.filler"  # in the checkpoint directory, beside iter_*/ (never a checkpoint name)
TMPFS = "tmpfs"
_FILL_CHUNKS = (1 << 20, 1 << 12)  # 1 MiB writes, then pages, until the filesystem says ENOSPC


def filesystem_type(directory: Path) -> str | None:
    """The type of the filesystem mounted exactly at `directory` (/proc/self/mounts), or None
    when `directory` is no mount point."""
    target = os.path.realpath(directory)
    found = None
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as mounts:
            for line in mounts:
                parts = line.split()
                if len(parts) >= 3 and parts[1].replace("\\040", " ") == target:
                    found = parts[2]  # the last mount on a point is the visible one
    except OSError:
        return None
    return found


def fill_filesystem(directory: Path) -> tuple[Path, int, int]:
    """Fill the filesystem of `directory` with FILLER_NAME until it says ENOSPC; return
    (filler, bytes written, the filesystem's size). Only a tmpfs mounted exactly there (what the
    harness mounts for disk-full): a real disk is never filled."""
    fs = filesystem_type(directory)
    if fs != TMPFS:
        raise InjectError(errno.EPERM, f"{directory} is not a tmpfs mount point ({fs or 'no mount'}): "
                          "disk-full fills only the size-limited tmpfs the harness mounts for the run")
    path = directory / FILLER_NAME
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    written = 0
    try:
        # One allocation of what the filesystem says is free (tmpfs allocates its pages at once: a
        # 64 MiB fill takes milliseconds, well inside a save), then writes until ENOSPC for the rest.
        free = os.fstatvfs(fd)
        try:
            os.posix_fallocate(fd, 0, free.f_bavail * free.f_frsize)
            written = free.f_bavail * free.f_frsize
            os.lseek(fd, written, os.SEEK_SET)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EOPNOTSUPP, errno.EINVAL):
                raise
        for chunk in _FILL_CHUNKS:
            block = b"\0" * chunk
            while True:
                try:
                    n = os.write(fd, block)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
                written += n
                if n < chunk:
                    break
        st = os.fstatvfs(fd)
    finally:
        os.close(fd)
    return path, written, st.f_blocks * st.f_frsize


def free_filesystem(directory: Path) -> int | None:
    """Remove the filler (the space an operator frees); its size, or None when there was none."""
    path = directory / FILLER_NAME
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    os.unlink(path)
    return st.st_size
