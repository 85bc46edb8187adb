"""QA: `bench.replay --quotas FILE.json` with the API's quota shape ({"team": {"gpu:H100":
{"guaranteed": 32, "borrowing_limit": 0}}}), natural after docs/what-if.md, crashed with
`TypeError: int() argument must be ... not 'dict'`. It is read now, its borrowing limit kept;
a file of neither shape is refused in one line giving the format."""

import json

import pytest

from bench.quota_file import QUOTA_FILE_FORMAT, TeamQuota, read_quota_file
from bench.replay import main

# Two 32-GPU jobs of one team at once on 64 GPUs: with 32 guaranteed and nothing to borrow, the
# second waits for the first (an hour).
TRACE = "job_id,submit_time,duration,num_gpus,team,gpu_type\n1,0,3600,32,vision,H100\n2,0,3600,32,vision,H100\n"


def replay(tmp_path, quotas) -> dict:
    trace, path = tmp_path / "trace.csv", tmp_path / "quotas.json"
    trace.write_text(TRACE)
    path.write_text(json.dumps(quotas))
    return main(["--trace", str(trace), "--nodes", "8", "--baseline", "none", "--quotas", str(path)])


def test_the_apis_quota_shape_is_replayed_with_its_borrowing_limit(tmp_path):
    limited = replay(tmp_path, {"vision": {"gpu:H100": {"guaranteed": 32, "borrowing_limit": 0}}})
    assert limited["finished"] == 2 and limited["max_wait_s"] >= 3600
    borrowing = replay(tmp_path, {"vision": {"gpu:H100": {"guaranteed": 32}}})  # no limit: the whole cluster
    assert borrowing["max_wait_s"] < 3600
    assert replay(tmp_path, {"vision": 32})["max_wait_s"] == borrowing["max_wait_s"]  # the plain shape, as before


def test_the_file_shapes_read_as_the_same_quotas(tmp_path):
    path = tmp_path / "q.json"
    path.write_text(
        json.dumps(
            {
                "a": 16,
                "b": {"gpu:H100": {"guaranteed": 8, "borrowing_limit": 4, "weight": 2}, "gpu:A100": {"guaranteed": 1}},
                "c": {"guaranteed": 4, "borrowing_limit": None},
                "d": {"gpu:A100": {"guaranteed": 8}},  # another class only: as if not named
            }
        )
    )
    assert read_quota_file(path, "gpu:H100") == {
        "a": TeamQuota(16),
        "b": TeamQuota(8, 4, 2.0),
        "c": TeamQuota(4),
    }


@pytest.mark.parametrize(
    ("quotas", "problem"),
    [
        ({"vision": "lots"}, 'vision: "lots" is neither a number of GPUs nor an object'),
        ({"vision": {"gpu:H100": {"guaranteed": -1}}}, "vision: gpu:H100.guaranteed: want a number of GPUs >= 0"),
        ({"vision": {"gpu:H100": {"guranteed": 8}}}, "vision: gpu:H100.guranteed: not a quota field"),
    ],
)
def test_a_file_of_neither_shape_is_refused_in_one_line_with_the_format(tmp_path, capsys, quotas, problem):
    with pytest.raises(SystemExit) as stopped:
        replay(tmp_path, quotas)
    assert stopped.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith("replay: error: --quotas ") and problem in error
    assert error.endswith(f"; the file is {QUOTA_FILE_FORMAT}\n") and error.count("\n") == 1


def test_a_file_for_another_class_says_which_classes_it_has(tmp_path, capsys):
    with pytest.raises(SystemExit):
        replay(tmp_path, {"vision": {"gpu:A100": {"guaranteed": 8}}})
    assert "no team has a quota for gpu:H100 (the replay's --gpu-type); the file's classes are gpu:A100" in (
        capsys.readouterr().err
    )
