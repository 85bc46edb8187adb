"""Preemption policy: the minimum runtime belongs to the preemptor's class (P0 waits for
nobody), and a job whose victims are only too young yet says when they may go."""

from dataclasses import replace

import pytest

from scheduling.core.model import MaintenanceWindow, PolicyConfig
from scheduling.core.reasons import ReasonCode
from scheduling.core.scheduler import schedule
from tests.unit.core.builders import HOUR, NOW, cluster, job, rack, running, snapshot, teams

# NOW is 21:20:00 UTC.
TWO_NODES = cluster(rack("z1-r1", 2))


def young_pair(*, ages=(60, 300), priority="P2"):
    return [running(i + 1, [f"z1-r1-n{i + 1}"], priority=priority, age=age) for i, age in enumerate(ages)]


def test_p0_preempts_victims_younger_than_ten_minutes_at_once():
    decisions = schedule(
        snapshot(
            TWO_NODES,
            pending=[job(9, gpus=16, priority="P0", team="ranking")],
            running_jobs=young_pair(),
            backfill=False,
        )
    )
    assert sorted(p.victim_job_id for p in decisions.preemptions) == [1, 2]
    assert {p.reason for p in decisions.preemptions} == {"PRIORITY"}
    assert decisions.pending[9].code == ReasonCode.PREEMPTING


@pytest.mark.parametrize(
    "priority, ages, config, code, message",
    [
        # P1 needs both young P2s: the younger started at 21:19 and may go at 21:29.
        (
            "P1",
            (60, 300),
            {},
            ReasonCode.PREEMPTION_PENDING,
            "2 victims reachable at 21:29 UTC after their 10-minute minimum",
        ),
        # One victim old enough, the other 2 minutes short: the time is the young one's.
        (
            "P1",
            (480, HOUR),
            {},
            ReasonCode.PREEMPTION_PENDING,
            "2 victims reachable at 21:22 UTC after their 10-minute minimum",
        ),
        (
            "P2",
            (60, 60),
            {},
            ReasonCode.INSUFFICIENT_CAPACITY,  # outranks nobody, however long it waits
            "needs 16 H100; 0 of 16 free (0/2 nodes fit a task: 2 fewer than 8 free H100)",
        ),
        (
            "P1",
            (30, 30),
            {"min_runtime_by_class": {"P1": 90}},
            ReasonCode.PREEMPTION_PENDING,
            "2 victims reachable at 21:21 UTC after their 90-second minimum",
        ),
        (
            "P1",
            (60, 60),
            {"min_runtime_by_class": {"P1": 1800}},
            ReasonCode.PREEMPTION_PENDING,
            "2 victims reachable at 21:49 UTC after their 30-minute minimum",
        ),
    ],
)
def test_a_job_whose_victims_are_too_young_says_when_they_may_go(priority, ages, config, code, message):
    decisions = schedule(
        snapshot(
            TWO_NODES,
            pending=[job(9, gpus=16, priority=priority, team="ranking")],
            running_jobs=young_pair(ages=ages),
            backfill=False,
            **config,
        )
    )
    assert decisions.preemptions == ()  # nobody is evicted early
    assert (decisions.pending[9].code, decisions.pending[9].message) == (code, message)
    assert str(decisions.pending[9]) == f"{code}: {message}"


def test_one_young_victim_is_one_victim():
    decisions = schedule(
        snapshot(
            TWO_NODES,
            pending=[job(9, gpus=8, priority="P1", team="ranking")],
            running_jobs=young_pair(ages=(120, 240)),
            backfill=False,
        )
    )
    # Either would do: the older (started 21:16) may go first, at 21:26, and is the one the
    # job will evict then (the younger, the fewer GPU-hours lost, may go only at 21:28).
    assert decisions.pending[9].message == "1 victim reachable at 21:26 UTC after their 10-minute minimum"
    at_2126 = schedule(
        snapshot(
            TWO_NODES,
            pending=[job(9, gpus=8, priority="P1", team="ranking", age=360)],
            running_jobs=young_pair(ages=(120, 240)),  # the same jobs, six minutes on
            backfill=False,
            now=NOW + 360,
        )
    )
    assert [p.victim_job_id for p in at_2126.preemptions] == [2]


