"""orchestrator/build.py's wiring against recorders: what each builder hands its collaborator from the config (issue 53:
written from the builder's mutation look). The collaborators are replaced inside these unit tests only."""

from __future__ import annotations

from evolvekit.config import load_config
from evolvekit.llm.base import Completion
from evolvekit.types import Task


class _Policy:
    name = "scripted"

    def chat(self, conversations, params):
        return [[Completion(text="Done.")] for _ in conversations]


def test_the_pass_probe_runs_the_policy_with_the_runs_rendering_template_seed_and_k(monkeypatch):
    from evolvekit.agent import evaluate
    from evolvekit.orchestrator.build import pass_probe

    cfg = load_config(
        None,
        [
            "questioning.pass_filter_samples=3",
            "env.tool_rendering=json",
            "rollout.template=reasoning",
            "run.seed=7",
        ],
    )
    asked: list = []

    class _Report:
        per_task = [{"scores": [1.0, 0.0, 1.0]}]

    def record(tasks, make_env, engine, rollout, params, k, rendering="compact", show_progress=True, **kw):
        asked.append((list(tasks), rollout, params, k, rendering, show_progress, kw))
        return _Report(), []

    monkeypatch.setattr(evaluate, "evaluate_policy", record)
    probe = pass_probe(cfg, _Policy(), lambda: None)
    task = Task(env_name="bfcl", query="What is 2 plus 5?")
    assert probe([task]) == [[1.0, 0.0, 1.0]]
    ((tasks, rollout, params, k, rendering, show_progress, kw),) = asked
    assert tasks == [task] and k == 3 and rendering == "json" and show_progress is False
    assert rollout is cfg.rollout and params.seed == 7
    assert kw["template"].template == "reasoning"
    off = load_config(None, ["questioning.pass_filter_samples=0"])
    assert pass_probe(off, _Policy(), lambda: None) is None
