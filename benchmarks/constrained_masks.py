"""Guided JSON decoding: evolvekit's lm-format-enforcer constraint against llguidance, per generated token.

    .venv/bin/pip install -e '.[guidance]' -c constraints.txt     # llguidance, pinned (not installed by setup.sh)
    .venv/bin/python benchmarks/constrained_masks.py --tasks 20

The explorer scaffold decodes a tool's arguments under its JSON schema (``llm/constrain.py: SchemaConstraint``, a
character-level parser walked over the tokenizer's vocabulary in Python): the hottest Python code of a traced
quickstart (issue 54). Here both libraries follow the same token sequences: every reference call of the first
``--tasks`` BFCL ``multi_turn_base`` tasks, its arguments written as compact JSON and tokenized by the embedded
SmolLM2 tokenizer, under that tool's parameter schema (``json_schema``, strings capped at 64 characters, as the
explorer does). For each token: the time to advance past the previous token and compute the next allowed set
(evolvekit: ``advance`` + ``allowed()``, a list of token ids; llguidance: ``consume_token`` + a filled bitmask),
and whether the real next token is in it. Prints one-off set-up times (vocabulary preparation, per-schema
construction) and per-token medians. BFCL's references are read here only as realistic JSON to decode; nothing on
the training side runs this.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=20)
    args = ap.parse_args()

    import llguidance
    import llguidance.hf
    import llguidance.torch as lltorch
    from transformers import AutoTokenizer

    from evolvekit.env.bfcl import data
    from evolvekit.env.bfcl.env import BfclEnv
    from evolvekit.llm.constrain import SchemaConstraint, SchemaVocabulary, json_schema
    from evolvekit.llm.embedded import smollm2_folder

    tok = AutoTokenizer.from_pretrained(str(smollm2_folder()))
    eos = {tok.eos_token_id}
    t0 = time.perf_counter()
    vocab = SchemaVocabulary(tok, eos)
    setup_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    lltok = llguidance.hf.from_tokenizer(tok)
    setup_ll = time.perf_counter() - t0
    mask = lltorch.allocate_token_bitmask(1, lltok.vocab_size)

    cases = []
    for task in data.load_tasks("multi_turn_base")[: args.tasks]:
        env = BfclEnv()
        tools = {t.name: t for t in env.reset(task).tools}
        env.close()
        for turn in task.reference_solution:
            for call in turn:
                if call.name in tools:
                    params = dict(tools[call.name].parameters or {})
                    params.setdefault("type", "object")
                    params.setdefault("properties", {})
                    text = json.dumps(call.arguments, separators=(",", ":"))
                    cases.append((params, tok.encode(text, add_special_tokens=False)))

    ours_ms, ll_ms, build_ours, build_ll = [], [], [], []
    ours_ok = ll_ok = tokens = 0
    for params, ids in cases:
        t0 = time.perf_counter()
        c = SchemaConstraint(vocab, params)
        build_ours.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        m = llguidance.LLMatcher(lltok, llguidance.LLMatcher.grammar_from_json_schema(json_schema(params, 64)))
        build_ll.append(time.perf_counter() - t0)
        ours_live, ll_live = True, True
        for t in ids:
            tokens += 1
            if ours_live:
                t0 = time.perf_counter()
                allowed = set(c.allowed())
                ours_ms.append(1000 * (time.perf_counter() - t0))
                if t in allowed:
                    ours_ok += 1
                    t0 = time.perf_counter()
                    nxt = c.advance(t)
                    ours_ms[-1] += 1000 * (time.perf_counter() - t0)
                    ours_live = isinstance(nxt, SchemaConstraint)
                    c = nxt if ours_live else c
                else:
                    ours_live = False
            if ll_live:
                t0 = time.perf_counter()
                lltorch.fill_next_token_bitmask(m, mask, 0)
                ll_ms.append(1000 * (time.perf_counter() - t0))
                if (int(mask[0, t // 32]) >> (t % 32)) & 1:
                    ll_ok += 1
                    t0 = time.perf_counter()
                    m.consume_token(t)
                    ll_ms[-1] += 1000 * (time.perf_counter() - t0)
                    ll_live = not m.is_error()
                else:
                    ll_live = False

    def q(xs: list[float], p: float) -> float:
        return statistics.quantiles(xs, n=100)[int(p) - 1] if len(xs) > 1 else (xs[0] if xs else 0.0)

    out = {
        "calls": len(cases),
        "tokens": tokens,
        "vocabulary_setup_s": {"evolvekit": round(setup_ours, 2), "llguidance": round(setup_ll, 2)},
        "schema_build_ms_median": {
            "evolvekit": round(1000 * statistics.median(build_ours), 3),
            "llguidance": round(1000 * statistics.median(build_ll), 3),
        },
        "per_token_ms_median": {
            "evolvekit": round(statistics.median(ours_ms), 3),
            "llguidance": round(statistics.median(ll_ms), 3),
        },
        "per_token_ms_p90": {"evolvekit": round(q(ours_ms, 90), 3), "llguidance": round(q(ll_ms, 90), 3)},
        "per_token_ms_mean": {
            "evolvekit": round(statistics.fmean(ours_ms), 3),
            "llguidance": round(statistics.fmean(ll_ms), 3),
        },
        "real_token_allowed": {"evolvekit": f"{ours_ok}/{tokens}", "llguidance": f"{ll_ok}/{tokens}"},
    }
    out["mean_ratio_evolvekit_over_llguidance"] = round(
        out["per_token_ms_mean"]["evolvekit"] / max(out["per_token_ms_mean"]["llguidance"], 1e-9), 1
    )
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
