#!/usr/bin/env bash
# tests/gpu and the master loop's smoke tests on a CUDA GPU, in one call of the device tool:
#   run(command="bash benchmarks/device/device_gpu_tests.sh", carry=[".whl", ".devtok"], timeout_s=480)
# .whl holds this project's pins of transformers, tokenizers, pydantic (+ core, annotated-types, typing-inspection),
# gguf, tenacity, platformdirs, llguidance, fastapi, starlette and uvicorn as cp312 wheels (the machine's image has
# torch 2.11.0+cu130 and the rest); .devtok holds the embedded SmolLM2 folder's config, generation config, tokenizer
# and chat template. The trained weights cannot travel (98 MB), so the cache folder gets SmolLM2's architecture with
# random weights: every test here uses a tiny random model (llm/tiny.py, SmolLM2's tokenizer) or needs no trained one.
# tests/cpu/test_run_loop.py sets no device, so there its policy resolves to cuda (models.policy.device: auto).
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu_tests}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
source benchmarks/device/device_common.sh
timeout 400 python3 -m pytest tests/gpu tests/cpu/test_run_loop.py -p no:cacheprovider -q -rs --timeout 180 \
  --deselect tests/cpu/test_run_loop.py::test_report_to_writes_wandb_offline_and_mlflow_beside_tensorboard \
  -o addopts="" --durations=15 2>&1 | tee "$OUT/pytest.txt"
echo "pytest rc=${PIPESTATUS[0]}" | tee -a "$OUT/pytest.txt"