@pytest.mark.parametrize(
    "remaining, config, message",
    [
        # The shadow start (22:20, when the victims' time limits run out) ignores the preemption:
        # it is left out, not given beside the earlier time the job starts by (QA: "reachable at
        # 23:05 UTC ...; reserved 1 node(s), estimated start 2026-12-11 22:55 UTC").
        (
            HOUR,
            {},
            "2 victims reachable at 21:29 UTC after their 10-minute minimum; reserved 2 node(s)",
        ),
        (
            7 * 24 * HOUR,
            {},
            "2 victims reachable at 21:29 UTC after their 10-minute minimum; reserved 2 node(s)",
        ),
        # The victims' time limits run out (21:25) before they may be preempted (21:49): that
        # earlier start is the true one, and is given.
        (
            300,
            {"min_runtime_by_class": {"P1": 1800}},
            "2 victims reachable at 21:49 UTC after their 30-minute minimum; reserved 2 node(s), "
            "estimated start 21:25 UTC",
        ),
    ],
)
def test_pending_preemption_gives_no_later_shadow_start(remaining, config, message):
    running_jobs = [replace(r, expected_end=NOW + remaining) for r in young_pair()]
    pending = [job(9, gpus=16, priority="P1", team="ranking")]
    decisions = schedule(snapshot(TWO_NODES, pending=pending, running_jobs=running_jobs, **config))
    assert (decisions.pending[9].code, decisions.pending[9].message) == (ReasonCode.PREEMPTION_PENDING, message)
    assert [r.nodes for r in decisions.reservations] == [("z1-r1-n1", "z1-r1-n2")]


def test_victims_that_would_not_make_room_even_when_old_are_not_promised():
    p0 = running(2, ["z1-r1-n2"], priority="P0", age=60)
    decisions = schedule(
        snapshot(
            TWO_NODES,
            pending=[job(9, gpus=16, priority="P1", team="ranking")],
            running_jobs=[running(1, ["z1-r1-n1"], age=60), p0],
            backfill=False,
        )
    )
    assert decisions.pending[9].code == ReasonCode.INSUFFICIENT_CAPACITY


def test_jobs_of_the_same_shape_get_the_same_promise():
    pending = [job(9, gpus=16, priority="P1", team="ranking"), job(10, gpus=16, priority="P1", team="infra")]
    decisions = schedule(snapshot(TWO_NODES, pending=pending, running_jobs=young_pair(), backfill=False))
    assert decisions.pending[9] == decisions.pending[10]
    assert decisions.pending[10].code == ReasonCode.PREEMPTION_PENDING


def test_the_promised_time_is_when_preemption_happens():
    victims = young_pair()
    incident = job(9, gpus=16, priority="P1", team="ranking")
    before = schedule(snapshot(TWO_NODES, pending=[incident], running_jobs=victims, now=NOW + 539, backfill=False))
    at = schedule(snapshot(TWO_NODES, pending=[incident], running_jobs=victims, now=NOW + 540, backfill=False))
    assert before.preemptions == () and before.pending[9].code == ReasonCode.PREEMPTION_PENDING
    assert sorted(p.victim_job_id for p in at.preemptions) == [1, 2]


@pytest.mark.parametrize(
    "config, expected",
    [
        ({}, {"P0": 0, "P1": 600, "P2": 600, "P3": 600}),
        ({"min_runtime_by_class": {"P0": 60, "P2": 1200}}, {"P0": 60, "P1": 600, "P2": 1200, "P3": 600}),
        # The older single knob still works: it is the minimum for P1-P3, never for P0.
        ({"min_runtime_before_preempt_s": 0}, {"P0": 0, "P1": 0, "P2": 0, "P3": 0}),
        ({"min_runtime_before_preempt_s": 900}, {"P0": 0, "P1": 900, "P2": 900, "P3": 900}),
    ],
)
def test_minimum_runtime_by_preemptor_class(config, expected):
    policy = PolicyConfig(**config)
    assert {p: policy.min_runtime_for(p) for p in ("P0", "P1", "P2", "P3")} == expected


def test_old_knob_at_zero_lets_p1_preempt_young_victims():
    decisions = schedule(
        snapshot(
            TWO_NODES,
            pending=[job(9, gpus=16, priority="P1", team="ranking")],
            running_jobs=young_pair(),
            min_runtime_before_preempt_s=0,
        )
    )
    assert sorted(p.victim_job_id for p in decisions.preemptions) == [1, 2]


# A borrower's priority preemption takes from other teams only what they hold above their
# guarantees: production's guaranteed room, taken by research's P1, would be reclaimed at once
# by the evicted P3 (evicting the P1 in turn: four evictions for one start, seen live).
def _teams(production: int, research: int = 0):
    return teams(production={"gpu:H100": (production, 32)}, research={"gpu:H100": (research, 32)})


