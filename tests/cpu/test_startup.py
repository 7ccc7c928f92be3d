"""Issue 54 (1): an environment that cannot start, or a batch in which no episode runs, stops eval, run and task
synthesis with exit 2 and one line naming the cause, before any model loads; the shipped configs work from any
folder (run.paths_from)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evolvekit.config import RolloutConfig, load_config
from evolvekit.engine.base import Engine
from evolvekit.env.mcp import mcp_available
from evolvekit.errors import ConfigError, EnvError

ROOT = Path(__file__).resolve().parents[2]
needs_mcp = pytest.mark.skipif(mcp_available() is not None, reason=str(mcp_available()))


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", *args], capture_output=True, text=True, timeout=300, cwd=cwd
    )


@pytest.mark.slow
@needs_mcp
@pytest.mark.parametrize(
    "command",
    [["eval", "--limit", "1", "--k", "1", "-c"], ["run"], ["tasks", "synthesize", "--n", "1", "-c"]],
    ids=["eval", "run", "synthesize"],
)
def test_an_environment_that_cannot_start_is_exit_2_and_one_line_before_any_model_loads(tmp_path, command):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        "".join(json.dumps({"task_id": f"t{i}", "env_name": "mcp", "query": f"Write {i} to /sandbox/n.txt"}) + "\n"
                for i in range(24))
    )  # fmt: skip
    cfg = tmp_path / "broken.yaml"
    cfg.write_text(
        "env:\n  name: mcp\n  mcp:\n    command: [./no-such-server, '{sandbox}']\n"
        f"    tasks_file: {tasks}\ntrain:\n  iterations: 1\n  eval_before: false\n  eval_after: false\n"
        "questioning:\n  enabled: false\n"
    )
    res = _cli(*command, str(cfg), cwd=tmp_path)
    assert res.returncode == 2, (res.stdout[-800:], res.stderr[-2000:])
    lines = [ln for ln in res.stderr.splitlines() if "cannot start" in ln]
    assert len(lines) == 1 and "env mcp" in lines[0] and "no-such-server" in lines[0], res.stderr[-2000:]
    assert "loaded embedded" not in res.stdout + res.stderr  # stopped before any model loaded
    assert not (tmp_path / "runs" / "quickstart" / "checkpoints").exists()


class _Crashing:
    """An environment whose every episode fails to start."""

    def __init__(self) -> None:
        pass

    def reset(self, task=None, sandbox_config=None):
        raise RuntimeError("backend down")

    def close(self) -> None:
        pass


def test_a_batch_in_which_no_episode_runs_is_one_error_not_a_score_of_zero():
    from evolvekit.agent.evaluate import evaluate_policy
    from evolvekit.agent.rollout import RolloutJob, require_a_valid_episode, run_rollouts
    from evolvekit.llm.base import SamplingParams
    from evolvekit.types import Task, Trajectory

    task = Task(task_id="t", env_name="x", query="q")
    cfg = RolloutConfig(max_steps=2, concurrency=2)
    trajs = run_rollouts(
        [RolloutJob(task=task)] * 2, _Crashing, Engine(None), cfg, SamplingParams(), show_progress=False
    )
    assert len(trajs) == 2 and all(t.flags.failed for t in trajs)  # each failure is recorded ...
    with pytest.raises(EnvError, match="rollouts: none of the 2 episodes ran; the first error: reset: RuntimeError"):
        require_a_valid_episode(trajs, "rollouts")  # ... and a batch of nothing but failures is refused
    ok = Trajectory(task_id="t")
    require_a_valid_episode([*trajs, ok], "rollouts")  # one episode that ran is enough
    require_a_valid_episode([], "rollouts")
    with pytest.raises(EnvError, match="evaluation: none of the 2 episodes ran"):
        evaluate_policy([task], _Crashing, Engine(None), cfg, SamplingParams(), k=2, show_progress=False)


def test_paths_from_reads_the_files_paths_from_a_folder_relative_to_the_file(tmp_path, monkeypatch):
    (tmp_path / "seed").mkdir()
    (tmp_path / "conf").mkdir()
    cfg_file = tmp_path / "conf" / "c.yaml"
    body = (
        "env:\n  name: mcp\n  mcp:\n    command: [bin/server, x/y]\n    seed_dir: seed\n"
        "train:\n  compare_with: /abs/r.json\n  eval_synthetic: held.jsonl\n"
    )
    cfg_file.write_text("run:\n  paths_from: ..\n" + body)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = load_config(cfg_file, ["env.mcp.tasks_file=mine.jsonl"])
    assert cfg.env.mcp.seed_dir == str(tmp_path / "seed")
    assert cfg.env.mcp.command == [str(tmp_path / "bin/server"), "x/y"]  # the program only
    assert cfg.train.eval_synthetic == str(tmp_path / "held.jsonl")
    assert cfg.train.compare_with == "/abs/r.json"  # absolute paths stay
    assert cfg.env.mcp.tasks_file == "mine.jsonl"  # --set values are read from the current folder
    cfg_file.write_text(body)  # without paths_from: the current folder, as before
    assert load_config(cfg_file).env.mcp.seed_dir == "seed"
    cfg_file.write_text("run:\n  paths_from: nowhere\n" + body)
    with pytest.raises(ConfigError, match="run.paths_from: .* is not a folder"):
        load_config(cfg_file)


def test_the_shipped_configs_work_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("mcp_filesystem", "mcp_git"):
        cfg = load_config(ROOT / "configs" / f"{name}.yaml")
        assert cfg.env.mcp.seed_dir and Path(cfg.env.mcp.seed_dir).is_dir()
    fs = load_config(ROOT / "configs" / "mcp_filesystem.yaml").env.mcp.command[0]
    assert fs == str(ROOT / ".venv/mcp-node/node_modules/.bin/mcp-server-filesystem")
    for name in ("quickstart", "evidence/oracle_quickstart_arith_chain"):
        compare = load_config(ROOT / "configs" / f"{name}.yaml").train.compare_with
        assert compare and Path(compare).is_file()
    shipped_configs = sorted((ROOT / "configs").glob("**/*.yaml"))  # no shipped config names a path it cannot find
    for shipped in shipped_configs:
        text = shipped.read_text()
        if "\nrows:" in text:
            continue  # evidence specs, read by benchmarks/evidence/evidence.py from the checkout's root
        if any(f"{k}:" in text for k in ("seed_dir", "tasks_file", "compare_with", "eval_synthetic", "seed_file")):
            depth = len(shipped.relative_to(ROOT / "configs").parts)  # configs/x.yaml: '..'; configs/a/x.yaml: '../..'
            assert f"paths_from: {'/'.join(['..'] * depth)} " in text, shipped.name
