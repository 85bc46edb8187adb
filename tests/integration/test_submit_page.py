"""The submit page: the form, its inline errors (the API's own messages), the YAML view, the
dry run, submit and clone. Forms are read back from the HTML the page serves, as a browser
would post them."""

import re
from html.parser import HTMLParser

import pytest
import yaml
from django.test import Client
from django.utils.html import escape

from scheduling import services
from scheduling.models import Job, Node, Task
from scheduling.spec import ONLY_WHEN_GIVEN, SPEC_FIELD_ORDER
from scheduling.web.form_fit import BLOCK_NOT_IN_FORM, BLOCKS_NOT_IN_FORM
from scheduling.web.submit_page import CLONE_NOT_VISIBLE, FIELDS, NOT_A_MAPPING, NOT_IN_FORM, YAML_SYNTAX
from teams.models import AuditEvent
from tests.conftest import make_spec
from tests.nodes import cordon, heartbeat

URL = "/jobs/new/"
SPEC_PATHS = {
    "client_job_id",
    "name",
    "team",
    "image",
    "command",
    "resources.gpu_count",
    "resources.gpu_type",
    "resources.gpus_per_task",
    "resources.tasks",
    "resources.cpu_per_rank",
    "resources.memory_per_rank_gb",
    "resources.scratch_disk_gb",
    "topology_hint",
    "node_selector",
    "priority",
    "max_runtime_hours",
    "grace_period_seconds",
    "checkpoint.path",
    "checkpoint.interval_minutes",
    "checkpoint.retain_last_n",
    "restart_policy.on_preemption",
    "restart_policy.on_node_failure",
    "restart_policy.max_restarts",
    "restart_policy.max_retries",
    "depends_on",
    "env",
    "secret_env",
    "array.count",
    "array.indices",
    "array.parallelism",
    "array.max_failures",
    "sweep.method",
    "sweep.parameters",
    "sweep.max_trials",
    "sweep.parallelism",
    "sweep.max_failures",
    "sweep.metric.name",
    "sweep.metric.goal",
    "sweep.early_stop.rule",
    "sweep.early_stop.min_reports",
    "sweep.seed",
}


class FormReader(HTMLParser):
    """What a browser would post from the page: each named input, select and textarea."""

    def __init__(self, html: str):
        super().__init__()
        self.values, self.ids, self._select, self._textarea = {}, set(), None, None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.ids.add(attrs.get("id"))
        if tag == "input" and attrs.get("name"):
            self.values[attrs["name"]] = attrs.get("value", "")
        elif tag == "select":
            self._select = attrs["name"]
        elif tag == "option" and self._select and (self._select not in self.values or "selected" in attrs):
            self.values[self._select] = attrs["value"]
        elif tag == "textarea":
            self._textarea = attrs["name"]
            self.values[self._textarea] = ""

    def handle_endtag(self, tag):
        if tag == "select":
            self._select = None
        elif tag == "textarea":
            # A browser drops the newline right after <textarea>.
            self.values[self._textarea] = self.values[self._textarea].removeprefix("\n")
            self._textarea = None

    def handle_data(self, data):
        if self._textarea:
            self.values[self._textarea] += data


def logged_in(username: str) -> Client:
    client = Client()
    assert client.login(username=username, password="demo")
    return client


def form_of(response) -> dict:
    assert response.status_code == 200, response.content[:500]
    return FormReader(response.content.decode()).values


def post(client: Client, form: dict, action: str, **changes):
    """Post the form as it is on the page, with some inputs changed, through htmx (as the YAML
    buttons and the dry run do) unless it is a submit."""
    headers = {} if action == "submit" else {"HX-Request": "true"}
    return client.post(URL, {**form, **changes, "action": action}, headers=headers)


def inline_errors(response, name: str) -> str:
    """The error text drawn next to one input."""
    found = re.search(
        rf'<span class="errorlist" id="err-f-{name.replace(".", "-")}">(.*?)</span>',
        response.content.decode(),
        re.DOTALL,
    )
    return found.group(1) if found else ""


def counts() -> tuple[int, int, int]:
    return Job.objects.count(), Task.objects.count(), AuditEvent.objects.count()


@pytest.fixture
def alice(demo) -> Client:
    return logged_in("alice")


@pytest.fixture
def form(alice) -> dict:
    """alice's fresh form, with a command."""
    return {**form_of(alice.get(URL)), "command": "python\n-m\ntrain"}


