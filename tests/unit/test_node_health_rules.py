"""The node health rules (scheduling/health_rules.py): which faults cordon, which exclude one
GPU, which are only shown, and that a fault reported again is acted on once."""

import pytest

from scheduling.health_rules import CORDON, EXCLUDE, Finding, Rules, has_fault, judge

RULES = Rules(cordon_xids=frozenset({79, 74}), exclude_xids=frozenset({48, 94}))


def sample(check=None, **faults) -> dict:
    gpus = [{"index": i, "ecc_uncorrectable": 0, "xids": [], **faults.get(f"gpu{i}", {})} for i in range(8)]
    return {"gpus": gpus, "check": check}


def xid(code: int, at: float) -> dict:
    return {"code": code, "at": at}


def test_a_healthy_sample_has_no_fault_and_calls_for_nothing():
    healthy = sample(gpu1={"xids": [xid(13, 5.0)]})  # XID 13 (a job's own error): shown only
    assert not has_fault(healthy, RULES)
    assert judge(healthy, {}, RULES).findings == []


@pytest.mark.parametrize(
    "faults, findings",
    [
        ({"gpu3": {"xids": [xid(79, 10.0)]}}, [Finding(CORDON, "XID 79 (GPU has fallen off the bus) on GPU 3", 3)]),
        ({"gpu5": {"xids": [xid(48, 10.0)]}}, [Finding(EXCLUDE, "XID 48 (double-bit ECC error)", 5)]),
        ({"gpu0": {"ecc_uncorrectable": 2}}, [Finding(EXCLUDE, "2 uncorrectable ECC error(s)", 0)]),
        (
            {"gpu1": {"xids": [xid(94, 11.0), xid(74, 10.0)]}},
            [Finding(CORDON, "XID 74 (NVLink error) on GPU 1", 1), Finding(EXCLUDE, "XID 94 (contained ECC error)", 1)],
        ),
    ],
)
def test_faults_and_what_they_call_for(faults, findings):
    assert has_fault(sample(**faults), RULES)
    assert judge(sample(**faults), {}, RULES).findings == findings


def test_a_fault_reported_again_is_acted_on_once_and_a_new_one_again():
    first = judge(sample(gpu3={"xids": [xid(79, 10.0)], "ecc_uncorrectable": 1}), {}, RULES)
    assert first.marks == {"xid_at": 10.0, "ecc": {"3": 1}}
    assert judge(sample(gpu3={"xids": [xid(79, 10.0)], "ecc_uncorrectable": 1}), first.marks, RULES).findings == []
    later = judge(sample(gpu3={"xids": [xid(79, 10.0), xid(79, 70.0)], "ecc_uncorrectable": 3}), first.marks, RULES)
    assert [f.action for f in later.findings] == [CORDON, EXCLUDE]
    assert later.marks == {"xid_at": 70.0, "ecc": {"3": 3}}
    assert later.excluded == {3: "3 uncorrectable ECC error(s)"}


def test_an_ecc_count_that_starts_again_is_followed():
    reloaded = judge(sample(gpu2={"ecc_uncorrectable": 0}), {"ecc": {"2": 4}}, RULES)
    assert (reloaded.findings, reloaded.marks["ecc"]) == ([], {"2": 0})
    assert judge(sample(gpu2={"ecc_uncorrectable": 1}), reloaded.marks, RULES).excluded == {
        2: "1 uncorrectable ECC error(s)"
    }


def test_a_failing_health_check_cordons_once_per_run_of_failures():
    check = {"status": "failed", "exit_code": 1, "output": "nvme0 SMART failed", "at": 100.0, "failed_since": 40.0}
    first = judge(sample(check=check), {}, RULES)
    assert first.cordon == [Finding(CORDON, "health check failed (exit 1): nvme0 SMART failed")]
    assert judge(sample(check={**check, "at": 160.0}), first.marks, RULES).findings == []
    timed_out = {**check, "exit_code": None, "output": "timed out after 30 s", "at": 300.0, "failed_since": 300.0}
    assert judge(sample(check=timed_out), first.marks, RULES).cordon == [
        Finding(CORDON, "health check failed: timed out after 30 s")
    ]
    assert not has_fault(sample(check={**check, "status": "ok"}), RULES)
