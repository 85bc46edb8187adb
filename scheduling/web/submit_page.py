"""The submit page (/jobs/new/): every spec field as a plain input, a YAML view of the same
spec, a dry run, and submit.

The form is read into a spec dict and checked by `check_job_submission`, the API's own
validation, so the page shows the API's messages, on the input they name. Inputs are named by
the spec's dotted paths ("resources.gpu_count"), the same paths the API's error "fields" use.
A blank input is left out of the spec, so the serializer's default applies; that keeps
form -> YAML -> form lossless, but for secret_env values, which never go back to the browser
(names come back ticked, each value to be typed again). The YAML buttons, the dry run and
submit are form posts (htmx swaps the form for the first three); the server does every
conversion.

A job group is the same blocks as the spec's: the "Array" inputs make `array:`, the "Sweep"
inputs `sweep:` (its parameters typed as YAML, one per line); left blank, the job is no group.
"""

import re
from dataclasses import dataclass, field
from functools import cache

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.views.decorators.debug import sensitive_post_parameters
from rest_framework.exceptions import Throttled, ValidationError

from mlqueue.api_errors import flatten_errors
from mlqueue.client.specs import dump_yaml
from mlqueue.errors import Conflict, FieldPermissionDenied
from mlqueue.yaml_body import (  # noqa: F401 (the page's messages, imported from here by its tests)
    MAX_YAML_BYTES,
    MAX_YAML_DEPTH,
    NOT_A_MAPPING,
    YAML_SYNTAX,
    YAML_TOO_DEEP,
    YAML_TOO_LARGE,
    YAML_VALUE,
    load_yaml,
)
from scheduling.core.model import PRIORITIES, Topology
from scheduling.secrets import MASK, masked_spec
from scheduling.selectors import visible_jobs
from scheduling.services import check_job_submission, do_submit_job
from scheduling.spec import RESTART_MODES, SPEC_FIELD_ORDER, JobSpecSerializer, gpu_types
from scheduling.web.dryrun import DryRun, dry_run, group_answer, resubmit_answer
from scheduling.web.form_fit import (  # noqa: F401 (NOT_IN_FORM: the page's tests import it)
    GROUP_SERIALIZERS,
    NOT_IN_FORM,
    lost_in_form,
)
from scheduling.web.submit_errors import NO_TEAM, errors_by_input, team_errors
from scheduling.web.throttles import check_submit_rate
from teams.selectors import visible_team_names

CLONE_NOT_VISIBLE = "job {id} does not exist or is not visible to you; the form starts from the defaults."
NOT_KEY_VALUE = "line {line}: {text!r} is not KEY=VALUE."
KEY_TWICE = "line {line}: {key} is given twice."
SECRET_VALUES_NOT_SHOWN = (
    "secret_env values are never sent back to the browser, so this YAML shows *** in their place: "
    "type the values in the secret_env box before you submit."
)
SECRET_NOT_KEY_VALUE = "line {line} is not NAME=value (the line is not shown: it may hold a secret)."
PARAMETERS_SHAPE = "one parameter a line: NAME: [values], or NAME: {{min: .., max: ..}} for method random; {problem}"
# The secret names the page carries (checkboxes) while their values, never sent back to the
# browser, wait to be typed again.
SECRET_NAMES_INPUT = "secret_env_names"


@dataclass(frozen=True)
class Field:
    name: str  # the dotted spec path, which is also the input's name
    kind: str  # text, choice, int, float, lines (one per line), pairs (KEY=VALUE lines), ids
    hint: str = ""


