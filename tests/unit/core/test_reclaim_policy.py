"""Reclaim without churn: a team takes its guarantee back, but the policy remembers whom it
already evicted, and a job that waits long enough is never refused its guarantee."""

import pytest

from scheduling.core.model import HOUR, Quota, Team
from scheduling.core.reasons import ReasonCode
from scheduling.core.scheduler import schedule
from tests.unit.core.builders import NOW, cluster, job, placed_nodes, rack, running, snapshot, teams

NODES = cluster(rack("z1-r1", 8))
QUOTAS = teams(vision={"gpu:H100": (32, 32)}, ranking={"gpu:H100": (32, 32)})


def ranking_jobs(evictions=(0,) * 8, ages=None):
    """ranking runs 8 single-node jobs (64 GPUs): its newest four (5-8) are the borrowed 32."""
    ages = ages or [HOUR * (10 - i) for i in range(1, 9)]
    return [
        running(i, [f"z1-r1-n{i}"], team="ranking", age=ages[i - 1], preemptions=evictions[i - 1], remaining=10 * HOUR)
        for i in range(1, 9)
    ]


def victims(decisions) -> list[int]:
    return sorted(p.victim_job_id for p in decisions.preemptions)


def reclaim(running_jobs, *, age=60.0, **config):
    claim = job(60, gpus=16, per_task=8, team="vision", age=age)
    return schedule(snapshot(NODES, pending=[claim], running_jobs=running_jobs, team_list=QUOTAS, **config))


def test_without_memory_or_a_cap_the_newest_borrowed_jobs_go_however_often_they_went_before():
    evictions = (0, 0, 0, 0, 0, 0, 3, 5)
    assert victims(reclaim(ranking_jobs(evictions), eviction_memory=False, reclaim_max_evictions=None)) == [7, 8]


def test_by_default_a_job_evicted_twice_is_not_reclaimed_again():
    assert victims(reclaim(ranking_jobs(evictions=(0, 0, 0, 0, 0, 0, 2, 5)))) == [5, 6]
    assert victims(reclaim(ranking_jobs(evictions=(0, 0, 0, 0, 0, 0, 1, 1)))) == [7, 8]


def test_with_memory_jobs_evicted_before_go_last():
    decisions = reclaim(
        ranking_jobs(evictions=(0, 0, 0, 0, 0, 2, 3, 5)), eviction_memory=True, reclaim_max_evictions=None
    )
    assert victims(decisions) == [5, 6]  # borrowed first, then the fewest evictions: 6 (2) before 7 (3)
    assert {p.reason for p in decisions.preemptions} == {"RECLAIM"}


def test_a_job_evicted_as_often_as_allowed_is_spared():
    decisions = reclaim(
        ranking_jobs(evictions=(0, 0, 0, 0, 1, 1, 1, 1)), reclaim_max_evictions=1, eviction_memory=False
    )
    assert victims(decisions) == [3, 4]  # the team is still 32 over: its other jobs may go


def test_when_every_candidate_is_spared_the_owner_waits_and_is_told_until_when():
    decisions = reclaim(ranking_jobs(evictions=(1,) * 8), reclaim_max_evictions=1)
    assert decisions.preemptions == ()
    reason = decisions.pending[60]
    assert str(reason) == (
        "PREEMPTION_PENDING: within team vision's guarantee: 2 victims reclaimable at 23:19 UTC, once it has "
        "waited 2 hours (spared until then: evicted 1 time already, the cap); reserved 2 node(s)"
    )
    assert reason.until == NOW - 60 + 2 * HOUR  # the owner's job waited a minute


@pytest.mark.parametrize(
    "evictions, remaining, config, expected",
    [
        # the default cap: every job over the guarantee evicted twice or more
        (
            (3,) * 8,
            10,
            {},
            "2 victims reclaimable at 23:19 UTC, once it has waited 2 hours "
            "(spared until then: evicted 2 times already, the cap)",
        ),
        # natural termination spares them all: every borrowed job ends within the hour
        (
            (0,) * 8,
            1,
            {"reclaim_spare_ending_s": 2 * HOUR},
            "2 victims reclaimable at 23:19 UTC, once it has waited 2 hours (spared until then: about to end)",
        ),
        # with a shorter bound, sooner
        (
            (3,) * 8,
            10,
            {"reclaim_wait_bound_s": 1800},
            "2 victims reclaimable at 21:49 UTC, once it has "
            "waited 30 minutes (spared until then: evicted 2 times already, the cap)",
        ),
    ],
)
def test_a_reclaim_the_spares_hold_back_says_when_the_wait_bound_lifts_them(evictions, remaining, config, expected):
    jobs = [
        running(
            i,
            [f"z1-r1-n{i}"],
            team="ranking",
            age=HOUR * (10 - i),
            preemptions=evictions[i - 1],
            remaining=remaining * HOUR,
        )
        for i in range(1, 9)
    ]
    decisions = reclaim(jobs, **config)
    assert decisions.preemptions == ()
    assert decisions.pending[60].message.startswith(f"within team vision's guarantee: {expected}")


