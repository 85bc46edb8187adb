"""Running a task in its job's image with podman (`mlqueue-agent --container-runtime podman`).

For job J, rank R, attempt A on node N the agent's supervisor runs

    podman run --rm --name mlq-N-J-R-A --label mlqueue.agent=WORKDIR --init --network host
        --security-opt no-new-privileges --cap-drop all --cpus C --memory Mg --shm-size Mg
        --device nvidia.com/gpu=I (one per assigned GPU) -v WORK:WORK -w WORK -v HELPERS:HELPERS:ro
        --user UID:GID --env-file /dev/fd/F [--env NAME ...] [--container-runtime-args] IMAGE COMMAND...

Who runs what: podman runs as the agent's user (root, with the recommended setup) and never
as the task's: a task UID from the pool has no subordinate ID ranges for rootless podman. The
container's processes run as the task's own UID and GID (`--user`), in the host's user
namespace, so the task's 0700 working directory, mounted at the same path, is its own, and
everything agents/node/isolation.py does for a UID (kill what it left running, remove its
files) holds for a container's processes too.

The task's environment never reaches podman's command line, nor podman's own environment
where podman or the dynamic loader would read it (a job's LD_PRELOAD or CONTAINERS_CONF in the
environment of a root podman would be the job's code or configuration running as root): every
variable goes through an env file read from a file descriptor (a file with no name), except
values with a line break (a PEM key), which that file cannot carry: those go in podman's own
environment, named with `--env NAME`, and a name podman, Go or the loader reads is refused.

Inside the container a task sees only its own GPUs, numbered from 0: CUDA_VISIBLE_DEVICES is
`0..n-1` there, and NVIDIA_VISIBLE_DEVICES names the host's indices (`void` for none).
"""

import dataclasses
import logging
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from agents.node.isolation import TaskUser

log = logging.getLogger("mlqueue.agent")

IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]*\Z")
LINE_BREAK = re.compile(r"[\r\n]")
# Names a root podman, its Go runtime, conmon or the dynamic loader read from their environment:
# never set there from a job's values.
READ_BY_PODMAN = re.compile(
    r"^(LD_|CONTAINER|_CONTAINERS|PODMAN|BUILDAH|STORAGE_|REGISTRY|XDG_|DOCKER|CONMON|GO[A-Z]*$|"
    r"(HOME|TMPDIR|PATH|NOTIFY_SOCKET|GCONV_PATH|LOCPATH|HOSTALIASES|RES_OPTIONS|LOCALDOMAIN)$|"
    r"(?i:[a-z_]*_proxy$))"
)
# podman's own environment: these names from the agent's (the site's configuration, never a job's).
PODMAN_ENV = (
    "PATH",
    "HOME",
    "TMPDIR",
    "XDG_RUNTIME_DIR",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "CONTAINERS_CONF",
    "CONTAINERS_STORAGE_CONF",
    "CONTAINERS_REGISTRIES_CONF",
    "REGISTRY_AUTH_FILE",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
)
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
REMOVE_TIMEOUT_S = 30


def check_image(image: str) -> str:
    """An image is one word of the command line: it cannot add options of its own to the
    runtime ("--privileged -v /:/host x")."""
    if not IMAGE.match(image):
        raise OSError(f"refusing image {image!r}: not an image reference")
    return image


def container_name(node: str, key: tuple[int, int, int]) -> str:
    """mlq-NODE-JOB-RANK-ATTEMPT: a node name is already a valid container name's characters."""
    return "mlq-{}-{}-{}-{}".format(node, *key)


def visible_gpus(env: dict[str, str], gpu_indices: list[int]) -> dict[str, str]:
    """The task's environment as seen inside its container, where its GPUs are numbered from 0."""
    return {
        **env,
        "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(len(gpu_indices))),
        "NVIDIA_VISIBLE_DEVICES": ",".join(str(i) for i in gpu_indices) or "void",
    }


