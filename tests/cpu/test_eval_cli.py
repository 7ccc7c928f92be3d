"""eval and run end to end: the quickstart on the real embedded model (small budgets); the evaluation's plumbing
(its JSON, journal, panels, leaderboard) on the tiny model of every role (conftest.tiny_roles)."""

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def _cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", *args], capture_output=True, text=True, timeout=900, cwd=cwd
    )


def test_eval_json_reports_avg_and_best(tmp_path, tiny_roles):
    out = tmp_path / "res.jsonl"
    args = ["eval", "--env", "bfcl", "--split", "multi_turn_base", "--limit", "1", "--k", "2", "--json"]
    sets = ["--set", "rollout.max_steps=2", "--set", "models.policy.max_new_tokens=48"]
    sets += ["--set", "rollout.concurrency=1", *tiny_roles]
    res = _cli(*args, "--out", str(out), *sets)
    assert res.returncode == 0, res.stderr[-2000:]
    # the cost before it starts (issue 54): episodes and the bound on generated tokens
    assert "1 tasks x 2 samples = 2 episodes, each at most 2 steps of at most 48 generated tokens" in res.stderr
    # ... and in minutes, at the pace of its own first episode (one at a time: the first wave is one; no episode is
    # run for it: the journal has two)
    assert "estimate: the first 1 of 2 episodes took" in res.stderr and "so the other 1 take about" in res.stderr
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert 0.0 <= summary["avg@2"] <= summary["best@2"] <= 1.0
    assert summary["tasks"] == 1 and summary["failed_rollouts"] == 0 and summary["completion_tokens"] > 0
    assert summary["category"] == "multi_turn_base" and "family" not in summary
    assert summary["worked_examples"] == "self" and "label" not in summary  # where the prompts' examples came from
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 1 and len(rows[0]["scores"]) == 2
    trajs = (tmp_path / "res.trajectories.jsonl").read_text().splitlines()
    assert len(trajs) == 2 and json.loads(trajs[0])["steps"][0]["completion_token_ids"]
    # each episode was journalled as it finished; the same command again continues from there (nothing left to run)
    journal = (tmp_path / "res.episodes.jsonl").read_text().splitlines()
    assert len(journal) == 3 and "evaluation" in json.loads(journal[0])
    again = _cli(*args, "--out", str(out), *sets)
    assert again.returncode == 0 and "2 of 2 episodes already in" in again.stderr, again.stderr[-2000:]
    assert "estimate:" not in again.stderr  # nothing left to run, nothing to measure
    assert (tmp_path / "res.episodes.jsonl").read_text().splitlines() == journal  # and nothing ran again
    assert json.loads(again.stdout.strip().splitlines()[-1])["avg@2"] == summary["avg@2"]
    other = _cli(*args, "--out", str(out), *sets, "--set", "rollout.max_steps=3")  # another evaluation: refused
    assert other.returncode == 2 and "holds episodes of another evaluation" in other.stderr


