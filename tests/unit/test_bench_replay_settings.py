"""`bench/replay.py --set`: a policy option out of range stops the replay with the field named,
before any replay starts."""

import pytest

from bench.replay import parse_args, policy_config


def test_a_backlog_gate_out_of_order_stops_the_replay_naming_the_field(capsys):
    args = parse_args(
        ["--trace", "t.csv", "--set", "reclaim_in_turn_backlog=0.5", "--set", "reclaim_in_turn_backlog_off=1"]
    )
    with pytest.raises(SystemExit) as stopped:
        policy_config(args)
    assert stopped.value.code == 2
    assert capsys.readouterr().err == (
        "replay: error: --set: reclaim_in_turn_backlog_off=1: must be at most reclaim_in_turn_backlog (0.5)\n"
    )


def test_a_backlog_gate_in_order_is_the_policy():
    args = parse_args(
        ["--trace", "t.csv", "--set", "reclaim_in_turn_backlog=1", "--set", "reclaim_in_turn_backlog_off=0.25"]
    )
    config = policy_config(args)
    assert (config.reclaim_in_turn_backlog, config.reclaim_in_turn_backlog_off) == (1, 0.25)
