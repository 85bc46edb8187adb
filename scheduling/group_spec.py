"""The spec's group blocks: `array:` (many elements of one job, by index) and `sweep:` (one
trial per set of hyperparameters). Each is checked field by field here; scheduling/groups.py
turns an accepted block into the group's children.

    array: {count: 200, parallelism: 16, max_failures: 5}          # or indices: "0-199" / "1,5,9-12"
    sweep: {method: grid, parameters: {lr: [0.001, 0.01]}, parallelism: 4,
            metric: {name: val_loss, goal: minimize}, early_stop: {rule: median, min_reports: 3}}
"""

import math
import re

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from mlqueue.metrics_report import NAME as METRIC_NAME  # what mlqueue.report and the agent accept
from mlqueue.serializer_fields import ChoiceField
from scheduling.core.early_stop import MAXIMIZE, MINIMIZE
from scheduling.spec import ArrayBlockField, StrictIntegerField, StrictSerializer, StrictStringField, SweepBlockField
from scheduling.sweep_params import as_text, grid_size

PARAM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}\Z")
# The placeholders a trial's command gets besides its parameters' (scheduling/groups.py
# `_trial_values`): a parameter of the same name would silently take its place.
TRIAL_PLACEHOLDERS = {"trial": "the trial's number"}
INDEX_RANGE = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?\Z")
MAX_PARAMETERS = 32
MAX_VALUES = 1000
MAX_VALUE_CHARS = 1000

COUNT_OR_INDICES = 'give count or indices (e.g. count: 200 or indices: "0-199").'
COUNT_DISAGREES = "{count} elements, but indices {indices!r} name {named}."
BAD_INDICES = (
    '{part!r} is not an index list: use comma-separated indices and ranges such as "0-199", "1,5,9-12" '
    'or "0-98:2" (every second).'
)
BACKWARDS_RANGE = "{part!r} runs backwards: write the lower index first."
INDEX_TOO_LARGE = "{part!r}: an index is at most {limit:,}."
LARGEST_INDEX = 2**31 - 1  # the column's
TOO_MANY_ELEMENTS = "at most {limit} elements in one group, got {count}."
MAX_FAILURES_RANGE = "must be less than the group's {count} {children}, got {value}."
BAD_PARAM_NAME = "{name!r} is not a parameter name: letters, digits and underscores, not starting with a digit."
PARAM_NAMES_CLASH = "{a!r} and {b!r} are the same variable (MLQ_PARAM_{upper}): rename one."
PARAM_NAME_TAKEN = "{{{name}}} in a trial's command and env values is {meaning}: name the parameter otherwise."
TOO_MANY_PARAMETERS = "at most {limit} parameters, got {count}."
NO_PARAMETERS = "give at least one parameter."
EMPTY_VALUES = "{name}: give at least one value."
TOO_MANY_VALUES = "{name}: at most {limit} values, got {count}."
BAD_VALUE = "{name}: values are numbers, strings or booleans, not {kind}."
VALUE_NOT_FINITE = "{name}: a value must be a finite number, not {value}."
VALUE_TOO_LONG = "{name}: a value is at most {limit} characters."
BAD_RANGE_KEYS = "{name}: a range is {{min, max}} with optional log: true and int: true; unknown {keys}."
RANGE_NEEDS_BOUNDS = "{name}: a range needs min and max."
RANGE_BOUNDS = "{name}: min must be below max, got min {low} and max {high}."
LOG_NEEDS_POSITIVE = "{name}: a log range needs min > 0, got {low}."
NO_INTEGER_IN_RANGE = "{name}: no integer lies between min {low} and max {high}."
GRID_REPEATS = "{name}: {value!r} is listed twice: each value once (a repeated value runs the same trials again)."
GRID_SAME_TEXT = (
    "{name}: {first!r} and {second!r} both go into a command as {text!r}: each value once (a repeated value runs "
    "the same trials again)."
)
NOT_A_NUMBER = "{name}: {bound} must be a finite number, not {value}."
MAX_BOUND = 10**15
BOUND_RANGE = "{name}: {bound} must be between -1e15 and 1e15, not {value}."
FLAG_NOT_BOOL = "{name}: {flag} is true or false, not {value!r}."
GRID_NEEDS_LISTS = "{name}: a grid takes a list of values; ranges ({{min, max}}) are for method: random."
PARAM_SHAPE = "{name}: give a list of values, or a range {{min: .., max: ..}} (method: random)."
RANDOM_NEEDS_TRIALS = "method random needs max_trials: how many trials to draw."
GRID_TOO_LARGE = "the grid has {size} combinations, more than {limit}: set max_trials to take the first ones."
EARLY_STOP_NEEDS_METRIC = "early stopping compares trials by a metric: give metric: {name: .., goal: minimize}."
BAD_METRIC_NAME = (
    "{name!r} is not a metric name: letters, digits and _ . / -, starting with a letter, digit or _ (as "
    "mlqueue.report takes them)."
)


