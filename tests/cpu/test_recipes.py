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
