"""What a spec says that the submit form cannot show, one line each, for YAML -> form and a
clone: told, rather than silently dropped or changed.

1. a block the form has no inputs for (pipeline, schedule, notify): one line naming the block
   and where to submit it instead, never its contents;
2. a field the spec does not have: the API's own "unknown field." (a typo: the submit would be
   a 400 saying the same);
3. a value the form's input would change (a list where a number goes): its path and the value
   as JSON, short.
"""

import json
from functools import cache

from rest_framework import serializers

from mlqueue.serializer_fields import UNKNOWN_FIELD
from scheduling.group_spec import ArraySerializer, SweepSerializer
from scheduling.spec import SPEC_FIELD_ORDER, JobSpecSerializer

# The blocks the form has no inputs for, and what to do with a spec that has one.
BLOCKS_NOT_IN_FORM = {
    "pipeline": "the form does not take pipelines: submit this spec with mlq submit or the API (docs/pipelines.md)",
    "schedule": (
        "the form does not take schedules: submit this spec with mlq submit or the API, which create the "
        "schedule (docs/schedules.md)"
    ),
    "notify": (
        "the form has no notify fields, so it leaves this block out: submit this spec with mlq submit or the API, "
        "or set your account's defaults on /account/notifications/ (docs/notifications.md)"
    ),
    "owner": "the form leaves owner out: a job's owner is always who submits it",
}
BLOCK_NOT_IN_FORM = "{block}: {why}"
NOT_A_SPEC_FIELD = "{path}: " + UNKNOWN_FIELD + " The form leaves it out."
NOT_IN_FORM = "{path}: the form cannot hold {value} as it is, so it was left out or changed."
VALUE_SHOWN = 60  # characters of a value quoted in NOT_IN_FORM
SPEC_FIELDS = frozenset(SPEC_FIELD_ORDER)
# The group blocks are JSON fields of the spec's serializer, checked by these.
GROUP_SERIALIZERS = {"array": ArraySerializer, "sweep": SweepSerializer}


def lost_in_form(data: dict, spec: dict) -> list[str]:
    """What `data` (the YAML or a cloned job's spec) says that `spec`, the form's reading of
    it, does not. Empty values are the defaults either way."""
    kept = _flat(spec)
    lines = []
    for key, value in data.items():
        if _empty(value):
            continue
        if key in BLOCKS_NOT_IN_FORM:
            lines.append(BLOCK_NOT_IN_FORM.format(block=key, why=BLOCKS_NOT_IN_FORM[key]))
        elif key not in SPEC_FIELDS:
            lines.append(NOT_A_SPEC_FIELD.format(path=key))
        else:
            lines.extend(_changed({key: value}, kept))
    return lines


def _changed(data: dict, kept: dict) -> list[str]:
    lines = []
    for path, value in _flat(data).items():
        if _empty(value):
            continue
        if not _known(path):
            lines.append(NOT_A_SPEC_FIELD.format(path=path))
        elif path not in kept or kept[path] != value:
            lines.append(NOT_IN_FORM.format(path=path, value=_shown(value)))
    return lines


def _flat(data: dict, prefix: str = "", depth: int = 0) -> dict:
    """{"resources.gpu_count": 8, "env.A": "1", ...}: two levels, as deep as the form goes."""
    out = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and depth < 1:
            out.update(_flat(value, f"{path}.", depth + 1))
        else:
            out[path] = value
    return out


def _known(path: str) -> bool:
    """Whether a path below a section is one of its fields (env's and node_selector's keys are
    names of the user's: any is known)."""
    section, _, name = path.partition(".")
    fields = _section_fields(section)
    return not name or fields is None or name in fields


@cache
def _section_fields(section: str) -> frozenset[str] | None:
    if section in GROUP_SERIALIZERS:
        return frozenset(GROUP_SERIALIZERS[section]().fields)
    found = JobSpecSerializer().fields.get(section)
    return frozenset(found.fields) if isinstance(found, serializers.Serializer) else None


def _empty(value) -> bool:
    return value is None or value == "" or value == [] or value == {}


def _shown(value) -> str:
    """The value as the YAML's JSON reads it (true, [1, 2], "P9"), cut short."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= VALUE_SHOWN else text[: VALUE_SHOWN - 3] + "..."