def _capped_ranking():
    return [
        running(i, [f"z1-r1-n{i}"], team="ranking", age=HOUR * (10 - i), preemptions=3, remaining=10 * HOUR)
        for i in range(1, 9)
    ]


def test_equal_owners_are_each_told_their_own_wait_bound():
    """Review: the reason of the first of two equal jobs was repeated for the second, with the
    first's time (its memo and the equal job's outcome are per shape, the bound per job)."""
    pending = [job(60, gpus=16, team="vision", age=HOUR), job(61, gpus=16, team="vision", age=60.0)]
    decisions = schedule(snapshot(NODES, pending=pending, running_jobs=_capped_ranking(), team_list=QUOTAS))
    times = {j: decisions.pending[j].until for j in (60, 61)}
    assert times == {60: NOW + HOUR, 61: NOW - 60 + 2 * HOUR}
    assert "reclaimable at 22:20 UTC" in decisions.pending[60].message
    assert "reclaimable at 23:19 UTC" in decisions.pending[61].message


def test_an_owner_past_its_wait_bound_reclaims_though_an_equal_younger_one_found_nothing_before_it():
    """Review: the younger job 61 (first in the order, the shorter) found every victim spared;
    the memo of that failure then skipped job 60, past its bound, which may take them."""
    pending = [
        job(60, gpus=16, team="vision", age=3 * HOUR, runtime=8 * HOUR),
        job(61, gpus=16, team="vision", age=60.0, runtime=HOUR),
    ]
    decisions = schedule(
        snapshot(
            NODES,
            pending=pending,
            running_jobs=_capped_ranking(),
            team_list=QUOTAS,
            reservation_wait_bound_s=4 * HOUR,
        )
    )
    assert decisions.order[:2] == (61, 60)
    assert sorted((p.victim_job_id, p.for_job_id) for p in decisions.preemptions) == [(7, 60), (8, 60)]


def test_victims_only_too_young_until_the_bound_are_named_so():
    """Review: it said "about to end" of victims with 10 hours left."""
    jobs = [
        running(i, [f"z1-r1-n{i}"], team="ranking", age=HOUR * (10 - i), preemptions=3, remaining=10 * HOUR)
        for i in range(1, 7)
    ] + [running(i, [f"z1-r1-n{i}"], team="ranking", age=600, remaining=10 * HOUR) for i in (7, 8)]
    decisions = reclaim(jobs, age=2 * HOUR - 300, reclaim_min_runtime_s=3 * HOUR)
    assert decisions.pending[60].message.startswith(
        "within team vision's guarantee: 2 victims reclaimable at 21:25 UTC, once it has waited 2 hours "
        "(spared until then: younger than their 3-hour minimum)"
    )


def test_young_victims_set_the_time_when_they_may_go_before_the_bound():
    """Spared by the cap until 23:19, but younger ones become reclaimable at 21:28: the earlier."""
    jobs = [
        running(i, [f"z1-r1-n{i}"], team="ranking", age=HOUR * (10 - i), preemptions=3, remaining=10 * HOUR)
        for i in range(1, 7)
    ] + [running(i, [f"z1-r1-n{i}"], team="ranking", age=120, remaining=10 * HOUR) for i in (7, 8)]
    decisions = reclaim(jobs, reclaim_min_runtime_s=600)
    assert decisions.pending[60].message.startswith("2 victims reachable at 21:28 UTC after their 10-minute minimum")


def test_past_the_wait_bound_the_owner_reclaims_from_anyone_over():
    decisions = reclaim(
        ranking_jobs(evictions=(1,) * 8), age=3 * HOUR, reclaim_max_evictions=1, reclaim_wait_bound_s=2 * HOUR
    )
    assert victims(decisions) == [7, 8]