SECTIONS = (
    (
        "Job",
        (
            Field("client_job_id", "text", "optional: makes a resubmit idempotent"),
            Field("name", "text", "defaults to client_job_id or the command"),
            Field("team", "choice"),
            Field("image", "text", "registry/image:tag"),
            Field("command", "lines", "one argument per line"),
        ),
    ),
    (
        "Resources",
        (
            Field("resources.gpu_count", "int"),
            Field("resources.gpu_type", "choice"),
            Field("resources.gpus_per_task", "int", "up to 8"),
            Field("resources.tasks", "int", "from GPUs"),
            Field("resources.cpu_per_rank", "int"),
            Field("resources.memory_per_rank_gb", "int"),
            Field("resources.scratch_disk_gb", "int"),
        ),
    ),
    (
        "Placement and limits",
        (
            Field("topology_hint", "choice"),
            Field("priority", "choice"),
            Field("max_runtime_hours", "float"),
            Field("grace_period_seconds", "int"),
            Field("node_selector", "pairs", "KEY=VALUE per line, e.g. ib=ndr400"),
        ),
    ),
    (
        "Checkpoint",
        (
            Field("checkpoint.path", "text", "all three empty: no checkpoint"),
            Field("checkpoint.interval_minutes", "int"),
            Field("checkpoint.retain_last_n", "int"),
        ),
    ),
    (
        "Restart policy",
        (
            Field("restart_policy.on_preemption", "choice"),
            Field("restart_policy.on_node_failure", "choice"),
            Field("restart_policy.max_restarts", "int"),
            Field("restart_policy.max_retries", "int"),
        ),
    ),
    (
        "Dependencies and environment",
        (
            Field("depends_on", "ids", "job ids, comma-separated; 13:failure or 13:any: after its failure or any end"),
            Field("env", "pairs", "KEY=VALUE per line"),
            Field("secret_env", "secret", "NAME=value per line; write-only"),
        ),
    ),
    (
        "Array (elements run at most parallelism at once; {index} and {count} in the command and env)",
        (
            Field("array.count", "int", "e.g. 200"),
            Field("array.indices", "text", 'or indices: "0-199", "1,5,9-12"'),
            Field("array.parallelism", "int", "all"),
            Field("array.max_failures", "int"),
        ),
    ),
    (
        "Sweep (a trial per set of parameters, {name} in the command and env; max_trials caps a grid, random needs it)",
        (
            Field("sweep.method", "choice"),
            Field(
                "sweep.parameters", "yaml", "lr: [0.0001, 0.001]\nbatch_size: [32, 64]\ndropout: {min: 0.0, max: 0.5}"
            ),
            Field("sweep.max_trials", "int", "grid: all"),
            Field("sweep.parallelism", "int", "all"),
            Field("sweep.max_failures", "int", "none"),
            Field("sweep.metric.name", "text", "e.g. val_loss"),
            Field("sweep.metric.goal", "choice"),
            Field("sweep.early_stop.rule", "choice"),
            Field("sweep.early_stop.min_reports", "int"),
            Field("sweep.seed", "int", "drawn"),
        ),
    ),
)
# In the spec's own order, so the YAML reads like the API's documented spec.
FIELDS = sorted(
    (f for _, fields in SECTIONS for f in fields), key=lambda f: SPEC_FIELD_ORDER.index(f.name.split(".")[0])
)


class FormProblem(ValueError):
    """An input the form cannot turn into a spec value (the serializer never sees it)."""


# --- form text <-> spec values -------------------------------------------------------------


def _text(raw: str) -> str | None:
    return raw.strip() or None


def _number(kind: type):
    """A parser that passes what is not a number through as the string typed, so the
    serializer answers as the API would ("must be an integer, not the string 'abc'")."""

    def parse(raw: str):
        raw = raw.strip()
        try:
            return kind(raw) if raw else None
        except ValueError:
            return raw

    return parse


_int, _float = _number(int), _number(float)