PRODUCTION_BOTH_NODES = [
    running(1, ["z1-r1-n1"], team="production", priority="P3"),
    running(2, ["z1-r1-n2"], team="production", priority="P3", age=2 * HOUR),
]


@pytest.mark.parametrize(
    ("guaranteed", "wanted", "priority", "victims"),
    [
        (16, 8, "P1", []),  # production is within its guarantee: nothing to take
        (8, 8, "P1", [1]),  # 8 above it: one job (the younger), never both
        (8, 16, "P1", []),  # the 16 it would need are more than production holds above its guarantee
        (0, 16, "P1", [1, 2]),  # no guarantee: all of it is over
        (16, 8, "P0", [1]),  # an incident's P0 takes what it needs
    ],
)
def test_a_borrower_outranks_other_teams_only_above_their_guarantees(guaranteed, wanted, priority, victims):
    pending = [job(9, gpus=wanted, priority=priority, team="research")]
    decisions = schedule(
        snapshot(TWO_NODES, pending=pending, running_jobs=PRODUCTION_BOTH_NODES, team_list=_teams(guaranteed))
    )
    assert sorted(p.victim_job_id for p in decisions.preemptions) == victims
    assert {p.reason for p in decisions.preemptions} <= {"PRIORITY"}


def test_a_borrower_outranks_its_own_teams_jobs_and_a_team_within_its_guarantee_outranks_anyone():
    own = [running(1, ["z1-r1-n1"], team="research", priority="P3"), PRODUCTION_BOTH_NODES[1]]
    borrower = schedule(
        snapshot(
            TWO_NODES,
            pending=[job(9, gpus=8, priority="P1", team="research")],
            running_jobs=own,
            team_list=_teams(16),
        )
    )
    assert [p.victim_job_id for p in borrower.preemptions] == [1]
    # research guaranteed 8: its P1 stays within it, so it may take production's guaranteed room
    # (production, then at 8 of 16, may not reclaim from a team within its guarantee).
    owner = schedule(
        snapshot(
            TWO_NODES,
            pending=[job(9, gpus=8, priority="P1", team="research")],
            running_jobs=PRODUCTION_BOTH_NODES,
            team_list=_teams(16, research=8),
        )
    )
    assert [p.victim_job_id for p in owner.preemptions] == [1]


# An incident's P0 past its team's guarantee takes its own team's jobs and what other teams hold
# above their guarantees first: production's guaranteed job, evicted, would reclaim its room at
# once from research (now over its guarantee by the P0), evicting research's P2 after all: two
# evictions where one does. Production's job is the younger (the cheaper to lose), so a search
# that ignores whose guarantee it is picks it.
RESEARCH_AND_PRODUCTION = [
    running(1, ["z1-r1-n1"], team="research", priority="P2", age=2 * HOUR),
    running(2, ["z1-r1-n2"], team="production", priority="P2", age=60),
]


@pytest.mark.parametrize(
    ("research", "production", "running_jobs", "victims"),
    [
        # both within their guarantees of 8: the P0 takes research's own job (the case above).
        (8, 8, RESEARCH_AND_PRODUCTION, [1]),
        # research has nothing of its own to give, production nothing above its guarantee:
        # the incident takes production's guaranteed room after all (the younger job).
        (0, 16, [replace(RESEARCH_AND_PRODUCTION[0], team="production"), RESEARCH_AND_PRODUCTION[1]], [2]),
        # production holds 8 above its guarantee: the P0 takes from there, not its own job.
        (8, 0, RESEARCH_AND_PRODUCTION, [2]),
    ],
)
def test_a_borrowing_p0_takes_a_guarantee_only_when_nothing_else_makes_room(
    research, production, running_jobs, victims
):
    quotas = teams(production={"gpu:H100": (production, 32)}, research={"gpu:H100": (research, 32)})
    pending = [job(9, gpus=8, priority="P0", team="research")]
    decisions = schedule(snapshot(TWO_NODES, pending=pending, running_jobs=running_jobs, team_list=quotas))
    assert sorted(p.victim_job_id for p in decisions.preemptions) == victims
    assert {p.reason for p in decisions.preemptions} == {"PRIORITY"}


