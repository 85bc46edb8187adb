"""One element of an array: "inference" over shard MLQ_ARRAY_INDEX of MLQ_ARRAY_COUNT (also given
as --shard/--of by the spec's {index} and {count}). It reports how far it got with mlqueue.report
and fails once, on its first attempt, where FAIL_ONCE names its index (to watch a retry of one
element alone)."""

import argparse
import os
import time

try:
    from mlqueue import report
except ImportError:  # run by hand
    report = None

parser = argparse.ArgumentParser()
parser.add_argument("--shard", type=int, required=True)
parser.add_argument("--of", type=int, required=True)
args = parser.parse_args()
attempt = os.environ.get("MLQ_ATTEMPT", "1")
print(
    f"shard {args.shard} of {args.of} (MLQ_ARRAY_INDEX={os.environ.get('MLQ_ARRAY_INDEX')}), attempt {attempt}",
    flush=True,
)
if os.environ.get("FAIL_ONCE") == str(args.shard) and attempt == "1":
    raise SystemExit(f"shard {args.shard}: a bad record (this attempt fails; the retry succeeds)")
for batch in range(1, 6):
    time.sleep(float(os.environ.get("BATCH_S", "1")))
    if report is not None:
        report(step=batch, rows_done=batch * 1000)
print(f"shard {args.shard}: 5000 rows done", flush=True)
