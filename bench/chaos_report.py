"""The fault campaign's summary table, printed before its JSON line."""

from collections import defaultdict

from bench.chaos_checks import INVARIANTS


def print_summary(result: dict) -> None:
    details = defaultdict(list)
    for fault in result["fault_log"]:
        details[fault["kind"]].append(fault["detail"])
    print(f"{'fault':<18} {'count':>5}  first detail")
    for kind, count in sorted(result["faults"].items()):
        print(f"{kind:<18} {count:>5}  {details[kind][0]}")
    jobs = result["jobs"]
    print(
        f"\njobs: {jobs['submitted']} submitted, {jobs['succeeded']} succeeded, {jobs['active']} still pending or "
        f"running, {jobs['never_accepted']} never accepted; {jobs['attempts_run']} attempts ran"
    )
    print(
        f"preemptions: {result['preemptions']} ({result['preemptions_held_to_grace']} held to their grace); "
        f"restarts spent: {result['restarts_spent']}; leader takeovers: {result['leader_takeovers']}; "
        f"nodes lost: {result['nodes_lost']}"
    )
    print(f"longest control-plane outage: {result['longest_outage_s']} s (bound {result['bound_s']:g} s)")
    print(
        f"API answers to submits: {result['api_answers']}; failed submits by fault: {result['failed_submits_by_fault']}"
    )
    print(f"processes restarted after exiting: {result['processes_restarted'] or 'none'}")
    for error in result["campaign_errors"]:
        print(f"fault not carried out: {error}")
    print(f"\n{'invariant':<24} {'count':>5}")
    for name in INVARIANTS:
        print(f"{name:<24} {result['invariants'][name]:>5}")
    for name, found in result["violations"].items():
        print(f"\n{name}:")
        for line in found:
            print(f"  {line}")
    violated = sum(result["invariants"].values())
    print(
        f"\nverdict: {'FAIL, ' + str(violated) + ' violation(s)' if violated else 'PASS, every invariant holds'} "
        f"(seed {result['seed']}, {result['wall_s']:.0f} s)\n"
    )
