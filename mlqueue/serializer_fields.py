"""Serializer fields built once per class, not once per serializer.

DRF gives every serializer instance its own fields: `get_fields` deep-copies the declared
fields, and deep-copying a field calls its `__init__` again with deep copies of its arguments
(for a ModelSerializer it first derives them from the model's meta). A submit's spec has about
sixty fields in its nested serializers: the copies were a fifth of a submit's CPU.

`FieldsBuiltOnce` builds the bound fields once per class and gives each instance shallow copies
of them, re-parented to the instance: a field's own settings (its validators, choices, error
messages) are shared, read-only, and only `parent`, the one thing that differs between
instances, is the instance's own (a field finds its serializer, its `context` and its
`validate_<name>` method through it). A list's or a dict's `child` (a related field's
`child_relation`) is copied and re-parented the same way; a nested serializer builds its own
fields afresh from its class's, so nothing of one request's validation is seen by another's.

Only for serializers whose fields are the same for every instance (declared, or added by
`get_fields` whatever the instance): a serializer that varies them by its context or its
instance must not use it. Code that changes an instance's fields after they are built must
replace a field (`serializer.fields[name] = Field(...)`), never set attributes on a shared one.
"""

from django.utils.functional import cached_property
from rest_framework import serializers
from rest_framework.utils.serializer_helpers import BindingDict

from mlqueue.text import INVISIBLE, invisible_char

NOT_AN_INTEGER = "must be an integer, not {kind}."
NOT_A_STRING = "must be a string, not {kind}."
# Where a field keeps the field it applies to each item: ListField, DictField and ListSerializer's
# `child`, a many=True related field's `child_relation`.
CHILDREN = ("child", "child_relation")
_built: dict[type, dict] = {}  # class -> its fields, bound to a throwaway instance of it


class FieldsBuiltOnce:
    @cached_property
    def fields(self):
        fields = BindingDict(self)
        for name, field in _fields_of(type(self)).items():
            fields.fields[name] = _copy_for(field, parent=self)  # already bound: not through bind()
        return fields


def _fields_of(cls: type) -> dict:
    if cls not in _built:
        # Bound as DRF binds them (names, labels, sources), to an instance used for nothing else.
        owner = cls()
        fields = BindingDict(owner)
        for name, field in owner.get_fields().items():
            fields[name] = field
        _built[cls] = fields.fields
    return _built[cls]


def _copy_for(field, *, parent):
    """A shallow copy of `field` whose parent is `parent`; its child, if any, copied likewise."""
    copy = object.__new__(type(field))
    copy.__dict__.update(field.__dict__)
    copy.parent = parent
    if isinstance(field, serializers.BaseSerializer):
        # A nested serializer's state of its own: its fields (built from its class's), what it validated.
        for name in ("fields", "_errors", "_validated_data", "_data"):
            copy.__dict__.pop(name, None)
    for name in CHILDREN:
        if name in field.__dict__:
            setattr(copy, name, _copy_for(field.__dict__[name], parent=copy))
    return copy


UNKNOWN_FIELD = "unknown field."


class NoUnknownFields:
    """A serializer mixin that refuses fields it does not declare: a typo ("expires_in" for
    "expires_in_days", "reson") is an error, not a default silently taken."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(map(str, set(data) - set(self.fields)))
            if unknown:
                raise serializers.ValidationError({name: [UNKNOWN_FIELD] for name in unknown})
        return super().to_internal_value(data)


class ChoiceField(serializers.ChoiceField):
    """DRF's choice field, whose refusal lists the choices: a user who typed `topology_hint:
    rack` learns `same_rack` is the word without opening the docs."""

    default_error_messages = {
        "invalid_choice": '"{input}" is not a valid choice (one of {choices}).',
        # A list or an object quoted as Python writes it ("['started']") read as a value (QA).
        "not_a_choice": "must be one of {choices}, not {kind}.",
    }

    def to_internal_value(self, data):
        if isinstance(data, list | dict):
            self.fail("not_a_choice", kind="a list" if isinstance(data, list) else "an object")
        return super().to_internal_value(data)

    def fail(self, key, **kwargs):
        if key in ("invalid_choice", "not_a_choice"):
            kwargs["choices"] = ", ".join(self.choice_strings_to_values)
        super().fail(key, **kwargs)


class StrictIntegerField(serializers.IntegerField):
    """An integer in the JSON sense: "8", 8.0 and true are refused, not coerced."""

    default_error_messages = {"invalid": NOT_AN_INTEGER}

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid", kind=type(data).__name__ if not isinstance(data, str) else f"the string {data!r}")
        return super().to_internal_value(data)


class StrictStringField(serializers.CharField):
    """A string, not a number or a list coerced to one; `printable_only=True` also refuses
    invisible and control characters (for names people read)."""

    default_error_messages = {"not_a_string": NOT_A_STRING, "invisible": INVISIBLE}

    def __init__(self, *, printable_only: bool = False, **kwargs):
        self.printable_only = printable_only
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("not_a_string", kind=type(data).__name__)
        value = super().to_internal_value(data)
        if self.printable_only and (char := invisible_char(value)):
            self.fail("invisible", char=char)
        return value
