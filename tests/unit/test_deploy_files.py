"""The deployment files in deploy/ (issue 19) hold together: every Kubernetes manifest validates
against the API's schema (kubernetes-validate, strict), the kustomization lists them all and
they refer only to each other and to the Secrets an operator creates; compose.yaml has the
whole one-machine stack; every process in either runs one of deploy/entrypoint.sh's roles; the
image runs as a user, with no secret in it; the systemd unit verifies. That the roles really
start is tests/e2e/test_deploy_roles.py."""

import configparser
import re
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
ENTRYPOINT = DEPLOY / "entrypoint.sh"
IMAGE = "mlqueue"
# The oldest Kubernetes release still commonly run, and the newest the validator knows.
K8S_VERSIONS = ("1.30.0", kubernetes_validate.latest_version())
CHECKS = {"scheduler", "beat", "agent"}


def entrypoint_roles() -> set[str]:
    """The roles deploy/entrypoint.sh lists in its usage line (asked of the script itself)."""
    result = subprocess.run([str(ENTRYPOINT)], capture_output=True, text=True, timeout=10)
    assert result.returncode == 64, result.stderr
    match = re.search(r"\{([a-z|-]+)\}", result.stderr)
    assert match, result.stderr
    return set(match.group(1).split("|"))


def kustomization() -> dict:
    return yaml.safe_load((K8S / "kustomization.yaml").read_text())


def manifests() -> list[dict]:
    """Every object of every file the kustomization lists, in its order (what `kubectl kustomize`
    renders, less the namespace and labels it adds)."""
    return [
        doc
        for name in kustomization()["resources"]
        for doc in yaml.safe_load_all((K8S / name).read_text())
        if doc is not None
    ]


def of_kind(kind: str) -> list[dict]:
    return [doc for doc in manifests() if doc["kind"] == kind]


def pod_specs() -> list[tuple[str, dict]]:
    return [
        (doc["metadata"]["name"], doc["spec"]["template"]["spec"])
        for doc in manifests()
        if "template" in doc.get("spec", {})
    ]


def containers(spec: dict) -> list[dict]:
    return [*spec.get("initContainers", []), *spec["containers"]]


def test_the_entrypoint_lists_its_roles_and_refuses_others():
    assert entrypoint_roles() == {
        "migrate",
        "wait-for-migrations",
        "web",
        "scheduler",
        "worker",
        "beat",
        "agent",
        "manage",
        "check",
    }
    unknown = subprocess.run([str(ENTRYPOINT), "serve"], capture_output=True, text=True, timeout=10)
    assert unknown.returncode == 64
    assert "unknown role 'serve'" in unknown.stderr


@pytest.mark.parametrize("role", ["migrate", "web", "scheduler", "worker", "beat"])
def test_a_server_role_missing_its_configuration_says_which_variable(role):
    env = {"PATH": "/usr/bin:/bin", "DATABASE_URL": "postgres://db/x", "REDIS_URL": "redis://r/0"}
    result = subprocess.run([str(ENTRYPOINT), role], env=env, capture_output=True, text=True, timeout=10)
    assert result.returncode == 78
    assert result.stderr == f"entrypoint.sh {role}: SECRET_KEY is not set (see docs/deploy.md)\n"


# --- Kubernetes


def test_the_kustomization_lists_every_manifest_in_the_directory():
    listed = kustomization()["resources"]
    present = sorted(path.name for path in K8S.glob("*.yaml") if path.name != "kustomization.yaml")
    assert sorted(listed) == present
    assert kustomization()["namespace"] == "mlqueue"
    assert [image["name"] for image in kustomization()["images"]] == [IMAGE]


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_manifest_validates_against_the_kubernetes_schema(version):
    for doc in manifests():
        kubernetes_validate.validate(doc, version, strict=True)  # raises on any error


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with its built-in kustomize) is not installed")
def test_kubectl_kustomize_renders_valid_objects_in_the_namespace():
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    docs = [doc for doc in yaml.safe_load_all(rendered) if doc]
    assert len(docs) == len(manifests())
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSIONS[-1], strict=True)
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "mlqueue", doc["metadata"]["name"]
    images = {
        c["image"]
        for doc in docs
        if "template" in doc.get("spec", {})
        for c in containers(doc["spec"]["template"]["spec"])
    }
    assert images == {"registry.example.com/mlqueue:0.1.0"}


