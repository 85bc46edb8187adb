"""`bench/replay.py --progress N`: how far a long replay got, every N passes, on stderr; the
summary is the same as without it."""

import json

import pytest

from bench.replay import main

TRACE = "job_id,submit_time,duration,num_gpus,team\n" + "".join(
    f"{n},{n * 3600},{7200 + 600 * n},{1 + n % 8},{'ab'[n % 2]}\n" for n in range(1, 41)
)


def replay(tmp_path, *extra: str) -> dict:
    trace = tmp_path / "trace.csv"
    trace.write_text(TRACE)
    return main(["--trace", str(trace), "--nodes", "1", "--baseline", "none", "--tick", "0", *extra])


def test_a_progress_line_every_n_passes_says_the_day_passes_waiting_and_cpu(tmp_path, capsys):
    quiet = replay(tmp_path)
    capsys.readouterr()
    figures = replay(tmp_path, "--progress", "10")
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [line["passes"] for line in lines] == list(range(10, 10 * len(lines) + 1, 10))
    assert len(lines) == figures["decisions"] // 10
    assert {tuple(line) for line in lines} == {("policy", "day", "passes", "waiting", "cpu_s")}
    assert [line["day"] for line in lines] == sorted(line["day"] for line in lines)
    assert {k: v for k, v in figures.items() if k not in ("wall_s", "jobs_per_min")} == {
        k: v for k, v in quiet.items() if k not in ("wall_s", "jobs_per_min")
    }


@pytest.mark.parametrize("value", ["0", "-5"])
def test_a_progress_of_no_passes_is_refused_naming_the_flag(tmp_path, capsys, value):
    with pytest.raises(SystemExit) as stopped:
        replay(tmp_path, "--progress", value)
    assert stopped.value.code == 2
    assert capsys.readouterr().err == f"replay: error: --progress must be a number of passes >= 1, not {value}\n"
