"""Rollout engines side by side: evolvekit's `native` continuous batch against transformers' `continuous_batching`.

    .venv/bin/python benchmarks/engine_throughput.py --prompts 8 --n 6 --max-new-tokens 64

Both engines (`models.policy.engine`) generate from one model object and the same group-shaped batch: ``--prompts``
prompts of ``--prompt-len`` token ids that share their first ``--shared-len`` (a rollout batch's system prompt,
tools and worked examples), ``--n`` samples each, temperature 1, ``--max-new-tokens`` at most. Each engine makes one
warm-up call, then ``--repeats`` timed calls (the native engine's kept prefix is dropped before every call, so
neither reuses work across calls). Prints generated tokens/s of each engine and the ratio continuous_batching /
native, for the device the model is on (``--device auto``: cuda when there is one, then bf16 under ``--dtype
auto``). Speed only: the prompts are random token ids, so the completions mean nothing, and a model with random
weights (any folder with a config.json and a tokenizer) measures the same as its trained one for lengths that
reach ``--max-new-tokens``.
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="embedded:smollm2-135m-instruct")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--n", type=int, default=6)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--shared-len", type=int, default=448)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if not 0 <= args.shared_len < args.prompt_len:
        ap.error("--shared-len must be at least 0 and below --prompt-len")

    import torch

    from evolvekit.llm.base import SamplingParams
    from evolvekit.llm.continuous import ContinuousBatchingLLM
    from evolvekit.llm.local import LocalLLM

    local = LocalLLM(args.model, device=args.device, dtype=args.dtype)
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

    rows: dict[str, dict] = {}
    for name, engine in (("native", local), ("continuous_batching", ContinuousBatchingLLM(local))):
        timed(engine, seed=0)  # warm-up: kernels, allocator, paged cache
        runs = [timed(engine, seed=1 + r) for r in range(args.repeats)]
        seconds = sum(dt for dt, _ in runs)
        tokens = sum(n for _, n in runs)
        rows[name] = {
            "seconds_per_call": round(seconds / args.repeats, 3),
            "generated_tokens_per_call": round(tokens / args.repeats, 1),
            "tokens_per_s": round(tokens / seconds, 1),
        }
        print(f"{name:>20}: {rows[name]}", flush=True)
    out = {
        "model": args.model,
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
        "continuous_batching_vs_native": round(
            rows["continuous_batching"]["tokens_per_s"] / rows["native"]["tokens_per_s"], 2
        ),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
