"""QA: `mlq submit --dry-run` against the real API (the Django app in process). A pipeline
printed its first step's placement alone, unlabelled; a schedule printed a plain placement, not
saying it was one nor when it fires; a spec whose client_job_id named a job of another spec was
VALID with exit 0 while the submit was a 409; a grid sweep was told its drawn seed submits its
trials, though a seed does nothing for a grid."""

import json

import pytest
import yaml

from mlqueue.cli.dry_run import SEED_DRAWN, WOULD_ANSWER, WOULD_BE_REFUSED
from scheduling.models import Job, Schedule
from scheduling.services import SPEC_CONFLICT
from scheduling.web.dryrun import SAME_SPEC
from tests.conftest import make_spec
from tests.integration.test_cli_maintenance import mlq_as  # noqa: F401 (the fixture: mlq as a demo user)
from tests.nodes import heartbeat

pytestmark = pytest.mark.django_db


def test_a_pipeline_dry_run_prints_each_step_with_its_verdict(mlq_as):  # noqa: F811
    heartbeat()
    dry = mlq_as("bob", "submit", "examples/pipeline.yaml", "--dry-run")
    assert dry.exit_code == 0, dry.output
    lines = dry.output.splitlines()
    assert "a pipeline of 4 steps, each tried as if it were next:" in lines
    steps = [line for line in lines if line.startswith("step ")]
    assert [line.split(" (")[0] for line in steps] == [
        "step prepare",
        "step train",
        "step evaluate",
        "step notify-failure",
    ]
    assert steps[0] == "step prepare (2 x 1 CPU): can run now"
    assert lines[lines.index(steps[0]) + 1].startswith("  would go to: ")
    assert steps[1] == "step train (1 x 1 H100): can run now"
    assert not any(line.startswith("would go to") for line in lines)  # no step's placement unlabelled
    assert not Job.objects.exists()


def test_a_pipeline_step_that_can_never_run_is_named_and_exits_1(mlq_as, tmp_path):  # noqa: F811
    spec = yaml.safe_load(open("examples/pipeline.yaml"))
    spec["pipeline"]["steps"][1]["resources"] = {"gpu_count": 4096, "gpu_type": "H100"}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(spec))
    dry = mlq_as("bob", "submit", str(path), "--dry-run")
    assert dry.exit_code == 1, dry.output
    assert "step train (512 x 8 H100): can never run" in dry.output.splitlines()
    assert "(change pipeline.steps[1].resources.gpu_count)" in dry.output


def test_a_schedule_dry_run_says_it_is_one_and_when_it_fires(mlq_as):  # noqa: F811
    schedules = Schedule.objects.count()
    dry = mlq_as("alice", "submit", "examples/nightly.yaml", "--dry-run")
    assert dry.exit_code == 0, dry.output
    lines = dry.output.splitlines()
    assert (
        "a schedule, not a job: a submit creates the schedule (cron '0 3 * * *', Europe/Berlin, concurrency forbid)"
        in lines
    )
    fires = json.loads(mlq_as("alice", "submit", "examples/nightly.yaml", "--dry-run", "-o", "json").output)
    next_fires = fires["schedule"]["next_fires"]
    assert len(next_fires) == 3
    assert f"next fires: {', '.join(next_fires)}" in lines
    assert "each run (as if fired now):" in lines
    assert Schedule.objects.count() == schedules  # a dry run creates nothing


@pytest.fixture
def dup_spec(tmp_path):
    def write(command: str) -> str:
        path = tmp_path / f"{command}.yaml"
        spec = make_spec(client_job_id="dup", command=[command], resources={"gpu_count": 1, "gpu_type": "H100"})
        path.write_text(yaml.safe_dump(spec))
        return str(path)

    return write


def test_a_dry_run_of_a_taken_client_job_id_says_the_submit_would_be_refused(mlq_as, dup_spec):  # noqa: F811
    assert mlq_as("alice", "submit", dup_spec("first")).exit_code == 0
    job = Job.objects.get()
    dry = mlq_as("alice", "submit", dup_spec("second"), "--dry-run")
    assert dry.exit_code == 1, dry.output
    refusal = SPEC_CONFLICT.format(team="research-foundation-models", job_id=job.pk, client_job_id="dup")
    assert WOULD_BE_REFUSED.format(status=409, message=refusal) in dry.output.splitlines()
    answer = json.loads(mlq_as("alice", "submit", dup_spec("second"), "--dry-run", "-o", "json").output)
    assert answer["existing"] == {"status": 409, "message": refusal}
    real = mlq_as("alice", "submit", dup_spec("second"))
    assert real.exit_code == 1 and refusal in real.output  # what the dry run said


def test_a_dry_run_of_the_same_spec_says_it_answers_the_existing_job(mlq_as, dup_spec):  # noqa: F811
    assert mlq_as("alice", "submit", dup_spec("first")).exit_code == 0
    job = Job.objects.get()
    dry = mlq_as("alice", "submit", dup_spec("first"), "--dry-run")
    assert dry.exit_code == 0, dry.output
    same = SAME_SPEC.format(team="research-foundation-models", job_id=job.pk, state=job.state, client_job_id="dup")
    assert WOULD_ANSWER.format(status=200, message=same) in dry.output.splitlines()
    assert Job.objects.count() == 1


def test_a_grid_sweep_dry_run_says_nothing_of_a_seed(mlq_as, tmp_path):  # noqa: F811
    sweep = {"method": "grid", "parameters": {"lr": [0.1, 0.01]}}
    spec = make_spec(client_job_id=None, resources={"gpu_count": 1, "gpu_type": "H100"}, sweep=sweep)
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(spec))
    dry = mlq_as("alice", "submit", str(path), "--dry-run")
    assert dry.exit_code == 0, dry.output
    seed = json.loads(mlq_as("alice", "submit", str(path), "--dry-run", "-o", "json").output)["group"]["seed"]
    assert "was drawn for this dry run" not in dry.output
    assert SEED_DRAWN.format(seed=seed) not in dry.output
    assert "  trial 1: lr=0.01" in dry.output.splitlines()
