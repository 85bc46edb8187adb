"""QA round 5 on a task's environment, without a database: master ports chosen free on the
master's node from below the ephemeral range (scheduling/assignments.py), the ranks that share
a task's node, and the variables mlqueue sets for each task refused in a spec's env."""

import pytest

from mlqueue.api_errors import flatten_errors
from scheduling.assignments import (
    MASTER_PORTS,
    free_master_port,
    legacy_master_port,
    local_ranks,
    master_port,
)
from scheduling.models import Task
from scheduling.spec import PER_TASK_ENV, RESERVED_ENV, SET_PER_TASK, JobSpecSerializer

SPEC = {"team": "research-vision", "command": ["python", "train.py"]}
EPHEMERAL_FIRST = 32768  # Linux's default net.ipv4.ip_local_port_range: 32768-60999


def test_master_ports_start_at_torchruns_default_and_stay_below_the_ephemeral_range():
    assert (MASTER_PORTS[0], MASTER_PORTS[-1]) == (29500, EPHEMERAL_FIRST - 1)
    ports = {master_port(job_id, attempt) for job_id in range(1, 2000) for attempt in (1, 2, 3)}
    assert min(ports) >= 29500 and max(ports) < EPHEMERAL_FIRST
    assert len(ports) > 3000  # spread over the range, not bunched


def test_the_qa_pair_shared_a_port_by_the_old_formula_and_rows_placed_before_keep_it():
    """Jobs 13 and 20013 were both told 32448 on one node; the old formula stays for attempts
    placed before ports were stored (they were told it)."""
    assert legacy_master_port(13, 1) == legacy_master_port(20013, 1) == 32448


def test_a_port_taken_on_the_node_is_passed_over_for_the_next_free_one():
    job, clash = 13, 13 + len(MASTER_PORTS)  # hashed to the same start
    start = master_port(job, 1)
    assert master_port(clash, 1) == start
    assert free_master_port(job, 1, taken=set()) == start
    assert free_master_port(clash, 1, taken={start}) == start + 1
    assert free_master_port(clash, 1, taken={start, start + 1, start + 3}) == start + 2


def test_the_search_wraps_round_the_range_and_gives_the_start_when_all_are_taken():
    last = MASTER_PORTS[-1]
    job = next(j for j in range(1, 100_000) if master_port(j, 1) == last)
    assert free_master_port(job, 1, taken={last}) == MASTER_PORTS[0]
    assert free_master_port(job, 1, taken=set(MASTER_PORTS)) == last


def test_a_new_attempt_starts_its_search_elsewhere():
    assert master_port(7, 1) != master_port(7, 2)


def tasks(*placed: tuple[int, int, int]) -> list[Task]:
    return [Task(rank=rank, node_id=node, attempt=attempt) for rank, node, attempt in placed]


def test_local_ranks_are_the_attempts_ranks_on_the_tasks_node_in_rank_order():
    gang = tasks((0, 1, 2), (1, 2, 2), (2, 1, 2), (3, 1, 2), (4, 2, 2))
    assert local_ranks(gang[2], gang) == [0, 2, 3]
    assert local_ranks(gang[4], gang) == [1, 4]
    # A rank not yet read with the rest (or of another attempt) still counts itself.
    assert local_ranks(Task(rank=5, node_id=3, attempt=2), gang) == [5]
    assert local_ranks(Task(rank=0, node_id=1, attempt=3), gang) == [0]


def errors(**spec) -> dict:
    serializer = JobSpecSerializer(data={**SPEC, **spec})
    assert not serializer.is_valid()
    return flatten_errors(serializer.errors)


@pytest.mark.parametrize("name", PER_TASK_ENV)
@pytest.mark.parametrize("block", ["env", "secret_env"])
def test_a_variable_mlqueue_sets_per_task_is_refused_naming_it(block, name):
    assert errors(**{block: {"SEED": "1", name: "7"}}) == {f"{block}.{name}": [SET_PER_TASK.format(name=name)]}


def test_the_refused_names_are_torchruns_and_cuda_visible_devices():
    assert set(PER_TASK_ENV) == {
        "RANK",
        "WORLD_SIZE",
        "NODE_RANK",
        "LOCAL_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "CUDA_VISIBLE_DEVICES",
    }
    assert (
        SET_PER_TASK.format(name="RANK")
        == "RANK is reserved: mlqueue sets it for each task (docs/task-environment.md)."
    )


def test_names_only_alike_are_the_users_and_mlq_names_keep_their_message():
    serializer = JobSpecSerializer(data={**SPEC, "env": {"rank": "1", "MY_RANK": "2", "MASTER_ADDRESS": "x"}})
    assert serializer.is_valid(), serializer.errors
    assert errors(env={"MLQ_EPOCH": "9", "RANK": "1"}) == {"env": [RESERVED_ENV.format(name="MLQ_EPOCH")]}
