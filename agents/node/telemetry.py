"""GPU telemetry and health for the heartbeat: per GPU, utilization, memory, temperature, ECC
error counts and XID errors, from NVML (the `nvidia-ml-py` package, the optional `gpu` extra)
or from fake GPUs (`--fake-gpus`, `--fleet`) whose faults a test or a demo injects through a
file; plus the result of an optional health-check command run every so often.

A missing or failing NVML is reported in the sample (`error`), never a crash of the agent: the
node keeps running its tasks, and its page says why it has no telemetry. Nothing here talks to
the server: `Health.due()` says what the next heartbeat carries (agents/protocol.py
`HealthSerializer` is the server's side of the format)."""

import json
import logging
import os
import subprocess
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("mlqueue.agent")

MAX_XIDS = 16  # per GPU: the latest ones
MAX_OUTPUT = 300
FAULTS_ENV = "MLQ_FAKE_GPU_FAULTS"
# A busy fake GPU: what a training job keeps one at.
FAKE_BUSY = {"utilization": 97, "memory_used_mb": 61_440, "temperature_c": 71}
FAKE_IDLE = {"utilization": 0, "memory_used_mb": 0, "temperature_c": 34}
FAKE_MEMORY_MB = 81_559  # an H100 80GB as NVML reports it
# NVML's answers for a reading this GPU does not give (not a failure of the GPU).
NOT_GIVEN = ("NVMLError_NotSupported", "NVMLError_NoPermission")
# The readings of a GPU NVML could not read.
UNREAD = dict.fromkeys(
    ("utilization", "memory_used_mb", "memory_total_mb", "temperature_c", "ecc_correctable", "ecc_uncorrectable")
)


class FakeGpus:
    """`count` GPUs that report FAKE_BUSY while a task holds them (`busy()` gives the indices)
    and FAKE_IDLE otherwise, with faults read from a JSON file, re-read when it changes:

        {"node-a": {"3": {"xid": [79], "ecc_uncorrectable": 1, "temperature_c": 95, "utilization": 100}}}

    keyed by node name, then GPU index. Each XID listed is one event; listing a code once more
    later is one more event (stamped when the file is read). Other keys replace the reading."""

    provider = "fake"

    def __init__(self, node: str, count: int, *, faults: Path | None, busy: Callable[[], set[int]] = set):
        self.node, self.count, self.faults_path, self.busy = node, count, faults, busy
        self.overrides: dict[int, dict] = {}
        self.xids: dict[int, deque] = {i: deque(maxlen=MAX_XIDS) for i in range(count)}
        self.xid_counts: dict[int, Counter] = {i: Counter() for i in range(count)}
        self.read_at: tuple | None = None

    def read(self) -> tuple[list[dict], str]:
        error = self._load_faults()
        busy = self.busy()
        gpus = []
        for index in range(self.count):
            reading = {**(FAKE_BUSY if index in busy else FAKE_IDLE), "memory_total_mb": FAKE_MEMORY_MB}
            reading.update(ecc_correctable=0, ecc_uncorrectable=0)
            reading.update({k: v for k, v in self.overrides.get(index, {}).items() if k != "xid"})
            gpus.append({"index": index, **reading, "xids": list(self.xids[index])})
        return gpus, error

    def _load_faults(self) -> str:
        if self.faults_path is None:
            return ""
        try:
            stat = self.faults_path.stat()
            if (stat.st_mtime_ns, stat.st_size) == self.read_at:
                return ""
            self.read_at = (stat.st_mtime_ns, stat.st_size)
            faults = json.loads(self.faults_path.read_text()).get(self.node, {})
            self.overrides = {
                int(index): dict(fault) for index, fault in faults.items() if 0 <= int(index) < self.count
            }
        except FileNotFoundError:
            self.overrides = {}
            return ""
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            return f"fake GPU faults file {self.faults_path}: {exc}"[:MAX_OUTPUT]
        now = time.time()
        for index, fault in self.overrides.items():
            listed = Counter(int(code) for code in fault.get("xid", ()))
            for code, times in listed.items():
                for _ in range(times - self.xid_counts[index][code]):
                    self.xids[index].append({"code": code, "at": now})
            self.xid_counts[index] = listed
        return ""


