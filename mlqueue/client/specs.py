"""Job spec files (YAML or JSON) and `--set KEY=VALUE` overrides, read as the API will: the
server checks every field; this only refuses what is not a spec at all."""

import copy
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from mlqueue.client.errors import MlqError

BAD_OVERRIDE = "--set wants KEY=VALUE with a dotted key, e.g. resources.gpu_count=16; got {item!r}"
NOT_A_MAPPING = "{where}: a job spec is a mapping of fields, not {kind}"
OVERRIDE_THROUGH_VALUE = "{part} is {kind}, not a mapping"  # kind: a_kind's
NOT_YAML = "not YAML: {error}"
NOT_JSON = "not JSON: {error}"
NOT_JSON_LINE = NOT_JSON  # the name the package exported first
NO_SPECS = "{where}: empty: a job spec is a mapping of fields{per_line}"
NOT_UTF8 = "{path}: not UTF-8 text (byte {position}): save it as UTF-8"
NOT_A_SPEC = "a job spec is a mapping of fields or a spec file's path, not {kind}"
UNREADABLE = "{path}: cannot read it ({error})"
# As the API refuses them (mlqueue/yaml_body.py): a few lines of nested aliases expand beyond any
# limit, and one that refers to itself makes a value no JSON can carry.
YAML_ALIASES = "YAML anchors and aliases (&, *) are not supported: write the spec out in full."
TOO_DEEP = "the YAML nests thousands of levels deep; a job spec nests three."
JSON_LINES_SUFFIXES = (".jsonl", ".ndjson")


_MERGE = "tag:yaml.org,2002:merge"


class AliasRefused(yaml.composer.ComposerError):
    """A YAML alias (`*name`) in a spec: refused, as the API refuses it."""