def test_young_borrowed_jobs_are_spared_until_the_owner_has_waited_past_the_bound():
    ages = [HOUR * (10 - i) for i in range(1, 7)] + [120, 60]  # 7 and 8 started minutes ago
    young = reclaim(ranking_jobs(ages=ages), reclaim_min_runtime_s=600)
    assert victims(young) == [5, 6]
    late = reclaim(ranking_jobs(ages=ages), age=3 * HOUR, reclaim_min_runtime_s=600, reclaim_wait_bound_s=2 * HOUR)
    assert victims(late) == [7, 8]


def test_equal_jobs_on_either_side_of_the_wait_bound_are_decided_apart():
    pending = [job(60, gpus=8, team="vision", age=60), job(61, gpus=8, team="vision", age=3 * HOUR)]
    decisions = schedule(
        snapshot(
            NODES,
            pending=pending,
            running_jobs=ranking_jobs(evictions=(1,) * 8),
            team_list=QUOTAS,
            reclaim_max_evictions=1,
            reclaim_wait_bound_s=2 * HOUR,
        )
    )
    assert [p.for_job_id for p in decisions.preemptions] == [61]


def test_a_reclaim_held_back_by_young_victims_says_when_they_may_go():
    nodes = cluster(rack("z1-r1", 2))
    quotas = teams(vision={"gpu:H100": (16, 0)}, ranking={"gpu:H100": (0, 16)})
    young = [
        running(1, ["z1-r1-n1"], team="ranking", age=60, remaining=10 * HOUR),
        running(2, ["z1-r1-n2"], team="ranking", age=300, remaining=10 * HOUR),
    ]
    decisions = schedule(
        snapshot(
            nodes,
            pending=[job(9, gpus=16, team="vision")],
            running_jobs=young,
            team_list=quotas,
            reclaim_min_runtime_s=600,
            backfill=False,
        )
    )
    assert decisions.preemptions == ()
    assert str(decisions.pending[9]) == (
        "PREEMPTION_PENDING: 2 victims reachable at 21:29 UTC after their 10-minute minimum"
    )


def test_borrowed_jobs_about_to_end_are_left_to_end():
    """Natural termination: their room comes back within the hour anyway, while an evicted
    job would wait again and redo its work since its last checkpoint."""
    jobs = [
        running(i, [f"z1-r1-n{i}"], team="ranking", age=HOUR * (10 - i), remaining=HOUR if i > 6 else 10 * HOUR)
        for i in range(1, 9)
    ]
    assert victims(reclaim(jobs, reclaim_spare_ending_s=2 * HOUR)) == [5, 6]  # 7 and 8 end within 2 h
    assert victims(reclaim(jobs, reclaim_spare_ending_s=0, reclaim_longest_first=False)) == [7, 8]


def test_when_every_borrowed_job_ends_soon_the_owner_waits_until_the_bound():
    jobs = [running(i, [f"z1-r1-n{i}"], team="ranking", age=HOUR * (10 - i), remaining=HOUR) for i in range(1, 9)]
    assert reclaim(jobs, reclaim_spare_ending_s=2 * HOUR).preemptions == ()
    assert victims(reclaim(jobs, age=3 * HOUR, reclaim_spare_ending_s=2 * HOUR)) == [7, 8]  # past the 2 h bound


def test_longest_expected_remaining_goes_first():
    jobs = [
        running(i, [f"z1-r1-n{i}"], team="ranking", age=HOUR * (10 - i), remaining=(10 + i % 3) * HOUR)
        for i in range(1, 9)
    ]
    assert victims(reclaim(jobs, reclaim_longest_first=True, reclaim_checkpoint_step_s=0)) == [5, 8]  # 12 h left each
    assert victims(reclaim(jobs, reclaim_longest_first=False)) == [7, 8]
    # None checkpoints: the time at risk is each one's age, hours apart (whole 12-minute steps), so the
    # youngest go first whatever their remaining (the default)
    assert victims(reclaim(jobs)) == [7, 8]


# The borrowed four (5-8): (hours left, minutes since their last checkpoint).
CHECKPOINTED = {5: (12, 40), 6: (10, 2), 7: (11, 10), 8: (11.5, 5)}