def test_two_borrowers_in_one_pass_take_no_more_than_a_team_holds_above_its_guarantee():
    # production holds 16, 8 above its guarantee: the first P1 takes those 8, the second none.
    pending = [job(9, gpus=8, priority="P1", team="research", age=600), job(10, gpus=8, priority="P1", team="research")]
    decisions = schedule(snapshot(TWO_NODES, pending=pending, running_jobs=PRODUCTION_BOTH_NODES, team_list=_teams(8)))
    assert [(p.victim_job_id, p.for_job_id) for p in decisions.preemptions] == [(1, 9)]


def test_two_reclaimers_in_one_pass_take_no_more_than_a_team_holds_above_its_guarantee():
    owners = teams(production={"gpu:H100": (8, 32)}, research={"gpu:H100": (16, 32)})
    pending = [job(9, gpus=8, team="research", age=600), job(10, gpus=8, team="research")]
    running_jobs = [replace(j, priority="P2") for j in PRODUCTION_BOTH_NODES]
    decisions = schedule(snapshot(TWO_NODES, pending=pending, running_jobs=running_jobs, team_list=owners))
    assert [(p.victim_job_id, p.for_job_id, p.reason) for p in decisions.preemptions] == [(1, 9, "RECLAIM")]


def test_a_borrower_finds_no_excess_in_a_team_s_own_swap():
    """Research's P1 (A) finds nothing: production is within its guarantee of 16. Production's
    own P1 then evicts its P3 for itself. That P3 and the P1 replacing it are the same room of
    production's, counted once (the P3 until it stops, then the P1), and the P1 does not run
    yet: production holds nothing above its guarantee that research's next P1 (C), A's kind,
    could take. (Before, the P1 was counted on top of its own team's stopping victim, so
    production read 16 above its guarantee and C evicted production's other P3.)"""
    nodes = cluster(rack("z1-r1", 3))
    run = [
        running(1, ["z1-r1-n1"], team="production", priority="P3"),
        running(2, ["z1-r1-n2"], team="production", priority="P3", age=2 * HOUR),
    ]
    quotas = teams(production={"gpu:H100": (16, 32)}, research={"gpu:H100": (0, 32)})
    pending = [
        job(9, gpus=16, priority="P1", team="research", age=2000),
        job(20, gpus=16, priority="P1", team="production", age=1500),
        job(10, gpus=16, priority="P1", team="research", age=500),
    ]
    snap = snapshot(nodes, pending=pending, running_jobs=run, team_list=quotas, reservation_wait_bound_s=1000)
    assert [(p.victim_job_id, p.for_job_id) for p in schedule(snap).preemptions] == [(1, 20)]


@pytest.mark.parametrize("guaranteed", [16, 12])
def test_a_borrower_with_nothing_it_may_take_spends_no_search(guaranteed):
    """Research's P1 would borrow, and production is within its guarantee (16), or over it by
    less than any of its jobs (12: 4 over, jobs of 8): nothing research may take. Its search over
    production's jobs, which could never succeed, still spent the pass's budget (here one
    search), so production's own P1, which may evict its team's P3, waited."""
    pending = [
        job(9, gpus=8, priority="P1", team="research", age=900),
        job(10, gpus=8, priority="P1", team="production", age=600),
    ]
    decisions = schedule(
        snapshot(
            TWO_NODES,
            pending=pending,
            running_jobs=PRODUCTION_BOTH_NODES,
            team_list=_teams(guaranteed),
            max_preemption_searches=1,
        )
    )
    assert [(p.victim_job_id, p.for_job_id, p.reason) for p in decisions.preemptions] == [(1, 10, "PRIORITY")]


def test_a_reclaim_takes_nothing_a_team_is_giving_back_already():
    # production holds 16, 8 above its guarantee, and job 1 (8) is stopping for job 9 (still
    # waiting on it): the 8 above are being given back, so job 10 reclaims nothing more.
    owners = teams(production={"gpu:H100": (8, 32)}, research={"gpu:H100": (16, 32)})
    stopping = replace(PRODUCTION_BOTH_NODES[0], priority="P2", preempting=True, preempted_for=9)
    running_jobs = [stopping, replace(PRODUCTION_BOTH_NODES[1], priority="P2")]
    pending = [job(9, gpus=8, team="research", age=600), job(10, gpus=8, team="research")]
    decisions = schedule(snapshot(TWO_NODES, pending=pending, running_jobs=running_jobs, team_list=owners))
    assert decisions.preemptions == ()


