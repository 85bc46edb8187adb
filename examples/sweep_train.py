"""One trial of a sweep: "trains" for STEPS steps and reports val_loss with mlqueue.report. The
loss is a made-up function of the trial's learning rate and batch size (given as --lr and
--batch-size by the spec's {lr} and {batch_size}, and as MLQ_PARAM_LR and MLQ_PARAM_BATCH_SIZE),
so the best trial is known in advance: lr 0.001 with batch size 64. A trial far from it does
clearly worse, and the sweep's median rule stops it early."""

import argparse
import math
import os
import time

try:
    from mlqueue import report
except ImportError:  # run by hand
    report = None

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
parser.add_argument("--batch-size", type=int, required=True)
args = parser.parse_args()
print(f"trial {os.environ.get('MLQ_SWEEP_TRIAL')}: lr={args.lr} batch_size={args.batch_size}", flush=True)
floor = 0.2 + abs(math.log10(args.lr) + 3) * 0.3 + abs(math.log2(args.batch_size) - 6) * 0.1
for step in range(1, int(os.environ.get("STEPS", "20")) + 1):
    time.sleep(float(os.environ.get("STEP_S", "0.5")))
    val_loss = round(floor + 2.0 / step, 4)
    if report is not None:
        report(step=step, val_loss=val_loss)
print(f"done: val_loss {val_loss}", flush=True)
