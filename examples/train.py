"""A short "training" loop that checkpoints to $MLQ_CHECKPOINT_DIR, confirms each checkpoint to
mlqueue, reports its loss with `mlqueue.report` (drawn on the job's page), and resumes from the
last checkpoint.

It saves when mlqueue says a checkpoint is due (the spec's `checkpoint.interval_minutes`, as
MLQ_CHECKPOINT_INTERVAL_S), every CKPT_EVERY steps if set, and on SIGTERM (a preemption or a
drain), then confirms it with `mlqueue.checkpoint.done(step=...)`: the scheduler then knows
what a preemption would lose. Preempt it (or drain its node) half-way: the next attempt
starts from the last saved step.

examples/train.json's checkpoint path, under /tmp/mlqueue-demo, is for the one-machine demo
(`make demo`: one agent, --isolation none, which leaves /tmp alone). A root agent removes what
a task left in /tmp when it ends, and a requeued attempt may run on another node: on a cluster,
give checkpoint.path a shared directory (docs/checkpoints.md)."""

import json
import os
import signal
import sys
import time
from pathlib import Path

try:
    from mlqueue import checkpoint  # on PYTHONPATH where the node agent runs the job
except ImportError:  # run by hand, or by an agent without the helper: write the marker ourselves
    checkpoint = None
try:
    from mlqueue import report
except ImportError:  # the same: write the metrics line ourselves (docs/job-metrics.md)
    report = None

STEPS = int(os.environ.get("STEPS", "60"))
EVERY = int(os.environ.get("CKPT_EVERY", "10"))
ckpt_dir = Path(os.environ.get("MLQ_CHECKPOINT_DIR") or ".")
ckpt_dir.mkdir(parents=True, exist_ok=True)
ckpt = ckpt_dir / f"rank{os.environ.get('RANK', '0')}.json"
step = json.loads(ckpt.read_text())["step"] if ckpt.exists() else 0
print(f"attempt {os.environ.get('MLQ_ATTEMPT')}: starting at step {step} of {STEPS}", flush=True)


def confirm(at_step: int) -> None:
    """Tell mlqueue the state up to `at_step` is safe (the marker file, written atomically)."""
    if checkpoint is not None and os.environ.get("MLQ_CHECKPOINT_DIR"):
        checkpoint.done(step=at_step)
        return
    tmp = ckpt_dir / f".mlq-checkpoint.{os.getpid()}.tmp"
    tmp.write_text(json.dumps({"step": at_step, "time": time.time()}))
    os.replace(tmp, ckpt_dir / ".mlq-checkpoint")


def save(*_):
    tmp = ckpt.with_suffix(".tmp")
    tmp.write_text(json.dumps({"step": step}))
    os.replace(tmp, ckpt)
    confirm(step)
    print(f"checkpoint at step {step}", flush=True)


def save_and_exit(*_):
    save()
    sys.exit(0)


def report_loss(at_step: int) -> None:
    """A made-up loss that falls with the steps, reported at every step."""
    loss = round(2.0 / (1 + 0.1 * at_step), 4)
    if report is not None:
        report(step=at_step, loss=loss)
    elif os.environ.get("MLQ_METRICS_FILE"):
        with open(os.environ["MLQ_METRICS_FILE"], "a") as metrics:
            metrics.write(json.dumps({"step": at_step, "time": time.time(), "metrics": {"loss": loss}}) + "\n")


def due() -> bool:
    if checkpoint is not None and checkpoint.due():
        return True
    return EVERY > 0 and step % EVERY == 0


signal.signal(signal.SIGTERM, save_and_exit)
while step < STEPS:
    time.sleep(0.5)
    step += 1
    report_loss(step)
    if due():
        save()
print(f"done: {STEPS} steps", flush=True)