def test_the_form_has_every_spec_field_with_sensible_defaults(alice):
    response = alice.get(URL)
    values = form_of(response)

    assert {f.name for f in FIELDS} == SPEC_PATHS
    assert set(values) == SPEC_PATHS | {"csrfmiddlewaretoken", "yaml"}
    assert {"submit-form", "spec-yaml", "dry-run"} <= FormReader(response.content.decode()).ids
    assert response.context["section"] == "submit"
    assert values["team"] == "research-foundation-models"
    assert (values["command"], values["resources.gpu_count"], values["resources.gpu_type"]) == ("", "1", "H100")
    assert (values["priority"], values["max_runtime_hours"], values["grace_period_seconds"]) == ("P2", "24", "120")
    assert (values["topology_hint"], values["checkpoint.path"], values["env"]) == ("none", "", "")
    assert (
        values["restart_policy.on_preemption"],
        values["restart_policy.max_restarts"],
        values["restart_policy.max_retries"],
    ) == ("resume_from_checkpoint", "20", "2")
    assert yaml.safe_load(values["yaml"])["resources"] == {"gpu_count": 1, "gpu_type": "H100"}
    for action in ("submit", "dry_run", "to_yaml", "from_yaml"):
        assert f'name="action" value="{action}"' in response.content.decode()


def test_submit_creates_the_job_and_goes_to_its_page(alice, form):
    response = post(
        alice,
        form,
        "submit",
        **{"client_job_id": "page-1", "resources.gpu_count": "16", "env": "A=1\nB = two", "depends_on": ""},
    )

    job = Job.objects.get()
    assert response.status_code == 302 and response.url == f"/jobs/{job.pk}/"
    assert (job.owner.username, job.team.name, job.gpu_count, job.task_count) == (
        "alice",
        "research-foundation-models",
        16,
        2,
    )
    assert (job.command, job.env, job.max_runtime_hours) == (["python", "-m", "train"], {"A": "1", "B": "two"}, 24)
    assert f"Job {job.pk} submitted" in alice.get(response.url).content.decode()


def test_the_same_submit_again_is_the_same_job_and_another_spec_is_a_conflict(alice, form):
    first = post(alice, form, "submit", client_job_id="page-1")
    again = post(alice, form, "submit", client_job_id="page-1")
    job = Job.objects.get()
    assert first.url == again.url == f"/jobs/{job.pk}/"
    assert f"Job {job.pk} already existed" in alice.get(again.url).content.decode()

    other = post(alice, form, "submit", client_job_id="page-1", priority="P3")
    assert other.status_code == 200 and Job.objects.count() == 1
    conflict = services.SPEC_CONFLICT.format(team="research-foundation-models", job_id=job.pk, client_job_id="page-1")
    assert escape(conflict) in other.content.decode()


@pytest.mark.parametrize(
    "changes, resources, message",
    [
        ({"resources.gpu_count": "abc"}, {"gpu_count": "abc"}, "must be an integer, not the string 'abc'."),
        (
            {"resources.gpu_count": "12", "resources.gpus_per_task": "8"},
            {"gpu_count": 12, "gpus_per_task": 8},
            "12 GPUs cannot be split into tasks of 8 (gpus_per_task).",
        ),
    ],
    ids=["not a number", "not divisible"],
)
def test_a_bad_gpu_count_gets_the_apis_message_inline_and_writes_nothing(api, alice, form, changes, resources, message):
    api_fields = api("alice").post("/api/v1/jobs", make_spec(resources=resources), format="json").json()["fields"]
    before = counts()
    response = post(alice, form, "submit", **changes)

    assert api_fields["resources.gpu_count"] == [message]
    assert response.status_code == 200 and counts() == before
    assert inline_errors(response, "resources.gpu_count") == escape(message)
    assert response.context["summary"] == [f"resources.gpu_count: {message}"]
    assert escape(f"resources.gpu_count: {message}") in response.content.decode()


def test_a_team_alice_is_not_in_is_refused_on_the_team_field(alice, form):
    response = post(alice, form, "dry_run", team="production-ranking")
    assert inline_errors(response, "team") == services.NOT_A_MEMBER.format(name="production-ranking")
    assert 'id="dry-run"' in response.content.decode() and "Not valid" in response.content.decode()


def test_p0_is_for_leads(alice, form):
    response = post(alice, form, "submit", priority="P0")
    assert inline_errors(response, "priority") == services.P0_RESERVED.format(name="research-foundation-models")
    assert Job.objects.count() == 0
    rita = logged_in("rita")
    assert post(rita, form_of(rita.get(URL)) | {"command": "true"}, "submit", priority="P0").status_code == 302


