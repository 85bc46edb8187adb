"""The deployment files and docs after the QA engineer's deploy: the web tiers trust proxy
headers only from MLQ_TRUSTED_PROXIES (set where something fronts web), the `docker run` example
has the environment it needs, and the DaemonSet's join token is not a 24-hour one."""

import ipaddress
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DEPLOY_MD = (ROOT / "docs" / "deploy.md").read_text()


def networks(value: str) -> list:
    return [ipaddress.ip_network(item.strip()) for item in value.split(",") if item.strip()]


def test_the_k8s_web_pods_trust_the_ingress_network_only():
    configmap = yaml.safe_load((DEPLOY / "k8s" / "configmap.yaml").read_text())
    trusted = networks(configmap["data"]["MLQ_TRUSTED_PROXIES"])
    assert trusted and all(net.is_private for net in trusted)


def test_compose_web_trusts_loopback_unless_told_otherwise():
    services = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]
    for name in ("web-1", "web-2"):
        value = services[name]["environment"]["MLQ_TRUSTED_PROXIES"]
        default = re.fullmatch(r"\$\{MLQ_TRUSTED_PROXIES:-([^}]*)\}", value)[1]
        assert all(net.is_loopback for net in networks(default)), value


def test_no_web_command_in_the_docs_passes_proxy_headers():
    for doc in (ROOT / "README.md", ROOT / "docs" / "deploy.md", ROOT / "docs" / "architecture.md"):
        for line in doc.read_text().splitlines():
            command = re.search(r"(mlqueue\.webserver|daphne) -b[^`#|]*", line)
            if command:
                assert "--proxy-headers" not in command[0] and "daphne" not in command[0], (doc.name, line)


def test_the_docker_run_env_file_has_the_stores():
    example = DEPLOY_MD.split("docker run --rm --env-file mlqueue.env", 1)[0].rsplit("cat > mlqueue.env", 1)[1]
    for name in ("DATABASE_URL=", "REDIS_URL=", "SECRET_KEY=", "ALLOWED_HOSTS="):
        assert f"\n{name}" in example, name


def test_the_daemonset_join_token_is_not_a_one_day_token():
    k8s = DEPLOY_MD.split("## Kubernetes", 1)[1].split("## Bare metal", 1)[0]
    assert "--expires 24h" not in k8s and "create_join_token" in k8s
    assert "kubectl apply -f -" in k8s  # how to rotate the Secret
