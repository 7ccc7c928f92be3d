#!/usr/bin/env bash
# tests/gpu and the master loop's smoke tests on a CUDA GPU, in one call of the device tool:
#   run(command="bash benchmarks/device/device_gpu_tests.sh", carry=[".whl", ".devtok", ".devemb"], timeout_s=540)
# (bash benchmarks/device/device_pack.sh makes the three carried folders here.) Then the short run of docs/scale.md step 4
# on the one GPU: the BFCL recipe through torch.distributed.run (one rank: FSDP2 over NCCL), the policy SmolLM2-135M's
# architecture with random weights on the native engine in bf16 (vLLM's CUDA build and a 7B model cannot travel), the
# served helpers replaced by the same model in process on the GPU, BFCL's MathAPI family, short episodes.
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
timeout 280 python3 -m pytest ${DEVICE_TESTS:-tests/gpu tests/cpu/test_run_loop.py} -p no:cacheprovider -q -rs --timeout 180 \
  --deselect tests/cpu/test_run_loop.py::test_report_to_writes_wandb_offline_and_mlflow_beside_tensorboard \
  -o addopts="" --durations=15 2>&1 | tee "$OUT/pytest.txt"
echo "pytest rc=${PIPESTATUS[0]}" | tee -a "$OUT/pytest.txt"

T=$(mktemp -d)
sets=(train.iterations=1 train.tasks_per_iteration=2 train.ppo_epochs=1 train.eval_tasks=4 run.name=smoke
  "run.out_dir=$T" "models.policy.model=$M" models.policy.engine=native models.policy.max_new_tokens=48
  env.family=arith env.tool_rendering=compact rollout.max_steps=4 questioning.explore_runs=1
  questioning.explore_steps=4 questioning.synthetic_tasks=2 questioning.hybrid_lambda=0)
for r in explorer synthesizer judge attributor summarizer; do
  sets+=("models.$r.backend=local" "models.$r.model=embedded:smollm2-135m-instruct" "models.$r.base_url=null"
    "models.$r.device=cuda" "models.$r.max_new_tokens=48")
done
args=(); for s in "${sets[@]}"; do args+=(--set "$s"); done
echo "$ python3 -m torch.distributed.run --nproc_per_node 1 -m evolvekit.cli.main run configs/recipes/agentevolver_bfcl_gpu.yaml ${args[*]}" \
  | tee "$OUT/recipe.txt"
python3 -m evolvekit.cli.main config show configs/recipes/agentevolver_bfcl_gpu.yaml "${args[@]}" > "$OUT/recipe_config.txt" 2>&1
start=$(date +%s)
timeout 200 python3 -m torch.distributed.run --nproc_per_node 1 -m evolvekit.cli.main run \
  configs/recipes/agentevolver_bfcl_gpu.yaml "${args[@]}" --json --no-progress 2>&1 | tee -a "$OUT/recipe.txt" | tail -40
echo "recipe rc=${PIPESTATUS[0]} in $(( $(date +%s) - start )) s" | tee -a "$OUT/recipe.txt"
nvidia-smi --query-gpu=memory.used --format=csv >> "$OUT/recipe.txt" 2>&1
