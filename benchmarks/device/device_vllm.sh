#!/usr/bin/env bash
# The vLLM engine (models.policy.engine: vllm) on a lent CUDA machine: tests/with_vllm/test_vllm_engine.py and the vllm row
# of benchmarks/speed/engine_throughput.py, in the last of three calls of the device tool on one warm machine.
#
# vLLM 0.24.0 is the release that pins the machine image's torch (2.11.0, CUDA 13); its wheel (279 MB) and the
# packages it needs that the image lacks (benchmarks/device/device_vllm_deps.txt, 62 wheels, 41 MB) are over the 64 MiB a
# call carries, so they travel as one tar (the wheel's contents as .tar.xz, the wheels beside it) cut in three parts
# (benchmarks/device/device_vllm_pack.sh makes them here):
#   run(command="mkdir -p /tmp/vc && cp .vc1/p1 /tmp/vc/", carry=[".vc1"])
#   run(command="cp .vc2/p2 /tmp/vc/", carry=[".vc2"])
#   run(command="bash benchmarks/device/device_vllm.sh", carry=[".vc3", ".whl", ".devtok"], timeout_s=560)
# Two of the wheel's kernel libraries are left out to fit (_vllm_fa2_C, FlashAttention 2, and _moe_C, the fused
# mixture-of-experts kernels); vLLM imports both inside try blocks and needs neither for a dense model on Hopper.
# .whl and .devtok are those of benchmarks/device/device_gpu_tests.sh (this project's pins; SmolLM2's tokenizer files).
set -u
export PYTHONUNBUFFERED=1 VLLM_WORKER_MULTIPROC_METHOD=spawn
OUT=${OUT:-/tmp/vllm_out}
mkdir -p "$OUT" /tmp/vb
part() { ls "/tmp/vc/$1" ".vc${1#p}/$1" 2>/dev/null | head -1; }  # kept in /tmp, else in its ignored folder
cat "$(part p1)" "$(part p2)" .vc3/p3 > /tmp/vb/blob.tar || exit 1
echo "$(cat .vc3/blob.sha256)  /tmp/vb/blob.tar" | sha256sum -c - || exit 1
tar -xf /tmp/vb/blob.tar -C /tmp/vb || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  /tmp/vb/vdeps/*.whl .whl/*.whl || exit 1
python3 -c "import tarfile; tarfile.open('/tmp/vb/vllm_024.tar.xz').extractall('/tmp/site')" || exit 1
DEVICE_VERSIONS=vllm source benchmarks/device/device_common.sh
timeout 330 python3 -m pytest tests/with_vllm/test_vllm_engine.py -p no:cacheprovider -q -rs --timeout 240 -o addopts="" \
  --durations=5 2>&1 | tee "$OUT/pytest.txt" | grep -v "Warning\|warn(" | tail -60
echo "pytest rc=${PIPESTATUS[0]}" | tee -a "$OUT/pytest.txt"
# a quickstart iteration's shape on Qwen2.5-0.5B's layer shapes: 8 prompts x 6 samples, 512-token prompts sharing
# 448, 64 new tokens; bf16
timeout 170 python3 benchmarks/speed/engine_throughput.py --random-arch qwen2.5-0.5b --tokenizer .devtok \
  --prompts 8 --n 6 --max-new-tokens 64 --repeats 2 --engines native,vllm,hf_generate \
  --jsonl "$OUT/rows.jsonl" 2>&1 | tee "$OUT/bench.txt" | grep -v "Warning\|warn(" | tail -15
echo "bench rc=${PIPESTATUS[0]}" | tee -a "$OUT/bench.txt"