class NvmlGpus:
    """The machine's GPUs through NVML, loaded lazily. XIDs arrive as NVML events, collected at
    each read (waiting for none). A GPU NVML cannot read (lost, fallen off the bus) is in the
    sample with no readings and the failure in `error`, beside the others' readings and its own
    XIDs (an XID 79 must reach the server's rules); when none can be read, NVML is started
    afresh at the next read."""

    provider = "nvml"

    def __init__(self):
        self.nvml = None
        self.handles: list = []
        self.events = None
        self.xids: dict[int, deque] = {}

    def read(self) -> tuple[list[dict], str]:
        try:
            self._start()
            failures = self._collect_xids()
        except ImportError:
            return [], "NVML is not available: install the `gpu` extra (nvidia-ml-py)"
        except Exception as exc:  # any NVML failure: reported, and tried afresh next time
            self.nvml = None
            return [], f"NVML failed: {exc}"[:MAX_OUTPUT]
        gpus, unread = [], 0
        for index, handle in enumerate(self.handles):
            try:
                gpus.append(self._gpu(index, handle))
            except Exception as exc:  # this GPU's failure (lost, off the bus): the others still report
                gpus.append({"index": index, **UNREAD, "xids": list(self.xids.get(index, ()))})
                failures.append(f"GPU {index}: {exc}")
                unread += 1
        if self.handles and unread == len(self.handles):
            self.nvml = None
        return gpus, (f"NVML failed: {'; '.join(failures)}" if failures else "")[:MAX_OUTPUT]

    def _start(self) -> None:
        if self.nvml is not None:
            return
        import pynvml  # nvidia-ml-py: the optional `gpu` extra

        pynvml.nvmlInit()
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        self.xids = {i: self.xids.get(i, deque(maxlen=MAX_XIDS)) for i in range(len(self.handles))}
        try:
            self.events = pynvml.nvmlEventSetCreate()
            for handle in self.handles:
                pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, self.events)
        except pynvml.NVMLError as exc:  # e.g. not supported in a container without the capability
            log.warning("NVML: no XID events (%s)", exc)
            self.events = None
        self.nvml = pynvml

    def _collect_xids(self) -> list[str]:
        """The XIDs waiting; what failed, if the event set did (its readings still go)."""
        nvml = self.nvml
        while self.events is not None:
            try:
                data = nvml.nvmlEventSetWait_v2(self.events, 0)
            except nvml.NVMLError_Timeout:
                return []
            except nvml.NVMLError as exc:
                return [f"XID events: {exc}"]
            index = nvml.nvmlDeviceGetIndex(data.device)
            self.xids.setdefault(index, deque(maxlen=MAX_XIDS)).append({"code": int(data.eventData), "at": time.time()})
        return []

    def _gpu(self, index: int, handle) -> dict:
        nvml = self.nvml
        memory = self._field(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        ecc = {}
        for name, kind in (
            ("ecc_correctable", "NVML_MEMORY_ERROR_TYPE_CORRECTED"),
            ("ecc_uncorrectable", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED"),
        ):
            ecc[name] = self._field(
                lambda k=kind: nvml.nvmlDeviceGetTotalEccErrors(handle, getattr(nvml, k), nvml.NVML_VOLATILE_ECC)
            )
        return {
            "index": index,
            "utilization": self._field(lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
            "memory_used_mb": memory and memory.used // 2**20,
            "memory_total_mb": memory and memory.total // 2**20,
            "temperature_c": self._field(lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
            **ecc,
            "xids": list(self.xids.get(index, ())),
        }

    def _field(self, read):
        """One reading, or None where this GPU does not give it (ECC on consumer boards); any
        other failure is the GPU's (read())."""
        nvml = self.nvml
        try:
            return read()
        except nvml.NVMLError as exc:
            if isinstance(exc, tuple(getattr(nvml, name) for name in NOT_GIVEN if hasattr(nvml, name))):
                return None
            raise


class NoGpus:
    provider = "none"

    def read(self) -> tuple[list[dict], str]:
        return [], ""


class HealthCheck:
    """An admin's command (`--health-check`), run by /bin/sh every `interval_s` with a
    `timeout_s`, in a thread of its own. `result` is the last run's: ok or failed (non-zero
    exit, or past the timeout), the exit code, the last line of its output, when it ran, and
    when the current run of failures began."""

    def __init__(self, command: str, *, interval_s: float, timeout_s: float):
        self.command, self.interval_s, self.timeout_s = command, interval_s, timeout_s
        self.result: dict | None = None
        self.stopping = threading.Event()

    def start(self) -> "HealthCheck":
        threading.Thread(target=self._loop, name="health-check", daemon=True).start()
        return self

    def _loop(self) -> None:
        while not self.stopping.is_set():
            self.result = self.run_once()
            self.stopping.wait(self.interval_s)

    def run_once(self) -> dict:
        started = time.time()
        try:
            done = subprocess.run(
                ["/bin/sh", "-c", self.command],
                capture_output=True,
                text=True,
                errors="replace",
                timeout=self.timeout_s,
                stdin=subprocess.DEVNULL,
            )
            code, output = done.returncode, last_line(done.stdout + "\n" + done.stderr)
        except subprocess.TimeoutExpired:
            code, output = None, f"timed out after {self.timeout_s:g} s"
        except OSError as exc:
            code, output = None, f"cannot run: {exc}"
        ok = code == 0
        was = self.result
        failed_since = None if ok else (was or {}).get("failed_since") or started
        return {
            "status": "ok" if ok else "failed",
            "exit_code": code,
            "output": output,
            "at": started,
            "failed_since": failed_since,
        }

    def stop(self) -> None:
        self.stopping.set()


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return "".join(ch for ch in (lines[-1] if lines else "") if ch.isprintable())[:MAX_OUTPUT]


class Health:
    """What the heartbeats carry: a sample at most every `interval_s`, sooner when a fault
    appears or goes (an XID, more ECC errors, the health check's verdict), so a fault reaches
    the server within one heartbeat and a healthy fleet sends little."""

    def __init__(self, gpus, *, check: HealthCheck | None = None, interval_s: float = 30.0):
        self.gpus, self.check, self.interval_s = gpus, check, interval_s
        self.sent_at, self.sent_faults = -float("inf"), None

    def sample(self) -> dict:
        gpus, error = self.gpus.read()
        sample = {"at": time.time(), "provider": self.gpus.provider, "error": error, "gpus": gpus}
        if self.check is not None and self.check.result is not None:
            sample["check"] = self.check.result
        return sample

    def due(self) -> dict | None:
        """The sample the next heartbeat carries, or None; `sent()` once the server took it."""
        sample = self.sample()
        if time.monotonic() - self.sent_at < self.interval_s and faults(sample) == self.sent_faults:
            return None
        return sample

    def sent(self, sample: dict) -> None:
        self.sent_at, self.sent_faults = time.monotonic(), faults(sample)


def faults(sample: dict) -> tuple:
    """What in a sample would change a rule's verdict."""
    check = sample.get("check") or {}
    gpus = tuple(
        (g["index"], len(g["xids"]), g["xids"][-1]["at"] if g["xids"] else 0, g.get("ecc_uncorrectable"))
        for g in sample["gpus"]
    )
    return gpus, check.get("status"), check.get("failed_since"), bool(sample["error"])


def provider_for(node: dict, *, fake: bool, faults_file: Path | None, busy: Callable[[], set[int]] = set):
    """Fake GPUs for --fake-gpus and --fleet nodes (faults from `faults_file`, or the file
    MLQ_FAKE_GPU_FAULTS names), NVML for a machine's own, none for a CPU node."""
    if not node.get("gpu_count"):
        return NoGpus()
    if fake:
        path = faults_file or (Path(os.environ[FAULTS_ENV]) if os.environ.get(FAULTS_ENV) else None)
        return FakeGpus(node["name"], node["gpu_count"], faults=path, busy=busy)
    return NvmlGpus()
