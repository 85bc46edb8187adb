"""MLQ_PREEMPT_MIN_RUNTIME: the minimum runtime per preemptor class, and the older
MLQ_PREEMPT_MIN_RUNTIME_S still honoured for P1-P3."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from mlqueue.settings import (
    QUEUE_ORDERS,
    env_backlog,
    env_bool,
    env_choice,
    env_max_evictions,
    env_min_runtime,
    env_seconds,
)
from scheduling.store_view import policy_config

NAME, SINGLE = "MLQ_PREEMPT_MIN_RUNTIME", "MLQ_PREEMPT_MIN_RUNTIME_S"


@pytest.mark.parametrize(
    "raw, single, expected",
    [
        ("", "", {"P0": 0, "P1": 600, "P2": 600, "P3": 600}),
        ("P0=0,P1=600,P2=600,P3=600", "", {"P0": 0, "P1": 600, "P2": 600, "P3": 600}),
        ("P1=60, P3=3600", "", {"P0": 0, "P1": 60, "P2": 600, "P3": 3600}),  # the rest keep their default
        ("P0=30", "", {"P0": 30, "P1": 600, "P2": 600, "P3": 600}),
        ("", "0", {"P0": 0, "P1": 0, "P2": 0, "P3": 0}),  # bench/chaos_stack.py's setting
        ("", "120", {"P0": 0, "P1": 120, "P2": 120, "P3": 120}),  # never P0's
        ("P2=900", "120", {"P0": 0, "P1": 120, "P2": 900, "P3": 120}),  # the per-class entry wins
    ],
)
def test_minimum_runtime_by_class_from_the_environment(monkeypatch, raw, single, expected):
    monkeypatch.setenv(NAME, raw)
    monkeypatch.setenv(SINGLE, single)
    assert env_min_runtime(NAME, SINGLE) == expected


@pytest.mark.parametrize(
    "raw, single, complaint",
    [
        ("P1", "", "MLQ_PREEMPT_MIN_RUNTIME='P1': 'P1' is not CLASS=SECONDS"),
        ("P4=10", "", "MLQ_PREEMPT_MIN_RUNTIME='P4=10': 'P4=10' is not CLASS=SECONDS with a class of P0, P1, P2, P3"),
        ("P1=ten", "", "MLQ_PREEMPT_MIN_RUNTIME='P1=ten': 'ten' is not a number of seconds >= 0"),
        ("P1=-5", "", "MLQ_PREEMPT_MIN_RUNTIME='P1=-5': '-5' is not a number of seconds >= 0"),
        ("P1=inf", "", "MLQ_PREEMPT_MIN_RUNTIME='P1=inf': 'inf' is not a number of seconds >= 0"),
        ("", "soon", "MLQ_PREEMPT_MIN_RUNTIME_S='soon': 'soon' is not a number of seconds >= 0"),
    ],
)
def test_a_bad_minimum_runtime_stops_the_server_naming_the_variable(monkeypatch, raw, single, complaint):
    monkeypatch.setenv(NAME, raw)
    monkeypatch.setenv(SINGLE, single)
    with pytest.raises(ImproperlyConfigured) as caught:
        env_min_runtime(NAME, SINGLE)
    assert str(caught.value).startswith(complaint)


def test_the_scheduler_policy_reads_the_setting(settings):
    settings.MLQ_PREEMPT_MIN_RUNTIME = {"P0": 0.0, "P1": 300.0, "P2": 600.0, "P3": 900.0}
    policy = policy_config()
    assert [policy.min_runtime_for(p) for p in ("P0", "P1", "P2", "P3")] == [0, 300, 600, 900]


@pytest.mark.parametrize("raw, expected", [("", 0.0), ("1800", 1800.0), (" 90.5 ", 90.5)])
def test_the_reclaim_delay_from_the_environment(monkeypatch, settings, raw, expected):
    monkeypatch.setenv("MLQ_RECLAIM_AFTER_WAIT_S", raw)
    assert env_seconds("MLQ_RECLAIM_AFTER_WAIT_S", 0.0) == expected
    settings.MLQ_RECLAIM_AFTER_WAIT_S = expected
    assert policy_config().reclaim_after_wait_s == expected


@pytest.mark.parametrize("raw", ["soon", "-1", "inf", "nan"])
def test_a_bad_reclaim_delay_stops_the_server_naming_the_variable(monkeypatch, raw):
    monkeypatch.setenv("MLQ_RECLAIM_AFTER_WAIT_S", raw)
    with pytest.raises(ImproperlyConfigured) as caught:
        env_seconds("MLQ_RECLAIM_AFTER_WAIT_S", 0.0)
    assert str(caught.value) == f"MLQ_RECLAIM_AFTER_WAIT_S={raw!r}: {raw!r} is not a number of seconds >= 0"


@pytest.mark.parametrize(
    "raw, expected",
    [("", "weighted_shortest"), ("fair_share", "fair_share"), (" weighted_shortest ", "weighted_shortest")],
)
def test_the_queue_order_from_the_environment(monkeypatch, settings, raw, expected):
    monkeypatch.setenv("MLQ_QUEUE_ORDER", raw)
    assert env_choice("MLQ_QUEUE_ORDER", QUEUE_ORDERS) == expected
    settings.MLQ_QUEUE_ORDER = expected
    assert policy_config().order == expected


@pytest.mark.parametrize("raw", ["fifo", "FAIR_SHARE", "shortest"])
def test_a_bad_queue_order_stops_the_server_naming_the_variable(monkeypatch, raw):
    monkeypatch.setenv("MLQ_QUEUE_ORDER", raw)
    with pytest.raises(ImproperlyConfigured) as caught:
        env_choice("MLQ_QUEUE_ORDER", QUEUE_ORDERS)
    assert str(caught.value) == f"MLQ_QUEUE_ORDER={raw!r} is not one of weighted_shortest, fair_share"


def test_reclaim_in_turn_is_one_setting_for_both_policy_fields_under_a_backlog_gate(settings):
    config = policy_config()
    assert (config.reclaim_in_turn, config.nominate_reclaimers) == (True, True)
    assert (config.reclaim_in_turn_backlog, config.reclaim_in_turn_backlog_off) == (1.0, 0.0)
    settings.MLQ_RECLAIM_IN_TURN = False
    assert (policy_config().reclaim_in_turn, policy_config().nominate_reclaimers) == (False, False)
    settings.MLQ_RECLAIM_IN_TURN_BACKLOG = None  # "always"
    assert (policy_config().reclaim_in_turn_backlog, policy_config().reclaim_in_turn_backlog_off) == (None, None)


@pytest.mark.parametrize(("raw", "expected"), [("0.5", 0.5), ("always", None), ("", 1.0)])
def test_the_backlog_gate_reads_a_multiple_or_always(monkeypatch, raw, expected):
    monkeypatch.setenv("MLQ_RECLAIM_IN_TURN_BACKLOG", raw)
    assert env_backlog("MLQ_RECLAIM_IN_TURN_BACKLOG", 1.0) == expected


@pytest.mark.parametrize("raw", ["-1", "nan", "lots"])
def test_a_bad_backlog_gate_stops_the_server_naming_the_variable(monkeypatch, raw):
    monkeypatch.setenv("MLQ_RECLAIM_IN_TURN_BACKLOG", raw)
    with pytest.raises(ImproperlyConfigured, match="MLQ_RECLAIM_IN_TURN_BACKLOG="):
        env_backlog("MLQ_RECLAIM_IN_TURN_BACKLOG", 1.0)


@pytest.mark.parametrize("raw, expected", [("", False), ("0", False), ("1", True), ("true", True)])
def test_the_overdue_line_counts_from_a_requeue_only_when_asked(monkeypatch, settings, raw, expected):
    monkeypatch.setenv("MLQ_OVERDUE_SINCE_REQUEUE", raw)
    assert env_bool("MLQ_OVERDUE_SINCE_REQUEUE", False) is expected
    settings.MLQ_OVERDUE_SINCE_REQUEUE = expected
    assert policy_config().overdue_since_requeue is expected


@pytest.mark.parametrize(("raw", "expected"), [("", 2), ("1", 1), ("5", 5), ("none", None), ("None", None)])
def test_the_reclaim_eviction_cap_reads_a_count_or_none(monkeypatch, settings, raw, expected):
    monkeypatch.setenv("MLQ_RECLAIM_MAX_EVICTIONS", raw)
    assert env_max_evictions("MLQ_RECLAIM_MAX_EVICTIONS", 2) == expected
    settings.MLQ_RECLAIM_MAX_EVICTIONS = expected
    assert policy_config().reclaim_max_evictions == expected


@pytest.mark.parametrize("raw", ["0", "-2", "2.5", "many"])
def test_a_bad_reclaim_eviction_cap_stops_the_server_naming_the_variable(monkeypatch, raw):
    monkeypatch.setenv("MLQ_RECLAIM_MAX_EVICTIONS", raw)
    with pytest.raises(ImproperlyConfigured) as caught:
        env_max_evictions("MLQ_RECLAIM_MAX_EVICTIONS", 2)
    assert str(caught.value) == f"MLQ_RECLAIM_MAX_EVICTIONS={raw!r} is not a number of evictions >= 1 or 'none'"


def test_the_reclaim_victim_order_reaches_the_policy(settings):
    settings.MLQ_RECLAIM_LONGEST_FIRST, settings.MLQ_RECLAIM_CHECKPOINT_STEP_S = False, 0.0
    config = policy_config()
    assert (config.reclaim_longest_first, config.reclaim_checkpoint_step_s) == (False, 0.0)
