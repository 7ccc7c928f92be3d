"""Guided JSON decoding per token, before and after the swap to llguidance (issue 54), paired in one process.

    .venv/bin/pip install -e '.[lmfe]' -c constraints.txt     # lm-format-enforcer, for "before" only
    .venv/bin/python benchmarks/speed/constrained_masks.py --tasks 20

The explorer scaffold decodes a tool's arguments under its JSON schema (``llm/constrain.py: SchemaConstraint``).
Before: lm-format-enforcer's character-level parser walked over the tokenizer's vocabulary in Python (the
constraint as it was at commit c81b8b8, read from git), with evolvekit's rules for small models as Python list
filters. After: llguidance's token mask, with the same rules as boolean masks. Both follow the same token sequences:
every reference call of the first ``--tasks`` BFCL ``multi_turn_base`` tasks, its arguments written as JSON (compact,
and with a space after ":" and ",") and tokenized by the embedded SmolLM2 tokenizer, under that tool's parameter
schema. Per token: the time to advance past the previous token and give the next allowed ids (what the decode batch
reads), whether the two allowed sets are equal, where they differ (the first three differing tokens of each kind),
and whether the real next token is allowed. BFCL's references are read here only as realistic JSON to decode;
nothing on the training side runs this.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

BEFORE = "c81b8b8"  # the last commit whose SchemaConstraint used lm-format-enforcer


def load_before(root: Path):
    """``llm/constrain.py`` as it was at ``BEFORE``, as a module of its own."""
    text = subprocess.run(
        ["git", "-C", str(root), "show", f"{BEFORE}:src/evolvekit/llm/constrain.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = Path("/tmp") / f"evolvekit_constrain_{BEFORE}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("constrain_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["constrain_before"] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=20)
    args = ap.parse_args()

    from transformers import AutoTokenizer

    from evolvekit.env.bfcl import data
    from evolvekit.env.bfcl.env import BfclEnv
    from evolvekit.llm import constrain as after
    from evolvekit.llm.embedded import smollm2_folder

    before = load_before(Path(__file__).resolve().parents[2])
    tok = AutoTokenizer.from_pretrained(str(smollm2_folder()))
    eos = {tok.eos_token_id}
    t0 = time.perf_counter()
    vocab_before = before.SchemaVocabulary(tok, eos)
    t1 = time.perf_counter()
    vocab_after = after.SchemaVocabulary(tok, eos)
    setup = {"before": round(t1 - t0, 2), "after": round(time.perf_counter() - t1, 2)}

    cases = []
    for task in data.load_tasks("multi_turn_base")[: args.tasks]:
        env = BfclEnv()
        tools = {t.name: t for t in env.reset(task).tools}
        env.close()
        for turn in task.reference_solution or []:
            for call in turn:
                if call.name in tools:
                    params = dict(tools[call.name].parameters or {})
                    params.setdefault("type", "object")
                    params.setdefault("properties", {})
                    for seps in ((",", ":"), (", ", ": ")):
                        text = json.dumps(call.arguments, separators=seps)
                        cases.append((params, tok.encode(text, add_special_tokens=False)))

    ms: dict[str, list[float]] = {"before": [], "after": []}
    build: dict[str, list[float]] = {"before": [], "after": []}
    real = Counter()
    same = tokens = 0
    differences: Counter = Counter()

    def show(ids) -> str:
        return ", ".join(sorted(repr(tok.decode([i])) for i in list(ids)[:3]))

    for params, ids in cases:
        t0 = time.perf_counter()
        b = before.SchemaConstraint(vocab_before, params)
        t1 = time.perf_counter()
        a = after.SchemaConstraint(vocab_after, params)
        t2 = time.perf_counter()
        build["before"].append(t1 - t0)
        build["after"].append(t2 - t1)
        for t in ids:
            tokens += 1
            t0 = time.perf_counter()
            ids_b = b.allowed()  # a list of ids
            t1 = time.perf_counter()
            ids_a = a.allowed()  # a tensor of ids
            t2 = time.perf_counter()
            ms["before"].append(1000 * (t1 - t0))
            ms["after"].append(1000 * (t2 - t1))
            allowed_b, allowed_a = set(ids_b), set(ids_a.tolist())  # not timed: the decode batch takes either
            same += allowed_a == allowed_b
            if allowed_a != allowed_b:
                only_b, only_a = allowed_b - allowed_a, allowed_a - allowed_b
                differences[(show(only_b), show(only_a))] += 1
            real["before"] += t in allowed_b
            real["after"] += t in allowed_a
            if t not in allowed_a or t not in allowed_b:
                break
            t0 = time.perf_counter()
            nb = b.advance(t)
            t1 = time.perf_counter()
            na = a.advance(t)
            t2 = time.perf_counter()
            ms["before"][-1] += 1000 * (t1 - t0)
            ms["after"][-1] += 1000 * (t2 - t1)
            if nb is not b or na is not a:  # the value is complete (or a dead end) for either
                break

    def q(xs: list[float], p: int) -> float:
        return statistics.quantiles(xs, n=100)[p - 1] if len(xs) > 1 else (xs[0] if xs else 0.0)

    out = {
        "calls": len(cases),
        "tokens": tokens,
        "vocabulary_setup_s": setup,
        "schema_build_ms_median": {k: round(1000 * statistics.median(v), 3) for k, v in build.items()},
        "per_token_ms_median": {k: round(statistics.median(v), 3) for k, v in ms.items()},
        "per_token_ms_p90": {k: round(q(v, 90), 3) for k, v in ms.items()},
        "per_token_ms_mean": {k: round(statistics.fmean(v), 3) for k, v in ms.items()},
        "real_token_allowed": {k: f"{real[k]}/{tokens}" for k in ("before", "after")},
        "same_allowed_set": f"{same}/{tokens}",
        "differences (only before | only after): steps": [
            f"{b or '-'} | {a or '-'}: {n}" for (b, a), n in differences.most_common(12)
        ],
    }
    out["mean_ratio_before_over_after"] = round(
        out["per_token_ms_mean"]["before"] / max(out["per_token_ms_mean"]["after"], 1e-9), 1
    )
    print(json.dumps(out, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
