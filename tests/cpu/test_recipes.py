"""The recipes (configs/recipes/): each validates as `config validate` does, and sets the paper's values
(issue 80: AgentEvolver's own experiment as a config a user can start from)."""

from pathlib import Path

import pytest

from evolvekit.config import load_config, paper_departures

RECIPES = sorted((Path(__file__).resolve().parents[2] / "configs" / "recipes").glob("*.yaml"))


def test_there_is_the_papers_experiment_among_the_recipes():
    assert "agentevolver_bfcl_gpu.yaml" in [p.name for p in RECIPES]


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_a_recipe_validates_and_departs_from_no_paper_value(recipe):
    cfg = load_config(recipe)
    assert paper_departures(cfg) == {}


def test_the_bfcl_recipe_has_the_papers_scale_out_pieces():
    cfg = load_config(next(p for p in RECIPES if p.name == "agentevolver_bfcl_gpu.yaml"))
    assert cfg.models.policy.engine == "vllm" and cfg.train.sharding == "fsdp2"
    assert cfg.env.name == "bfcl" and cfg.env.family is None and cfg.train.eval_k == 8
    assert {cfg.models.judge.backend, cfg.models.attributor.backend, cfg.models.summarizer.backend} == {"openai"}
    assert cfg.questioning.enabled and cfg.navigating.enabled and cfg.attributing.enabled


# ---- each recipe starts: one iteration of a shrunken copy on this CPU (issue 80.2) ----------------------------------

ROOT = Path(__file__).resolve().parents[2]
ROLES = ("explorer", "synthesizer", "judge", "attributor", "summarizer")


@pytest.fixture(scope="module")
def tiny_qwen(tmp_path_factory):
    from evolvekit.llm.tiny import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny-qwen2"), arch="qwen2")


def _shrunk(served, tiny_qwen, out: Path, recipe: Path) -> list[str]:
    """The CPU-sized copy: the tiny Qwen2 policy on the native engine without sharding, every served role at the
    stand-in, one iteration of one task, short episodes."""
    url, path = served
    sets = [f"models.policy.model={tiny_qwen}", "models.policy.engine=native", "models.policy.dtype=float32"]
    sets += ["models.policy.device=cpu", "models.policy.max_new_tokens=24", "train.sharding=replicate"]
    cfg = load_config(recipe)
    for role in [r for r in ROLES if getattr(cfg.models, r).backend == "openai"]:  # the recipe's served roles
        sets += [f"models.{role}.base_url={url}", f"models.{role}.model={path}", f"models.{role}.max_new_tokens=48"]
    sets += ["train.iterations=1", "train.tasks_per_iteration=1", "rollout.group_size=2", "rollout.max_steps=2"]
    sets += ["train.ppo_epochs=1", "questioning.explore_runs=1", "questioning.explore_steps=2", "train.eval_k=1"]
    sets += ["train.eval_tasks=1", f"run.out_dir={out}", "questioning.synthetic_tasks=1", "env.tool_rendering=compact"]
    # λ = 0: the run trains on tasks it is given whatever the served 135M helpers keep (it may keep none: a served
    # explorer has no decoding scaffold), so that one iteration always runs; synthesis still runs on the served roles
    sets += ["questioning.hybrid_lambda=0"]
    return sets


def _run(recipe: Path, sets: list[str]):
    import subprocess
    import sys

    args = [a for s in sets for a in ("--set", s)]
    return subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", "run", str(recipe), *args, "--json", "--no-progress"],
        capture_output=True, text=True, timeout=840, cwd=ROOT,
    )  # fmt: skip


@pytest.mark.slow
def test_the_bfcl_recipe_starts_one_iteration_of_a_shrunken_copy(served, tiny_qwen, tmp_path):
    recipe = next(p for p in RECIPES if p.name == "agentevolver_bfcl_gpu.yaml")
    # BFCL's 4-tool MathAPI family: short prompts for the served 135M helpers
    res = _run(recipe, [*_shrunk(served, tiny_qwen, tmp_path, recipe), "env.family=arith"])
    assert res.returncode == 0, res.stderr[-3000:]
    import json

    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["iterations"] == 1
    # the served explorer and synthesizer are said to run without the scaffold (a served model cannot be constrained)
    assert "the explorer (" in res.stderr and "runs without the decoding scaffold" in res.stderr


@pytest.mark.slow
def test_the_mcp_recipe_starts_one_iteration_of_a_shrunken_copy(served, tiny_qwen, tmp_path):
    """Your MCP server (npm's filesystem server here) with the served helpers: one iteration on a tasks file."""
    import json

    from evolvekit.env.mcp import mcp_available

    if mcp_available() is not None or not (ROOT / ".venv/mcp-node/node_modules/.bin/mcp-server-filesystem").exists():
        pytest.skip("npm's MCP filesystem server is not installed (scripts/setup.sh)")
    tasks = tmp_path / "tasks.jsonl"
    rows = [
        {"task_id": f"box{i}", "env_name": "mcp", "query": f"Make a folder /sandbox/box{i}.", "source": "synthetic",
         "reference_solution": [[{"name": "create_directory", "arguments": {"path": f"/sandbox/box{i}"}}]]}
        for i in range(6)
    ]  # fmt: skip
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    recipe = next(p for p in RECIPES if p.name == "mcp_served.yaml")
    given = [f"env.mcp.tasks_file={tasks}", "env.mcp.test_share=0.3"]
    res = _run(recipe, [*_shrunk(served, tiny_qwen, tmp_path, recipe), *given])
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["iterations"] == 1
    assert "the explorer (" in res.stderr and "runs without the decoding scaffold" in res.stderr