def max_group_size() -> int:
    return settings.MLQ_MAX_GROUP_SIZE


def parse_indices(text: str) -> list[int]:
    """Slurm's --array list: "0-199", "1,5,9-12", "0-98:2"; sorted, each index once."""
    found: set[int] = set()
    limit = max_group_size()
    for part in (p.strip() for p in text.split(",")):
        match = INDEX_RANGE.match(part)
        if not match:
            raise serializers.ValidationError(BAD_INDICES.format(part=part))
        low, high, step = int(match[1]), int(match[2] or match[1]), int(match[3] or 1)
        if high > LARGEST_INDEX:
            raise serializers.ValidationError(INDEX_TOO_LARGE.format(part=part, limit=LARGEST_INDEX))
        if high < low:
            raise serializers.ValidationError(BACKWARDS_RANGE.format(part=part))
        if step < 1:
            raise serializers.ValidationError(BAD_INDICES.format(part=part))
        # Counted before the range is built, so "0-999999999" is refused without a billion-element set.
        count = (high - low) // step + 1 + len(found)
        if count > limit:
            raise serializers.ValidationError(TOO_MANY_ELEMENTS.format(limit=limit, count=count))
        found.update(range(low, high + 1, step))
    return sorted(found)


class ArraySerializer(StrictSerializer):
    """`array:`: one spec run over many indices, `{count}` or Slurm's `indices`, at most
    `parallelism` at once; the array fails once more than `max_failures` elements fail for good."""

    count = StrictIntegerField(required=False, min_value=1)
    indices = StrictStringField(required=False, max_length=2000)
    parallelism = StrictIntegerField(required=False, allow_null=True, default=None, min_value=1)
    max_failures = StrictIntegerField(required=False, default=0, min_value=0)

    def validate(self, attrs):
        text = attrs.get("indices")
        count = _element_count(attrs.get("count"), text)
        if count > max_group_size():
            raise serializers.ValidationError(
                {"count": [TOO_MANY_ELEMENTS.format(limit=max_group_size(), count=count)]}
            )
        if attrs["max_failures"] and attrs["max_failures"] >= count:
            raise serializers.ValidationError(
                {
                    "max_failures": [
                        MAX_FAILURES_RANGE.format(count=count, children="elements", value=attrs["max_failures"])
                    ]
                }
            )
        return {
            "count": count,
            "indices": text,
            "parallelism": min(attrs["parallelism"] or count, count),
            "max_failures": attrs["max_failures"],
        }


def _element_count(count: int | None, text: str | None) -> int:
    """The array's size: `count`, or how many `indices` name (both given: they must agree)."""
    if count is None and text is None:
        raise serializers.ValidationError({"count": [COUNT_OR_INDICES]})
    if text is None:
        return count
    try:
        indices = parse_indices(text)
    except serializers.ValidationError as exc:  # named on its field, as every bad input is
        raise serializers.ValidationError({"indices": exc.detail}) from exc
    if count is not None and count != len(indices):
        raise serializers.ValidationError(
            {"count": [COUNT_DISAGREES.format(count=count, indices=text, named=len(indices))]}
        )
    return len(indices)


class MetricSerializer(StrictSerializer):
    """The metric a sweep ranks its trials by (they report it with mlqueue.report)."""

    name = StrictStringField(max_length=100)
    goal = ChoiceField([MINIMIZE, MAXIMIZE], required=False, default=MINIMIZE)

    def validate_name(self, value):
        if not METRIC_NAME.match(value):
            raise serializers.ValidationError(BAD_METRIC_NAME.format(name=value))
        return value


class EarlyStopSerializer(StrictSerializer):
    """Stop a running trial whose best value is worse than the median of the others' at its step,
    once it has reported `min_reports` steps (scheduling/core/early_stop.py)."""

    rule = ChoiceField(["median"])
    min_reports = StrictIntegerField(required=False, default=3, min_value=1, max_value=100_000)


