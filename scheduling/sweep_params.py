"""A sweep's trials: the parameters of each, from an accepted `sweep:` block (group_spec.py).

Pure (no Django, no clock): the same block and seed give the same trials, in the same order,
on any machine, so a sweep can be submitted again and compared trial by trial. Parameters are
taken by name in alphabetical order, never in the order a spec lists them: a spec stored (in
Postgres' jsonb), shown, cloned or sent by another client may list its keys in another order,
and the same seed must still draw the same trials.

- grid: every combination of the listed values, the first parameter by name varying slowest,
  the first `max_trials` of them;
- random: `max_trials` draws, the parameters by name: a list uniformly, a range {min, max}
  uniformly, on a log scale with `log: true`, as an integer with `int: true` (each integer
  between min and max equally likely; with `log: true` too, each integer n as likely as the log
  scale's stretch from n - 0.5 to n + 0.5).
"""

import itertools
import math
import random


def grid_size(parameters: dict) -> int:
    return math.prod(len(values) for values in parameters.values())


def trials(sweep: dict, *, seed: int) -> list[dict]:
    """The parameters of each trial, trial 0 first."""
    parameters, count = sweep["parameters"], sweep["max_trials"]
    if sweep["method"] == "grid":
        return list(itertools.islice(_grid(parameters), count))
    rng = random.Random(seed)
    return [{name: _draw(rng, parameters[name]) for name in sorted(parameters)} for _ in range(count)]


def _grid(parameters: dict):
    names = sorted(parameters)
    for combination in itertools.product(*(parameters[name] for name in names)):
        yield dict(zip(names, combination, strict=True))


def _draw(rng: random.Random, value):
    if isinstance(value, list):
        return rng.choice(value)
    if value.get("int"):
        return _draw_integer(rng, value)
    low, high = value["min"], value["max"]
    if value.get("log"):
        return math.exp(rng.uniform(math.log(low), math.log(high)))
    return rng.uniform(low, high)


def _draw_integer(rng: random.Random, value) -> int:
    """An integer in [ceil(min), floor(max)]. Rounding a draw over [min, max] gave each end half
    the share of the others (QA: of 1..3, 1 and 3 came up a quarter of the time each, 2 half),
    so each integer n owns [n - 0.5, n + 0.5): uniformly, every n alike; on a log scale, n's share
    of the log scale over [low - 0.5, high + 0.5) (low >= 1 there: a log range's min is > 0)."""
    low, high = math.ceil(value["min"]), math.floor(value["max"])
    if not value.get("log"):
        return rng.randint(low, high)
    drawn = math.exp(rng.uniform(math.log(low - 0.5), math.log(high + 0.5)))
    return min(max(round(drawn), low), high)  # the draw's top end, and exp(log(x)) a hair off x


def as_text(value) -> str:
    """A parameter's value as it goes into a command or a variable: true/false for booleans
    (what YAML and most argument parsers read), the shortest exact form for floats."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def env_name(name: str) -> str:
    return f"MLQ_PARAM_{name.upper()}"