def test_inputs_the_form_cannot_read_are_named(alice, form):
    response = post(alice, form, "dry_run", env="A=1\nNOPE", depends_on="x, 7")
    assert inline_errors(response, "env") == escape("line 2: 'NOPE' is not KEY=VALUE.")
    assert inline_errors(response, "depends_on") == escape("0: must be an integer, not the string 'x'.")


def test_form_to_yaml_to_form_to_yaml_is_lossless(alice, form, user):
    form |= {
        "client_job_id": "rt-1",
        "name": "round trip",
        "image": "reg/x:1",
        "command": "python\n\n--flag=a b",
        "resources.gpu_count": "16",
        "resources.gpus_per_task": "8",
        "resources.cpu_per_rank": "16",
        "topology_hint": "prefer_same_rack",
        "node_selector": "ib=ndr400",
        "max_runtime_hours": "1.5",
        "checkpoint.path": "s3://ckpt/rt",
        "checkpoint.interval_minutes": "15",
        "env": "B=2\nA=x=y",
    }
    first_yaml = form_of(post(alice, form, "to_yaml"))["yaml"]
    back = form_of(post(alice, form | {"yaml": first_yaml, "name": "changed"}, "from_yaml"))
    second_yaml = form_of(post(alice, back, "to_yaml"))["yaml"]

    assert second_yaml == first_yaml
    assert back | {"csrfmiddlewaretoken": ""} == form | {"yaml": first_yaml, "csrfmiddlewaretoken": ""}
    spec = yaml.safe_load(first_yaml)
    assert list(spec) == [k for k in SPEC_FIELD_ORDER if k not in ("depends_on", "secret_env", *ONLY_WHEN_GIVEN)]
    assert spec["command"] == ["python", "", "--flag=a b"] and spec["env"] == {"B": "2", "A": "x=y"}
    services.check_job_submission(user=user("alice"), data=spec)  # the YAML is a spec the API takes


def test_yaml_to_form_fills_the_form_from_an_api_spec(alice, form):
    spec = make_spec(depends_on=[], env={"X": "1"})
    values = form_of(post(alice, form, "from_yaml", yaml=yaml.safe_dump(spec)))
    assert (values["name"], values["resources.gpu_count"], values["checkpoint.path"], values["env"]) == (
        "llama-70b-pretrain-run-47",
        "64",
        "s3://ckpt/llama-70b/run-47",
        "X=1",
    )
    assert values["command"] == "python\n-m\ntrain\n--config\nllama-70b.yaml"


def test_yaml_dependencies_as_mappings_fill_the_form(alice, form):
    """`{job: 1}` (on: success by default) and `on:` as a key, as docs/pipelines.md writes
    them: the first was a 500 (KeyError), the second read `on` as a boolean."""
    text = "team: research-foundation-models\ncommand: [a]\ndepends_on: [{job: 1}, {job: 2, on: failure}, 3]\n"
    values = form_of(post(alice, form, "from_yaml", yaml=text))
    assert values["depends_on"] == "1, 2:failure, 3"


def test_yaml_without_a_field_leaves_its_select_on_the_default(alice, form):
    response = post(alice, form, "from_yaml", yaml="team: research-foundation-models\ncommand: [a]\n")
    assert form_of(response)["priority"] == ""
    assert '<option value="" selected>default (P2)</option>' in response.content.decode()
    assert yaml.safe_load(form_of(post(alice, form_of(response), "to_yaml"))["yaml"]) == {
        "team": "research-foundation-models",
        "command": ["a"],
    }


def test_yaml_the_form_cannot_hold_is_reported(alice, form):
    text = "team: research-foundation-models\ncommand: [a]\nresources: {gpu_count: [1, 2]}\n"
    response = post(alice, form, "from_yaml", yaml=text)
    assert response.context["state"].yaml_errors == [NOT_IN_FORM.format(path="resources.gpu_count", value="[1, 2]")]


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "team: [unclosed\n",
            YAML_SYNTAX.format(line=2, column=1, problem="expected ',' or ']', but got '<stream end>'"),
        ),
        ("- a\n- b\n", NOT_A_MAPPING.format(kind="a list")),
        ("", NOT_A_MAPPING.format(kind="empty")),
    ],
)
def test_yaml_that_is_not_a_spec_mapping_is_explained_and_the_form_kept(alice, form, text, message):
    response = post(alice, form | {"name": "kept"}, "from_yaml", yaml=text)
    assert response.context["state"].yaml_errors == [message]
    assert escape(message) in response.content.decode()
    assert form_of(response)["name"] == "kept"


