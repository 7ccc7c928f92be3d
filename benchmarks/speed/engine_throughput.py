"""Rollout engines side by side: evolvekit's `native` continuous batch, transformers' `continuous_batching`, and
transformers' own `generate` as the anchor.

    .venv/bin/python benchmarks/speed/engine_throughput.py --prompts 8 --n 6 --max-new-tokens 64
    python3 benchmarks/speed/engine_throughput.py --random-arch qwen2.5-1.5b --jsonl rows.jsonl   # on a GPU

The engines (`models.policy.engine`) generate from one model object and the same group-shaped batch: ``--prompts``
prompts of ``--prompt-len`` token ids that share their first ``--shared-len`` (a rollout batch's system prompt,
tools and worked examples), ``--n`` samples each, temperature 1, ``--max-new-tokens`` at most. Each engine makes one
warm-up call, then ``--repeats`` timed calls (the native engine's kept prefix is dropped before every call, so
neither reuses work across calls). Prints generated tokens/s of each engine and the ratio continuous_batching /
native, for the device the model is on (``--device auto``: cuda when there is one, then bf16 under ``--dtype
auto``). Speed only: the prompts are random token ids, so the completions mean nothing, and a model with random
weights (any folder with a config.json and a tokenizer) measures the same as its trained one for lengths that
reach ``--max-new-tokens``.

``--random-arch`` builds a model with random weights in place of ``--model``: the layer shapes of Qwen2.5-0.5B or
Qwen2.5-1.5B (their published config.json, 151,936-row tied embedding), with the tokenizer of ``--tokenizer`` (by
default the embedded SmolLM2 one, since no Qwen tokenizer ships offline) for the prompts' ids and EOS; the parameter
count is printed, not assumed.
`vllm` (``--engines ...,vllm``, where vLLM is installed on a CUDA machine) is the in-process vLLM engine of
``models.policy.engine: vllm`` over the same weights (saved to a temporary folder for vLLM to start from), taking
``--vllm-memory`` of the GPU's memory for its weights and KV cache; its own prefix cache is dropped before every call.
The anchor row `hf_generate` is ``model.generate`` on the same prompts (``num_return_sequences=--n``, sampling at
temperature 1 with top-k and top-p off, the model's default dynamic KV cache).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

ENGINES = ("native", "continuous_batching", "hf_generate", "vllm")

# The published Qwen2.5 instruct models' config.json: layer shapes and the 151,936-row embedding (tied).
ARCHS: dict[str, dict] = {
    "qwen2.5-0.5b": dict(
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        vocab_size=151936,
    ),
    "qwen2.5-1.5b": dict(
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        vocab_size=151936,
    ),
}


def random_model(arch: str, tokenizer_dir: str, layers: int | None, device: str, dtype: str):
    """A Qwen2 model of ``arch``'s shapes with random weights, built on ``device``, and ``tokenizer_dir``'s tokenizer
    (prompts, EOS; ids past its end, which a random model samples, decode to nothing)."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from evolvekit.llm.local import pick_device, pick_dtype

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    shape = dict(ARCHS[arch])
    if layers is not None:
        shape["num_hidden_layers"] = layers
    cfg = Qwen2Config(
        max_position_embeddings=32768,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        **shape,
    )
    dev = pick_device(device)
    torch.manual_seed(0)
    with torch.device(dev):
        model = Qwen2ForCausalLM(cfg).to(pick_dtype(dtype, dev))
    return model, tok


def sample_with_generate(model, ids, n: int, max_new_tokens: int, pad_id: int, eos_ids=None, exact: bool = False):
    """transformers' own ``generate`` as the anchor: ``n`` samples per prompt row of ``ids`` at temperature 1, top-k
    and top-p off; ``exact``: every row runs to ``max_new_tokens`` (no early EOS)."""
    import torch

    with torch.no_grad():
        return model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=max_new_tokens,
            min_new_tokens=max_new_tokens if exact else None,
            num_return_sequences=n,
            eos_token_id=eos_ids,
            pad_token_id=pad_id,
        )


