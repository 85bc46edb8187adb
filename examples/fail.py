"""Fails on purpose, to show retries with back-off: exits 3 until attempt $SUCCEED_ON."""

import os
import sys

attempt = int(os.environ.get("MLQ_ATTEMPT", "1"))
print(f"attempt {attempt}", flush=True)
sys.exit(0 if attempt >= int(os.environ.get("SUCCEED_ON", "99")) else 3)
