"""What this machine has: GPUs through NVML when present (or fake ones for machines without),
CPUs and memory from the OS."""

import os
import socket


def detect_gpus() -> tuple[str, int]:
    """(type, count) from NVML, e.g. ("H100", 8); ("", 0) without NVIDIA GPUs or NVML."""
    try:
        import pynvml  # nvidia-ml-py: the optional `gpu` extra
    except ImportError:
        return "", 0
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return "", 0
    try:
        count = pynvml.nvmlDeviceGetCount()
        if not count:
            return "", 0
        name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
        return gpu_type_from_name(name.decode() if isinstance(name, bytes) else name), count
    finally:
        pynvml.nvmlShutdown()


KNOWN_TYPES = ("H200", "H100", "A100", "L40S", "L4", "A10G", "V100", "T4")


def gpu_type_from_name(name: str) -> str:
    """ "NVIDIA H100 80GB HBM3" -> "H100"; an unknown model keeps its whole name, dashed
    ("NVIDIA RTX 6000 Ada Generation" -> "RTX-6000-ADA-GENERATION"): set --gpu-type to taste."""
    words = name.upper().replace("-", " ").split()
    for known in KNOWN_TYPES:
        if known in words:
            return known
    return "-".join(w for w in words if w not in ("NVIDIA", "TESLA"))


def memory_gb() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30)
    except (ValueError, OSError):
        return 1


def inventory(
    *,
    name: str | None,
    zone: str,
    rack: str,
    fake_gpus: int | None,
    gpu_type: str | None,
    cpus: int | None,
    memory: int | None,
    labels: dict,
    address: str | None,
    scratch: int | None = None,
) -> dict:
    if fake_gpus is not None:
        kind, count = (gpu_type or "H100") if fake_gpus else "", fake_gpus
    else:
        kind, count = detect_gpus()
    return {
        "name": name or socket.gethostname(),
        "zone": zone,
        "rack": rack,
        "gpu_type": kind,
        "gpu_count": count,
        "cpu_count": cpus or os.cpu_count() or 1,
        "memory_gb": memory or memory_gb(),
        "labels": labels,
        "address": address or socket.gethostname(),
        **({"scratch_disk_gb": scratch} if scratch is not None else {}),
    }
