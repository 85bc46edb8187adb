"""The web processes' cyclic collector is set for a server holding thousands of sockets: what the
application imported is frozen, and young collections are rare (mlqueue/gc_tuning.py)."""

import os
import subprocess
import sys

import pytest

PROBE = "import gc, mlqueue.asgi; print(gc.get_threshold()[0], gc.get_freeze_count() > 10_000)"


def web_process_collector(**env: str) -> subprocess.CompletedProcess:
    """Import the application in a fresh interpreter, as daphne does, and read its collector."""
    return subprocess.run(
        [sys.executable, "-c", PROBE], env={**os.environ, **env}, capture_output=True, text=True, timeout=120
    )


def test_the_web_application_freezes_what_it_imported_and_collects_young_objects_rarely():
    result = web_process_collector()
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["50000", "True"]


def test_the_young_threshold_is_configurable():
    result = web_process_collector(MLQ_GC_YOUNG_THRESHOLD="700")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["700", "True"]


@pytest.mark.parametrize("raw", ["0", "-5", "lots"])
def test_a_bad_young_threshold_stops_the_web_process_with_its_name(raw):
    result = web_process_collector(MLQ_GC_YOUNG_THRESHOLD=raw)
    assert result.returncode != 0
    assert "MLQ_GC_YOUNG_THRESHOLD" in result.stderr.splitlines()[-1]
