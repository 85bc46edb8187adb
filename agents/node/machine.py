"""What this machine has: GPUs through NVML when present (or fake ones for machines without),
CPUs and memory from the OS.

A GPU node must never come back from a restart as a CPU node because NVML failed: the server
would make it a READY CPU node and give it CPU jobs, and nobody would know. So a machine whose
NVML fails (a driver not loaded, a GPU lost), or which registered GPUs before from this workdir
(`WORKDIR/NODE/gpus.json`) and now finds none, is refused at start (`GpusMissing`) unless the
operator says `--no-gpus`. Only a machine where NVML is absent (or answers and finds no GPUs)
and which never registered GPUs is a CPU node by itself (`machine_gpus` has the rules).
"""

import contextlib
import json
import logging
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path

from agents.node.credentials import write_private

log = logging.getLogger("mlqueue.agent")

# The server's limit on a GPU type (agents/protocol.py RegisterSerializer; a test keeps them equal).
MAX_GPU_TYPE = 20
GPU_TYPE = re.compile(rf"^[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_GPU_TYPE - 1}}}\Z")
GPU_TYPE_RULE = f"1 to {MAX_GPU_TYPE} letters, digits, '.', '_' and '-', starting with a letter or digit"
GPUS_FILE = "gpus.json"  # in WORKDIR/NODE: the GPUs the node last registered with
KNOWN_TYPES = ("H200", "H100", "A100", "L40S", "L4", "A10G", "V100", "T4")
# Words of NVML's model names that tell no two GPU classes apart.
NOISE_WORDS = ("NVIDIA", "TESLA", "GENERATION")

NO_NVML = "no NVML ({error}): registering as a CPU node"
NO_GPUS = "NVML reports no GPUs: registering as a CPU node"
FEWER_GPUS = "NVML reports %d GPUs; this node registered %d before"
REGISTERED_BEFORE = (
    "this node registered {count} x {kind} before; NVML now reports none ({error}): fix the driver, "
    "or start with --no-gpus to register it as a CPU node"
)
NVML_FAILED = (
    "NVML failed ({error}), so this node's GPUs are unknown: fix the driver, "
    "or start with --no-gpus to register it as a CPU node"
)
GPU_TYPE_WITHOUT_GPUS = "--gpu-type {kind} but NVML reports no GPUs ({error}): fix the driver, or leave out --gpu-type"


class GpusMissing(Exception):
    """NVML finds no GPUs where there should be some: the agent does not register the node."""


@dataclass(frozen=True)
class NvmlScan:
    """What NVML said of the machine: its GPUs' model name and count, or why it could not say.
    `absent`: NVML is not on this machine at all (no nvidia-ml-py, or no libnvidia-ml)."""

    model: str = ""
    count: int = 0
    error: str = ""
    absent: bool = False


def detect_gpus() -> NvmlScan:
    """The machine's GPUs from NVML; a failure other than NVML's absence is logged as an ERROR."""
    try:
        import pynvml  # nvidia-ml-py: the optional `gpu` extra
    except ImportError:
        return NvmlScan(error="the nvidia-ml-py package is not installed", absent=True)
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        if isinstance(exc, getattr(pynvml, "NVMLError_LibraryNotFound", ())):
            return NvmlScan(error=str(exc), absent=True)
        log.error("NVML failed: %s", exc)
        return NvmlScan(error=str(exc))
    try:
        count = pynvml.nvmlDeviceGetCount()
        name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0)) if count else ""
    except pynvml.NVMLError as exc:
        log.error("NVML failed: %s", exc)
        return NvmlScan(error=str(exc))
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
    return NvmlScan(model=name.decode() if isinstance(name, bytes) else name, count=count)