def split_env(env: dict[str, str]) -> tuple[str, dict[str, str]]:
    """(the env file's text, the variables that go in podman's own environment by name). Raises
    OSError naming a variable that can go in neither."""
    lines, by_name = [], {}
    for name, value in env.items():
        if not LINE_BREAK.search(value):
            lines.append(f"{name}={value}\n")
        elif READ_BY_PODMAN.match(name):
            raise OSError(
                f"{name}'s value has a line break, which podman's env file cannot carry, and {name} is a "
                "variable podman itself reads: give it without line breaks (e.g. base64), or under another name"
            )
        else:
            by_name[name] = value
    return "".join(lines), by_name


@dataclass(frozen=True)
class Podman:
    """podman as this agent runs it: its binary, the site's extra `podman run` options, and the
    node and workdir whose containers these are."""

    binary: str
    extra: tuple[str, ...] = ()
    node: str = ""
    owner: str = ""  # the node's workdir: the label that finds this agent's leftover containers

    @classmethod
    def find(cls, extra_args: str) -> "Podman":
        binary = shutil.which("podman", path=os.environ.get("PATH", SYSTEM_PATH))
        if binary is None:
            raise ValueError("--container-runtime podman: no podman on PATH (apt-get install podman runc catatonit)")
        try:
            extra = tuple(shlex.split(extra_args))
        except ValueError as exc:
            raise ValueError(f"--container-runtime-args: {exc}") from None
        return cls(binary=binary, extra=extra)

    def for_node(self, node: str, workdir: Path) -> "Podman":
        return dataclasses.replace(self, node=node, owner=str(workdir))

    def environment(self, by_name: dict[str, str]) -> dict[str, str]:
        env = {name: os.environ[name] for name in PODMAN_ENV if name in os.environ}
        env.setdefault("PATH", SYSTEM_PATH)
        return {**env, **by_name}

    def run_command(
        self,
        assignment: dict,
        *,
        work: Path,
        helpers: Path | None,
        user: TaskUser | None,
        env_file_fd: int,
        by_name: list[str],
    ) -> list[str]:
        key = (assignment["job_id"], assignment["rank"], assignment["attempt"])
        image = check_image(assignment["image"])
        command = [self.binary, "run", "--rm", "--name", container_name(self.node, key)]
        command += ["--label", f"mlqueue.agent={self.owner}", "--init", "--network", "host"]
        command += ["--security-opt", "no-new-privileges", "--cap-drop", "all"]
        memory = f"{assignment['memory_gb']}g"
        # /dev/shm (64 MiB by default) as large as the memory limit, which its pages count against
        # anyway: data loaders pass their batches through it.
        command += ["--cpus", str(assignment["cpus"]), "--memory", memory, "--shm-size", memory]
        for index in assignment.get("gpu_indices") or []:
            command += ["--device", f"nvidia.com/gpu={int(index)}"]
        command += ["-v", f"{work}:{work}", "-w", str(work)]
        if helpers is not None:
            command += ["-v", f"{helpers}:{helpers}:ro"]
        if user is not None:
            command += ["--user", f"{user.uid}:{user.gid}"]
        command += ["--env-file", f"/dev/fd/{env_file_fd}"]
        for name in by_name:
            command += ["--env", name]
        return [*command, *self.extra, image, *assignment["command"]]

    def remove(self, *names: str) -> None:
        """Stop (SIGKILL, no grace) and remove these containers, wherever they are."""
        if names:
            self._podman("rm", "--force", "--ignore", "--time", "0", *names)

    def sweep(self) -> int:
        """At start: containers an earlier run of this agent left (it was killed, and its
        supervisors with it): remove them before any task starts. Returns how many."""
        listed = self._podman("ps", "--all", "--filter", f"label=mlqueue.agent={self.owner}", "--format", "{{.Names}}")
        names = listed.split()
        if names:
            log.warning("%s: removing %d container(s) left from before this agent started", self.node, len(names))
            self.remove(*names)
        return len(names)

    def _podman(self, *args: str) -> str:
        try:
            done = subprocess.run(
                [self.binary, *args],
                env=self.environment({}),
                capture_output=True,
                text=True,
                timeout=REMOVE_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            log.error("%s: podman %s failed: %s", self.node, args[0], exc)
            return ""
        if done.returncode:
            log.error("%s: podman %s failed: %s", self.node, args[0], done.stderr.strip()[-500:])
        return done.stdout