def test_run_quickstart_small_budget_then_eval_the_checkpoint(tmp_path, tiny_roles):
    res = _cli(
        "run",
        "configs/quickstart.yaml",
        "--json",
        "--no-progress",
        "--set",
        f"run.out_dir={tmp_path}",
        "--set",
        "train.iterations=1",
        "--set",
        "train.tasks_per_iteration=1",
        "--set",
        "rollout.group_size=2",
        "--set",
        "train.eval_tasks=2",
        "--set",
        "train.eval_k=1",
        "--set",
        "models.policy.max_new_tokens=32",
        "--set",
        "questioning.synthetic_tasks=2",
        "--set",
        "questioning.explore_runs=2",
        "--set",
        "questioning.explore_steps=3",
        # the least work that still runs every part of the first command: one candidate request a framing, one
        # round-trip attempt each, no second panel (the panels' own plumbing: test_a_panel_reruns_exactly_and_says_so)
        "--set",
        "questioning.requests.per_framing=1",
        "--set",
        "questioning.requests.shortlist=1",
        "--set",
        "questioning.requests.round_trip_samples=1",
        "--set",
        "train.eval_panels=[]",
    )
    assert res.returncode == 0, res.stderr[-2000:]
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["iterations"] == 1
    assert summary["eval_before"]["k"] == 1 and summary["eval_after"]["tasks"] == 2
    lines = open(summary["metrics"]).read().splitlines()
    assert len(lines) == 1 and "train/loss" in json.loads(lines[0])
    ckpt = summary["checkpoint"]
    res = _cli(
        "eval",
        "--set",
        "env.family=arith",
        "--subset",
        "test",
        "--limit",
        "1",
        "--k",
        "1",
        "--json",
        "--out",
        str(tmp_path / "ev.jsonl"),
        "--set",
        "models.policy.max_new_tokens=32",
        *tiny_roles,  # the checkpoint is what this evaluates: no worked example (the tiny explorer executes no call)
        "--policy",
        ckpt,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    evaluated = json.loads(res.stdout.strip().splitlines()[-1])
    assert evaluated["tasks"] == 1 and evaluated["family"] == "arith" and evaluated["split"] == "test"
    assert "category" not in evaluated  # it names the family it evaluated, not a BFCL category


def test_a_panel_reruns_exactly_and_says_so(tmp_path, tiny_roles):
    """Issue 54 (8): versioned evaluation panels. --panel-out writes the tasks, k, config, commit and weights hash;
    --panel re-runs them and reports whether the figures were reproduced; a changed task, a changed policy or an
    option that would change the panel is refused; --policy evaluates another policy on the same panel."""
    from evolvekit.llm.tiny import make_tiny_model

    tiny, other = make_tiny_model(tmp_path / "tiny"), make_tiny_model(tmp_path / "other", seed=1)
    panel = tmp_path / "panel.json"
    args = ["eval", "--set", "env.family=arith", "--subset", "test", "--limit", "2", "--k", "2", "--json"]
    sets = [*tiny_roles, "--set", f"models.policy.model={tiny}", "--set", "rollout.max_steps=1"]
    sets += ["--set", "models.policy.max_new_tokens=8"]
    first = _cli(*args, *sets, "--out", str(tmp_path / "a.jsonl"), "--panel-out", str(panel))
    assert first.returncode == 0, first.stderr[-2000:]
    written = json.loads(panel.read_text())
    assert len(written["tasks"]) == 2 and written["k"] == 2 and written["code"] and written["model_sha256"]
    again = _cli("eval", "--panel", str(panel), "--out", str(tmp_path / "b.jsonl"), "--json")
    assert again.returncode == 0, again.stderr[-2000:]
    summary = json.loads(again.stdout.strip().splitlines()[-1])
    assert (
        summary["reproduced"] is True and summary["avg@2"] == json.loads(first.stdout.strip().splitlines()[-1])["avg@2"]
    )
    mixed = _cli("eval", "--panel", str(panel), "--k", "4")
    assert mixed.returncode == 2 and "--panel fixes" in mixed.stderr
    moved = _cli("eval", "--panel", str(panel), "--policy", str(other), "--out", str(tmp_path / "c.jsonl"), "--json")
    assert moved.returncode == 0 and "reproduced" not in json.loads(moved.stdout.strip().splitlines()[-1])
    written["config"]["models"]["policy"]["model"] = str(other)
    (tmp_path / "swapped.json").write_text(json.dumps(written))
    swapped = _cli("eval", "--panel", str(tmp_path / "swapped.json"))
    assert swapped.returncode == 2 and "differ from the panel's" in swapped.stderr
    written["tasks"][0]["query"] = "something else"
    (tmp_path / "edited.json").write_text(json.dumps(written))
    edited = _cli("eval", "--panel", str(tmp_path / "edited.json"))
    assert edited.returncode == 2 and "tasks changed" in edited.stderr


def test_the_bfcl_leaderboard_score_is_bfcls_own(tmp_path, tiny_roles):
    """Issue 54 (8): BFCL's multi-turn categories scored as BFCL's leaderboard scores them: one attempt per task,
    each category's accuracy, and their unweighted mean (bfcl-eval's own function)."""
    from evolvekit.cli.eval_cmd import LEADERBOARD_CATEGORIES
    from evolvekit.llm.tiny import make_tiny_model

    tiny = make_tiny_model(tmp_path / "tiny")
    res = _cli(
        "eval", "--leaderboard", "--limit", "1", "--json", "--out", str(tmp_path / "lb" / "r.jsonl"),
        "--set", "rollout.max_steps=1", "--set", "models.policy.max_new_tokens=8",
        *tiny_roles, "--set", f"models.policy.model={tiny}",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    scores = json.loads(res.stdout.strip().splitlines()[-1])
    assert all(scores[f"{c}/tasks"] == 1 for c in LEADERBOARD_CATEGORIES)
    assert scores["multi_turn_overall"] == round(sum(scores[c] for c in LEADERBOARD_CATEGORIES) / 4, 4)
    for c in LEADERBOARD_CATEGORIES:  # one attempt per task, per category
        rows = [json.loads(line) for line in (tmp_path / "lb" / f"r.{c}.jsonl").read_text().splitlines()]
        assert len(rows) == 1 and len(rows[0]["scores"]) == 1
    refused = _cli("eval", "--leaderboard", "--set", "env.family=arith")
    assert refused.returncode == 2 and "--leaderboard" in refused.stderr


def test_the_overall_is_bfcls_unweighted_mean_with_missing_categories_at_zero():
    from evolvekit.cli.eval_cmd import unweighted_overall

    assert unweighted_overall({"multi_turn_base": 0.5, "multi_turn_miss_func": 0.25}) == 0.1875  # (0.5+0.25+0+0)/4
    assert unweighted_overall({c: 1.0 for c in ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param",
                                                "multi_turn_long_context")}) == 1.0  # fmt: skip


@pytest.mark.parametrize("template", ["sliding_window", "self_managing", "basic"])
def test_eval_uses_the_runs_context_template(template, monkeypatch, tmp_path):
    """Issue 98.1: `evolvekit eval` built no context template, so under sliding_window or self_managing it fell back
    to truncation while the run's own held-out evaluation used the configured one. Now both get rollout_template."""
    from types import SimpleNamespace

    import evolvekit.agent.evaluate as evaluate
    import evolvekit.engine.registry as engines
    from evolvekit.cli import eval_cmd
    from evolvekit.config import load_config
    from evolvekit.env.registry import env_tasks
    from evolvekit.llm import factory

    cfg = load_config(None, ["env.family=arith", "env.worked_examples=person", f"rollout.template={template}"])
    seen: dict = {}

    def evaluate_policy(tasks, make_env, engine, rollout, params, k, rendering, *args, **kwargs):
        seen.update(kwargs)
        return SimpleNamespace(), []

    monkeypatch.setattr(factory, "role_llm", lambda models, role: f"{role} model")
    monkeypatch.setattr(engines, "policy_engine", lambda cfg, llm: "engine")
    monkeypatch.setattr(evaluate, "evaluate_policy", evaluate_policy)
    monkeypatch.setattr(evaluate, "write_results", lambda out, report, trajs: None)
    eval_cmd._evaluate(cfg, env_tasks(cfg.env, "test")[:1], 1, tmp_path / "ev.jsonl", estimate=False)
    used = seen["template"]
    assert used.template == template and used.token_limit == cfg.rollout.context_token_limit
    assert (used.summarise is not None) == (template != "basic")  # the summarizer role writes the memory
