"""eval and run end to end with the real embedded model (small budgets)."""

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def _cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", *args], capture_output=True, text=True, timeout=900, cwd=cwd
    )


def test_eval_json_reports_avg_and_best(tmp_path):
    out = tmp_path / "res.jsonl"
    args = ["eval", "--env", "bfcl", "--split", "multi_turn_base", "--limit", "1", "--k", "2", "--json"]
    sets = ["--set", "rollout.max_steps=2", "--set", "models.policy.max_new_tokens=48"]
    res = _cli(*args, "--out", str(out), *sets)
    assert res.returncode == 0, res.stderr[-2000:]
    # the cost before it starts (issue 54): episodes and the bound on generated tokens
    assert "1 tasks x 2 samples = 2 episodes, each at most 2 steps of at most 48 generated tokens" in res.stderr
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert 0.0 <= summary["avg@2"] <= summary["best@2"] <= 1.0
    assert summary["tasks"] == 1 and summary["failed_rollouts"] == 0 and summary["completion_tokens"] > 0
    assert summary["category"] == "multi_turn_base" and "family" not in summary
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 1 and len(rows[0]["scores"]) == 2
    trajs = (tmp_path / "res.trajectories.jsonl").read_text().splitlines()
    assert len(trajs) == 2 and json.loads(trajs[0])["steps"][0]["completion_token_ids"]
    # each episode was journalled as it finished; the same command again continues from there (nothing left to run)
    journal = (tmp_path / "res.episodes.jsonl").read_text().splitlines()
    assert len(journal) == 3 and "evaluation" in json.loads(journal[0])
    again = _cli(*args, "--out", str(out), *sets)
    assert again.returncode == 0 and "2 of 2 episodes already in" in again.stderr, again.stderr[-2000:]
    assert json.loads(again.stdout.strip().splitlines()[-1])["avg@2"] == summary["avg@2"]
    other = _cli(*args, "--out", str(out), *sets, "--set", "rollout.max_steps=3")  # another evaluation: refused
    assert other.returncode == 2 and "holds episodes of another evaluation" in other.stderr


def test_run_quickstart_small_budget_then_eval_the_checkpoint(tmp_path):
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
        "--policy",
        ckpt,
        "--out",
        str(tmp_path / "ev.jsonl"),
        "--set",
        "models.policy.max_new_tokens=32",
    )
    assert res.returncode == 0, res.stderr[-2000:]
    evaluated = json.loads(res.stdout.strip().splitlines()[-1])
    assert evaluated["tasks"] == 1 and evaluated["family"] == "arith" and evaluated["split"] == "test"
    assert "category" not in evaluated  # it names the family it evaluated, not a BFCL category
