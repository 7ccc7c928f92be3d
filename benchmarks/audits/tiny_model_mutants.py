"""The tests that moved to the tiny model (issue 97.3), each run on a mutant of the fault it guards: a moved test
that passes a broken wiring is no test. Each mutant is one textual change to a fresh copy of the committed tree
(benchmarks/audits/mutation.py: copy_checkout); the named test (slow ones included) then runs on that copy.

    nice .venv/bin/python benchmarks/audits/tiny_model_mutants.py > runs/tiny_model_mutants.log 2>&1 &

Writes benchmarks/results/tiny_model_mutants.md. Run it alone on the machine, never in CI.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hand_mutants import Mutant, run  # noqa: E402
from mutation import ROOT, copy_checkout  # noqa: E402

T = "tests/cpu/"

MUTANTS = (
    # an interrupted evaluation continues from its journal: the episodes it holds are not run again
    Mutant("eval journal ignored", "agent/evaluate.py", "todo = [i for i in range(len(jobs)) if i not in done]",
           "todo = list(range(len(jobs)))", (T + "test_eval_cli.py::test_eval_json_reports_avg_and_best",)),
    # a panel re-run refuses other weights than the panel's
    Mutant("panel weights unchecked", "cli/eval_cmd.py",
           "if not policy and weights_sha256(cfg.models.policy.model) != panel.model_sha256:",
           "if False and weights_sha256(cfg.models.policy.model) != panel.model_sha256:",
           (T + "test_eval_cli.py::test_a_panel_reruns_exactly_and_says_so",)),
    # BFCL's leaderboard: one attempt per task
    Mutant("leaderboard attempts", "cli/eval_cmd.py", "cfg, tasks, 1, where, experiences, estimate,",
           "cfg, tasks, 2, where, experiences, estimate,",
           (T + "test_eval_cli.py::test_the_bfcl_leaderboard_score_is_bfcls_own",)),
    # what a served explorer or synthesizer loses is said once per role
    Mutant("served scaffold said every time", "questioning/pipeline.py",
           'if mode == "auto" and not constrained and role not in _UNSCAFFOLDED:',
           'if mode == "auto" and not constrained:',
           (T + "test_served_roles.py::test_a_served_explorer_synthesizer_and_judge_work_as_documented",)),
    # a served role is the server's (the recipes' helpers), not a model loaded in the run's process
    Mutant("served roles built locally", "llm/factory.py", 'if cfg.backend == "openai":', 'if cfg.backend == "served":',
           (T + "test_recipes.py::test_the_bfcl_recipe_starts_one_iteration_of_a_shrunken_copy",
            T + "test_recipes.py::test_the_mcp_recipe_starts_one_iteration_of_a_shrunken_copy")),
    # an MCP task file's train split is the tasks outside the test share
    Mutant("mcp split inverted", "env/mcp.py", '== (split == "test")][: cfg.family_tasks]',
           '!= (split == "test")][: cfg.family_tasks]',
           (T + "test_mcp.py::test_self_questioning_on_an_mcp_server_then_training_on_what_it_kept",)),
    # a synthesized task the check passes with no call is dropped (well-posed tasks only)
    Mutant("trivial tasks kept", "questioning/pipeline.py", "if ok and passes_without_acting(t, make_env):",
           "if False and passes_without_acting(t, make_env):",
           (T + "test_examples.py::test_a_run_on_a_plugin_written_from_the_docs_keeps_and_trains_on_its_own_tasks",)),
    # the extractor's samples carry Evolving-RL's entropy term (Eq. 3)
    Mutant("extractor entropy dropped", "navigating/evolving_stage.py", '"entropy_coef": e.entropy_coef,',
           '"entropy_coef": 0.0,', (T + "test_evolving_rl.py::test_co_evolution_run_offline_from_the_command_line",)),
    # a run's metrics count its episodes' steps
    Mutant("steps miscounted", "orchestrator/metrics.py", 'prefix + "steps_mean": len(steps) / n,',
           'prefix + "steps_mean": len(steps) / n / 2,',
           (T + "test_scienceworld.py::test_eval_and_a_short_run_from_the_command_line",
            T + "test_examples.py::test_the_docs_commands_run_on_the_counter_environment")),
)  # fmt: skip


def main() -> None:
    only = set(sys.argv[1:])  # mutant names: run only these (the file then lists only them)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    copy = ROOT / "runs" / "tiny_model_mutants"
    copy_checkout(copy)
    rows = []
    for m in [m for m in MUTANTS if not only or m.name in only]:
        verdict, seconds = run(m, copy, ())  # slow tests included, every one run
        print(f"{m.name}: {verdict} ({seconds:.0f} s)", flush=True)
        tests = ", ".join(t.split("::")[-1] for t in m.tests)
        rows.append(f"| {m.name} | `{m.path}` | `{m.old}` → `{m.new}` | {tests} | {verdict} |")
    killed = sum("killed" in r for r in rows)
    out = ROOT / "benchmarks" / "results" / "tiny_model_mutants.md"
    out.write_text(
        f"$ nice .venv/bin/python benchmarks/audits/tiny_model_mutants.py   # code: commit {commit.stdout.strip()}\n\n"
        "# The tests moved to the tiny model, each on a mutant of the fault it guards (issue 97.3)\n\n"
        f"**{killed} of {len(rows)} killed.** Each mutant is one change to a fresh copy of the committed tree; the "
        "named tests run on it.\n\n| mutant | file | change | tests | verdict |\n|---|---|---|---|---|\n"
        + "\n".join(rows) + "\n"
    )  # fmt: skip
    print(f"{out}: {killed} of {len(rows)} killed")


if __name__ == "__main__":
    main()
