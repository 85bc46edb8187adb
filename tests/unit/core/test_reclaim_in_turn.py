"""`PolicyConfig.reclaim_in_turn`: an owner reclaims only while no job before it in the order
waits for the room its eviction would free (else that job takes the room in the next pass and
the owner evicts again: the loop behind most reclaim churn on the Philly trace)."""

from dataclasses import replace

import pytest

from scheduling.core.model import BACKLOG_OFF_WITHOUT_ON, PolicyConfig
from scheduling.core.reasons import ReasonCode
from scheduling.core.scheduler import Scheduler, schedule
from tests.unit.core.builders import HOUR, cluster, job, rack, running, snapshot, teams

NODES = cluster(rack("z1-r1", 2))
QUOTAS = teams(vision={"gpu:H100": (16, 0)}, other={"gpu:H100": (0, 64)})
# The borrower fills both nodes with 16 one-GPU jobs.
BORROWERS = [
    running(10 + i, [f"z1-r1-n{1 + i // 8}"], gpus_per_node=1, first_gpu=i % 8, team="other", cpus=1, age=600 + i)
    for i in range(16)
]


# The rule's options as they were before its gate became the default: each test here sets
# what it tests on top of these.
RULE_OFF = {
    "reclaim_in_turn": False,
    "nominate_reclaimers": False,
    "reclaim_in_turn_backlog": None,
    "reclaim_in_turn_backlog_off": None,
}


def contended(*pending, **config):
    return snapshot(NODES, pending=pending, running_jobs=BORROWERS, team_list=QUOTAS, **{**RULE_OFF, **config})


def decide(*pending, **config):
    return schedule(contended(*pending, **config))


def test_an_owner_behind_a_waiting_job_that_could_take_its_room_does_not_reclaim():
    borrower_job = job(2, gpus=1, team="other", runtime=HOUR / 4, cpus=1)
    owner_job = job(3, gpus=8, team="vision")
    # Without the option the owner evicts a node's worth of borrowers, whose room the borrower's
    # waiting job (before it in the order) would take in the next pass.
    loop = decide(borrower_job, owner_job, reclaim_in_turn=False)
    assert loop.order == (2, 3)
    assert len(loop.preemptions) == 8
    in_turn = decide(borrower_job, owner_job, reclaim_in_turn=True)
    assert in_turn.preemptions == ()
    assert in_turn.pending[3].code == ReasonCode.PREEMPTION_PENDING
    assert in_turn.pending[3].message.startswith(
        "within team vision's guarantee: it reclaims borrowed H100 once no job before it waits "
        "for that room (job 2 waits for 1 H100)"
    )


def test_an_owner_is_not_promised_a_reclaim_of_what_no_reclaim_may_take():
    """Every borrowed job is a P0, which nothing evicts: the owner waits for room like any job,
    and its reason says that, not that it reclaims once no job before it waits (QA)."""
    p0s = [replace(borrower, priority="P0", preemptible=False) for borrower in BORROWERS]
    pending = [job(2, gpus=1, team="other", runtime=HOUR / 4, cpus=1), job(3, gpus=8, team="vision")]
    snap = snapshot(NODES, pending=pending, running_jobs=p0s, team_list=QUOTAS, **{**RULE_OFF, "reclaim_in_turn": True})
    decisions = schedule(snap)
    assert decisions.preemptions == ()
    assert decisions.pending[3].code == ReasonCode.INSUFFICIENT_CAPACITY
    assert "reclaims" not in decisions.pending[3].message


