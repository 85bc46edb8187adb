"""Node health on the server: the latest telemetry sample of each node, kept in Redis (never a
Postgres row per sample: it is replaced every time and may be lost), the rules applied to it
(scheduling/health_rules.py) and infrastructure failures counted per node.

What the rules find is written once, conditionally (scheduling/nodes.py): a node cordoned with
the fault as its reason and its jobs requeued gracefully, or one GPU taken out of placement.
Embedded (no Redis), the local cache stands in for Redis."""

import json
import logging
import time

import redis
from django.conf import settings
from django.core.cache import cache
from django.db import transaction

from mlqueue.breaker import RedisBreaker
from scheduling import health_rules, nodes
from scheduling.models import Node

log = logging.getLogger(__name__)

SAMPLE_KEY = "mlq:health:{}"
INFRA_KEY = "mlq:infra:{}"
_redis = RedisBreaker("node health samples")


def rules() -> health_rules.Rules:
    return health_rules.Rules(frozenset(settings.MLQ_HEALTH_CORDON_XIDS), frozenset(settings.MLQ_HEALTH_EXCLUDE_XIDS))


def receive(node_id: int, name: str, sample: dict, *, now) -> bool:
    """A heartbeat brought a sample: keep it as the node's latest, and act on what it reports
    that was not acted on before. A healthy sample costs one Redis write. Returns whether it
    acted (the node's tasks may have been asked to stop)."""
    store_sample(name, {**sample, "received_at": now.timestamp()})
    if not health_rules.has_fault(sample, rules()):
        return False
    node = Node.objects.get(pk=node_id)
    own = its_own_gpus(node, sample)
    if own is not sample and not health_rules.has_fault(own, rules()):
        return False
    verdict = health_rules.judge(own, node.health_marks, rules())
    return verdict.marks != node.health_marks and act(node, verdict, now=now)


def its_own_gpus(node: Node, sample: dict) -> dict:
    """The sample without GPUs the node does not have (an index past its count, any on a CPU
    node): a fault there excluded a GPU that is not there, so the node counted fewer, or
    cordoned a CPU node. Logged, not refused: the heartbeat that carries it must go through."""
    foreign = sorted(gpu["index"] for gpu in sample["gpus"] if gpu["index"] >= node.gpu_count)
    if not foreign:
        return sample
    log.warning("node %s has %d GPUs; ignored the health of GPUs %s", node.name, node.gpu_count, foreign)
    return {**sample, "gpus": [gpu for gpu in sample["gpus"] if gpu["index"] < node.gpu_count]}


def act(node: Node, verdict: health_rules.Verdict, *, now) -> bool:
    """Claim the verdict's faults on the node (another heartbeat may have), then act on them."""
    before, fresh = (
        node.health_marks,
        {i: why for i, why in verdict.excluded.items() if str(i) not in node.excluded_gpus},
    )
    with transaction.atomic():
        if not nodes.do_claim_health_marks(node=node, before=before, after=verdict.marks, excluded=fresh):
            return False
        if fresh:
            nodes.do_exclude_gpus(node=node, excluded=fresh, now=now)
        if verdict.cordon:
            reason = cordon_reason([finding.reason for finding in verdict.cordon])
            data = {"findings": [finding.reason for finding in verdict.findings]}
            nodes.do_health_cordon(node=node, reason=reason, data=data, now=now)
    for finding in verdict.findings:
        log.warning("node %s: %s -> %s", node.name, finding.reason, finding.action)
    return True


REASON_CHARS = Node._meta.get_field("admin_reason").max_length
MORE_FAULTS = "; and {count} more (the node's events list them all)"


def cordon_reason(reasons: list[str], limit: int | None = None) -> str:
    """The findings that cordon a node, as its reason: as many whole as fit the column (eight
    GPUs fallen off the bus come to more), then how many more; the event keeps every one."""
    limit = limit or REASON_CHARS
    text = "; ".join(reasons)
    if len(text) <= limit:
        return text
    for kept in range(len(reasons) - 1, 0, -1):
        text = "; ".join(reasons[:kept]) + MORE_FAULTS.format(count=len(reasons) - kept)
        if len(text) <= limit:
            return text
    more = MORE_FAULTS.format(count=len(reasons) - 1) if len(reasons) > 1 else ""
    return reasons[0][: limit - len(more) - 3] + "..." + more


# --- the latest sample ------------------------------------------------------------------------
def store_sample(name: str, sample: dict) -> None:
    """Never raises for Redis: a lost sample is a gap on a page, not a wrong decision."""
    ttl = int(settings.MLQ_HEALTH_SAMPLE_TTL_S) or 1
    raw = json.dumps(sample, separators=(",", ":"))
    if not settings.REDIS_URL:
        cache.set(SAMPLE_KEY.format(name), raw, ttl)
        return
    client = _redis.client()
    if client is None:
        return
    try:
        client.set(SAMPLE_KEY.format(name), raw, ex=ttl)
    except redis.RedisError as exc:
        _redis.failed(exc)
    else:
        _redis.worked()


def latest(names: list[str]) -> dict[str, dict]:
    """node -> its latest sample, for the nodes that have one (empty while Redis is down)."""
    if not names:
        return {}
    keys = [SAMPLE_KEY.format(name) for name in names]
    if not settings.REDIS_URL:
        found = cache.get_many(keys)
        values = [found.get(key) for key in keys]
    else:
        client = _redis.client()
        if client is None:
            return {}
        try:
            values = client.mget(keys)
        except redis.RedisError as exc:
            _redis.failed(exc)
            return {}
        _redis.worked()
    return {name: json.loads(raw) for name, raw in zip(names, values, strict=True) if raw}


