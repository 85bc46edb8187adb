"""`MLQ_WEB_WORKERS=abc python -m mlqueue.webserver` is a usage error naming the variable, not
a ValueError traceback; daphne's --proxy-headers is refused (mlqueue/proxies.py says why)."""

import subprocess
import sys
from pathlib import Path

import pytest

from mlqueue.webserver import BAD_WORKERS_ENV, NO_PROXY_HEADERS, parse_args

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("raw", ["abc", "2.5", "two"])
def test_a_worker_count_that_is_not_a_number_is_a_usage_error_naming_the_variable(monkeypatch, capsys, raw):
    monkeypatch.setenv("MLQ_WEB_WORKERS", raw)
    with pytest.raises(SystemExit) as exc:
        parse_args([])
    assert exc.value.code == 2
    assert capsys.readouterr().err.rstrip().endswith(BAD_WORKERS_ENV.format(raw=raw))


def test_the_variable_and_the_option_still_count(monkeypatch):
    monkeypatch.setenv("MLQ_WEB_WORKERS", " 3 ")
    assert parse_args([])[0].workers == 3
    assert parse_args(["--workers", "5", "--verbosity", "1"])[0].workers == 5
    monkeypatch.setenv("MLQ_WEB_WORKERS", "0")
    with pytest.raises(SystemExit):
        parse_args([])


def test_the_command_line_says_so_without_a_traceback():
    env = {"PATH": "/usr/bin:/bin", "MLQ_WEB_WORKERS": "abc"}
    result = subprocess.run(
        [sys.executable, "-m", "mlqueue.webserver"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "MLQ_WEB_WORKERS='abc' is not a whole number" in result.stderr


@pytest.mark.parametrize("option", ["--proxy-headers", "--proxy-headers-host=X-Real-IP"])
def test_daphnes_proxy_headers_are_refused(capsys, option):
    with pytest.raises(SystemExit) as exc:
        parse_args(["--workers", "1", option])
    assert exc.value.code == 2
    assert NO_PROXY_HEADERS.format(option=option.partition("=")[0]) in capsys.readouterr().err
