"""The cluster's history as a trace (scheduling/sim/history.py), the trace written and read back,
and the what-if comparison of two team trees on it (scheduling/sim/whatif.py)."""

import io
from collections import Counter

import pytest

from scheduling.core.model import PolicyConfig, Quota, Team
from scheduling.sim.fleets import custom_fleet
from scheduling.sim.history import CPU_ONLY, NEVER_STARTED, NO_USEFUL_WORK, Attempt, trace_of
from scheduling.sim.trace import TraceJob, load_generic, write_generic
from scheduling.sim.whatif import compare, with_quota

T0 = 1_000_000.0


def attempt(job_id=1, started=T0 + 100, ended=T0 + 1100, gpus=8, **extra) -> Attempt:
    facts = {"submitted": T0 + 10, "team": "vision", "gpu_type": "H100"} | extra
    return Attempt(job_id, started=started, ended=ended, gpus=gpus, **facts)


@pytest.mark.parametrize(
    "attempts, duration",
    [
        ([attempt()], 1000),
        # Preempted after 1,000 s with its last checkpoint 600 s in (400 s x 8 GPUs lost), then
        # 700 s to finish: the lost 400 s are the simulator's to charge again, not the trace's.
        ([attempt(lost_gpu_s=400 * 8), attempt(started=T0 + 1200, ended=T0 + 1900)], 1300),
        # No checkpoint: the whole first attempt was lost; the job needed the second only.
        ([attempt(lost_gpu_s=1000 * 8), attempt(started=T0 + 1200, ended=T0 + 1900)], 700),
        # Failed by itself (nothing lost to the scheduler), retried: both runs count.
        ([attempt(), attempt(started=T0 + 1200, ended=T0 + 1500)], 1300),
        # Still running at the export: up to `as_of`.
        ([attempt(ended=None)], 4900),
    ],
)
def test_a_jobs_duration_is_its_run_time_less_what_the_scheduler_made_it_lose(attempts, duration):
    export = trace_of(attempts, start=T0, as_of=T0 + 5000)
    assert [(j.job_id, j.submit, j.duration, j.gpus, j.team, j.gpu_type) for j in export.jobs] == [
        (1, 10, duration, 8, "vision", "H100")
    ]


def test_jobs_without_gpus_or_useful_work_or_a_start_are_left_out_and_counted():
    export = trace_of(
        [
            attempt(1, started=None, ended=None),
            attempt(2, gpus=0, gpu_type=None),
            attempt(3, lost_gpu_s=1000 * 8),
            attempt(4, submitted=T0 + 50, priority="P1", max_runtime_s=7200, group=9, parallelism=2),
            attempt(5, submitted=T0 + 20),
        ],
        start=T0,
        as_of=T0 + 5000,
    )
    assert export.skipped == Counter({NEVER_STARTED: 1, CPU_ONLY: 1, NO_USEFUL_WORK: 1})
    assert export.jobs == [
        TraceJob(5, 20, 1000, 8, "vision", "H100"),
        TraceJob(4, 50, 1000, 8, "vision", "H100", "P1", 7200, group=9, parallelism=2),
    ]


def test_the_written_trace_reads_back_as_the_same_jobs(tmp_path):
    jobs = [
        TraceJob(5, 20, 1000.5, 8, "vision", "H100"),
        TraceJob(4, 50, 3600, 16, "ranking", "A100", "P1", 7200, group=9, parallelism=2),
    ]
    handle = io.StringIO()
    assert write_generic(jobs, handle) == 2
    assert handle.getvalue().splitlines() == [
        "job_id,submit_time,duration,num_gpus,team,gpu_type,priority,max_runtime,group",
        "5,20,1000.5,8,vision,H100,P2,,",
        "4,50,3600,16,ranking,A100,P1,7200,9%2",
    ]
    path = tmp_path / "trace.csv"
    path.write_text(handle.getvalue())
    # The loader counts from the first submit, as for any trace.
    assert load_generic(path) == [
        TraceJob(5, 0, 1000.5, 8, "vision", "H100"),
        TraceJob(4, 30, 3600, 16, "ranking", "A100", "P1", 7200, group=9, parallelism=2),
    ]


