#!/usr/bin/env bash
# Where the native engine's GPU step goes (benchmarks/speed/engine_step_profile.py), in one call of the device tool:
#   run(command="bash benchmarks/device/device_engine_profile.sh", carry=[".whl", ".devtok"], timeout_s=300)
# (.whl and .devtok as in benchmarks/device/device_engine_table.sh.)
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/engine_profile}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:src
for arch in qwen2.5-0.5b qwen2.5-1.5b; do
  for shape in "--prompts 32 --n 8" "--prompts 8 --n 6"; do
    # shellcheck disable=SC2086
    timeout 75 python3 benchmarks/speed/engine_step_profile.py --random-arch "$arch" --tokenizer .devtok $shape \
      --max-new-tokens 32 >"$OUT/profile_${arch}_$(echo $shape | tr -dc 0-9).txt" 2>&1
    echo "== $arch $shape rc=$?"
    tail -1 "$OUT/profile_${arch}_$(echo $shape | tr -dc 0-9).txt"
  done
done
head -45 "$OUT/profile_qwen2.5-0.5b_328.txt"
