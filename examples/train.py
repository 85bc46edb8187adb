"""A short "training" loop that checkpoints to $MLQ_CHECKPOINT_DIR and resumes from it.

Preempt it (or drain its node) half-way: the next attempt starts from the last saved step."""
import json
import os
import signal
import sys
import time
from pathlib import Path

STEPS = int(os.environ.get("STEPS", "60"))
ckpt_dir = Path(os.environ.get("MLQ_CHECKPOINT_DIR") or ".")
ckpt_dir.mkdir(parents=True, exist_ok=True)
ckpt = ckpt_dir / f"rank{os.environ.get('RANK', '0')}.json"
step = json.loads(ckpt.read_text())["step"] if ckpt.exists() else 0
print(f"attempt {os.environ.get('MLQ_ATTEMPT')}: starting at step {step} of {STEPS}", flush=True)


def save(*_):
    ckpt.write_text(json.dumps({"step": step}))
    print(f"checkpoint at step {step}", flush=True)


def save_and_exit(*_):
    save()
    sys.exit(0)


signal.signal(signal.SIGTERM, save_and_exit)
while step < STEPS:
    time.sleep(0.5)
    step += 1
    if step % 10 == 0:
        save()
print(f"done: {STEPS} steps", flush=True)
