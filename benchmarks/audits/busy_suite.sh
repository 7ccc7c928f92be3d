#!/usr/bin/env bash
# The README's test command on a busy machine (issue 77): another process holds 4 GiB of memory and keeps one core
# busy for as long as the suite runs. Run from a fresh clone:
#
#   git clone <repo> /tmp/fresh && cd /tmp/fresh && bash benchmarks/audits/busy_suite.sh 2>&1 | tee /tmp/busy_suite.log
#
# It prints the load's own line (its pid, the bytes it holds), then the test command's output; its exit status is
# the test command's.
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 - <<'PY' &
import os, sys, time
block = bytearray(4 * 2**30)  # 4 GiB, every page touched so it is resident
for i in range(0, len(block), 4096):
    block[i] = 1
print(f"[busy] pid {os.getpid()} holds {len(block)} bytes and spins one core", file=sys.stderr, flush=True)
x = 0
while True:  # one core, busy until killed
    x = (x * 31 + 7) % 1_000_003
PY
load=$!
trap 'kill $load 2>/dev/null || true' EXIT
sleep 5  # the load is resident before the suite starts
bash scripts/setup.sh --tests && .venv/bin/python -m pytest
