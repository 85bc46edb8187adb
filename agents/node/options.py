"""`mlqueue-agent`'s command line: its options, checked before anything starts, and the
nodes they describe.

A value the server would refuse at registration is refused here, with a usage message
(exit 2), instead of being sent, refused and sent again. The limits are the server's
(agents/protocol.py, which this stdlib-only package cannot import; a test keeps them equal).
"""

import argparse
import json
import re
import urllib.parse
from pathlib import Path

from agents.node.containers import Podman
from agents.node.isolation import DEFAULT_UID_RANGE, task_users_from
from agents.node.machine import GPU_TYPE, GPU_TYPE_RULE, MAX_GPU_TYPE, inventory
from agents.node.runtime import DEFAULT_PASS_ENV, check_pass_env

MAX_GPUS, MAX_CPUS, MAX_MEMORY_GB, MAX_SCRATCH_GB = 16, 1024, 64 * 1024, 1_000_000
NODE_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?\Z")
NODE_NAME_RULE = "letters, digits, '.', '_' and '-', starting and ending with a letter or digit, no '..'"
# option -> (lowest, highest) the server accepts
INT_RANGES = {
    "fake_gpus": (0, MAX_GPUS),
    "cpus": (1, MAX_CPUS),
    "memory_gb": (1, MAX_MEMORY_GB),
    "scratch_gb": (0, MAX_SCRATCH_GB),
}


def parse_args(argv=None) -> argparse.Namespace:
    # No abbreviations: `--token X` must not quietly mean `--token-file X`.
    parser = argparse.ArgumentParser(prog="mlqueue-agent", description="The mlqueue node agent.", allow_abbrev=False)
    parser.add_argument("--server", required=True, help="the mlqueue web URL, e.g. https://mlqueue.example.com")
    parser.add_argument(
        "--token-file",
        type=Path,
        help="a file (mode 600) holding a join token; or set "
        "MLQ_AGENT_JOIN_TOKEN. Not needed once the workdir holds the node's own token",
    )
    parser.add_argument("--workdir", type=Path, default=Path("/var/lib/mlqueue-agent"))
    parser.add_argument("--log-level", default="INFO")
    add_node_arguments(parser)
    add_task_arguments(parser)
    add_health_arguments(parser)
    args = parser.parse_args(argv)
    server = urllib.parse.urlsplit(args.server)
    if server.scheme not in ("http", "https") or not server.hostname:
        parser.error(f"--server {args.server!r}: give the server's http:// or https:// URL")
    if any("=" not in label for label in args.label):
        parser.error("--label takes KEY=VALUE")
    check_node_options(parser, args)
    for option in ("health_interval", "health_check_interval", "health_check_timeout"):
        if not getattr(args, option) > 0:
            parser.error(f"--{option.replace('_', '-')} takes a number of seconds > 0")
    try:
        args.pass_env = DEFAULT_PASS_ENV + tuple(
            check_pass_env([name.strip() for item in args.pass_env for name in item.split(",") if name.strip()])
        )
        args.task_users = task_users_from(args.isolation, args.task_uids, args.task_user_map)
        args.container = container_from(args)
    except ValueError as exc:
        parser.error(str(exc))
    return args


def check_node_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """What registration would refuse (HTTP 400, every time): a usage error instead."""
    for option, (low, high) in INT_RANGES.items():
        value = getattr(args, option)
        if value is not None and not low <= value <= high:
            parser.error(f"--{option.replace('_', '-')} takes {low} to {high}, not {value}")
    if args.node_name is not None and (not NODE_NAME.match(args.node_name) or ".." in args.node_name):
        parser.error(f"--node-name {args.node_name!r}: a node name is {NODE_NAME_RULE}")
    if args.gpu_type is not None and not GPU_TYPE.match(args.gpu_type):
        parser.error(f"--gpu-type {args.gpu_type!r}: a GPU type is {GPU_TYPE_RULE}")
    if args.no_gpus and (args.fake_gpus is not None or args.gpu_type is not None):
        parser.error("--no-gpus registers a CPU node: no --fake-gpus or --gpu-type with it")


