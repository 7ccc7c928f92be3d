"""The self-made worked examples' exploration on configs/mcp_filesystem.yaml, every step printed: the explorer the
examples use (the policy's model unless ``models.explorer`` is set), its seed and scaffold, 2 runs of 4 steps, on a
sandbox that shows no example. Extra arguments are config overrides (``section.key=value``).

    PYTHONPATH=src .venv/bin/python benchmarks/audits/mcp_self_examples_probe.py

Results: benchmarks/results/mcp_fs_gate.md."""

from __future__ import annotations

import sys


def main() -> None:
    from evolvekit.config import load_config
    from evolvekit.engine.registry import seam
    from evolvekit.env.registry import make_env
    from evolvekit.llm.factory import role_llm, role_llm_or, sampling_for
    from evolvekit.questioning.explore import Explorer
    from evolvekit.questioning.pipeline import sandbox_for, scaffold_on
    from evolvekit.questioning.self_examples import EXAMPLE_RUNS, EXAMPLE_STEPS, EXAMPLES_SEED

    cfg = load_config("configs/mcp_filesystem.yaml", ["env.worked_examples=self", *sys.argv[1:]])
    q = cfg.questioning
    llm = role_llm_or(cfg.models, "explorer", role_llm(cfg.models, "policy"))
    explorer = Explorer(
        seam(llm),
        sampling_for(cfg.models.explorer, seed=cfg.run.seed + EXAMPLES_SEED),
        q.n_breadth,
        q.n_depth,
        cfg.env.tool_rendering,
        scaffold=scaffold_on(q.scaffold, llm),
        show_start=q.explore_state,
    )
    print("scaffold", explorer.scaffold)
    bare = cfg.env.model_copy(update={"worked_examples": "none"})
    traces = explorer.explore(lambda: make_env(bare), sandbox_for(cfg.env), EXAMPLE_RUNS, EXAMPLE_STEPS)
    for trace in traces:
        print("TRACE", trace.error)
        for s in trace.steps:
            print(" STEP", s.index, s.ok, repr(s.action_text[:300]), "->", repr(s.observation[:300]))


if __name__ == "__main__":
    main()
