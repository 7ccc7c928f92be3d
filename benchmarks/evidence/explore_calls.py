"""Explorer call validity: how many exploration steps are parseable calls, and how many the environment executed.

    .venv/bin/python benchmarks/evidence/explore_calls.py env.family=arith
    .venv/bin/python benchmarks/evidence/explore_calls.py env.name=bfcl

Runs the self-questioning explorer (embedded SmolLM2-135M, scaffold on, T = 1, seed 0) for 4 parallel runs x 6
steps (N_b = 3 breadth steps, then depth steps) in the configured sandbox and prints one JSON line: steps, parsed
calls, successful calls (executed without an error or a refusal), and the rest of the parsed calls (refused by the
backend or rejected by the argument check), also per tool. Arguments are config overrides (``--set`` style).

It also prints how varied the successful calls' numeric arguments are (``argument_variety``): the share of calls with
a negative number, the share with two equal numbers (such as ``multiply(-1, -1)``), and the share of distinct calls.
Before a single space was allowed in constrained arguments, the 135M explorer wrote almost only negative numbers
and repeated one value in half its calls, and its synthesizer then wrote requests with other numbers
(benchmarks/results/synthetic_task_audit.md).
"""

from __future__ import annotations

import json
import sys
import time


def argument_variety(calls) -> dict[str, float | int]:
    """Shares over the calls that have numeric arguments: with a negative one, with two equal ones, distinct."""
    numeric = [c for c in calls if any(_is_number(v) for v in c.arguments.values())]
    if not numeric:
        return {"numeric_calls": 0}
    values = [[v for v in c.arguments.values() if _is_number(v)] for c in numeric]
    n = len(numeric)
    return {
        "numeric_calls": n,
        "with_negative": round(sum(any(v < 0 for v in vs) for vs in values) / n, 3),
        "with_equal_values": round(sum(len(set(vs)) < len(vs) for vs in values) / n, 3),
        "distinct": round(len({(c.name, json.dumps(c.arguments, sort_keys=True)) for c in numeric}) / n, 3),
    }


def per_tool(steps) -> dict[str, str]:
    """Per tool: "successful/called" over the steps' calls (on a file system, whether cd, cat and mv named
    something that exists)."""
    called: dict[str, list[int]] = {}
    for s in steps:
        for c in s.tool_calls:
            called.setdefault(c.name, [0, 0])
            called[c.name][0] += int(s.ok)
            called[c.name][1] += 1
    return {name: f"{ok}/{n}" for name, (ok, n) in sorted(called.items())}


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def main() -> None:
    from evolvekit.config import load_config
    from evolvekit.engine.registry import seam
    from evolvekit.env.registry import make_env
    from evolvekit.llm.base import SamplingParams
    from evolvekit.llm.local import LocalLLM
    from evolvekit.questioning.explore import Explorer
    from evolvekit.questioning.pipeline import sandbox_for

    cfg = load_config(None, sys.argv[1:])
    llm = LocalLLM(cfg.models.explorer.model, device="cpu")
    q = cfg.questioning
    explorer = Explorer(
        seam(llm),
        SamplingParams(temperature=1.0, max_new_tokens=96, seed=0),
        q.n_breadth,
        q.n_depth,
        cfg.env.tool_rendering,
        scaffold=True,
    )
    t0 = time.perf_counter()
    traces = explorer.explore(lambda: make_env(cfg.env), sandbox_for(cfg.env), 4, 6)
    steps = [s for t in traces for s in t.steps]
    print(
        json.dumps(
            {
                "overrides": sys.argv[1:],
                "seconds": round(time.perf_counter() - t0, 1),
                "steps": len(steps),
                "parsed_calls": sum(bool(s.tool_calls) for s in steps),
                "successful": sum(s.ok for s in steps),
                "failed_calls": sum(bool(s.tool_calls) and not s.ok for s in steps),
                "argument_variety": argument_variety([c for s in steps if s.ok for c in s.tool_calls]),
                "per_tool": per_tool(steps),
            }
        )
    )


if __name__ == "__main__":
    main()
