"""Issue 78.2: served helper roles as the README documents them, offline: `transformers serve` (set-up installs its
serving extra) on a model folder, and the explorer, synthesizer and judge pointed at it. The served folder is the
tiny model's (conftest.served): what is checked is the served roles' plumbing; `evolvekit llm path` is checked to
print the embedded model's folder, in the form `transformers serve` loads."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", *args], capture_output=True, text=True, timeout=1200, cwd=ROOT
    )


def test_llm_path_prints_a_folder_transformers_serve_loads():
    from transformers import AutoConfig, AutoTokenizer

    res = _cli("llm", "path")
    assert res.returncode == 0, res.stderr[-2000:]
    folder = Path(res.stdout.strip().splitlines()[-1])
    assert AutoConfig.from_pretrained(folder).model_type == "llama"
    assert AutoTokenizer.from_pretrained(folder).chat_template  # what the server's chat completions apply


def test_a_served_explorer_synthesizer_and_judge_work_as_documented(served, tmp_path):
    url, path = served
    sets = []
    for role in ("explorer", "synthesizer", "judge"):
        sets += [f"models.{role}.backend=openai", f"models.{role}.base_url={url}", f"models.{role}.model={path}"]
        sets += [f"models.{role}.max_new_tokens=48"]
    sets += ["questioning.explore_runs=2", "questioning.explore_steps=3"]
    args = [a for s in sets for a in ("--set", s)]
    judge = _cli("llm", "chat", "--role", "judge", "Answer yes or no: is 2 + 2 = 4?", *args, "--json")
    assert judge.returncode == 0, judge.stderr[-2000:]
    answer = json.loads(judge.stdout.strip().splitlines()[-1])
    # the server's reply came back whole (the tiny model's greedy text is blank lines: its content is no claim here)
    assert answer["role"] == "judge" and answer["text"] and answer["completion_tokens"] > 0
    out = tmp_path / "tasks.jsonl"
    syn = _cli("tasks", "synthesize", "--env", "bfcl", "--set", "env.family=arith", *args, "--n", "2",
               "--max-rounds", "1", "--out", str(out), "--json")  # fmt: skip
    assert syn.returncode == 0, syn.stderr[-3000:]
    funnel = json.loads(syn.stdout.strip().splitlines()[-1])
    assert funnel["explored"] == 2  # both exploration runs ran, every step a request to the server
    for role in ("explorer", "synthesizer"):  # what a served explorer or synthesizer loses is said, once per role
        said = f"questioning.scaffold: the {role} ({path}) is served"
        assert syn.stderr.count(said) == 1, syn.stderr[-3000:]