@pytest.mark.parametrize(
    ("quotas", "running_jobs", "config"),
    [
        # other is 8 over its guarantee of 8, in one 16-GPU job: no reclaim may take that job.
        (
            teams(vision={"gpu:H100": (16, 0)}, other={"gpu:H100": (8, 64)}),
            [running(10, ["z1-r1-n1", "z1-r1-n2"], team="other")],
            {},
        ),
        # every borrowed job ends within the reclaim's spare: none is reclaimed.
        (
            QUOTAS,
            [replace(borrower, expected_end=borrower.started_at + 630) for borrower in BORROWERS],
            {"reclaim_spare_ending_s": 600},
        ),
    ],
)
def test_an_owner_is_promised_a_reclaim_only_of_what_its_reclaim_would_take(quotas, running_jobs, config):
    """Found by a review: the check above asked only whether another team over its guarantee
    ran anything evictable, not what this owner's reclaim may take."""
    pending = [job(2, gpus=1, team="other", runtime=HOUR / 4, cpus=1), job(3, gpus=8, team="vision")]
    config = {**RULE_OFF, "reclaim_in_turn": True, **config}
    decisions = schedule(snapshot(NODES, pending=pending, running_jobs=running_jobs, team_list=quotas, **config))
    alone = schedule(snapshot(NODES, pending=pending[1:], running_jobs=running_jobs, team_list=quotas, **config))
    assert alone.preemptions == ()  # in its turn it would take nothing
    assert "reclaims" not in decisions.pending[3].message


def test_an_owner_first_in_the_order_reclaims():
    owner_job = job(3, gpus=1, team="vision", runtime=HOUR / 4, cpus=1)
    borrower_job = job(2, gpus=1, team="other", runtime=HOUR, cpus=1)
    decisions = decide(borrower_job, owner_job, reclaim_in_turn=True)
    assert decisions.order == (3, 2)
    [eviction] = decisions.preemptions
    assert (eviction.for_job_id, eviction.victim_job_id) == (3, 10)  # the borrower with the least work lost
    assert decisions.pending[3].code == ReasonCode.PREEMPTING


def test_a_waiting_job_too_large_for_the_room_does_not_stop_the_owner():
    # A 16-GPU gang goes first (the least GPU-time) and waits: the 8 GPUs the owner frees would
    # not start it, so the owner reclaims.
    gang = job(2, gpus=16, team="other", runtime=60, cpus=1)
    owner_job = job(3, gpus=8, team="vision")
    decisions = decide(gang, owner_job, reclaim_in_turn=True)
    assert decisions.order == (2, 3)
    assert len(decisions.preemptions) == 8
    assert {p.for_job_id for p in decisions.preemptions} == {3}


def test_only_a_job_that_could_start_in_the_room_stops_the_owner():
    """A 4-GPU job of a third team waits first: it stops the 8-GPU owner while its team may
    borrow, but not once its quota refuses it (it could not take the room anyway)."""

    def decide_with(ranking_borrows: int):
        quotas = teams(
            vision={"gpu:H100": (16, 0)}, other={"gpu:H100": (0, 64)}, ranking={"gpu:H100": (0, ranking_borrows)}
        )
        pending = [job(2, gpus=4, team="ranking", runtime=60, cpus=1), job(3, gpus=8, team="vision")]
        return schedule(
            snapshot(
                NODES,
                pending=pending,
                running_jobs=BORROWERS,
                team_list=quotas,
                **{**RULE_OFF, "reclaim_in_turn": True},
            )
        )

    borrowing = decide_with(64)
    assert borrowing.preemptions == ()
    assert borrowing.pending[3].message.startswith(
        "within team vision's guarantee: it reclaims borrowed H100 once no job before it waits "
        "for that room (job 2 waits for 4 H100)"
    )
    refused = decide_with(0)
    assert refused.pending[2].code == ReasonCode.QUOTA
    assert {p.for_job_id for p in refused.preemptions} == {3}


def test_a_pass_that_leaves_out_jobs_that_can_change_nothing_still_sees_them_wait():
    """`Scheduler(actions_only=True)` leaves out a team's jobs once none can start, evict or
    reserve; the borrower's one-GPU job is such a job, yet it keeps the owner from reclaiming."""
    state = snapshot(
        NODES,
        pending=[job(2, gpus=1, team="other", runtime=HOUR / 4, cpus=1), job(3, gpus=8, team="vision")],
        running_jobs=BORROWERS,
        team_list=QUOTAS,
        reservations_per_class=0,
        **{**RULE_OFF, "reclaim_in_turn": True},
    )
    pruned = Scheduler(actions_only=True).schedule(state)
    assert pruned.preemptions == schedule(state).preemptions == ()