H100 = "gpu:H100"
TEAMS = (
    Team("research", None, {H100: Quota(8, 16)}),
    Team("production", None, {H100: Quota(8, 16)}),
    Team("vision", "research", {H100: Quota(0, 16)}),
    Team("ranking", "production", {H100: Quota(8, 16)}),
)


def test_a_guarantee_given_to_the_waiting_team_cuts_its_wait_and_lengthens_the_others():
    # Two 8-GPU nodes. Ranking submits six 1-hour jobs at 0 and borrows the node beyond its
    # guarantee; vision's two jobs arrive a minute later. Guaranteed nothing, vision waits for
    # a node to free; guaranteed 8 GPUs, it reclaims the node ranking borrows, and ranking's
    # job there loses work. Its second job waits: vision is at its guarantee, and ranking is
    # at its own (the reclaimed job still stopping counted as ranking's excess once, and the
    # second job took ranking's guaranteed node too).
    ranking = [TraceJob(i, 0, 3600, 8, "ranking", "H100") for i in range(1, 7)]
    vision = [TraceJob(100 + i, 60 + i, 1800, 8, "vision", "H100") for i in range(2)]
    proposed = with_quota(TEAMS, team="vision", rclass=H100, quota=Quota(8, 16))
    seen = []
    fleet = custom_fleet(2, 8, racks=1, zones=1)
    result = compare(fleet, TEAMS, proposed, ranking + vision, policy=PolicyConfig(), progress=seen.append)
    now, then = result.current["teams"], result.proposed["teams"]
    assert (now["vision"]["avg_wait_s"], then["vision"]["avg_wait_s"]) == (4439.5, 1019.5)
    assert (now["ranking"]["avg_jct_s"], then["ranking"]["avg_jct_s"]) == (8400.0, 9060.0)
    assert (now["ranking"]["gpu_hours_lost"], then["ranking"]["gpu_hours_lost"]) == (0.0, 0.4)
    assert now["ranking"]["share"] + now["vision"]["share"] == pytest.approx(1.0)
    assert result.refused == 0
    assert seen == sorted(seen) and seen[-1] == 1.0 and any(0 < f < 0.5 for f in seen)


def test_jobs_today_s_fleet_cannot_hold_are_refused_and_counted():
    jobs = [TraceJob(1, 0, 60, 8, "vision", "H100"), TraceJob(2, 0, 60, 8, "vision", "L40S")]
    result = compare(custom_fleet(1, 8, racks=1, zones=1), TEAMS, TEAMS, jobs, policy=PolicyConfig())
    assert result.refused == 1
    assert result.current["cluster"]["jobs"] == 1


def test_a_job_the_proposed_limit_never_lets_run_ends_the_replay_unfinished():
    # Vision may hold at most 16 H100 as proposed (nothing guaranteed, 16 to borrow): its
    # 24-GPU job never starts, and the replay stops a week after the last arrival.
    jobs = [TraceJob(1, 0, 600, 24, "vision", "H100"), TraceJob(2, 60, 600, 8, "ranking", "H100")]
    proposed = with_quota(TEAMS, team="vision", rclass=H100, quota=Quota(0, 16))
    wide = with_quota(TEAMS, team="vision", rclass=H100, quota=Quota(0, 32))
    result = compare(custom_fleet(4, 8, racks=1, zones=1), wide, proposed, jobs, policy=PolicyConfig())
    assert (result.current["teams"]["vision"]["unfinished"], result.proposed["teams"]["vision"]["unfinished"]) == (0, 1)
    assert result.proposed["cluster"]["unfinished"] == 1
    assert result.proposed["teams"]["ranking"]["finished"] == 1
