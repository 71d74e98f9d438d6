"""Where a policy runs, decided without importing torch unless a GPU is there.

``torch.cuda`` answers "is there a CUDA device?" only after ``import torch`` (about 500 MB
and seconds). A CPU-only worker asks the CUDA driver instead: ``libcuda.so.1`` through
ctypes (``cuInit`` + ``cuDeviceGetCount``, which honour ``CUDA_VISIBLE_DEVICES``). Only when
the driver reports a device is torch imported, to confirm that it can use it (a CPU-only
torch build cannot).
"""

from __future__ import annotations

import ctypes
import functools
import logging

from rolloutfleet.spec.job import SpecError

log = logging.getLogger("rolloutfleet.inference.device")


@functools.cache
def driver_device_count() -> int:
    """CUDA devices the driver reports to this process (0 without a driver or a device)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


@functools.cache
def usable_cuda_devices() -> int:
    """CUDA devices torch can use here; imports torch only when the driver reports one."""
    if driver_device_count() == 0:
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_device(name: str) -> str:
    """``spec.policy.device`` → ``"cpu"`` or a CUDA device name.

    ``auto`` is the first CUDA device when one is usable, else the CPU (logged once per
    process: a warning when the driver has a device that torch cannot use); ``cuda`` or ``cuda:N`` that cannot be had is a :class:`SpecError` (a worker
    exits 3 with it as its one line).
    """
    if name == "cpu":
        return "cpu"
    count = usable_cuda_devices()
    if name == "auto":
        if count:
            return "cuda"
        _log_cpu_fallback(driver_device_count())
        return "cpu"
    index = int(name.partition(":")[2] or 0)
    if count == 0:
        raise SpecError(f"spec.policy.device: {name!r} asked for, but no CUDA device is available on this node")
    if index >= count:
        raise SpecError(f"spec.policy.device: {name!r} asked for, but only {count} CUDA device(s) exist")
    return name


@functools.cache
def _log_cpu_fallback(driver_devices: int) -> None:
    if driver_devices:  # a GPU is there, but this torch cannot use it (a CPU-only build?)
        log.warning(
            "spec.policy.device is auto: the driver reports %d CUDA device(s) but torch cannot use them; "
            "the policy runs on the CPU",
            driver_devices,
        )
    else:
        log.info("spec.policy.device is auto and no CUDA device is usable here: the policy runs on the CPU")