def test_with_nobody_over_a_guarantee_the_reason_is_the_capacity_one():
    quotas = teams(vision={"gpu:H100": (16, 0)}, other={"gpu:H100": (16, 16)})
    state = snapshot(
        NODES,
        pending=[job(2, gpus=1, team="other", runtime=HOUR / 4, cpus=1), job(3, gpus=8, team="vision")],
        running_jobs=BORROWERS,
        team_list=quotas,
        reclaim_in_turn=True,
    )
    decisions = schedule(state)
    assert decisions.preemptions == ()
    assert decisions.pending[3].code == ReasonCode.INSUFFICIENT_CAPACITY


# The borrower's 1-GPU job waits before the 8-GPU owner (9 of the class's 16 GPUs asked); with
# `reclaim_in_turn_backlog` the rule holds only while the class's waiting jobs ask at least that
# many times its capacity, and the owner otherwise evicts as without it.
BACKLOG_CASES = [
    # (backlog, other waiting jobs, evictions)
    (None, [], 0),  # the rule as `reclaim_in_turn` says
    (0.5, [], 0),  # 9 GPUs asked >= 8
    (1.0, [], 8),  # 9 < 16: the owner reclaims
    (1.0, [job(4, gpus=8, team="other", runtime=4 * HOUR)], 0),  # 17 >= 16
    (1.0, [job(4, gpus=8, team="other", runtime=4 * HOUR, held=True)], 8),  # a held job cannot start
    (1.0, [job(4, gpus=16, team="other", gpu_type="A100")], 8),  # another class's backlog
]


def test_the_rule_holds_only_under_a_deep_enough_backlog_of_its_class():
    for backlog, others, evictions in BACKLOG_CASES:
        pending = [job(2, gpus=1, team="other", runtime=HOUR / 4, cpus=1), job(3, gpus=8, team="vision"), *others]
        passed = contended(*pending, reclaim_in_turn=True, reclaim_in_turn_backlog=backlog)
        decisions = schedule(passed)
        assert len(decisions.preemptions) == evictions, (backlog, others)
        assert {p.for_job_id for p in decisions.preemptions} <= {3}
        expected = ReasonCode.PREEMPTION_PENDING if evictions == 0 else ReasonCode.PREEMPTING
        assert decisions.pending[3].code == expected, (backlog, others)
        assert Scheduler(actions_only=True).schedule(passed).preemptions == decisions.preemptions


def test_the_backlog_option_does_nothing_without_the_rule():
    pending = [job(2, gpus=1, team="other", runtime=HOUR / 4, cpus=1), job(3, gpus=8, team="vision")]
    assert len(decide(*pending, reclaim_in_turn=False, reclaim_in_turn_backlog=0.0).preemptions) == 8


def test_an_owner_that_reclaims_is_nominated_only_under_a_deep_enough_backlog():
    """The 8-GPU owner alone asks half the class: it reclaims either way, and is nominated to
    the nodes it freed only while the backlog counts as deep."""
    for backlog, nominated in [(None, True), (0.5, True), (1.0, False)]:
        decisions = decide(
            job(3, gpus=8, team="vision"),
            reclaim_in_turn=True,
            nominate_reclaimers=True,
            reclaim_in_turn_backlog=backlog,
        )
        assert len(decisions.preemptions) == 8, backlog
        assert (3 in decisions.nominations) == nominated, backlog


# Hysteresis: with `reclaim_in_turn_backlog_off` the rule, once on in a class (the snapshot's
# `reclaim_turn`: where it held last pass), holds on until the backlog falls below that many
# times the class's capacity. The class has 16 GPUs; the borrower's 1-GPU job and the 8-GPU owner
# ask 9, and a third job of 8 more makes 17.
H100 = "gpu:H100"
MORE = [job(4, gpus=8, team="other", runtime=4 * HOUR)]