def test_the_workloads_are_web_scheduler_and_celery_deployments_and_the_agent_daemonset():
    deployments = {doc["metadata"]["name"]: doc for doc in of_kind("Deployment")}
    assert set(deployments) == {"mlqueue-web", "mlqueue-scheduler", "mlqueue-worker", "mlqueue-beat"}
    assert deployments["mlqueue-web"]["spec"]["replicas"] >= 2
    assert deployments["mlqueue-scheduler"]["spec"]["replicas"] >= 2  # a warm standby
    assert [doc["metadata"]["name"] for doc in of_kind("DaemonSet")] == ["mlqueue-agent"]
    assert [doc["metadata"]["name"] for doc in of_kind("Job")] == ["mlqueue-migrate"]


def test_every_container_runs_a_role_of_the_entrypoint():
    roles = entrypoint_roles()
    for name, spec in pod_specs():
        for container in containers(spec):
            assert container["image"] == IMAGE, name
            assert "command" not in container, f"{name}: the image's entrypoint chooses the role"
            assert container["args"][0] in roles - {"check", "manage"}, (name, container["args"])


def test_every_deployment_has_readiness_and_liveness_probes_the_image_can_answer():
    for doc in of_kind("Deployment"):
        for container in doc["spec"]["template"]["spec"]["containers"]:
            for probe in ("readinessProbe", "livenessProbe"):
                assert probe in container, (doc["metadata"]["name"], probe)
                check = container[probe]
                if "httpGet" in check:
                    assert check["httpGet"]["path"] == "/healthz"
                    ports = {port["name"] for port in container["ports"]}
                    assert check["httpGet"]["port"] in ports
                    continue
                command = check["exec"]["command"]
                if command[0] == "/app/deploy/entrypoint.sh":
                    assert command[1:2] == ["check"] and command[2] in CHECKS, command
                else:
                    assert "celery -A mlqueue inspect ping" in command[-1], command


def test_every_deployment_has_a_disruption_budget_selecting_its_pods():
    budgets = of_kind("PodDisruptionBudget")
    for doc in of_kind("Deployment"):
        labels = doc["spec"]["template"]["metadata"]["labels"]
        matching = [pdb for pdb in budgets if pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()]
        assert len(matching) == 1, doc["metadata"]["name"]
        budget = matching[0]["spec"]
        if doc["spec"]["replicas"] > 1:
            assert budget.get("minAvailable") == 1, doc["metadata"]["name"]
        else:  # one replica: a budget of "keep 1" would block every node drain
            assert budget.get("maxUnavailable") == 1, doc["metadata"]["name"]