def faults_reported(node: Node) -> list[str]:
    """The faults that would cordon `node` that its latest sample reports, acted on or not: what
    an admin putting it back in service should know (QA: an uncordon over a GPU that fell off
    the bus said nothing). Empty without a sample (Redis away: nothing known)."""
    sample = latest([node.name]).get(node.name)
    if sample is None or not health_rules.has_fault(sample, rules()):
        return []
    verdict = health_rules.judge(its_own_gpus(node, sample), {}, rules())
    return [finding.reason for finding in verdict.findings if finding.action == health_rules.CORDON]


def latest_of(node: Node) -> tuple[dict | None, float | None, list[dict]]:
    """The node's latest sample (None without one), its age in seconds, and a row per GPU: what
    its page and the API's node detail show."""
    sample = latest([node.name]).get(node.name)
    age = time.time() - sample["received_at"] if sample and sample.get("received_at") else None
    return sample, age, gpu_rows(sample, node.gpu_count, node.excluded_gpus)


def gpu_rows(sample: dict | None, gpu_count: int, excluded: dict) -> list[dict]:
    """One row per GPU for a page: its latest telemetry (if any), whether it is excluded and
    why, and what to warn about."""
    by_index = {gpu["index"]: gpu for gpu in (sample or {}).get("gpus", ())}
    rows = []
    for index in range(gpu_count):
        gpu = by_index.get(index, {})
        warnings = [health_rules.xid_text(x["code"]) for x in gpu.get("xids", ())]
        if gpu.get("ecc_uncorrectable"):
            warnings.append(f"{gpu['ecc_uncorrectable']} uncorrectable ECC")
        if (gpu.get("temperature_c") or 0) >= settings.MLQ_HEALTH_HOT_C:
            warnings.append(f"hot ({gpu['temperature_c']} °C)")
        rows.append({"index": index, **gpu, "excluded": excluded.get(str(index), ""), "warnings": warnings})
    return rows


def with_gpu_use(tasks: list) -> list:
    """The tasks, each running one with `gpu_use`: its GPUs' latest telemetry from its node's
    sample ([] when the node sent none), for the job page."""
    running = [t for t in tasks if t.state == "RUNNING" and t.node is not None]
    samples = latest(sorted({t.node.name for t in running}))
    for task in running:
        by_index = {gpu["index"]: gpu for gpu in samples.get(task.node.name, {}).get("gpus", ())}
        task.gpu_use = [by_index[i] for i in task.gpu_indices if i in by_index]
    return tasks


# --- infrastructure failures ------------------------------------------------------------------
def note_infra_failures(node: Node, count: int, *, now) -> bool:
    """An infrastructure failure on `node` that cost `count` tasks (its agent lost them, or the
    node was lost with them): past MLQ_HEALTH_INFRA_FAILURES such failures within
    MLQ_HEALTH_INFRA_WINDOW_S, the node is cordoned. Failures are counted, not tasks: one agent
    restart that loses an 8-rank gang is one fault of the machine's, not eight, and three
    restarts in ten minutes are three. The count lives in Redis (lost with it: the rule starts
    counting again). Returns whether it cordoned."""
    limit, window = settings.MLQ_HEALTH_INFRA_FAILURES, settings.MLQ_HEALTH_INFRA_WINDOW_S
    if limit <= 0 or count <= 0:
        return False
    recent = _recent_failures(node.name, count, at=now.timestamp(), window=window)
    if len(recent) < limit:
        return False
    _forget_failures(node.name)  # counted again from zero after this cordon (and an uncordon)
    tasks = sum(recent)
    reason = f"{len(recent)} infrastructure failures within {window:g} s ({tasks} task{'s' * (tasks != 1)} lost)"
    with transaction.atomic():
        return nodes.do_health_cordon(
            node=node, reason=reason, data={"infra_failures": len(recent), "tasks_lost": tasks}, now=now
        )


def _recent_failures(name: str, tasks: int, *, at: float, window: float) -> list[int]:
    """Record a failure that cost `tasks` tasks at `at`: the tasks each failure within the
    window cost, this one included ([] with Redis away: no cordon on a count it cannot keep)."""
    key = INFRA_KEY.format(name)
    member = f"{at}:{tasks}:{time.monotonic_ns()}"
    if not settings.REDIS_URL:
        kept = [(t, n) for t, n in cache.get(key, []) if t > at - window] + [(at, tasks)]
        cache.set(key, kept, int(window) + 1)
        return [n for _, n in kept]
    client = _redis.client()
    if client is None:
        return []
    try:
        pipe = client.pipeline(transaction=True)
        pipe.zadd(key, {member: at}).zremrangebyscore(key, "-inf", at - window).zrange(key, 0, -1)
        pipe.expire(key, int(window) + 1)
        members = pipe.execute()[2]
    except redis.RedisError as exc:
        _redis.failed(exc)
        return []
    _redis.worked()
    return [int(raw.decode().split(":")[1]) for raw in members]


def _forget_failures(name: str) -> None:
    if not settings.REDIS_URL:
        cache.delete(INFRA_KEY.format(name))
        return
    client = _redis.client()
    if client is not None:
        try:
            client.delete(INFRA_KEY.format(name))
        except redis.RedisError as exc:
            _redis.failed(exc)
