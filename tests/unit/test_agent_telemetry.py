"""The agent's telemetry (agents/node/telemetry.py): fake GPUs with injected faults, NVML
absent (reported, not a crash), the health-check command, and when a sample is sent."""

import json
import sys
import types

import pytest

from agents.node import telemetry
from agents.node.telemetry import FakeGpus, Health, HealthCheck, NoGpus, NvmlGpus, provider_for


def write(path, faults: dict) -> None:
    path.write_text(json.dumps(faults))


def test_fake_gpus_show_busy_ones_and_injected_faults(tmp_path):
    faults = tmp_path / "faults.json"
    gpus = FakeGpus("n1", 8, faults=faults, busy=lambda: {0, 1})
    read, error = gpus.read()  # no file yet: all healthy
    assert error == "" and len(read) == 8
    assert (read[0]["utilization"], read[2]["utilization"]) == (97, 0)
    assert all(g["xids"] == [] and g["ecc_uncorrectable"] == 0 for g in read)

    write(faults, {"n1": {"3": {"xid": [79], "temperature_c": 95}, "5": {"ecc_uncorrectable": 2}}, "n2": {"0": {}}})
    read, _ = gpus.read()
    assert [x["code"] for x in read[3]["xids"]] == [79] and read[3]["temperature_c"] == 95
    assert read[5]["ecc_uncorrectable"] == 2
    again, _ = gpus.read()  # the same file: the same event, not a second one
    assert again[3]["xids"] == read[3]["xids"]

    write(faults, {"n1": {"3": {"xid": [79, 79]}}})  # one more XID 79
    read, _ = gpus.read()
    assert [x["code"] for x in read[3]["xids"]] == [79, 79]
    assert read[3]["xids"][1]["at"] >= read[3]["xids"][0]["at"] and read[5]["ecc_uncorrectable"] == 0


def test_a_bad_faults_file_is_reported_not_raised(tmp_path):
    faults = tmp_path / "faults.json"
    faults.write_text("{not json")
    read, error = FakeGpus("n1", 2, faults=faults).read()
    assert len(read) == 2 and error.startswith(f"fake GPU faults file {faults}: ")


