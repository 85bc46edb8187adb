"""QA's GPU defects in the node agent (agents/node/machine.py, options.py, telemetry.py):

- a GPU node whose agent restarted while NVML failed came back as a CPU node, silently: now
  only a machine without NVML that never registered GPUs is a CPU node; a failing NVML, or no
  GPUs where the node registered some before (WORKDIR/NODE/gpus.json), refuses to start unless
  the operator says --no-gpus;
- a GPU with a long model name could never join (its derived type was over the server's 20
  characters) and --gpu-type was ignored on real GPUs: now it replaces the derived name, which
  drops noise words and always fits; a bad --gpu-type is a usage error;
- a GPU NVML cannot read after joining (lost) is reported in the sample's `error`, its XIDs too.
"""

import logging
import sys
import types

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents import protocol
from agents.node import daemon, machine
from agents.node.machine import (
    GPU_TYPE,
    GPUS_FILE,
    NVML_FAILED,
    REGISTERED_BEFORE,
    gpu_type_from_name,
)
from agents.node.options import nodes_from, parse_args
from agents.node.telemetry import Health, NvmlGpus
from tests.unit.test_agent_fencing import NODE
from tests.unit.test_agent_telemetry import NVMLError, stand_in_nvml

NODE_NAME = "qa-g1"


