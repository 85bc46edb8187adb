"""`python -m bench.replay --quotas FILE.json`: the quotas an admin is considering, in either of
two shapes:

    {"research-vision": 32, ...}                       team -> guaranteed GPUs; it may borrow
                                                       up to the whole cluster
    {"research-vision": {"gpu:H100": {"guaranteed": 32, "borrowing_limit": 0, "weight": 1.0}}}
                                                       the API's quotas (GET /api/v1/teams/{name}/quotas):
                                                       the replayed class's entry; borrowing_limit
                                                       null or left out: the whole cluster

The replay simulates one resource class (`--gpu-type`): a team whose quotas name only other
classes is left out, as a team the file does not name (no guarantee, no limit). Anything else
is refused with one line naming the team and the format.
"""

import json
import math
from dataclasses import dataclass
from pathlib import Path

QUOTA_FILE_FORMAT = (
    'a JSON object of team -> guaranteed GPUs ({"vision": 32}), or team -> the API\'s quotas '
    '({"vision": {"gpu:H100": {"guaranteed": 32, "borrowing_limit": 0}}})'
)
QUOTA_KEYS = ("guaranteed", "borrowing_limit", "weight")
NOT_AN_OBJECT = "{path} is not {format}"
BAD_TEAM = "{team}: {problem}; the file is {format}"
NO_CLASS = (
    "no team has a quota for {rclass} (the replay's --gpu-type); the file's classes are {found}: "
    "replay with --gpu-type {example}, or give {rclass}'s quotas"
)


class QuotaFileError(ValueError):
    """A quota file the replay cannot read, in one line."""


@dataclass(frozen=True)
class TeamQuota:
    guaranteed: int
    borrowing_limit: int | None = None  # None: up to the whole cluster
    weight: float = 1.0


def read_quota_file(path: Path, rclass: str) -> dict[str, TeamQuota]:
    """Team -> its quota in `rclass` ("gpu:H100"). Raises OSError, QuotaFileError."""
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise QuotaFileError(f"{path} is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise QuotaFileError(NOT_AN_OBJECT.format(path=path, format=QUOTA_FILE_FORMAT))
    quotas, classes = {}, set()
    for team, value in data.items():
        try:
            found = _team_quota(value, rclass)
        except QuotaFileError as exc:
            raise QuotaFileError(BAD_TEAM.format(team=team, problem=exc, format=QUOTA_FILE_FORMAT)) from None
        if found is not None:
            quotas[team] = found
        elif isinstance(value, dict):
            classes.update(value)
    if data and not quotas and classes:
        example = sorted(classes)[0].partition(":")[2] or sorted(classes)[0]
        raise QuotaFileError(NO_CLASS.format(rclass=rclass, found=", ".join(sorted(classes)), example=example))
    return quotas


def _team_quota(value, rclass: str) -> TeamQuota | None:
    """One team's entry: a number of GPUs, its quota ({"guaranteed": ..}), or its quotas by
    class; None when they name other classes only."""
    if _is_count(value):
        return TeamQuota(int(value))
    if not isinstance(value, dict):
        raise QuotaFileError(f"{json.dumps(value)[:60]} is neither a number of GPUs nor an object")
    if value and set(value) <= set(QUOTA_KEYS):
        return _quota(value)
    if rclass not in value:
        return None
    if not isinstance(value[rclass], dict):
        raise QuotaFileError(f'{rclass}: want an object such as {{"guaranteed": 32, "borrowing_limit": 0}}')
    return _quota(value[rclass], where=f"{rclass}.")


def _quota(entry: dict, where: str = "") -> TeamQuota:
    unknown = sorted(set(entry) - set(QUOTA_KEYS))
    if unknown:
        raise QuotaFileError(f"{where}{unknown[0]}: not a quota field (a quota has {', '.join(QUOTA_KEYS)})")
    guaranteed, limit, weight = (entry.get(key) for key in QUOTA_KEYS)
    if not _is_count(guaranteed if guaranteed is not None else 0):
        raise QuotaFileError(f"{where}guaranteed: want a number of GPUs >= 0, not {json.dumps(guaranteed)}")
    if limit is not None and not _is_count(limit):
        raise QuotaFileError(f"{where}borrowing_limit: want a number of GPUs >= 0 or null, not {json.dumps(limit)}")
    weight = 1.0 if weight is None else weight
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 < weight < math.inf:
        raise QuotaFileError(f"{where}weight: want a number above 0, not {json.dumps(weight)}")
    return TeamQuota(int(guaranteed or 0), None if limit is None else int(limit), float(weight))


def _is_count(value) -> bool:
    """A whole number of GPUs, >= 0 (16 or 16.0; not true, -1 or 1.5)."""
    return not isinstance(value, bool) and isinstance(value, int | float) and value >= 0 and float(value).is_integer()