def add_node_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("the node")
    group.add_argument("--node-name", help="default: this machine's hostname")
    group.add_argument("--zone", default="z1")
    group.add_argument("--rack", default="r1")
    group.add_argument("--fake-gpus", type=int, help="pretend to have this many GPUs (no NVML needed)")
    group.add_argument(
        "--gpu-type",
        help=f"the GPUs' type as jobs name it, {MAX_GPU_TYPE} characters at most (default: from NVML's model "
        "name, e.g. H100 or RTX-6000-ADA; H100 for --fake-gpus)",
    )
    group.add_argument(
        "--no-gpus",
        action="store_true",
        help="register as a CPU node without asking NVML: for a GPU machine whose driver is broken "
        "(without it, the agent refuses to start there)",
    )
    group.add_argument("--cpus", type=int)
    group.add_argument("--memory-gb", type=int)
    group.add_argument(
        "--scratch-gb",
        type=int,
        help="local scratch disk for tasks, GB: jobs asking more per task do not start here (default: not "
        "reported, not checked)",
    )
    group.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")
    group.add_argument("--address", help="how other nodes reach this one (a gang's MASTER_ADDR)")
    group.add_argument("--fleet", type=Path, help="a JSON list of virtual nodes to run in this process")


def add_task_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("how tasks run")
    group.add_argument(
        "--container-runtime",
        choices=["none", "podman"],
        default="none",
        help="podman: a job that names an image runs in it, with its CPU and memory limits and its GPUs "
        "(docs/agents.md); none (default): as a plain process",
    )
    group.add_argument(
        "--container-runtime-args",
        default="",
        metavar="ARGS",
        help="more `podman run` options for every container, e.g. '--runtime runc' on a cgroup v1 host",
    )
    group.add_argument(
        "--container-hook",
        default="",
        help="instead of --container-runtime: wraps jobs that name an image, e.g. 'apptainer exec --nv docker://{image}'",
    )
    group.add_argument(
        "--pass-env",
        action="append",
        default=[],
        metavar="NAME[,NAME...]",
        help="more of the agent's environment variables that tasks see (always: "
        f"{', '.join(DEFAULT_PASS_ENV)} where set)",
    )
    group.add_argument(
        "--isolation",
        choices=["auto", "uid", "none"],
        default="auto",
        help="uid: each task runs as a user of its own (needs root); none: as the agent's user; "
        "auto (default): uid when running as root",
    )
    group.add_argument(
        "--task-uids",
        default=DEFAULT_UID_RANGE,
        metavar="FIRST-LAST",
        help=f"the UIDs (and GIDs) given to tasks, one per running task (default {DEFAULT_UID_RANGE})",
    )
    group.add_argument(
        "--task-user-map",
        type=Path,
        metavar="FILE",
        help="a JSON object of user name -> UID: a job runs as its owner's own UID where listed",
    )


def add_health_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("health")
    group.add_argument(
        "--fake-gpu-faults",
        type=Path,
        metavar="FILE",
        help="fake GPUs' faults, a JSON file re-read when it changes (docs/node-health.md); or set MLQ_FAKE_GPU_FAULTS",
    )
    group.add_argument(
        "--health-interval", type=float, default=30.0, metavar="S", help="send GPU telemetry every S seconds"
    )
    group.add_argument(
        "--health-check", default="", metavar="CMD", help="a command (run by /bin/sh): non-zero = unhealthy"
    )
    group.add_argument("--health-check-interval", type=float, default=60.0, metavar="S")
    group.add_argument("--health-check-timeout", type=float, default=30.0, metavar="S")


def container_from(args: argparse.Namespace) -> Podman | None:
    if args.container_runtime == "none":
        if args.container_runtime_args:
            raise ValueError("--container-runtime-args needs --container-runtime podman")
        return None
    if args.container_hook:
        raise ValueError("--container-hook and --container-runtime podman: give one of them")
    return Podman.find(args.container_runtime_args)


def runs_images(args: argparse.Namespace) -> bool:
    """Whether this agent runs a job's image: with a container runtime or a hook."""
    return args.container is not None or bool(args.container_hook)


def nodes_from(args: argparse.Namespace) -> list[dict]:
    """The nodes this agent runs; a --fleet's virtual nodes run images as the agent does,
    whatever their file says."""
    if args.fleet:
        try:
            fleet = json.loads(args.fleet.read_text())
        except (OSError, ValueError) as exc:
            raise SystemExit(f"mlqueue-agent: cannot read --fleet {args.fleet}: {exc}") from None
        return [{"labels": {}, "address": "127.0.0.1", **node, "runs_images": runs_images(args)} for node in fleet]
    labels = dict(label.split("=", 1) for label in args.label)
    return [
        inventory(
            name=args.node_name,
            zone=args.zone,
            rack=args.rack,
            fake_gpus=args.fake_gpus,
            gpu_type=args.gpu_type,
            cpus=args.cpus,
            memory=args.memory_gb,
            scratch=args.scratch_gb,
            runs_images=runs_images(args),
            labels=labels,
            address=args.address,
            workdir=args.workdir,
            no_gpus=args.no_gpus,
        )
    ]