def test_nvml_absent_is_reported_not_a_crash(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails as on a machine without the extra
    read, error = NvmlGpus().read()
    assert (read, error) == ([], "NVML is not available: install the `gpu` extra (nvidia-ml-py)")


def test_providers_by_node(monkeypatch, tmp_path):
    monkeypatch.setenv(telemetry.FAULTS_ENV, str(tmp_path / "f.json"))
    assert isinstance(provider_for({"name": "c1", "gpu_count": 0}, fake=True, faults_file=None), NoGpus)
    fake = provider_for({"name": "g1", "gpu_count": 8}, fake=True, faults_file=None)
    assert isinstance(fake, FakeGpus) and fake.faults_path == tmp_path / "f.json"
    assert isinstance(provider_for({"name": "g1", "gpu_count": 8}, fake=False, faults_file=None), NvmlGpus)


def test_the_health_check_reports_ok_failed_and_timeouts():
    ok = HealthCheck("echo checking; echo all good", interval_s=60, timeout_s=5).run_once()
    assert (ok["status"], ok["exit_code"], ok["output"], ok["failed_since"]) == ("ok", 0, "all good", None)
    check = HealthCheck("echo 'ECC: 3 pages retired' >&2; exit 3", interval_s=60, timeout_s=5)
    check.result = first = check.run_once()
    assert (first["status"], first["exit_code"], first["output"]) == ("failed", 3, "ECC: 3 pages retired")
    second = check.run_once()
    assert second["failed_since"] == first["failed_since"] == first["at"]  # one run of failures
    slow = HealthCheck("sleep 5", interval_s=60, timeout_s=0.2).run_once()
    assert (slow["status"], slow["exit_code"], slow["output"]) == ("failed", None, "timed out after 0.2 s")


def test_samples_are_sent_every_interval_or_when_a_fault_appears(tmp_path):
    faults = tmp_path / "faults.json"
    health = Health(FakeGpus("n1", 4, faults=faults), interval_s=3600)
    first = health.due()
    assert first["provider"] == "fake" and len(first["gpus"]) == 4 and "check" not in first
    health.sent(first)
    assert health.due() is None  # nothing new within the interval
    write(faults, {"n1": {"2": {"xid": [48]}}})
    fault = health.due()
    assert [x["code"] for x in fault["gpus"][2]["xids"]] == [48]
    assert health.due() is not None  # not taken by the server yet: offered again
    health.sent(fault)
    assert health.due() is None


@pytest.mark.parametrize("option", ["--health-interval", "--health-check-interval", "--health-check-timeout"])
def test_intervals_must_be_positive(option, capsys):
    from agents.node.daemon import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--server", "http://x", option, "0"])
    assert f"{option} takes a number of seconds > 0" in capsys.readouterr().err


class NVMLError(Exception):
    pass


class NVMLError_Timeout(NVMLError):  # noqa: N801 (pynvml's own name)
    pass


class NVMLError_NotSupported(NVMLError):  # noqa: N801 (pynvml's own name: what NVMLError(NOT_SUPPORTED) makes)
    pass


def stand_in_nvml(events: list):
    """The slice of nvidia-ml-py (13.x, names checked against its pynvml.py) the provider
    calls: two GPUs, the second without ECC reporting, and `events` XIDs waiting."""

    def ecc(handle, kind, counter):
        if handle == 1:
            raise NVMLError_NotSupported("Not Supported")
        return {"corrected": 5, "uncorrected": 1}[kind]

    def wait(event_set, timeout_ms):
        if not events:
            raise NVMLError_Timeout("Timeout")
        return events.pop(0)

    return types.SimpleNamespace(
        NVMLError=NVMLError,
        NVMLError_Timeout=NVMLError_Timeout,
        NVMLError_NotSupported=NVMLError_NotSupported,
        NVML_MEMORY_ERROR_TYPE_CORRECTED="corrected",
        NVML_MEMORY_ERROR_TYPE_UNCORRECTED="uncorrected",
        NVML_VOLATILE_ECC=0,
        NVML_TEMPERATURE_GPU=0,
        nvmlEventTypeXidCriticalError=8,
        nvmlInit=lambda: None,
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetIndex=lambda handle: handle,
        nvmlEventSetCreate=lambda: "set",
        nvmlDeviceRegisterEvents=lambda handle, kinds, event_set: None,
        nvmlEventSetWait_v2=wait,
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=40 + h),
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=2**30, total=80 * 2**30),
        nvmlDeviceGetTemperature=lambda h, sensor: 50 + h,
        nvmlDeviceGetTotalEccErrors=ecc,
    )


def test_nvml_readings_and_xid_events_map_to_the_sample(monkeypatch):
    events = [types.SimpleNamespace(device=1, eventData=79)]
    monkeypatch.setitem(sys.modules, "pynvml", stand_in_nvml(events))
    read, error = NvmlGpus().read()
    assert error == ""
    assert read[0] == {
        "index": 0,
        "utilization": 40,
        "memory_used_mb": 1024,
        "memory_total_mb": 81920,
        "temperature_c": 50,
        "ecc_correctable": 5,
        "ecc_uncorrectable": 1,
        "xids": [],
    }
    assert (read[1]["ecc_correctable"], read[1]["ecc_uncorrectable"]) == (None, None)  # not supported: unknown
    assert [x["code"] for x in read[1]["xids"]] == [79]


def test_a_failing_nvml_is_reported_and_tried_again(monkeypatch):
    nvml = stand_in_nvml([])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)

    def no_driver():
        raise NVMLError("Driver Not Loaded")

    nvml.nvmlInit = no_driver
    gpus = NvmlGpus()
    assert gpus.read() == ([], "NVML failed: Driver Not Loaded")
    nvml.nvmlInit = lambda: None  # the driver is back
    read, error = gpus.read()
    assert (len(read), error) == (2, "")