def test_dry_run_lists_the_nodes_an_8_gpu_job_would_take_now_and_writes_nothing(alice, form):
    heartbeat()
    before = counts()
    response = post(alice, form, "dry_run", **{"resources.gpu_count": "8"})

    dry = response.context["state"].dry_run
    assert (dry.shape, dry.placement, dry.reason) == ("1 x 8 H100", (("z1-r1-h100-01", 1),), None)
    html = response.content.decode()
    assert "Can run on this cluster" in html and "<td>z1-r1-h100-01</td><td>1</td>" in html
    assert "Jobs ahead of it in the queue" in html
    assert counts() == before


def test_dry_run_explains_a_job_that_does_not_fit_now(alice, form):
    heartbeat()
    cordon(Node.objects.exclude(gpu_type="A100"))
    response = post(alice, form, "dry_run", **{"resources.gpu_count": "8"})

    dry = response.context["state"].dry_run
    assert dry.placement == () and dry.reason.code == "NO_MATCHING_NODES"
    assert dry.reason.message.startswith("no READY node has gpu_type=H100 (matching nodes: 16 CORDONED)")
    assert dry.suggestions == ("fits now on A100",)
    html = response.content.decode()
    assert "<code>NO_MATCHING_NODES</code>" in html and "<li>fits now on A100</li>" in html
    assert f"<td>{dict(dry.reason.histogram)['CORDONED']}</td><td>CORDONED</td>" in html


def test_clone_prefills_a_visible_job_and_ignores_an_invisible_one(alice, user):
    team, spec = services.check_job_submission(user=user("alice"), data=make_spec())
    mine, _ = services.do_submit_job(user=user("alice"), team=team, spec=spec)
    team, spec = services.check_job_submission(user=user("bob"), data=make_spec(team="production-ranking"))
    bobs, _ = services.do_submit_job(user=user("bob"), team=team, spec=spec)

    values = form_of(alice.get(f"{URL}?clone={mine.pk}"))
    assert (values["client_job_id"], values["name"], values["resources.gpu_count"], values["priority"]) == (
        "",
        "llama-70b-pretrain-run-47 (copy)",
        "64",
        "P1",
    )
    assert values["env"] == "WANDB_PROJECT=llama-70b" and values["checkpoint.path"] == "s3://ckpt/llama-70b/run-47"

    assert 'id="yaml-errors"' not in alice.get(f"{URL}?clone={mine.pk}").content.decode()  # it all fits the form

    response = alice.get(f"{URL}?clone={bobs.pk}")
    assert form_of(response)["name"] == "" and form_of(response)["team"] == "research-foundation-models"
    assert escape(CLONE_NOT_VISIBLE.format(id=bobs.pk)) in response.content.decode()


def test_a_clone_says_what_the_form_cannot_hold(alice, user, settings):
    """QA: a clone dropped a job's notify (and a pipeline's steps) and said nothing."""
    settings.MLQ_WEBHOOK_ALLOWED_HOSTS = ["hooks.example.com"]
    notify = {"on": ["started", "succeeded"], "webhook": "https://hooks.example.com/mlq"}
    team, spec = services.check_job_submission(user=user("alice"), data=make_spec(client_job_id="n", notify=notify))
    job, _ = services.do_submit_job(user=user("alice"), team=team, spec=spec)
    html = alice.get(f"{URL}?clone={job.pk}").content.decode().replace("&#x27;", "'")
    assert 'id="yaml-errors"' in html
    assert BLOCK_NOT_IN_FORM.format(block="notify", why=BLOCKS_NOT_IN_FORM["notify"]) in html


def test_the_page_needs_a_login(demo):
    response = Client().get(URL)
    assert response.status_code == 302 and response.url.startswith("/accounts/login/")


def test_a_dependency_with_a_condition_is_written_job_colon_condition(alice, form):
    first = Job.objects.get(pk=post(alice, form, "submit", client_job_id="first").url.strip("/").split("/")[-1])
    response = post(alice, form, "submit", client_job_id="second", depends_on=f"{first.pk}:failure")
    second = Job.objects.get(client_job_id="second")
    assert response.status_code == 302
    assert second.spec["depends_on"] == [{"job": first.pk, "on": "failure"}]
    clone = form_of(alice.get(f"{URL}?clone={second.pk}"))
    assert clone["depends_on"] == f"{first.pk}:failure"