@pytest.mark.parametrize(
    "config, expected",
    [
        # The default: 6, 7 and 8 checkpointed within the last 12-minute step; of them the longest
        # left go (8, 7). 5, the longest left of all, would redo 40 minutes.
        ({}, [7, 8]),
        ({"reclaim_checkpoint_step_s": 0}, [5, 8]),  # the longest left alone
        ({"reclaim_longest_first": False}, [6, 8]),  # the least work lost
    ],
)
def test_victims_that_checkpointed_lately_go_first_then_the_longest_left(config, expected):
    jobs = ranking_jobs()[:4] + [
        running(
            i,
            [f"z1-r1-n{i}"],
            team="ranking",
            age=HOUR * (10 - i),
            remaining=left * HOUR,
            checkpointing=True,
            last_checkpoint_at=NOW - minutes * 60,
        )
        for i, (left, minutes) in CHECKPOINTED.items()
    ]
    assert victims(reclaim(jobs, **config)) == expected


def test_with_reclaim_off_an_owner_does_not_reclaim_but_still_outranks():
    # The forecast's simulated future may leave borrowers be (PolicyConfig.reclaim).
    assert victims(reclaim(ranking_jobs())) == [7, 8]
    assert reclaim(ranking_jobs(), reclaim=False).preemptions == ()
    claim = job(60, gpus=16, per_task=8, team="vision", priority="P1")
    decisions = schedule(snapshot(NODES, pending=[claim], running_jobs=ranking_jobs(), team_list=QUOTAS, reclaim=False))
    assert victims(decisions) == [7, 8]
    assert {p.reason for p in decisions.preemptions} == {"PRIORITY"}


def test_a_reclaimer_in_flight_counts_against_its_team_s_guarantee():
    """vision (guaranteed 32) runs 8 and has job 60 waiting for ranking's job 7 to stop (8 more,
    reclaimed last pass). Its next jobs may reclaim 16 more, not 24: the reclaimer in flight was
    left out of vision's use, so each pass reclaimed again up to the guarantee, and vision ended
    borrowing what it had reclaimed (QA: production-ranking at 96 of 77, "placed ... borrowing")."""
    quotas = teams(vision={"gpu:H100": (32, 64)}, ranking={"gpu:H100": (16, 64)})
    ranking = ranking_jobs()[:7]
    ranking[6] = running(7, ["z1-r1-n7"], team="ranking", age=HOUR, preempting=True, preempted_for=60)
    vision = running(50, ["z1-r1-n8"], team="vision", age=2 * HOUR, remaining=10 * HOUR)
    pending = [job(60 + i, gpus=8, team="vision", age=600 - i) for i in range(4)]
    decisions = schedule(snapshot(NODES, pending=pending, running_jobs=[*ranking, vision], team_list=quotas))
    assert victims(decisions) == [5, 6]  # ranking's newest borrowed but the one already stopping
    assert {p.for_job_id for p in decisions.preemptions} == {61, 62}
    assert decisions.pending[60].code == ReasonCode.PREEMPTING
    assert decisions.pending[63].code != ReasonCode.PREEMPTION_PENDING


