"""A what-if side where no job finished has no averages: null, not the simulator's 0.0."""

from scheduling.whatif import _over_finished


def test_no_finished_job_has_no_average_wait_or_jct():
    figures = {"jobs": 17, "finished": 0, "unfinished": 17, "avg_wait_s": 0.0, "p95_wait_s": 0.0, "avg_jct_s": 0.0}
    assert _over_finished(figures) == {**figures, "avg_wait_s": None, "p95_wait_s": None, "avg_jct_s": None}


def test_a_side_with_finished_jobs_or_no_side_is_left_as_it_is():
    figures = {"jobs": 3, "finished": 2, "avg_wait_s": 0.0, "avg_jct_s": 60.0}
    assert _over_finished(figures) is figures
    assert _over_finished(None) is None