_SCALAR = {"oneOf": [{"type": "number"}, {"type": "string"}, {"type": "boolean"}]}
_RANGE = {
    "type": "object",
    "properties": {
        "min": {"type": "number"},
        "max": {"type": "number"},
        "log": {"type": "boolean", "default": False, "description": "drawn on a log scale"},
        "int": {"type": "boolean", "default": False, "description": "drawn as an integer"},
    },
    "required": ["min", "max"],
    "additionalProperties": False,
}


@extend_schema_field(
    {
        "type": "object",
        "description": "parameter name -> a list of values, or a range {min, max, log, int} (method random only)",
        "additionalProperties": {"oneOf": [{"type": "array", "items": _SCALAR, "minItems": 1}, _RANGE]},
        "minProperties": 1,
        "maxProperties": MAX_PARAMETERS,
    }
)
class ParametersField(serializers.Field):
    """name -> a list of values, or a range {min, max, log, int}; kept in the order given."""

    default_error_messages = {"not_a_mapping": "must be a mapping of parameter names to values or ranges."}

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            self.fail("not_a_mapping")
        if not data:
            raise serializers.ValidationError(NO_PARAMETERS)
        if len(data) > MAX_PARAMETERS:
            raise serializers.ValidationError(TOO_MANY_PARAMETERS.format(limit=MAX_PARAMETERS, count=len(data)))
        _check_names(list(data))
        _check_no_placeholder(list(data))
        return {name: _parameter(name, value) for name, value in data.items()}

    def to_representation(self, value):
        return value


def _check_names(names: list) -> None:
    seen: dict[str, str] = {}
    for name in names:
        if not isinstance(name, str) or not PARAM_NAME.match(name):
            raise serializers.ValidationError(BAD_PARAM_NAME.format(name=name))
        upper = name.upper()
        if upper in seen:
            raise serializers.ValidationError(PARAM_NAMES_CLASH.format(a=seen[upper], b=name, upper=upper))
        seen[upper] = name


def _check_no_placeholder(names: list[str]) -> None:
    """A parameter named like a trial's own placeholder would silently replace it in every command
    (QA: `trial: [5, 6]` ran every trial as number 5 or 6); refused on its own key."""
    taken = next((name for name in names if name in TRIAL_PLACEHOLDERS), None)
    if taken:
        message = PARAM_NAME_TAKEN.format(name=taken, meaning=TRIAL_PLACEHOLDERS[taken])
        raise serializers.ValidationError({taken: [message]})


def _parameter(name: str, value):
    if isinstance(value, list):
        return _values(name, value)
    if isinstance(value, dict):
        return _range(name, value)
    raise serializers.ValidationError(PARAM_SHAPE.format(name=name))


def _values(name: str, values: list) -> list:
    if not values:
        raise serializers.ValidationError(EMPTY_VALUES.format(name=name))
    if len(values) > MAX_VALUES:
        raise serializers.ValidationError(TOO_MANY_VALUES.format(name=name, limit=MAX_VALUES, count=len(values)))
    for value in values:
        if not isinstance(value, (str, int, float, bool)):
            raise serializers.ValidationError(BAD_VALUE.format(name=name, kind=type(value).__name__))
        if isinstance(value, float) and not math.isfinite(value):  # JSON's 1e400, YAML's .inf and .nan
            raise serializers.ValidationError(VALUE_NOT_FINITE.format(name=name, value=value))
        if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
            raise serializers.ValidationError(VALUE_TOO_LONG.format(name=name, limit=MAX_VALUE_CHARS))
    return values


def _range(name: str, spec: dict) -> dict:
    unknown = sorted(map(str, set(spec) - {"min", "max", "log", "int"}))
    if unknown:
        raise serializers.ValidationError(BAD_RANGE_KEYS.format(name=name, keys=", ".join(map(str, unknown))))
    if "min" not in spec or "max" not in spec:
        raise serializers.ValidationError(RANGE_NEEDS_BOUNDS.format(name=name))
    low, high = (_bound(name, bound, spec[bound]) for bound in ("min", "max"))
    log, as_int = spec.get("log", False), spec.get("int", False)
    for flag, flag_value in (("log", log), ("int", as_int)):
        if not isinstance(flag_value, bool):
            raise serializers.ValidationError(FLAG_NOT_BOOL.format(name=name, flag=flag, value=flag_value))
    if not low < high:
        raise serializers.ValidationError(RANGE_BOUNDS.format(name=name, low=low, high=high))
    if log and low <= 0:
        raise serializers.ValidationError(LOG_NEEDS_POSITIVE.format(name=name, low=low))
    if as_int and math.ceil(low) > math.floor(high):
        raise serializers.ValidationError(NO_INTEGER_IN_RANGE.format(name=name, low=low, high=high))
    return {"min": low, "max": high, "log": log, "int": as_int}