def gated(*others, on: float = 1.0, off: float | None = 0.5, held=None):
    """The borrower's 1-GPU job and the 8-GPU owner, then `others`, under a gate with hysteresis,
    where it held last pass as `held` says."""
    pending = [job(2, gpus=1, team="other", runtime=HOUR / 4, cpus=1), job(3, gpus=8, team="vision"), *others]
    passed = contended(*pending, reclaim_in_turn=True, reclaim_in_turn_backlog=on, reclaim_in_turn_backlog_off=off)
    return passed if held is None else replace(passed, reclaim_turn=frozenset(held))


HYSTERESIS_CASES = [
    # (on, off, held last pass, other waiting jobs, evictions, holds after the pass)
    (1.0, 0.5, frozenset(), [], 8, frozenset()),  # off: 9 < 16, and it was off
    (1.0, 0.5, frozenset(), MORE, 0, {H100}),  # turns on: 17 >= 16
    (1.0, 0.5, {H100}, [], 0, {H100}),  # stays on: 9 >= 8, and it was on
    (1.0, 0.75, {H100}, [], 8, frozenset()),  # turns off: 9 < 12
    (1.0, None, {H100}, [], 8, frozenset()),  # no hysteresis: off below 16, as before
    (1.0, 0.5, {"gpu:A100"}, [], 8, frozenset()),  # on in another class only
]


def test_the_rule_turns_on_at_one_backlog_and_off_only_below_a_lower_one():
    for on, off, held, others, evictions, holds in HYSTERESIS_CASES:
        passed = gated(*others, on=on, off=off, held=held)
        decisions = schedule(passed)
        case = (on, off, held, len(others))
        assert len(decisions.preemptions) == evictions, case
        assert decisions.reclaim_turn == frozenset(holds), case
        assert Scheduler(actions_only=True).schedule(passed).preemptions == decisions.preemptions, case


def test_a_kept_scheduler_remembers_where_the_rule_held_and_a_fresh_one_starts_with_it_off():
    """Pass 1: 17 GPUs asked, the rule turns on and the owner waits its turn. Pass 2: the 8-GPU
    job is gone (9 asked): the kept `Scheduler` still holds the rule (9 >= 0.5 x 16), while a
    fresh pass (a restarted worker) knows nothing of pass 1 and lets the owner reclaim."""
    first = gated(*MORE)
    kept = Scheduler()
    assert kept.schedule(first).reclaim_turn == {H100}
    second = replace(first, pending=first.pending[:2], now=first.now + 60)
    stays = kept.schedule(second)
    assert stays.preemptions == ()
    assert stays.pending[3].code == ReasonCode.PREEMPTION_PENDING
    assert stays == schedule(replace(second, reclaim_turn=frozenset({H100})))
    assert len(schedule(second).preemptions) == 8


GATE_ERRORS = [
    # (reclaim_in_turn_backlog, reclaim_in_turn_backlog_off, message)
    (1.0, 1.5, "reclaim_in_turn_backlog_off=1.5: must be at most reclaim_in_turn_backlog (1.0)"),
    (None, 0.5, BACKLOG_OFF_WITHOUT_ON.format(value=0.5)),
    (1.0, -0.25, "reclaim_in_turn_backlog_off=-0.25: must be a number >= 0 (or None)"),
    (-1, None, "reclaim_in_turn_backlog=-1: must be a number >= 0 (or None)"),
    (1.0, "0.5", "reclaim_in_turn_backlog_off='0.5': must be a number >= 0 (or None)"),
    (True, None, "reclaim_in_turn_backlog=True: must be a number >= 0 (or None)"),
    (float("nan"), None, "reclaim_in_turn_backlog=nan: must be a number >= 0 (or None)"),
]


def test_a_backlog_gate_out_of_order_is_refused_naming_the_field():
    for on, off, message in GATE_ERRORS:
        with pytest.raises(ValueError) as refused:
            PolicyConfig(reclaim_in_turn_backlog=on, reclaim_in_turn_backlog_off=off)
        assert str(refused.value) == message, (on, off)
    for on, off in [(1.0, 1.0), (1.0, 0.0), (0, 0), (2, 0.5), (1.0, None), (None, None)]:
        assert PolicyConfig(reclaim_in_turn_backlog=on, reclaim_in_turn_backlog_off=off).reclaim_in_turn_backlog == on
