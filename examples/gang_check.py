"""Run as every rank of a gang: checks the torchrun variables mlqueue sets, and that all ranks
agree on where rank 0 is. Exits non-zero if anything is off."""

import os
import sys

needed = ["WORLD_SIZE", "RANK", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "MLQ_JOB_ID"]
missing = [name for name in needed if not os.environ.get(name)]
if missing:
    sys.exit(f"missing: {', '.join(missing)}")
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
gpus = os.environ["CUDA_VISIBLE_DEVICES"].split(",")
print(f"rank {rank} of {world}, master {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}, GPUs {gpus}")
if not 0 <= rank < world:
    sys.exit("RANK outside WORLD_SIZE")
