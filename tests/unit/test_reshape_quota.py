"""Reshapes are offered only where the team's quota lets them start, counting the team's use as
the scheduler's pass does: what runs and each preemptor whose victims are still stopping
(review of 6375601: "fits now on H100" was offered while the pass refused the reshaped job for
quota, a preemptor of the team's being in flight)."""

from scheduling.core.fairshare import in_flight_ledger
from scheduling.core.maintenance import Windows
from scheduling.core.model import HOUR
from scheduling.core.reasons import ReasonCode
from scheduling.core.scheduler import schedule
from scheduling.core.state import ClusterState
from scheduling.web import explanations
from tests.unit.core.builders import NOW, cluster, job, rack, running, snapshot, teams

H100 = "gpu:H100"


def test_a_reshape_the_pass_would_refuse_for_quota_is_not_offered(monkeypatch):
    monkeypatch.setattr(explanations, "gpu_types", lambda: ["H100", "A100"])
    nodes = cluster(rack("z1-r1", 8), rack("z1-r2", 1))
    quotas = teams(vision={H100: (32, 0)}, ranking={H100: (32, 32)})
    r1 = [f"z1-r1-n{i}" for i in range(1, 9)]
    runs = [
        *[running(i, [r1[i - 1]], team="vision", age=(10 - i) * HOUR, remaining=10 * HOUR) for i in (1, 2, 8)],
        *[running(i, [r1[i - 1]], team="ranking", age=(10 - i) * HOUR, remaining=10 * HOUR) for i in (3, 4, 5, 6)],
        running(7, [r1[6]], team="ranking", age=HOUR, remaining=10 * HOUR, preempting=True, preempted_for=60),
        running(9, ["z1-r2-n1"], gpus_per_node=4, team="ranking", age=HOUR, remaining=10 * HOUR),
    ]
    # vision's 60 (8 H100) waits for ranking's 7 to stop; 61 is an A100 job of vision's as it
    # would be on H100: the pass refuses it for vision's quota, 60 being charged already.
    pending = [job(60, gpus=8, team="vision", age=3 * HOUR), job(61, gpus=4, team="vision", age=900)]
    decisions = schedule(snapshot(nodes, pending=pending, running_jobs=runs, team_list=quotas))
    assert decisions.pending[61].code == ReasonCode.QUOTA

    on_a100 = job(61, gpus=4, team="vision", gpu_type="A100").shape  # no A100 anywhere: a room wait
    state = ClusterState(nodes, runs)

    def offered(preemptors: dict) -> list[str]:
        ledger = in_flight_ledger(quotas, tuple(runs), state.fleet.capacity, preemptors)
        return explanations.reshapes(
            state, on_a100, Windows((), NOW), now=NOW, end_at=NOW + 4 * HOUR, team="vision", ledger=ledger
        )

    assert "fits now on H100" not in offered({60: ("vision", H100, 8)})
    assert "fits now on H100" in offered({})  # what was offered before: 60 not counted
