#!/usr/bin/env bash
# The GPU engine table of issue 55 (benchmarks/results/engine_throughput.md), in one call of the device tool:
#   run(command="bash benchmarks/device/device_engine_table.sh", carry=[".whl", ".devtok"], timeout_s=560)
# .whl holds transformers 5.23.0, pydantic 2.14.3 and their compiled or pure-Python needs as cp312 wheels (the
# image's transformers is not the one this project pins); .devtok holds the embedded SmolLM2 tokenizer files.
# Each engine's row is appended to $OUT/rows.jsonl as it finishes, so a run cut by a timeout keeps what it measured.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/engine_table}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:src
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import sys, torch, transformers; print(sys.version.split()[0], torch.__version__, transformers.__version__)"
  git log -1 --format=%H 2>/dev/null || true
} 2>&1 | tee "$OUT/machine.txt"
bench() {  # $1 timeout, $2 arch, then engine_throughput.py's own options
  local limit=$1 arch=$2
  shift 2
  timeout "$limit" python3 benchmarks/speed/engine_throughput.py --random-arch "$arch" --tokenizer .devtok \
    --jsonl "$OUT/rows.jsonl" "$@" 2>&1 | tee -a "$OUT/log.txt" | grep -v Warning
  echo "== $arch $* rc=${PIPESTATUS[0]}" | tee -a "$OUT/log.txt"
}
# a quickstart iteration's shape: 8 prompts x 6 samples, 512-token prompts sharing 448, 64 new tokens
for arch in qwen2.5-0.5b qwen2.5-1.5b; do
  bench 110 "$arch" --prompts 8 --n 6 --max-new-tokens 64 --repeats 2
done
# a large batch: 32 prompts x 8 samples, 128 new tokens (continuous_batching last: the slowest)
for arch in qwen2.5-0.5b qwen2.5-1.5b; do
  bench 140 "$arch" --prompts 32 --n 8 --max-new-tokens 128 --repeats 1 --engines native,hf_generate,continuous_batching
done
cat "$OUT/rows.jsonl"