def _bound(name: str, bound: str, value) -> float:
    not_finite = isinstance(value, float) and not math.isfinite(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not_finite:
        raise serializers.ValidationError(NOT_A_NUMBER.format(name=name, bound=bound, value=_shown(value)))
    if not -MAX_BOUND <= value <= MAX_BOUND:  # a draw between bounds this far apart overflows to infinity
        raise serializers.ValidationError(BOUND_RANGE.format(name=name, bound=bound, value=_shown(value)))
    return value


def _shown(value) -> str:
    """A bound as an error names it: an integer of a thousand digits by its size."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_BOUND:
        return f"an integer of {len(str(abs(value)))} digits"
    return repr(value)[:100]


class SweepSerializer(StrictSerializer):
    """`sweep:`: one trial per set of parameters, a grid's combinations or random draws. Without
    `max_failures` the sweep fails only when every trial fails."""

    method = ChoiceField(["grid", "random"])
    parameters = ParametersField()
    max_trials = StrictIntegerField(required=False, allow_null=True, default=None, min_value=1)
    parallelism = StrictIntegerField(required=False, allow_null=True, default=None, min_value=1)
    max_failures = StrictIntegerField(required=False, allow_null=True, default=None, min_value=0)
    metric = MetricSerializer(required=False, allow_null=True, default=None)
    early_stop = EarlyStopSerializer(required=False, allow_null=True, default=None)
    seed = StrictIntegerField(required=False, allow_null=True, default=None, min_value=0, max_value=2**32 - 1)

    def validate(self, attrs):
        trials = _grid_trials(attrs) if attrs["method"] == "grid" else _random_trials(attrs)
        if attrs["early_stop"] and not attrs["metric"]:
            raise serializers.ValidationError({"early_stop": [EARLY_STOP_NEEDS_METRIC]})
        if attrs["max_failures"] and attrs["max_failures"] >= trials:
            message = MAX_FAILURES_RANGE.format(count=trials, children="trials", value=attrs["max_failures"])
            raise serializers.ValidationError({"max_failures": [message]})
        return {**attrs, "max_trials": trials, "parallelism": min(attrs["parallelism"] or trials, trials)}


def _grid_trials(attrs: dict) -> int:
    """A grid's trials: its combinations, the first max_trials of them, at most the group limit."""
    params, limit = attrs["parameters"], max_group_size()
    ranged = next((name for name, value in params.items() if isinstance(value, dict)), None)
    if ranged:
        raise serializers.ValidationError({"parameters": [GRID_NEEDS_LISTS.format(name=ranged)]})
    for name, values in params.items():
        _check_distinct(name, values)
    size = grid_size(params)
    trials = min(size, attrs["max_trials"] or size)
    if trials > limit:
        raise serializers.ValidationError({"max_trials": [GRID_TOO_LARGE.format(size=size, limit=limit)]})
    return trials


def _check_distinct(name: str, values: list) -> None:
    """Each value once, by the text a trial gets (sweep_params.as_text): 1 and "1" make the same
    command and variables, so the same trials; 1 and true ("1", "true"), or 1 and 1.0, do not."""
    seen: dict[str, object] = {}
    for value in values:
        text = as_text(value)
        if text not in seen:
            seen[text] = value
            continue
        first = seen[text]
        if type(first) is type(value) and first == value:
            message = GRID_REPEATS.format(name=name, value=value)
        else:
            message = GRID_SAME_TEXT.format(name=name, first=first, second=value, text=text)
        raise serializers.ValidationError({"parameters": [message]})


def _random_trials(attrs: dict) -> int:
    """A random sweep's trials: max_trials, which it must give, at most the group limit."""
    trials, limit = attrs["max_trials"], max_group_size()
    if trials is None:
        raise serializers.ValidationError({"max_trials": [RANDOM_NEEDS_TRIALS]})
    if trials > limit:
        raise serializers.ValidationError({"max_trials": [TOO_MANY_ELEMENTS.format(limit=limit, count=trials)]})
    return trials


# The API reference's schema of the spec's blocks (scheduling/spec.py declares the fields).
extend_schema_field(ArraySerializer)(ArrayBlockField)
extend_schema_field(SweepSerializer)(SweepBlockField)
