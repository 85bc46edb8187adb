"""One agent per node directory; atomic writes that never share a temporary file; options the
server would refuse are refused at once; a registration the server refuses (400) is not sent
again forever."""

import os
import subprocess
import sys
import threading

import pytest

from agents import protocol
from agents.node import credentials, daemon, options, supervise
from agents.node.client import ApiError
from agents.node.daemon import NodeAgent, parse_args
from agents.node.workdir_lock import WorkdirBusy, hold_node_dir
from tests.unit.test_agent_fencing import NODE as FENCING_NODE

NODE = {**FENCING_NODE, "name": "qa-a1"}
HOLD = (
    "import sys, time; from pathlib import Path; from agents.node.workdir_lock import hold_node_dir; "
    "hold_node_dir(Path(sys.argv[1])); print('held', flush=True); time.sleep(60)"
)


def agent(workdir, **node) -> NodeAgent:
    return NodeAgent(server="http://127.0.0.1:9", join_token="x", node={**NODE, **node}, workdir=workdir)


@pytest.fixture
def other_agent(tmp_path):
    """Another process (another agent) holding tmp_path/qa-a1."""
    (tmp_path / "qa-a1").mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "qa-a1")], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "held\n"
    yield holder
    holder.kill()
    holder.wait()


def test_a_second_agent_on_a_node_directory_refuses_to_start(tmp_path, other_agent):
    with pytest.raises(WorkdirBusy) as refused:
        agent(tmp_path)
    assert str(refused.value) == (
        f"another agent (PID {other_agent.pid}) is already running on {tmp_path / 'qa-a1'}: stop it first, "
        "or give this agent another --workdir or --node-name"
    )
    assert not (tmp_path / "qa-a1" / credentials.NODE_TOKEN_FILE).exists()  # it touched nothing there
    agent(tmp_path, name="qa-a2").release()  # another node in the same workdir is another directory


def test_the_command_exits_non_zero_naming_the_other_agent(tmp_path, other_agent):
    argv = ["--server", "http://127.0.0.1:9", "--workdir", str(tmp_path), "--node-name", "qa-a1"]
    with pytest.raises(SystemExit) as exited:
        daemon.main([*argv, "--fake-gpus", "2", "--isolation", "none"])
    assert exited.value.code.startswith(f"mlqueue-agent: another agent (PID {other_agent.pid}) is already running")


def test_a_stopped_agent_frees_its_node_directory(tmp_path):
    first = agent(tmp_path)
    first.release()
    agent(tmp_path).release()
    hold_node_dir(tmp_path / "qa-a1")  # nothing holds it now


@pytest.mark.parametrize(
    "write",
    [
        lambda path: credentials.write_private(path, "x"),
        lambda path: supervise.write_lease(path, until=1.0, grace_s=1.0),
    ],
)
def test_two_writers_of_one_file_never_share_a_temporary_file(tmp_path, monkeypatch, write):
    """A second writer writes the same file while the first is between writing its temporary
    file and renaming it (they collided on `NAME.tmp`: FileNotFoundError)."""
    path, real_replace, nested = tmp_path / "state.json", os.replace, []

    def replace(src, dst):
        if not nested:
            nested.append(src)
            write(path)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    write(path)
    assert path.exists()
    assert os.listdir(tmp_path) == ["state.json"]


def test_the_limits_are_the_servers():
    assert (options.MAX_GPUS, options.MAX_CPUS, options.MAX_MEMORY_GB, options.MAX_SCRATCH_GB) == (
        protocol.MAX_GPUS,
        protocol.MAX_CPUS,
        protocol.MAX_MEMORY_GB,
        protocol.MAX_SCRATCH_GB,
    )
    assert options.NODE_NAME.pattern == protocol.NODE_NAME.pattern


@pytest.mark.parametrize(
    "bad, message",
    [
        (["--fake-gpus", "17"], "--fake-gpus takes 0 to 16, not 17"),
        (["--fake-gpus", "-1"], "--fake-gpus takes 0 to 16, not -1"),
        (["--cpus", "0"], "--cpus takes 1 to 1024, not 0"),
        (["--memory-gb", "70000"], "--memory-gb takes 1 to 65536, not 70000"),
        (["--node-name", "bad..name"], "--node-name 'bad..name': a node name is letters"),
        (["--node-name", "x_"], "--node-name 'x_': a node name is letters"),
        (["--gpu-type", "X" * 21], f"--gpu-type '{'X' * 21}': a GPU type is 1 to 20 letters, digits"),
    ],
)
def test_options_the_server_would_refuse_are_a_usage_error(bad, message, capsys):
    with pytest.raises(SystemExit) as exited:
        parse_args(["--server", "http://x", *bad])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_good_node_options_pass():
    args = parse_args(["--server", "http://x", "--fake-gpus", "16", "--node-name", "gpu-01.rack_2", "--cpus", "1"])
    assert (args.fake_gpus, args.node_name) == (16, "gpu-01.rack_2")


class Refusing:
    def __init__(self, status: int):
        self.status, self.posts, self.timeout = status, 0, 1.0

    def post(self, path, body, *, token=None):
        self.posts += 1
        raise ApiError(self.status, '{"gpu_count": ["Ensure this value is less than or equal to 16."]}')


def test_a_registration_refused_as_bad_is_not_retried(tmp_path):
    node = agent(tmp_path)
    node.client = Refusing(400)
    runner = threading.Thread(target=node.run)
    runner.start()
    runner.join(timeout=10)
    assert not runner.is_alive()
    assert node.client.posts == 1
    assert node.refused == 'HTTP 400: {"gpu_count": ["Ensure this value is less than or equal to 16."]}'
    node.release()


@pytest.mark.parametrize("status", [401, 409, 429, 500, 503])
def test_other_refusals_are_tried_again(tmp_path, status):
    node = agent(tmp_path)
    node.client = Refusing(status)
    assert node.try_register() is False
    assert node.refused == ""
    node.release()


def test_a_refusal_while_re_registering_is_forgotten_once_a_registration_succeeds(tmp_path):
    """Review: a 400 on a mid-run re-register left `refused` set, so the agent's ordinary stop
    later exited non-zero, 'the server refused to register', after it had joined again."""
    node = agent(tmp_path)
    node.client = Refusing(400)
    assert node.try_register() is False and node.refused
    node.joined({"token": "mlqn_again", "heartbeat_interval_s": 1, "lease_s": 10})
    assert node.refused == ""
    node.release()
