"""The node agent: the daemon that runs on each GPU host (`mlqueue-agent`, agents/node/daemon.py),
the supervisor between it and each task, and what they need (isolation, checkpoints, the
agent's HTTP client and outbox, its credentials, the machine's inventory).

Standard library only (NVML and `websockets` are optional, imported where used): a GPU host
runs this package without Django, DRF, Celery, Redis or Postgres, and nothing here imports the
server's apps (tests/unit/test_agent_package.py holds it to that)."""