def _lines(raw: str) -> list[str] | None:
    lines = [line.strip() for line in raw.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines or None


def _pairs(raw: str, *, exact_values: bool = False) -> dict[str, str] | None:
    """NAME=value lines; `exact_values`: as typed (a secret's), less a textarea's "\\r"."""
    pairs = {}
    for number, line in enumerate(raw.split("\n"), 1):
        key, eq, value = line.partition("=")
        key, value = key.strip(), value.removesuffix("\r") if exact_values else value.strip()
        if not eq and key:
            raise FormProblem(NOT_KEY_VALUE.format(line=number, text=key))
        if key in pairs:
            raise FormProblem(KEY_TWICE.format(line=number, key=key))
        if eq:
            pairs[key] = value
    return pairs or None


def _secret_pairs(raw: str) -> dict[str, str] | None:
    """As _pairs with values as typed; a line not NAME=value is named by number only (a pasted secret)."""
    for number, line in enumerate(raw.split("\n"), 1):
        if line.strip() and "=" not in line:
            raise FormProblem(SECRET_NOT_KEY_VALUE.format(line=number))
    return _pairs(raw, exact_values=True)


def _yaml_mapping(raw: str) -> dict | None:
    """A sweep's parameters typed as YAML ("lr: [0.001, 0.01]" a line)."""
    if not raw.strip():
        return None
    data, problem = load_yaml(raw)
    if data is None:
        raise FormProblem(PARAMETERS_SHAPE.format(problem=problem))
    return data


def _show_yaml(value) -> str:
    """Each parameter on its line, its values in flow style, as one would type them."""
    if not isinstance(value, dict):
        return _show(value)
    return dump_yaml(value, sort_keys=False, default_flow_style=None, width=10_000, allow_unicode=True).strip()


def _ids(raw: str) -> list | None:
    return [_dependency(item) for item in re.split(r"[\s,]+", raw) if item] or None


def _dependency(item: str):
    """`13` or `13:failure` (the condition: success, failure or any)."""
    job, colon, on = item.partition(":")
    return {"job": _int(job), "on": on} if colon else _int(item)


def _show(value) -> str:
    return "" if value is None else str(value)


def _show_lines(value) -> str:
    return "\n".join(map(str, value)) if isinstance(value, list) else _show(value)


def _show_pairs(value) -> str:
    """KEY=VALUE lines, less the pairs a line cannot hold (a line break in the key or value):
    those are left out, and lost_in_form names them alone (QA: one value with a line break
    broke the box, and every variable was named as lost)."""
    if not isinstance(value, dict):
        return _show(value)
    lines = (f"{k}={v}" for k, v in value.items())
    return "\n".join(line for line in lines if "\n" not in line and "\r" not in line)


def _show_secret(value) -> str:
    """Names only: a value never goes back to the browser."""
    return "\n".join(f"{name}={MASK}" for name in value) if isinstance(value, dict) else ""


def _secret_names(text: str) -> tuple[str, ...]:
    names = (line.partition("=")[0].strip() for line in text.split("\n") if "=" in line)
    return tuple(dict.fromkeys(name for name in names if name))


def _show_ids(value) -> str:
    if not isinstance(value, list):
        return _show(value)
    items = (v if isinstance(v, dict) else {"job": v} for v in value)  # without `on`: success, the default
    return ", ".join(f"{v.get('job', '')}" + (f":{v['on']}" if v.get("on") is not None else "") for v in items)


# kind -> (form text to spec value, spec value to form text)
KINDS = {
    "text": (_text, _show),
    "choice": (_text, _show),
    "int": (_int, _show),
    "float": (_float, _show),
    "lines": (_lines, _show_lines),
    "pairs": (_pairs, _show_pairs),
    "ids": (_ids, _show_ids),
    "secret": (_secret_pairs, _show_secret),
    "yaml": (_yaml_mapping, _show_yaml),
}


def form_to_spec(values: dict[str, str]) -> tuple[dict, dict[str, list[str]]]:
    """The spec the inputs describe, and the inputs that could not be read at all. Blank
    inputs are left out, so a checkpoint block with every input blank is no block; one with any
    input filled in is checked as the API checks it (QA: an interval without a path, or of -1,
    was dropped in silence where the API answers "checkpoint.path: This field is required.")."""
    spec, problems = {}, {}
    for f in FIELDS:
        try:
            value = KINDS[f.kind][0](values.get(f.name, ""))
        except FormProblem as exc:
            problems[f.name] = [str(exc)]
            continue
        if value is not None:
            *sections, leaf = f.name.split(".")
            target = spec
            for section in sections:
                target = target.setdefault(section, {})
            target[leaf] = value
    return spec, problems


def spec_to_form(spec: dict) -> dict[str, str]:
    return {f.name: KINDS[f.kind][1](_get(spec, f.name)) for f in FIELDS}


def _get(spec: dict, path: str):
    for part in path.split("."):
        spec = spec.get(part) if isinstance(spec, dict) else None
    return spec


def _dump(spec: dict) -> str:
    return dump_yaml(masked_spec(spec), sort_keys=False, allow_unicode=True)


def _yaml_without_secret_values(text: str) -> str:
    """The YAML box as posted, unless it holds secret_env values: then the same spec written
    out with ***, since a value never goes back to the browser. (YAML that does not parse is
    sent back as typed, for its author to fix.)"""
    data, _ = load_yaml(text)
    if data is None or "secret_env" not in data or data == masked_spec(data):
        return text
    return _dump(data)


# --- what the page shows ------------------------------------------------------------------


@dataclass
class SubmitState:
    values: dict[str, str]
    yaml: str = ""
    errors: dict[str, list[str]] = field(default_factory=dict)  # dotted path -> messages
    yaml_errors: list[str] = field(default_factory=list)
    alerts: list[str] = field(default_factory=list)  # about the whole job (a 409)
    dry_run: DryRun | None = None
    dry_run_ran: bool = False
    dry_run_group: dict | None = None  # an array's or a sweep's settings, as the API's dry run says them


@dataclass(frozen=True)
class BoundField:
    """One input as the template draws it."""

    name: str
    kind: str
    value: str
    errors: list[str]
    choices: list[tuple[str, str]]
    placeholder: str
    secret_names: tuple[str, ...] = ()  # secret_env: names whose values must be typed (again)

    @property
    def id(self) -> str:
        return "f-" + self.name.replace(".", "-")

    @property
    def label(self) -> str:
        """The path below its section: "gpu_count", "metric.name"."""
        return self.name.partition(".")[2] or self.name

    @property
    def wide(self) -> bool:
        return self.kind in ("lines", "pairs", "secret", "yaml")


def _choices(user) -> dict[str, list[tuple[str, str]]]:
    modes = [(mode, mode) for mode in RESTART_MODES]
    return {
        "team": [(name, name) for name in visible_team_names(user)],
        "resources.gpu_type": [("", "none (CPU job)"), *((t, t) for t in gpu_types())],
        "topology_hint": [(t.value, t.value) for t in Topology],
        "priority": [(p, p) for p in PRIORITIES],
        "restart_policy.on_preemption": modes,
        "restart_policy.on_node_failure": modes,
        "sweep.method": [("", "none (not a sweep)"), ("grid", "grid"), ("random", "random")],
        "sweep.metric.goal": [("minimize", "minimize"), ("maximize", "maximize")],
        "sweep.early_stop.rule": [("", "none"), ("median", "median")],
    }


@cache
def _serializer_default(path: str):
    first, *rest = path.split(".")
    spec_field = GROUP_SERIALIZERS[first]() if first in GROUP_SERIALIZERS else JobSpecSerializer().fields[first]
    for part in rest:
        spec_field = spec_field.fields[part]
    return spec_field.default


def _default_text(name: str) -> str:
    """The serializer's default for a blank input, when it is a plain value worth showing."""
    default = _serializer_default(name)
    return str(default) if isinstance(default, (int, float, str)) else ""


def _bind(f: Field, state: SubmitState, choices: dict, errors: list[str]) -> BoundField:
    value = state.values.get(f.name, "")
    options = choices.get(f.name, [])
    default = _default_text(f.name)
    if f.kind == "choice" and value not in (v for v, _ in options):
        # Keep what the YAML or a clone said, even a value the API will refuse.
        options = [*options, (value, value or (f"default ({default})" if default else "(not set)"))]
    if f.kind == "secret":
        # Never echoed: the box comes back empty and the names come back as checkboxes.
        return BoundField(f.name, f.kind, "", errors, [], f.hint, secret_names=_secret_names(value))
    return BoundField(f.name, f.kind, value, errors, options, f.hint or default)


def _render(request, state: SubmitState):
    choices = _choices(request.user)
    team_errors(state.errors, choices["team"])
    errors = errors_by_input([f.name for _, fields in SECTIONS for f in fields], state.errors)
    shown = _yaml_without_secret_values(state.yaml)
    if shown != state.yaml:
        state.yaml, state.yaml_errors = shown, [*state.yaml_errors, SECRET_VALUES_NOT_SHOWN]
    context = {
        "section": "submit",
        "state": state,
        "sections": [(title, [_bind(f, state, choices, errors[f.name]) for f in fields]) for title, fields in SECTIONS],
        "no_team": "" if choices["team"] else NO_TEAM,
        "summary": [f"{path}: {message}" for path, found in state.errors.items() for message in found],
    }
    template = "scheduling/submit_form.html" if request.headers.get("HX-Request") else "scheduling/submit.html"
    return render(request, template, context)


# --- the view -------------------------------------------------------------------------------


@login_required
@sensitive_post_parameters("secret_env", "yaml")  # kept out of crash reports
def page(request):
    if request.method != "POST":
        cloned = _cloned_spec(request)
        values = spec_to_form(cloned) if cloned else _default_values(request.user)
        state = SubmitState(values, yaml=_dump(form_to_spec(values)[0]))
        if cloned:  # what the form cannot hold is said, as for YAML loaded into it (QA: notify was dropped)
            state.yaml_errors = lost_in_form(masked_spec(cloned), masked_spec(form_to_spec(values)[0]))
        return _render(request, state)
    action = ACTIONS.get(request.POST.get("action", ""))
    if action is None:
        return HttpResponseBadRequest("unknown action")
    values = {f.name: request.POST.get(f.name, "") for f in FIELDS}
    values["secret_env"] = _posted_secrets(request.POST)
    state = SubmitState(values, yaml=request.POST.get("yaml", ""))
    return action(request, state)


def _posted_secrets(post) -> str:
    """The secret_env box's NAME=value lines, then NAME=*** for each name still ticked that the
    box does not give: the serializer refuses *** and asks for the value by name."""
    typed = post.get("secret_env", "")
    given = {line.partition("=")[0].strip() for line in typed.split("\n")}
    waiting = [f"{name}={MASK}" for name in dict.fromkeys(post.getlist(SECRET_NAMES_INPUT)) if name not in given]
    return "\n".join(part for part in (typed.rstrip("\n"), *waiting) if part)


def _default_values(user) -> dict[str, str]:
    teams = visible_team_names(user)
    values = dict.fromkeys((f.name for f in FIELDS), "")
    values.update(
        {
            "team": teams[0] if teams else "",
            "resources.gpu_count": "1",
            "resources.gpu_type": settings.MLQ_GPU_TYPES[0],
            "max_runtime_hours": "24",
        }
    )
    for name in (
        "topology_hint",
        "priority",
        "grace_period_seconds",
        "restart_policy.on_preemption",
        "restart_policy.on_node_failure",
        "restart_policy.max_restarts",
        "restart_policy.max_retries",
    ):
        values[name] = str(_serializer_default(name))
    return values


def _cloned_spec(request) -> dict | None:
    """The spec of a job the user may see, as a new job: no client_job_id, name "... (copy)"."""
    job_id = request.GET.get("clone")
    if job_id is None:
        return None
    job = visible_jobs(request.user).filter(pk=job_id).first() if re.fullmatch(r"[0-9]{1,18}", job_id) else None
    if job is None:
        messages.error(request, CLONE_NOT_VISIBLE.format(id=job_id))
        return None
    return {**job.spec, "client_job_id": "", "name": f"{job.spec['name']} (copy)"}


def _check(user, state: SubmitState):
    """The API's validation of the form's spec, plus the inputs the form could not read;
    errors land in state.errors keyed by dotted path. Returns (team, spec) if all is well."""
    spec, state.errors = form_to_spec(state.values)
    try:
        checked = check_job_submission(user=user, data=spec)
    except ValidationError as exc:
        found = flatten_errors(exc.detail)
    except FieldPermissionDenied as exc:
        found = {exc.field: [str(exc.detail)]}
    else:
        return None if state.errors else checked
    unread = set(state.errors)  # left out of the spec: "This field is required." there is no news
    state.errors.update({path: found_messages for path, found_messages in found.items() if path not in unread})
    return None


def _to_yaml(request, state: SubmitState):
    state.yaml = _dump(form_to_spec(state.values)[0])
    return _render(request, state)


def _from_yaml(request, state: SubmitState):
    data, error = load_yaml(state.yaml)
    if data is None:
        state.yaml_errors = [error]
    else:
        state.values = spec_to_form(data)
        # Compared masked: a message about secret_env must not quote a value.
        state.yaml_errors = lost_in_form(masked_spec(data), masked_spec(form_to_spec(state.values)[0]))
    response = _render(request, state)
    if data is None and not request.headers.get("HX-Request"):
        response.status_code = 400  # htmx swaps only 2xx answers: it gets the same form with a 200
    return response


def _dry_run(request, state: SubmitState):
    checked = _check(request.user, state)
    state.dry_run_ran = True
    state.dry_run = dry_run(checked[1]) if checked else None
    if checked and (checked[1].get("array") is not None or checked[1].get("sweep") is not None):
        state.dry_run_group = group_answer(checked[1])
    existing = resubmit_answer(team=checked[0], spec=checked[1]).get("existing") if checked else None
    if existing and existing["status"] == 409:  # the submit would be refused: said as a submit says it
        state.alerts.append(existing["message"])
    return _render(request, state)


def _submit(request, state: SubmitState):
    checked = _check(request.user, state)
    if checked is None:
        return _render(request, state)
    try:
        check_submit_rate(request)
        job, created = do_submit_job(user=request.user, team=checked[0], spec=checked[1])
    except (Conflict, Throttled) as exc:
        state.alerts.append(str(exc.detail))
        response = _render(request, state)
        if isinstance(exc, Throttled) and not request.headers.get("HX-Request"):  # htmx swaps no 4xx
            response.status_code, response["Retry-After"] = 429, str(int(exc.wait))
        return response
    messages.success(request, f"Job {job.pk} submitted" if created else f"Job {job.pk} already existed")
    return redirect("job-page", job_id=job.pk)


ACTIONS = {"to_yaml": _to_yaml, "from_yaml": _from_yaml, "dry_run": _dry_run, "submit": _submit}