def test_the_agent_runs_on_gpu_nodes_with_the_nvidia_runtime_and_keeps_its_token_on_the_node():
    (agent,) = of_kind("DaemonSet")
    spec = agent["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert spec["runtimeClassName"] == "nvidia"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    (container,) = spec["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"]
    assert container["securityContext"]["runAsUser"] == 0  # tasks run as users of their own
    assert "livenessProbe" not in container  # a restart would kill its tasks (see the manifest)
    assert agent["spec"]["updateStrategy"]["type"] == "OnDelete"
    state = next(volume for volume in spec["volumes"] if volume["name"] == "state")
    assert state["hostPath"]["path"] == "/var/lib/mlqueue-agent"
    assert "--workdir=/var/lib/mlqueue-agent" in container["args"]
    assert "--node-name=$(NODE_NAME)" in container["args"]
    join = next(env for env in container["env"] if env["name"] == "MLQ_AGENT_JOIN_TOKEN")
    assert join["valueFrom"]["secretKeyRef"]["name"] == "mlqueue-agent-join"


def test_services_and_ingress_reach_the_web_pods():
    (service,) = of_kind("Service")
    (web,) = [doc for doc in of_kind("Deployment") if doc["metadata"]["name"] == "mlqueue-web"]
    assert service["spec"]["selector"].items() <= web["spec"]["template"]["metadata"]["labels"].items()
    (ingress,) = of_kind("Ingress")
    backends = [path["backend"]["service"] for rule in ingress["spec"]["rules"] for path in rule["http"]["paths"]]
    assert backends == [{"name": service["metadata"]["name"], "port": {"name": "http"}}]
    assert ingress["spec"]["tls"]


def test_configuration_comes_from_the_configmap_and_secrets_the_operator_creates():
    """No Secret object (no secret value) in the tree; every ConfigMap reference resolves."""
    assert of_kind("Secret") == []
    configmaps = {doc["metadata"]["name"] for doc in of_kind("ConfigMap")}
    secrets = set()
    for name, spec in pod_specs():
        for container in containers(spec):
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    assert source["configMapRef"]["name"] in configmaps, name
                else:
                    secrets.add(source["secretRef"]["name"])
            for env in container.get("env", []):
                ref = env.get("valueFrom", {})
                if "configMapKeyRef" in ref:
                    assert ref["configMapKeyRef"]["name"] in configmaps, name
                if "secretKeyRef" in ref:
                    secrets.add(ref["secretKeyRef"]["name"])
    assert secrets == {"mlqueue-secrets", "mlqueue-agent-join"}
    (config,) = of_kind("ConfigMap")
    assert not {"SECRET_KEY", "DATABASE_URL", "REDIS_URL", "MLQ_AGENT_JOIN_TOKEN"} & set(config["data"])


def test_server_pods_run_as_a_user_with_a_read_only_root():
    for name, spec in pod_specs():
        if name == "mlqueue-agent":
            continue
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["automountServiceAccountToken"] is False, name
        for container in containers(spec):
            assert container["securityContext"]["readOnlyRootFilesystem"] is True, name
            assert container["securityContext"]["allowPrivilegeEscalation"] is False, name


# --- compose


def compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def test_compose_has_the_whole_one_machine_stack():
    services = compose()["services"]
    assert set(services) == {
        "postgres",
        "redis",
        "migrate",
        "web-1",
        "web-2",
        "scheduler-1",
        "scheduler-2",
        "worker",
        "beat",
        "agent-1",
        "agent-2",
        "agent-3",
        "agent-4",
    }
    for name, service in services.items():
        if name != "migrate":
            assert "healthcheck" in service, name


def test_every_compose_process_of_the_image_runs_a_role_of_the_entrypoint():
    roles = entrypoint_roles()
    for name, service in compose()["services"].items():
        if name in ("postgres", "redis"):
            continue
        assert service["image"] == "${MLQ_IMAGE:-mlqueue:dev}", name
        assert service["build"]["dockerfile"] == "deploy/Dockerfile", name
        assert service["command"][0] in roles - {"check", "manage"}, name
        test = service["healthcheck"]["test"] if "healthcheck" in service else []
        if test[1:2] == ["/app/deploy/entrypoint.sh"]:
            assert test[2:3] == ["check"] and test[3] in CHECKS, name


def test_compose_servers_wait_for_the_migration_and_take_secrets_from_the_environment():
    services = compose()["services"]
    for name in ("web-1", "web-2", "scheduler-1", "scheduler-2", "worker", "beat"):
        assert services[name]["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}, name
        env = services[name]["environment"]
        for secret in ("SECRET_KEY", "MLQ_AGENT_JOIN_TOKEN"):
            assert re.fullmatch(rf"\$\{{{secret}:\?[^}}]+\}}", env[secret]), (name, env[secret])
        assert "${POSTGRES_PASSWORD:?" in env["DATABASE_URL"]
    assert services["migrate"]["depends_on"]["postgres"] == {"condition": "service_healthy"}


def test_compose_runs_four_agents_with_fake_gpus_as_root_each_with_its_own_state():
    services = compose()["services"]
    agents = {name: service for name, service in services.items() if name.startswith("agent-")}
    assert len(agents) == 4
    names, volumes = set(), set()
    for service in agents.values():
        command = service["command"]
        assert command[0] == "agent"
        assert int(command[command.index("--fake-gpus") + 1]) == 8
        server = command[command.index("--server") + 1]
        assert server in ("http://web-1:8000", "http://web-2:8000")
        assert "--token-file" not in command  # the join token comes from the environment
        assert service["environment"]["MLQ_AGENT_JOIN_TOKEN"].startswith("${MLQ_AGENT_JOIN_TOKEN:?")
        assert service["user"] == "0:0"
        assert "init" not in service  # the image's tini is PID 1 already (a second init: a warning)
        names.add(command[command.index("--node-name") + 1])
        volumes.add(service["volumes"][0])
    assert len(names) == 4 and len(volumes) == 4


# --- the image


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (DEPLOY / "Dockerfile").read_text()
    text = re.sub(r"\\\n", " ", text)
    return [
        tuple(line.split(None, 1)) for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]


def test_the_image_enters_through_the_entrypoint_as_a_user_with_no_secret_in_it():
    instructions = dockerfile_instructions()
    final = instructions[max(i for i, (word, _) in enumerate(instructions) if word == "FROM") :]
    # tini as PID 1 reaps orphans (a task's daemonized child in the agent's container).
    assert ("ENTRYPOINT", '["/usr/bin/tini", "--", "/app/deploy/entrypoint.sh"]') in final
    assert any(word == "RUN" and "install" in value and " tini" in value for word, value in final)
    users = [value for word, value in final if word == "USER"]
    assert users == ["mlqueue"]
    for word, value in instructions:
        if word in ("ENV", "ARG"):
            assert not re.search(r"SECRET|TOKEN|PASSWORD|DATABASE_URL|REDIS_URL", value), value
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", ".git", "**/.env"} <= set(ignored)  # no deploy/.env copied into the image


# --- systemd


UNIT = DEPLOY / "systemd" / "mlqueue-agent.service"


def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str
    parser.read(UNIT)
    return parser


def test_the_agent_unit_restarts_always_as_root_with_the_join_token_in_an_environment_file():
    service = unit()["Service"]
    assert service["Restart"] == "always"
    assert service["User"] == "root"
    assert service["EnvironmentFile"] == "/etc/mlqueue/agent.env"
    assert service["KillMode"] == "mixed"  # SIGTERM to the agent, which stops its own tasks
    assert "--token" not in service["ExecStart"].replace("--token-file", "")
    assert unit()["Install"]["WantedBy"] == "multi-user.target"
    example = (DEPLOY / "systemd" / "agent.env.example").read_text()
    used = set(re.findall(r"\$\{?(MLQ_[A-Z_]+)", service["ExecStart"]))
    assert used <= set(re.findall(r"^(MLQ_[A-Z_]+)=", example, re.M))
    assert "MLQ_AGENT_JOIN_TOKEN=" in example


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_analyze_verifies_the_agent_unit(tmp_path):
    """The unit's ExecStart names the agent where the install puts it (/opt/mlqueue); systemd
    checks that the binary exists, so the copy verified here names this environment's."""
    agent = shutil.which("mlqueue-agent") or str(Path(ROOT / ".venv" / "bin" / "mlqueue-agent"))
    text = UNIT.read_text()
    assert "ExecStart=/opt/mlqueue/bin/mlqueue-agent " in text
    copy = tmp_path / UNIT.name
    copy.write_text(text.replace("/opt/mlqueue/bin/mlqueue-agent", agent))
    result = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", result.stderr
