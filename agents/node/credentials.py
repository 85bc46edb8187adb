"""The agent's secrets: the join token it starts with and the node token it is given.

Neither may reach a task. The join token never appears on a command line (every process can
read every other's `/proc/<pid>/cmdline`): it comes from a file or from the environment, and
an environment variable is removed after reading, from the process's memory too, where
`/proc/<pid>/environ` would still show it. The node token lives in a 0600 file in the node's
workdir, so that an agent restarting on the same workdir can re-register its node.
"""

import contextlib
import ctypes
import logging
import os
import stat
import tempfile
from pathlib import Path

log = logging.getLogger("mlqueue.agent")
JOIN_TOKEN_ENV = "MLQ_AGENT_JOIN_TOKEN"
NODE_TOKEN_FILE = "node-token"


def join_token_from(token_file: Path | None) -> str:
    """The join token from --token-file, else from MLQ_AGENT_JOIN_TOKEN (then forgotten by the
    environment); "" when there is none (a node token in the workdir may do)."""
    from_env = take_env(JOIN_TOKEN_ENV)
    if token_file is None:
        return from_env
    try:
        mode = token_file.stat().st_mode
        token = token_file.read_text().strip()
    except OSError as exc:
        raise SystemExit(f"mlqueue-agent: cannot read --token-file {token_file}: {exc.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("%s can be read by other users: chmod 600 it", token_file)
    if not token:
        raise SystemExit(f"mlqueue-agent: --token-file {token_file} is empty")
    return token


def take_env(name: str) -> str:
    """Read and remove an environment variable, wiping its value where the kernel shows it."""
    value = os.environ.get(name, "")
    if value:
        _wipe_initial_environ(name)
        del os.environ[name]
    return value


def _wipe_initial_environ(name: str) -> None:
    """Zero the bytes of NAME=value in libc's environment block (the memory that
    /proc/<pid>/environ reads): unsetenv only drops the pointer to it."""
    try:
        libc = ctypes.CDLL(None)
        environ = ctypes.POINTER(ctypes.c_void_p).in_dll(libc, "environ")
    except (OSError, ValueError):
        return  # not glibc: the variable is still removed from the environment
    prefix = f"{name}=".encode()
    index = 0
    while environ[index]:
        address = environ[index]
        entry = ctypes.string_at(address)
        if entry.startswith(prefix):
            ctypes.memset(address + len(prefix), 0, len(entry) - len(prefix))
        index += 1


def read_private(path: Path) -> str:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return ""


def write_private(path: Path, text: str) -> None:
    """Write a file only the agent's user can read, atomically (a crash leaves the old one).
    The temporary file's name is unique (mkstemp, mode 0600): two writers never share one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
