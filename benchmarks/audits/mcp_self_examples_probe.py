"""The self-made worked examples' exploration on configs/mcp_filesystem.yaml, every step printed: the explorer the
examples use (the policy's model unless ``models.explorer`` is set), its seed and scaffold, 2 runs of 4 steps, on a
sandbox that shows no example. Extra arguments are config overrides (``section.key=value``).

    PYTHONPATH=src .venv/bin/python benchmarks/audits/mcp_self_examples_probe.py

Results: benchmarks/results/mcp_fs_gate.md."""

from __future__ import annotations

import sys


def main() -> None:
    from evolvekit.config import load_config
    from evolvekit.env.registry import make_env
    from evolvekit.llm.factory import role_llm, role_llm_or
    from evolvekit.questioning.pipeline import sandbox_for
    from evolvekit.questioning.self_examples import EXAMPLE_RUNS, EXAMPLE_STEPS, examples_explorer

    cfg = load_config("configs/mcp_filesystem.yaml", ["env.worked_examples=self", *sys.argv[1:]])
    explorer = examples_explorer(cfg, role_llm_or(cfg.models, "explorer", role_llm(cfg.models, "policy")))
    print("scaffold", explorer.scaffold)
    bare = cfg.env.model_copy(update={"worked_examples": "none"})
    traces = explorer.explore(lambda: make_env(bare), sandbox_for(cfg.env), EXAMPLE_RUNS, EXAMPLE_STEPS)
    for trace in traces:
        print("TRACE", trace.error)
        for s in trace.steps:
            print(" STEP", s.index, s.ok, repr(s.action_text[:300]), "->", repr(s.observation[:300]))


if __name__ == "__main__":
    main()