def _in_flight_case(name):
    """The cases a review found against the first charge of preemptors in flight (each
    decided wrongly by it): (nodes, quotas, running jobs, pending jobs)."""
    h100 = "gpu:H100"
    r1 = [f"z1-r1-n{i}" for i in range(1, 9)]

    def runs(team, ids, **more):
        return [running(i, [r1[i - 1]], team=team, age=(10 - i) * HOUR, remaining=10 * HOUR, **more) for i in ids]

    flat = teams(vision={h100: (32, 32)}, ranking={h100: (32, 32)})
    stopping_7 = running(7, [r1[6]], team="ranking", age=HOUR, remaining=10 * HOUR, preempting=True, preempted_for=60)
    if name == "placed on free room":  # 60 finds room on n8 while its victim stops
        return NODES, flat, [*runs("vision", (1, 2, 3)), *runs("ranking", (4, 5, 6)), stopping_7], FIRST_60
    if name == "within its own limit":  # vision's limit is its guarantee; a node of another rack is free
        limited = teams(vision={h100: (32, 0)}, ranking={h100: (32, 32)})
        running_jobs = [*runs("vision", (1, 2, 8)), *runs("ranking", (3, 4, 5, 6)), stopping_7]
        return cluster(rack("z1-r1", 8), rack("z1-r2", 1)), limited, running_jobs, FIRST_60
    if name == "its own team's victim":  # vision's P1 60 evicted vision's own P3 job 3
        own = running(3, [r1[2]], team="vision", priority="P3", age=5 * HOUR, preempting=True, preempted_for=60)
        return NODES, flat, [*runs("vision", (1, 2)), own, *runs("ranking", (4, 5, 6, 7, 8))], P1_60 + VISION_61
    if name == "a sibling's victim":  # vision's 60 reclaims from nlp, both in division research
        tree = (
            Team("research", None, {h100: Quota(64, 0)}),
            Team("vision", "research", {h100: Quota(32, 32)}),
            Team("nlp", "research", {h100: Quota(32, 32)}),
            Team("ranking", None, {h100: Quota(16, 0)}),
        )
        nlp_8 = running(8, [r1[7]], team="nlp", age=HOUR, remaining=10 * HOUR, preempting=True, preempted_for=60)
        nodes = cluster(rack("z1-r1", 8), rack("z1-r2", 2))
        return nodes, tree, [*runs("vision", (1, 2, 3)), *runs("nlp", (4, 5, 6, 7)), nlp_8], LATER_60 + NLP_70
    # "no phantom excess": vision runs its 32; its P1 60 waits for ranking's P3 job 8
    quotas = teams(vision={h100: (32, 32)}, ranking={h100: (24, 32)}, nlp={h100: (8, 32)})
    p3 = running(8, [r1[7]], team="ranking", priority="P3", age=HOUR, preempting=True, preempted_for=60)
    return NODES, quotas, [*runs("vision", (1, 2, 3, 4)), *runs("ranking", (5, 6, 7)), p3], P1_60 + NLP_70


# The pending jobs of a case, (id, team, priority, waited s): the preemptor in flight is 60.
FIRST_60 = [(60, "vision", "P2", 3 * HOUR), (61, "vision", "P2", 900)]
P1_60 = [(60, "vision", "P1", 900)]
LATER_60 = [(60, "vision", "P2", 900)]
VISION_61, NLP_70 = [(61, "vision", "P2", 3 * HOUR)], [(70, "nlp", "P2", 3 * HOUR)]


def _in_flight_pending(spec):
    return [job(job_id, gpus=8, team=team, priority=priority, age=age) for job_id, team, priority, age in spec]


@pytest.mark.parametrize(
    "case, placed, evicted, reasons",
    [
        # Placed once, and not as borrowed: vision holds 32 with it; its next job reads 32/32.
        ("placed on free room", [(60, False)], [], {61: "team vision at 32/32 guaranteed H100"}),
        # Its own charge did not refuse it against vision's limit (32 = guarantee).
        ("within its own limit", [(60, False)], [], {61: "team vision uses 32 H100"}),
        # The stopping victim is vision's own: vision holds 24 after, so 61 still reclaims.
        ("its own team's victim", [], [(8, 61)], {60: "stopping job(s) 3"}),
        # nlp's stopping job and vision's 60 are the same room of research: 64, not 72.
        ("a sibling's victim", [], [], {70: "parent team research uses 64 H100"}),
        # vision's 60 does not run yet: vision holds no excess another team could reclaim.
        ("no phantom excess", [], [], {70: "needs 8 H100; 0 of 64 free"}),
    ],
)
def test_a_preemptor_in_flight_is_charged_once_and_only_for_room_not_yet_counted(case, placed, evicted, reasons):
    nodes, quotas, running_jobs, spec = _in_flight_case(case)
    pending = _in_flight_pending(spec)
    decisions = schedule(snapshot(nodes, pending=pending, running_jobs=running_jobs, team_list=quotas))
    assert [(p.job_id, p.borrowed) for p in decisions.placements] == placed
    assert [(p.victim_job_id, p.for_job_id) for p in decisions.preemptions] == evicted
    for job_id, text in reasons.items():
        assert text in decisions.pending[job_id].message, decisions.pending[job_id].message