class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801 (pynvml's own names)
    pass


class NVMLError_DriverNotLoaded(NVMLError):  # noqa: N801
    pass


class NVMLError_GpuIsLost(NVMLError):  # noqa: N801
    pass


def machine_nvml(*, fails: Exception | None = None, count: int = 8, name: str = "NVIDIA RTX A6000"):
    """The slice of nvidia-ml-py that detect_gpus calls: `count` GPUs named `name`, or nvmlInit
    raising `fails` (as pynvml does: a subclass of NVMLError per error code)."""

    def init():
        if fails is not None:
            raise fails

    return types.SimpleNamespace(
        NVMLError=NVMLError,
        NVMLError_LibraryNotFound=NVMLError_LibraryNotFound,
        nvmlInit=init,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: count,
        nvmlDeviceGetHandleByIndex=lambda index: index,
        nvmlDeviceGetName=lambda handle: name.encode(),
    )


NO_PACKAGE = None  # sys.modules["pynvml"] = None: `import pynvml` fails as without the extra
NO_LIBRARY = machine_nvml(fails=NVMLError_LibraryNotFound("NVML Shared Library Not Found"))
NO_DRIVER = machine_nvml(fails=NVMLError_DriverNotLoaded("Driver Not Loaded"))
GPU_LOST = machine_nvml(fails=NVMLError_GpuIsLost("GPU is lost"))
NO_GPUS = machine_nvml(count=0)


def argv(tmp_path, *more: str) -> list[str]:
    workdir = ["--workdir", str(tmp_path), "--node-name", NODE_NAME, "--isolation", "none"]
    return ["--server", "https://mlqueue.example.com", *workdir, *more]


def node_for(tmp_path, *more: str) -> dict:
    (node,) = nodes_from(parse_args(argv(tmp_path, *more)))
    return node


class Accepting:
    timeout = 1.0

    def post(self, path, body, *, token=None):
        return {"token": "mlqn_qa", "heartbeat_interval_s": 1, "lease_s": 10}


def register(tmp_path, *more: str) -> dict:
    """Start the agent as `mlqueue-agent` does and have the server accept its node."""
    (agent,) = daemon.agents_for(parse_args(argv(tmp_path, *more)), "mlqj_qa")
    agent.client = Accepting()
    assert agent.try_register()
    agent.release()
    return agent.node


@pytest.fixture
def refusal(tmp_path, monkeypatch):
    """`mlqueue-agent ARGV`'s exit message, where it must refuse to start."""

    def ran_on(agents):
        raise AssertionError(f"the agent went on to register {[agent.node for agent in agents]}")

    monkeypatch.setattr(daemon, "run_until_signalled", ran_on)

    def refused(*more: str) -> str:
        with pytest.raises(SystemExit) as exited:
            daemon.main(argv(tmp_path, *more))
        return exited.value.code

    return refused


@pytest.mark.parametrize("nvml", [NO_PACKAGE, NO_LIBRARY], ids=["no package", "no library"])
def test_no_nvml_on_a_node_that_never_had_gpus_is_a_cpu_node_said_once(tmp_path, monkeypatch, caplog, nvml):
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    caplog.set_level(logging.INFO, logger="mlqueue.agent")
    node = node_for(tmp_path)
    assert (node["gpu_type"], node["gpu_count"]) == ("", 0)
    said = [r for r in caplog.records if r.getMessage().startswith("no NVML (")]
    assert len(said) == 1 and said[0].levelno == logging.INFO
    assert said[0].getMessage().endswith("): registering as a CPU node")


@pytest.mark.parametrize(
    "nvml, error", [(NO_DRIVER, "Driver Not Loaded"), (GPU_LOST, "GPU is lost")], ids=["no driver", "lost"]
)
def test_a_failing_nvml_is_an_error_and_no_cpu_node(tmp_path, monkeypatch, refusal, caplog, nvml, error):
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    assert refusal() == "mlqueue-agent: " + NVML_FAILED.format(error=error)
    assert [(r.levelno, r.getMessage()) for r in caplog.records if r.levelno >= logging.ERROR] == [
        (logging.ERROR, f"NVML failed: {error}")
    ]
    assert not (tmp_path / NODE_NAME / GPUS_FILE).exists()


def test_no_gpus_registers_a_cpu_node_whatever_nvml_says(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", NO_DRIVER)
    node = register(tmp_path, "--no-gpus")
    assert (node["gpu_type"], node["gpu_count"]) == ("", 0)


@pytest.mark.parametrize(
    "nvml, error",
    [
        (NO_PACKAGE, "the nvidia-ml-py package is not installed"),
        (NO_LIBRARY, "NVML Shared Library Not Found"),
        (NO_DRIVER, "Driver Not Loaded"),
        (NO_GPUS, "no GPUs"),
    ],
    ids=["no package", "no library", "no driver", "none found"],
)
def test_a_node_that_registered_gpus_refuses_when_nvml_finds_none(tmp_path, monkeypatch, refusal, nvml, error):
    monkeypatch.setitem(sys.modules, "pynvml", machine_nvml(count=8, name="NVIDIA RTX A6000"))
    assert register(tmp_path)["gpu_type"] == "RTX-A6000"
    monkeypatch.setitem(sys.modules, "pynvml", nvml)  # the agent restarts, NVML broken
    assert refusal() == "mlqueue-agent: " + REGISTERED_BEFORE.format(count=8, kind="RTX-A6000", error=error)
    assert REGISTERED_BEFORE.format(count=8, kind="RTX-A6000", error="Driver Not Loaded") == (
        "this node registered 8 x RTX-A6000 before; NVML now reports none (Driver Not Loaded): fix the driver, "
        "or start with --no-gpus to register it as a CPU node"
    )
    # The operator's choice: a CPU node, remembered as one (no NVML then is a CPU node again).
    assert register(tmp_path, "--no-gpus")["gpu_count"] == 0
    monkeypatch.setitem(sys.modules, "pynvml", NO_PACKAGE)
    assert node_for(tmp_path)["gpu_count"] == 0


def test_fake_gpus_are_not_remembered_as_the_machines(tmp_path, monkeypatch):
    register(tmp_path, "--fake-gpus", "4")
    monkeypatch.setitem(sys.modules, "pynvml", NO_PACKAGE)
    assert node_for(tmp_path)["gpu_count"] == 0 and not (tmp_path / NODE_NAME / GPUS_FILE).exists()


@pytest.mark.parametrize(
    "name, kind",
    [
        ("NVIDIA RTX 6000 Ada Generation", "RTX-6000-ADA"),
        ("NVIDIA RTX A6000", "RTX-A6000"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX-PRO-6000"),
        ("NVIDIA GeForce RTX 4090", "GEFORCE-RTX-4090"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA Supercalifragilisticexpialidocious", "SUPERCALIFRAGILISTIC"),
    ],
)
def test_derived_gpu_types_drop_noise_and_fit_the_server(name, kind):
    assert gpu_type_from_name(name) == kind


@given(st.text())
def test_any_model_name_gives_a_type_the_server_takes(name):
    kind = gpu_type_from_name(name)
    assert GPU_TYPE.match(kind) and len(kind) <= protocol.RegisterSerializer().fields["gpu_type"].max_length


def test_the_gpu_type_limit_is_the_servers():
    assert machine.MAX_GPU_TYPE == protocol.RegisterSerializer().fields["gpu_type"].max_length


@pytest.mark.parametrize(
    "model, given_type",
    [("NVIDIA RTX 6000 Ada Generation", "RTX6000"), ("NVIDIA RTX A6000", "A6000")],
)
def test_gpu_type_names_real_gpus_and_the_server_takes_the_node(tmp_path, monkeypatch, model, given_type):
    monkeypatch.setitem(sys.modules, "pynvml", machine_nvml(count=4, name=model))
    node = node_for(tmp_path, "--gpu-type", given_type)
    assert (node["gpu_type"], node["gpu_count"]) == (given_type, 4)
    derived = node_for(tmp_path)
    registration = protocol.RegisterSerializer(data=derived)
    assert registration.is_valid(), registration.errors


@pytest.mark.parametrize("bad", ["X" * 21, "RTX 6000", "-A6000", "A6000/ada", "A6000\u200b", ""])
def test_a_bad_gpu_type_is_refused_at_start(bad, capsys):
    with pytest.raises(SystemExit) as exited:
        parse_args(["--server", "https://x", f"--gpu-type={bad}"])
    assert exited.value.code == 2
    assert f"--gpu-type {bad!r}: a GPU type is 1 to 20 letters, digits, '.', '_' and '-'" in capsys.readouterr().err


def test_gpu_type_where_nvml_finds_no_gpus_is_refused(tmp_path, monkeypatch, refusal):
    monkeypatch.setitem(sys.modules, "pynvml", NO_PACKAGE)
    assert refusal("--gpu-type", "A6000") == (
        "mlqueue-agent: --gpu-type A6000 but NVML reports no GPUs (the nvidia-ml-py package is not installed): "
        "fix the driver, or leave out --gpu-type"
    )


@pytest.mark.parametrize("other", [["--fake-gpus", "2"], ["--gpu-type", "A6000"]])
def test_no_gpus_goes_with_no_other_gpu_option(other, capsys):
    with pytest.raises(SystemExit):
        parse_args(["--server", "https://x", "--no-gpus", *other])
    assert "--no-gpus registers a CPU node: no --fake-gpus or --gpu-type with it" in capsys.readouterr().err


def test_a_gpu_lost_after_joining_is_in_the_samples_error_with_its_xids(monkeypatch):
    """Before, the lost GPU's readings were None as for a board without ECC, and the sample's
    `error` was empty: the node page said nothing."""
    nvml = stand_in_nvml([types.SimpleNamespace(device=1, eventData=79)])
    temperature = nvml.nvmlDeviceGetTemperature

    def lost(handle, sensor):
        if handle == 1:
            raise NVMLError_GpuIsLost("GPU is lost")
        return temperature(handle, sensor)

    nvml.nvmlDeviceGetTemperature = lost
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    sample = Health(NvmlGpus()).due()
    assert sample["error"] == "NVML failed: GPU 1: GPU is lost"
    assert sample["gpus"][0]["temperature_c"] == 50  # the other GPU still reports
    assert [x["code"] for x in sample["gpus"][1]["xids"]] == [79] and sample["gpus"][1]["temperature_c"] is None
    checked = protocol.HealthSerializer(data=sample)
    assert checked.is_valid(), checked.errors


class Heartbeats:
    timeout = 1.0

    def __init__(self):
        self.bodies = []

    def post(self, path, body, *, token=None):
        self.bodies.append(body)
        return {
            "lease_s": 60,
            "heartbeat_interval_s": 5,
            "highest_epoch": 0,
            "kill": [],
            "signals": [],
            "assignments": [],
        }


def test_an_nvml_failing_after_joining_reaches_the_server_in_the_heartbeat(tmp_path, monkeypatch):
    nvml = stand_in_nvml([])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    agent = daemon.NodeAgent(
        server="https://mlqueue.example.com", join_token="x", node={**NODE, "name": NODE_NAME}, workdir=tmp_path
    )
    agent.client = Heartbeats()
    agent.health = Health(NvmlGpus(), interval_s=3600)
    assert agent.heartbeat() and agent.client.bodies[0]["health"]["error"] == ""

    def no_driver():
        raise NVMLError_DriverNotLoaded("Driver Not Loaded")

    def uninitialized(handle, sensor):
        raise NVMLError("Uninitialized")

    nvml.nvmlInit, nvml.nvmlDeviceGetTemperature = no_driver, uninitialized  # the driver unloaded under it
    assert agent.heartbeat()  # within the interval: sent because the error is new
    assert agent.client.bodies[1]["health"]["error"] == "NVML failed: GPU 0: Uninitialized; GPU 1: Uninitialized"
    assert agent.heartbeat()
    assert agent.client.bodies[2]["health"]["error"] == "NVML failed: Driver Not Loaded"  # started afresh
    agent.release()


def test_xid_events_failing_are_in_the_error_and_the_readings_still_go(monkeypatch):
    nvml = stand_in_nvml([])

    def broken(event_set, timeout_ms):
        raise NVMLError("Unknown Error")

    nvml.nvmlEventSetWait_v2 = broken
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    gpus = NvmlGpus()
    read, error = gpus.read()
    assert error == "NVML failed: XID events: Unknown Error"
    assert [gpu["temperature_c"] for gpu in read] == [50, 51] and gpus.nvml is nvml  # not started afresh
