"""The fault campaign's short version (`bench/chaos.py --short`): a whole mlqueue of real
processes on its own Postgres and Redis, a steady workload, and every fault kind of the issue's
table once. Every invariant must hold, and the campaign must fit in three minutes."""

import json
import subprocess
import sys

import pytest

from bench.chaos_checks import INVARIANTS
from bench.chaos_faults import FAULTS
from bench.chaos_services import ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.alone]  # `make test` runs it by itself
SEED = 12


def test_every_fault_kind_runs_and_every_invariant_holds():
    result = subprocess.run(
        [sys.executable, "bench/chaos.py", "--short", "--seed", str(SEED)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
    )
    lines = result.stdout.strip().splitlines()
    assert lines, result.stderr[-3000:]
    figures = json.loads(lines[-1])
    # The table printed before the JSON line names each violation: the job, the fault, the times.
    assert figures["invariants"] == dict.fromkeys(INVARIANTS, 0), "\n".join(lines[:-1])
    assert result.returncode == 0, result.stderr[-3000:]
    assert figures["faults"] == dict.fromkeys(FAULTS, 1)
    assert figures["celery_kills_in_grace_window"] == 1
    # An outage past the bound would not test "no task killed by an outage shorter than it".
    assert figures["longest_outage_s"] < figures["bound_s"], json.dumps(figures["fault_log"], indent=1)
    assert figures["jobs"]["succeeded"] > 0 and figures["preemptions"] > 0
    assert figures["wall_s"] < 180, json.dumps(figures["fault_log"], indent=1)
