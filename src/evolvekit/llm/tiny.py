"""A tiny randomly initialised Llama (or Qwen2) with the SmolLM2 tokenizer, for smoke tests and CI-sized benchmarks.

It speaks the same chat template and vocabulary as the embedded policy, so every code path (rollouts, snapshot
merge, training, checkpoints, resume) runs exactly as with the real model, only ~1000× cheaper.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def make_tiny_model(
    folder: Path | str,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    seed: int = 0,
    tokenizer_from: str = "embedded:smollm2-135m-instruct",
    arch: str = "llama",
) -> Path:
    """``arch``: ``llama`` (SmolLM2's) or ``qwen2`` (Qwen2.5's: biased q/k/v projections), both with the SmolLM2
    tokenizer."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from evolvekit.llm.embedded import resolve_model_path

    folder = Path(folder)
    if (folder / "config.json").is_file():
        return folder
    tok = AutoTokenizer.from_pretrained(resolve_model_path(tokenizer_from))
    if arch not in ("llama", "qwen2"):
        raise ValueError(f"arch: llama or qwen2, not {arch!r}")
    classes: dict[str, tuple[Any, Any]] = {
        "llama": (LlamaConfig, LlamaForCausalLM),
        "qwen2": (Qwen2Config, Qwen2ForCausalLM),
    }
    config_class, model_class = classes[arch]
    cfg = config_class(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=8192,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = model_class(cfg)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder
