"""A node lease for tests that start tasks without an agent: the supervisor refuses to start a
task without one."""

import time
from pathlib import Path

from agents.node.supervise import write_lease


def a_lease(directory: Path, *, seconds: float = 600, grace_s: float = 5) -> Path:
    path = directory / "lease"
    write_lease(path, until=time.monotonic() + seconds, grace_s=grace_s)
    return path