def machine_gpus(scan: NvmlScan, *, registered: dict, gpu_type: str | None) -> tuple[str, int]:
    """(type, count) to register for what NVML found; `registered` is what the node last
    registered with (gpus.json), `gpu_type` the operator's --gpu-type. In order:
    1. NVML found GPUs: that many, of `gpu_type`, else of the type their model name gives.
    2. It found none, and the node registered GPUs before (whatever the cause, NVML's absence
       too): GpusMissing.
    3. It found none and failed (it is here: a driver not loaded, a GPU lost): GpusMissing.
    4. It found none, and --gpu-type says there are some: GpusMissing.
    5. Otherwise (no NVML, or NVML and no GPUs, on a node that never had any): a CPU node."""
    if scan.count:
        if scan.count < registered.get("gpu_count", 0):
            log.warning(FEWER_GPUS, scan.count, registered["gpu_count"])
        return gpu_type or gpu_type_from_name(scan.model), scan.count
    error = scan.error or "no GPUs"
    if registered.get("gpu_count"):
        raise GpusMissing(
            REGISTERED_BEFORE.format(count=registered["gpu_count"], kind=registered["gpu_type"], error=error)
        )
    if scan.error and not scan.absent:
        raise GpusMissing(NVML_FAILED.format(error=scan.error))
    if gpu_type:
        raise GpusMissing(GPU_TYPE_WITHOUT_GPUS.format(kind=gpu_type, error=error))
    log.info(NO_NVML.format(error=scan.error) if scan.absent else NO_GPUS)
    return "", 0


def gpu_type_from_name(name: str) -> str:
    """ "NVIDIA H100 80GB HBM3" -> "H100"; another model is its name's words in capitals, less
    the noise words, joined by '-' and cut at a word to fit the server's limit
    ("NVIDIA RTX 6000 Ada Generation" -> "RTX-6000-ADA"). --gpu-type replaces it."""
    words = re.findall(r"[A-Z0-9]+", name.upper())
    for known in KNOWN_TYPES:
        if known in words:
            return known
    kept = [word for word in words if word not in NOISE_WORDS] or ["GPU"]
    kind = kept[0][:MAX_GPU_TYPE]
    for word in kept[1:]:
        if len(kind) + 1 + len(word) > MAX_GPU_TYPE:
            break
        kind = f"{kind}-{word}"
    return kind


def registered_gpus(node_dir: Path) -> dict:
    """What the node last registered with from this workdir: {"gpu_type", "gpu_count"}, or {}."""
    try:
        found = json.loads((node_dir / GPUS_FILE).read_text())
        return {"gpu_type": str(found["gpu_type"]), "gpu_count": int(found["gpu_count"])}
    except (OSError, ValueError, TypeError, KeyError):
        return {}


def remember_gpus(node_dir: Path, node: dict) -> None:
    """Keep what the node has just registered with, for the checks of its next start."""
    write_private(node_dir / GPUS_FILE, json.dumps({"gpu_type": node["gpu_type"], "gpu_count": node["gpu_count"]}))


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
    runs_images: bool | None = None,
    workdir: Path | None = None,
    no_gpus: bool = False,
) -> dict:
    """What the node registers with. Its GPUs: `fake_gpus` of `gpu_type` (H100), none with
    `no_gpus`, else NVML's (machine_gpus: may raise GpusMissing), checked against what the node
    last registered with from `workdir`. `runs_images`: whether the agent runs jobs' images."""
    name = name or socket.gethostname()
    if fake_gpus is not None:
        kind, count = (gpu_type or "H100") if fake_gpus else "", fake_gpus
    elif no_gpus:
        log.info("--no-gpus: registering as a CPU node")
        kind, count = "", 0
    else:
        registered = registered_gpus(workdir / name) if workdir is not None else {}
        kind, count = machine_gpus(detect_gpus(), registered=registered, gpu_type=gpu_type)
    return {
        "name": name,
        "zone": zone,
        "rack": rack,
        "gpu_type": kind,
        "gpu_count": count,
        "cpu_count": cpus or os.cpu_count() or 1,
        "memory_gb": memory or memory_gb(),
        "labels": labels,
        "address": address or socket.gethostname(),
        **({"scratch_disk_gb": scratch} if scratch is not None else {}),
        **({"runs_images": runs_images} if runs_images is not None else {}),
    }