def add_batch_args(ap: argparse.ArgumentParser, prompts: int, n: int, max_new_tokens: int) -> None:
    """The model and batch options this benchmark and benchmarks/speed/engine_step_profile.py share."""
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"])
    ap.add_argument("--prompts", type=int, default=prompts)
    ap.add_argument("--n", type=int, default=n)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--shared-len", type=int, default=448)
    ap.add_argument("--max-new-tokens", type=int, default=max_new_tokens)
    ap.add_argument("--tokenizer", default=None, help="tokenizer folder for --random-arch (default: embedded SmolLM2)")
    ap.add_argument("--layers", type=int, default=None, help="override the layer count of --random-arch (smoke runs)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="embedded:smollm2-135m-instruct")
    add_batch_args(ap, prompts=8, n=6, max_new_tokens=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--random-arch", choices=sorted(ARCHS), help="random weights of this layer shape (see above)")
    ap.add_argument("--engines", default="native,continuous_batching,hf_generate")
    ap.add_argument("--vllm-memory", type=float, default=0.4, help="engine vllm: its gpu_memory_utilization")
    ap.add_argument("--jsonl", default=None, help="append one JSON line per engine as it finishes")
    args = ap.parse_args()
    engines = [e for e in args.engines.split(",") if e]
    if not engines or set(engines) - set(ENGINES):
        ap.error(f"--engines is a comma list of {', '.join(ENGINES)}")
    if not 0 <= args.shared_len < args.prompt_len:
        ap.error("--shared-len must be at least 0 and below --prompt-len")

    import torch

    from evolvekit.llm.base import SamplingParams
    from evolvekit.llm.continuous import ContinuousBatchingLLM
    from evolvekit.llm.local import LocalLLM

    if args.random_arch:
        from evolvekit.llm.embedded import smollm2_folder

        hf_model, tok = random_model(
            args.random_arch, args.tokenizer or str(smollm2_folder()), args.layers, args.device, args.dtype
        )
        if "vllm" in engines:  # vLLM starts from a folder: the same random weights, saved
            folder = Path(tempfile.mkdtemp(prefix="engine_throughput_"))
            hf_model.save_pretrained(folder)
            tok.save_pretrained(folder)
            del hf_model
            local = LocalLLM(str(folder), device=args.device, dtype=args.dtype)
        else:
            local = LocalLLM(hf_model=hf_model, tokenizer=tok, device=args.device, dtype=args.dtype)
        model_name = f"random {args.random_arch}" + (f" ({args.layers} layers)" if args.layers else "")
    else:
        local = LocalLLM(args.model, device=args.device, dtype=args.dtype)
        model_name = args.model
    params_b = round(sum(p.numel() for p in local.model.parameters()) / 1e9, 3)
    vocab = len(local.tokenizer)
    g = torch.Generator().manual_seed(0)
    shared = torch.randint(10, vocab - 10, (args.shared_len,), generator=g).tolist()
    prompts = [
        shared + torch.randint(10, vocab - 10, (args.prompt_len - args.shared_len,), generator=g).tolist()
        for _ in range(args.prompts)
    ]
    cuda = str(local.device).startswith("cuda")

    def timed(engine, seed: int) -> tuple[float, int]:
        params = SamplingParams(n=args.n, temperature=1.0, max_new_tokens=args.max_new_tokens, seed=seed)
        engine.reset_prefix_cache()
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        outs = engine.generate_ids(prompts, params)
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - t0, sum(len(c.token_ids) for comps in outs for c in comps)

    def timed_generate(seed: int) -> tuple[float, int]:
        """transformers' own ``generate`` on the same batch; tokens counted up to the first EOS of each row."""
        ids = torch.tensor(prompts, device=local.device)
        torch.manual_seed(seed)
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = sample_with_generate(
            local.model, ids, args.n, args.max_new_tokens, local.tokenizer.pad_token_id, sorted(local.eos_ids)
        )
        if cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        tokens = 0
        for row in out[:, args.prompt_len :].tolist():
            ends = [i for i, t in enumerate(row) if t in local.eos_ids]
            tokens += ends[0] + 1 if ends else len(row)
        return dt, tokens

    def run_engine(name: str):
        if name == "hf_generate":
            return lambda seed: timed_generate(seed)
        if name == "vllm":
            from evolvekit.llm.vllm_engine import VLLMEngine

            engine: Any = VLLMEngine(local, gpu_memory_utilization=args.vllm_memory)
        else:
            engine = local if name == "native" else ContinuousBatchingLLM(local)
        return lambda seed: timed(engine, seed)

    rows: dict[str, dict] = {}
    for name in engines:
        call = run_engine(name)
        call(0)  # warm-up: kernels, allocator, paged cache
        runs = [call(1 + r) for r in range(args.repeats)]
        seconds = sum(dt for dt, _ in runs)
        tokens = sum(n for _, n in runs)
        rows[name] = {
            "seconds_per_call": round(seconds / args.repeats, 3),
            "generated_tokens_per_call": round(tokens / args.repeats, 1),
            "tokens_per_s": round(tokens / seconds, 1),
        }
        print(f"{name:>20}: {rows[name]}", flush=True)
        if args.jsonl:
            with Path(args.jsonl).open("a") as fh:
                row = {"model": model_name, "params_b": params_b, "engine": name, "rows": args.prompts * args.n}
                fh.write(json.dumps({**row, "max_new_tokens": args.max_new_tokens, **rows[name]}) + "\n")
    anchor = rows.get("hf_generate") or rows[engines[0]]
    out = {
        "model": model_name,
        "params_b": params_b,
        "device": str(local.device),
        "device_name": torch.cuda.get_device_name(local.device) if cuda else "cpu",
        "dtype": str(next(local.model.parameters()).dtype),
        "prompts": args.prompts,
        "n": args.n,
        "prompt_len": args.prompt_len,
        "shared_len": args.shared_len,
        "max_new_tokens": args.max_new_tokens,
        "repeats": args.repeats,
        **rows,
        "vs_anchor": {n: round(r["tokens_per_s"] / anchor["tokens_per_s"], 2) for n, r in rows.items()},
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
