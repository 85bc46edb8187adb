"""The console's filters (/nodes/?state=&zone=&rack=&gpu_type=&label=&name=): GET parameters,
applied in the database, so a filtered view is a URL an admin can share."""

import django_filters
from django import forms
from django.db import connection

from mlqueue.query_parameters import EMPTY_VALUE, ChoicesFilter
from scheduling.models import Node, NodeState

CPU = "cpu"  # gpu_type=cpu: the nodes without GPUs
NOT_A_LABEL = "a label is key or key=value."


def _a_label(value: str) -> None:
    if not value.partition("=")[0].strip():
        raise forms.ValidationError(NOT_A_LABEL)


class ConsoleFilter(django_filters.FilterSet):
    state = ChoicesFilter(choices=NodeState.choices)
    zone = django_filters.CharFilter(max_length=63)
    rack = django_filters.CharFilter(max_length=63)
    gpu_type = django_filters.CharFilter(method="by_gpu_type", max_length=20)
    label = django_filters.CharFilter(
        method="by_label", max_length=200, validators=[_a_label], help_text="key or key=value"
    )
    name = django_filters.CharFilter(field_name="name", lookup_expr="icontains", max_length=253)

    class Meta:
        model = Node
        fields = ["state", "zone", "rack", "gpu_type", "label", "name"]

    def by_gpu_type(self, nodes, _name, value):
        return nodes.filter(gpu_type="") if value.lower() == CPU else nodes.filter(gpu_type__iexact=value)

    def by_label(self, nodes, _name, value):
        key, has_value, wanted = value.partition("=")
        if not has_value:
            return nodes.filter(labels__has_key=key.strip())
        key, wanted = key.strip(), wanted.strip()
        if connection.features.supports_json_field_contains:
            return nodes.filter(labels__contains={key: wanted})
        # SQLite (`make demo`'s store, a few dozen nodes) has no JSON containment (it was a
        # 500), and its JSON paths read a key of digits as an array index: picked in Python.
        found = [pk for pk, labels in nodes.values_list("pk", "labels") if str((labels or {}).get(key)) == wanted]
        return nodes.filter(pk__in=found)


UNKNOWN_PARAMETER = "not a filter: filter by {known}."
ONE_VALUE = "one {name} at a time (only state may be given more than once)."
PAGE_PARAMETERS = {"part"}  # htmx's partial reloads


def misused(query, *, also=PAGE_PARAMETERS, empty_refused: bool = False) -> dict[str, str]:
    """Parameter -> why it is refused: one that is no filter (a typo showed the whole fleet),
    or a filter that takes one value given several (all but the last were dropped). `also`:
    the parameters that are no filter but the page's or the API's own (its cursor, limit).
    `empty_refused` (the API): one given empty too (`?zone=`, a script's unset variable, listed
    the whole fleet), as every other list refuses it; the console's form sends "" for "any"."""
    known = [*ConsoleFilter.base_filters]
    errors = {}
    for name in query:
        if name not in known and name not in also:
            errors[name] = UNKNOWN_PARAMETER.format(known=", ".join(known))
        elif name != "state" and len(query.getlist(name)) > 1:
            errors[name] = ONE_VALUE.format(name=name)
        elif empty_refused and "" in query.getlist(name):
            errors[name] = EMPTY_VALUE.format(name=name)
    return errors


def choices() -> dict:
    """The values the zone, rack and GPU type selectors offer (one query)."""
    rows = set(Node.objects.values_list("zone", "rack", "gpu_type").distinct())
    return {
        "zones": sorted({zone for zone, _, _ in rows}),
        "racks": sorted({rack for _, rack, _ in rows}),
        "gpu_types": sorted({gpu_type or CPU for _, _, gpu_type in rows}),
        "states": NodeState.values,
    }