def test_a_preemptor_in_flight_counts_in_its_team_s_share_of_the_order():
    """vision runs 8 with its 16-GPU job 60 waiting for ranking's jobs 6 and 7 to stop; nlp runs
    12. Once 60 starts vision holds 24 (share 0.75) against nlp's 12 (0.375), so nlp's 70 takes
    the free node before vision's equal 61. Ranked by what it runs now (0.25), vision would take
    it and hold 32 of its 32 when 60 starts, nlp 12: tried on the Philly trace, more evictions
    at 640 and 768 GPUs (BENCHMARKS.md, "Reclaim stops at the guarantee")."""
    quotas = teams(vision={"gpu:H100": (32, 32)}, nlp={"gpu:H100": (32, 32)}, ranking={"gpu:H100": (0, 64)})
    running_jobs = [
        running(1, ["z1-r1-n1"], team="vision", age=5 * HOUR, remaining=10 * HOUR),
        running(2, ["z1-r1-n2"], team="nlp", age=5 * HOUR, remaining=10 * HOUR),
        running(3, ["z1-r1-n3"], gpus_per_node=4, team="nlp", age=5 * HOUR, remaining=10 * HOUR),
        *[running(i, [f"z1-r1-n{i}"], team="ranking", age=5 * HOUR, remaining=10 * HOUR) for i in (4, 5)],
        *[running(i, [f"z1-r1-n{i}"], team="ranking", age=HOUR, preempting=True, preempted_for=60) for i in (6, 7)],
    ]
    pending = [job(60, gpus=16, team="vision", age=900), job(61, team="vision"), job(70, team="nlp")]
    decisions = schedule(snapshot(NODES, pending=pending, running_jobs=running_jobs, team_list=quotas))
    assert [(p.job_id, p.borrowed, placed_nodes(decisions, p.job_id)) for p in decisions.placements] == [
        (70, False, ["z1-r1-n8"])
    ]
    assert decisions.pending[60].code == ReasonCode.PREEMPTING


def test_a_team_s_borrowed_jobs_are_its_lowest_class_not_its_newest():
    """ranking (guaranteed 32) runs four P2s and, newest, a P1: 8 above its guarantee. The P2
    job 4 is the borrowed one; by start alone the P1 was, a reclaim evicted it, and back in the
    queue it evicted ranking's P2 for priority at once (QA: two evictions where one does)."""
    running_jobs = [
        *[running(i, [f"z1-r1-n{i}"], team="ranking", age=(11 - i) * HOUR, remaining=10 * HOUR) for i in (1, 2, 3, 4)],
        running(5, ["z1-r1-n5"], team="ranking", priority="P1", age=900, remaining=10 * HOUR),
        *[running(i, [f"z1-r1-n{i}"], team="vision", age=HOUR, remaining=10 * HOUR) for i in (6, 7, 8)],
    ]
    claim = job(60, team="vision", age=60.0)
    decisions = schedule(snapshot(NODES, pending=[claim], running_jobs=running_jobs, team_list=QUOTAS))
    assert [(p.victim_job_id, p.for_job_id, p.reason) for p in decisions.preemptions] == [(4, 60, "RECLAIM")]


# A division of two teams: research-a runs 24 of its 8 guaranteed (16 over), research-b 8 of its
# 16; the division 32 of its 24 (8 over). vision runs 32 of its 48. The cluster is full.
DIVISION = (
    Team("research", None, {"gpu:H100": Quota(24, 40)}),
    Team("research-a", "research", {"gpu:H100": Quota(8, 40)}),
    Team("research-b", "research", {"gpu:H100": Quota(16, 40)}),
    Team("vision", None, {"gpu:H100": Quota(48, 16)}),
)


def division_running():
    teams_on = ["research-a"] * 3 + ["research-b"] + ["vision"] * 4
    return [running(i, [f"z1-r1-n{i}"], team=team, remaining=10 * HOUR) for i, team in enumerate(teams_on, 1)]


def reclaim_in_division(claim):
    return schedule(snapshot(NODES, pending=[claim], running_jobs=division_running(), team_list=DIVISION))


@pytest.mark.parametrize(
    "claim, expected",
    [
        # research-a is 16 over its own guarantee, but its division only 8 over: a reclaim from
        # outside the division takes 8 of research-a's, never 16 (the division would fall to 16
        # of its 24 guaranteed).
        (job(60, gpus=8, team="vision"), 1),
        (job(60, gpus=16, per_task=8, team="vision"), 0),
        # research-b, within its guarantee, takes from its sibling: the division's use is the
        # same after, so only research-a's own excess bounds it.
        (job(60, gpus=8, team="research-b"), 1),
    ],
)
def test_a_reclaim_never_takes_a_division_below_its_guarantee(claim, expected):
    decisions = reclaim_in_division(claim)
    assert len(decisions.preemptions) == expected
    assert all(p.victim_job_id in (1, 2, 3) and p.reason == "RECLAIM" for p in decisions.preemptions)