# An incident's P0 its team's borrowing limit refuses evicts its own team's lower classes to
# fit (Kueue's preemption within a ClusterQueue): it waited for the team's own P2s to end, with
# room idle.
AT_LIMIT = teams(vision={"gpu:H100": (8, 8)}, ranking={"gpu:H100": (8, 8)})  # a limit of 16 each
VISION_AT_LIMIT = [
    running(1, ["z1-r1-n1"], team="vision", priority="P2", age=2 * HOUR),
    running(2, ["z1-r1-n2"], team="vision", priority="P2", age=HOUR),
]


@pytest.mark.parametrize("nodes", [2, 3])  # with a node idle, and with none
def test_a_job_over_its_teams_limit_evicts_its_own_teams_lower_classes(nodes):
    decisions = schedule(
        snapshot(
            cluster(rack("z1-r1", nodes)),
            pending=[job(9, gpus=8, priority="P0", team="vision")],
            running_jobs=VISION_AT_LIMIT,
            team_list=AT_LIMIT,
        )
    )
    assert [(p.victim_job_id, p.for_job_id, p.reason) for p in decisions.preemptions] == [(2, 9, "PRIORITY")]
    assert decisions.placements == ()
    assert decisions.pending[9].code == ReasonCode.PREEMPTING


def test_it_waits_for_its_victims_within_the_limit_then_starts():
    stopping = [VISION_AT_LIMIT[0], replace(VISION_AT_LIMIT[1], preempting=True, preempted_for=9)]
    snap = snapshot(
        cluster(rack("z1-r1", 3)),
        pending=[job(9, gpus=8, priority="P0", team="vision")],
        running_jobs=stopping,
        team_list=AT_LIMIT,
    )
    waiting = schedule(snap)
    assert (waiting.placements, waiting.preemptions, waiting.pending[9].code) == ((), (), ReasonCode.PREEMPTING)
    started = schedule(replace(snap, running=(VISION_AT_LIMIT[0],)))
    assert [p.job_id for p in started.placements] == [9]


@pytest.mark.parametrize(
    ("priority", "running_jobs", "team"),
    [
        ("P2", VISION_AT_LIMIT, "vision"),  # nobody of its team ranks below it
        ("P1", VISION_AT_LIMIT, "vision"),  # P0 only: the room a P1's victims free could go to a job before it
        ("P0", [replace(j, team="ranking") for j in VISION_AT_LIMIT], "ranking"),  # other teams' jobs: not for a limit
    ],
)
def test_within_a_limit_only_its_own_teams_lower_classes_old_enough_go(priority, running_jobs, team):
    quotas = AT_LIMIT if team == "vision" else teams(vision={"gpu:H100": (0, 0)}, ranking={"gpu:H100": (8, 8)})
    decisions = schedule(
        snapshot(
            cluster(rack("z1-r1", 3)),
            pending=[job(9, gpus=8, priority=priority, team="vision")],
            running_jobs=running_jobs,
            team_list=quotas,
        )
    )
    assert decisions.preemptions == ()
    assert decisions.pending[9].code == ReasonCode.QUOTA


def test_a_p0_over_its_limit_evicts_nobody_while_a_stopping_job_makes_the_room():
    """Job 2 is being cancelled: once it stops, job 9 fits the limit. Job 1 was evicted too."""
    running_jobs = [VISION_AT_LIMIT[0], replace(VISION_AT_LIMIT[1], preempting=True)]
    decisions = schedule(
        snapshot(
            cluster(rack("z1-r1", 3)),
            pending=[job(9, gpus=8, priority="P0", team="vision")],
            running_jobs=running_jobs,
            team_list=AT_LIMIT,
        )
    )
    assert decisions.preemptions == ()
    assert decisions.pending[9].code == ReasonCode.QUOTA


def test_a_p0_over_its_limit_evicts_nobody_where_it_could_not_start_once_they_are_gone():
    """Every node is in a maintenance window its 4-hour limit would run into."""
    nodes = cluster(rack("z1-r1", 3))
    window = MaintenanceWindow(1, "rack z1-r1", tuple(n.name for n in nodes), NOW + HOUR, NOW + 3 * HOUR)
    snap = snapshot(
        nodes,
        pending=[job(9, gpus=8, priority="P0", team="vision", runtime=4 * HOUR)],
        running_jobs=VISION_AT_LIMIT,
        team_list=AT_LIMIT,
    )
    assert schedule(replace(snap, maintenance=(window,))).preemptions == ()
