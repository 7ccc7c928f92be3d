"""The self-made worked examples' exploration on an MCP config (default configs/mcp_filesystem.yaml), every step
printed: the explorer the examples use (the policy's model unless ``models.explorer`` is set), its seed and
scaffold, 2 runs of 4 steps, on a sandbox that shows no example. A first argument ending in ``.yaml`` is the config;
the others are config overrides (``section.key=value``).

    PYTHONPATH=src .venv/bin/python benchmarks/audits/mcp_self_examples_probe.py
    PYTHONPATH=src .venv/bin/python benchmarks/audits/mcp_self_examples_probe.py configs/mcp_git.yaml

Results: benchmarks/results/mcp_fs_gate.md."""

from __future__ import annotations

import sys


def main() -> None:
    from evolvekit.config import load_config
    from evolvekit.env.registry import make_env
    from evolvekit.llm.factory import role_llm, role_llm_or
    from evolvekit.questioning.pipeline import sandbox_for
    from evolvekit.questioning.self_examples import EXAMPLE_RUNS, EXAMPLE_STEPS, examples_explorer

    args = sys.argv[1:]
    path = args.pop(0) if args and args[0].endswith(".yaml") else "configs/mcp_filesystem.yaml"
    cfg = load_config(path, ["env.worked_examples=self", *args])
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
