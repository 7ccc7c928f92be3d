"""Where a step of the native engine's continuous batch goes, beside transformers' own ``generate``.

    python3 benchmarks/speed/engine_step_profile.py --random-arch qwen2.5-0.5b --prompts 32 --n 8 --max-new-tokens 32

Times, with the device synchronised around each part: ``DecodeBatch.add`` (rows join: the shared prefix copied
into each row's slot off CPU), the first step (the prompts' unshared tails prefilled), and the mean decode step,
split into the model forward (``ragged_forward``), sampling (``sample_next``) and the rest (log-probabilities,
per-row bookkeeping); then ``model.generate``'s mean time per new token on the same batch; then a
``torch.profiler`` table of a few decode steps (self CPU time: where the host spends a step). Speed only, as in
benchmarks/speed/engine_throughput.py, whose random-weight models (``--random-arch``) this reuses.
"""

from __future__ import annotations

import argparse
import json
import time

from engine_throughput import ARCHS, add_batch_args, random_model, sample_with_generate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--random-arch", choices=sorted(ARCHS), required=True)
    add_batch_args(ap, prompts=32, n=8, max_new_tokens=32)
    ap.add_argument("--profile-steps", type=int, default=3)
    args = ap.parse_args()

    import torch

    import evolvekit.llm.batcher as batcher
    from evolvekit.llm.base import SamplingParams
    from evolvekit.llm.embedded import smollm2_folder
    from evolvekit.llm.local import LocalLLM

    hf_model, tok = random_model(
        args.random_arch, args.tokenizer or str(smollm2_folder()), args.layers, args.device, args.dtype
    )
    llm = LocalLLM(hf_model=hf_model, tokenizer=tok, device=args.device, dtype=args.dtype)
    cuda = str(llm.device).startswith("cuda")

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    g = torch.Generator().manual_seed(0)
    vocab = len(tok)
    shared = torch.randint(10, vocab - 10, (args.shared_len,), generator=g).tolist()
    prompts = [
        shared + torch.randint(10, vocab - 10, (args.prompt_len - args.shared_len,), generator=g).tolist()
        for _ in range(args.prompts)
    ]
    items = [((i, s), p) for i, p in enumerate(prompts) for s in range(args.n)]
    params = SamplingParams(n=args.n, temperature=1.0, max_new_tokens=args.max_new_tokens, seed=1)

    parts = {"forward": 0.0, "sample": 0.0}
    timing = {"on": False}

    def timed(name, fn):
        def wrapper(*a, **k):
            if not timing["on"]:
                return fn(*a, **k)
            sync()
            t0 = time.perf_counter()
            out = fn(*a, **k)
            sync()
            parts[name] += time.perf_counter() - t0
            return out

        return wrapper

    batcher.ragged_forward = timed("forward", batcher.ragged_forward)
    batcher.sample_next = timed("sample", batcher.sample_next)

    def one_call(profile: bool) -> dict:
        llm.reset_prefix_cache()
        batch = batcher.DecodeBatch(llm, params)
        sync()
        t0 = time.perf_counter()
        batch.add(items)
        sync()
        t_add = time.perf_counter() - t0
        t0 = time.perf_counter()
        batch.step()
        sync()
        t_first = time.perf_counter() - t0
        parts["forward"] = parts["sample"] = 0.0
        timing["on"] = True
        steps, t_decode = 0, 0.0
        table = ""
        while batch.rows and steps < args.max_new_tokens - 1 - (args.profile_steps if profile else 0):
            t0 = time.perf_counter()
            batch.step()
            sync()
            t_decode += time.perf_counter() - t0
            steps += 1
        timing["on"] = False
        if profile and batch.rows:
            acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
            with torch.profiler.profile(activities=acts) as prof:
                for _ in range(args.profile_steps):
                    batch.step()
                sync()
            avg = prof.key_averages()
            table = avg.table(sort_by="self_cpu_time_total", row_limit=15, max_name_column_width=48)
            if cuda:
                table += "\n" + avg.table(sort_by="self_cuda_time_total", row_limit=12, max_name_column_width=48)
        per = max(steps, 1)
        return {
            "rows": len(items),
            "add_s": round(t_add, 4),
            "first_step_s": round(t_first, 4),
            "decode_steps": steps,
            "decode_step_ms": round(1000 * t_decode / per, 2),
            "forward_ms": round(1000 * parts["forward"] / per, 2),
            "sample_ms": round(1000 * parts["sample"] / per, 2),
            "rest_ms": round(1000 * (t_decode - parts["forward"] - parts["sample"]) / per, 2),
            "table": table,
        }

    def hf_generate(new: int) -> float:
        ids = torch.tensor(prompts, device=llm.device)
        sync()
        t0 = time.perf_counter()
        sample_with_generate(llm.model, ids, args.n, new, tok.pad_token_id or tok.eos_token_id, exact=True)
        sync()
        return time.perf_counter() - t0

    one_call(profile=False)  # warm-up
    res = one_call(profile=True)
    hf_generate(args.max_new_tokens)  # warm-up
    t_long, t_one = hf_generate(args.max_new_tokens), hf_generate(1)
    res["hf_generate_prefill_and_first_s"] = round(t_one, 4)
    res["hf_generate_decode_step_ms"] = round(1000 * (t_long - t_one) / (args.max_new_tokens - 1), 2)
    table = res.pop("table")
    print(table)
    print(json.dumps({"model": f"random {args.random_arch}", "device": str(llm.device), **res}))


if __name__ == "__main__":
    main()