class SpecLoader(yaml.SafeLoader):
    """YAML as a spec reads it, as YAML 1.2 does: a date stays the text it is (`env: {DAY:
    2026-12-01}` is the string "2026-12-01", as JSON carries it), not a date object nothing can
    send; and only true and false are booleans. YAML 1.1 also reads on, off, yes and no as
    booleans, so `notify: {on: [failed]}` and `depends_on: [{job: 3, on: failure}]`, as the docs
    write them, had the key True. And 1e-5 is a number, as in JSON: YAML 1.1 read an exponent
    without a dot, or without a sign, as text (a learning rate of "1e-5" refused as a string).
    A key given twice in a mapping is an error, as the API refuses it in JSON: YAML 1.1 loaders
    keep the last value silently (`gpu_count: 1` then `gpu_count: 2` read as 2). An alias
    (`*name`) is an error too, as the API refuses it (QA: `env: &e {A: *e}`, a mapping inside
    itself, was a RecursionError's traceback)."""

    def compose_node(self, parent, index):
        """An alias is refused where it is met, before anything is built from it."""
        if self.check_event(yaml.AliasEvent):
            raise AliasRefused(None, None, YAML_ALIASES, self.peek_event().start_mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:
                continue  # `<<: {...}` merges keys that the mapping's own may override
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:
                continue  # unhashable: PyYAML refuses it with its own error
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark, f"found duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


_BOOL, _TIMESTAMP = "tag:yaml.org,2002:bool", "tag:yaml.org,2002:timestamp"
SpecLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in (_BOOL, _TIMESTAMP)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
SpecLoader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
# After YAML 1.1's own forms (which need a dot and a signed exponent): JSON's exponents.
EXPONENT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")
SpecLoader.add_implicit_resolver("tag:yaml.org,2002:float", EXPONENT, list("-+0123456789."))


class SpecDumper(yaml.SafeDumper):
    """YAML written for SpecLoader to read back: a string that it would read as a number
    ("1e-5", an argument in a command) is quoted."""


SpecDumper.add_implicit_resolver("tag:yaml.org,2002:float", EXPONENT, list("-+0123456789."))
SpecDumper.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


def dump_yaml(data, **options) -> str:
    """`data` as YAML that `read_yaml` reads back as the same data."""
    return yaml.dump(data, Dumper=SpecDumper, **options)


def read_yaml(text: str) -> Any:
    return yaml.load(text, Loader=SpecLoader)  # noqa: S506 (a SafeLoader)


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise MlqError(0, NOT_UTF8.format(path=path, position=error.start)) from None
    except OSError as error:  # no such file, a directory, no permission
        raise MlqError(0, UNREADABLE.format(path=path, error=error.strerror or error)) from None


def parse_override(item: str) -> tuple[list[str], Any]:
    """`resources.gpu_count=16` -> (["resources", "gpu_count"], 16): the value read as a YAML
    scalar; a `secret_env.NAME` value is taken as written (a secret is a string, and an error
    about it must not repeat it), an `env.NAME` value as text (QA: `--set env.SLEEP=6` was
    refused, "must be a string, not int", with no hint to quote it)."""
    parts = override_key(item)
    value = item.partition("=")[2]
    if parts[0] == "secret_env":
        return parts, value
    if parts[0] == "env" and len(parts) == 2:
        return parts, env_value(value)
    return parts, read_scalar(value, ".".join(parts))


def env_value(text: str) -> str:
    """An `env.NAME` value: text. YAML's reading only where it gives text (`'16'` and `"a b"`
    unquoted); otherwise as written: `6` is "6", not the number, and `*.txt`, `%s` or `[1`,
    which YAML refuses, are themselves (QA: each was a usage error or a refused number)."""
    try:
        found = read_scalar(text, "env")
    except MlqError:
        return text.strip()
    return found if isinstance(found, str) else text.strip()


def override_key(item: str) -> list[str]:
    """KEY=VALUE's dotted key, as its parts; an item not of that shape is an MlqError."""
    key, equals, _ = item.partition("=")
    parts = key.strip().split(".")
    if not equals or not all(parts):
        shown = f"{key}=***" if key.strip().startswith("secret_env") and equals else item
        raise MlqError(0, BAD_OVERRIDE.format(item=shown))
    return parts


def read_scalar(text: str, where: str) -> Any:
    """VALUE as YAML reads it (16 -> 16, '16' -> "16", true -> True); blank is ""."""
    if not text.strip():
        return ""
    try:
        return read_yaml(text)
    except yaml.YAMLError as error:
        message = NOT_YAML.format(error=str(error).splitlines()[0])
        raise MlqError(0, f"{where}: {message}", {where: [message]}) from None


def apply_overrides(spec: dict, items: Iterable[str] = (), **overrides) -> dict:
    """A copy of `spec` with dotted `KEY=VALUE` items and keyword overrides (top-level fields) applied."""
    out = copy.deepcopy(spec)
    pairs = [parse_override(item) for item in items] + [([key], value) for key, value in overrides.items()]
    for parts, value in pairs:
        here = out
        for depth, part in enumerate(parts[:-1]):
            here = here.setdefault(part, {})
            if not isinstance(here, dict):
                key = ".".join(parts)
                where = ".".join(parts[: depth + 1])
                message = OVERRIDE_THROUGH_VALUE.format(part=where, kind=a_kind(here))
                raise MlqError(0, f"{key}: {message}", {key: [message]})
        here[parts[-1]] = value
    return out


# What a value read from JSON or YAML is, as a sentence names it (QA: "resources.tasks is a int").
KINDS = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list", dict: "a mapping"}


def a_kind(value) -> str:
    """`value`'s kind with its article: "an integer", "a list"; "null" for None."""
    if value is None:
        return "null"
    if type(value) in KINDS:
        return KINDS[type(value)]
    name = type(value).__name__
    return f"{'an' if name[:1] in ('a', 'e', 'i', 'o', 'u') else 'a'} {name}"


def load_spec(spec_or_path: dict | str | os.PathLike) -> dict:
    """A spec given as a mapping, or read from its file; anything else is an MlqError."""
    if isinstance(spec_or_path, dict):
        return spec_or_path
    if not isinstance(spec_or_path, str | os.PathLike):
        raise MlqError(0, NOT_A_SPEC.format(kind=type(spec_or_path).__name__))
    path = Path(spec_or_path)
    if path.suffix.lower() == ".json":  # read as JSON exactly, not as the YAML it also is
        spec = _json_spec(read_text(path), str(path))
    else:
        try:
            spec = read_yaml(read_text(path))
        except AliasRefused:
            raise MlqError(0, f"{path}: {YAML_ALIASES}") from None
        except RecursionError:  # the parser recurses per level: thousands of "[" were a traceback
            raise MlqError(0, f"{path}: {TOO_DEEP}") from None
        except yaml.YAMLError as error:
            raise MlqError(0, f"{path}: {NOT_YAML.format(error=' '.join(str(error).split()))}") from None
    if spec is None:
        raise MlqError(0, NO_SPECS.format(where=path, per_line=""))
    if not isinstance(spec, dict):
        raise MlqError(0, NOT_A_MAPPING.format(where=path, kind=type(spec).__name__))
    return spec


def load_specs(paths: Iterable[str | os.PathLike]) -> list[tuple[str, dict]]:
    """(where, spec) of each spec in the files, in order: a YAML or JSON file is one spec (where
    is its path), a JSON Lines file (.jsonl, .ndjson) one spec per line that is not blank (where
    is `path:line`)."""
    found = []
    for name in paths:
        path = Path(name)
        if not is_json_lines(path):
            found.append((str(path), load_spec(path)))
            continue
        lines = [(number, line) for number, line in enumerate(read_text(path).splitlines(), start=1) if line.strip()]
        if not lines:
            raise MlqError(0, NO_SPECS.format(where=path, per_line=", one per line in a JSON Lines file"))
        found.extend((f"{path}:{number}", _json_spec(line, f"{path}:{number}")) for number, line in lines)
    return found


def is_json_lines(path: str | os.PathLike) -> bool:
    return Path(path).suffix.lower() in JSON_LINES_SUFFIXES


def _json_spec(text: str, where: str) -> dict | None:
    """A JSON document (a file's, or a JSON Lines line's) as a spec; None for a blank file."""
    if not text.strip():
        return None
    try:
        spec = json.loads(text)
    except ValueError as error:
        raise MlqError(0, f"{where}: {NOT_JSON.format(error=error)}") from None
    if not isinstance(spec, dict):
        raise MlqError(0, NOT_A_MAPPING.format(where=where, kind=type(spec).__name__))
    return spec
