"""Issue 54 (7): the CLI's rough edges. Every option says what it does; `run CONFIG --resume DIR` no longer ignores
CONFIG: it may only extend the run (more train.iterations), and anything else is refused naming the fields."""

import json

import click
import pytest
import typer

from evolvekit.cli.main import app
from evolvekit.config import config_from_dict
from evolvekit.errors import ConfigError
from evolvekit.orchestrator.run_dir import open_run


def _commands(cmd: click.Command, path: str = "evolvekit"):
    yield path, cmd
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            yield from _commands(sub, f"{path} {name}")


def test_every_option_of_every_command_has_help_text():
    missing = [
        f"{path} {'/'.join(p.opts)}"
        for path, cmd in _commands(typer.main.get_command(app))
        for p in cmd.params
        if isinstance(p, click.Option) and not p.help and "--help" not in p.opts
    ]
    assert missing == []


def _run(tmp_path, **train):
    cfg = config_from_dict({"run": {"out_dir": str(tmp_path)}, "train": {"iterations": 2, **train}})
    _, run_dir, store = open_run(cfg, None)
    with store.transaction() as c:
        store.put_evaluation(c, "after", {"avg@8": 0.5})
    store.close()
    return cfg, run_dir


def test_a_resumed_run_refuses_another_config_and_names_the_fields(tmp_path):
    cfg, run_dir = _run(tmp_path)
    other = cfg.model_copy(deep=True)
    other.train.learning_rate, other.rollout.group_size = 1e-5, 3
    with pytest.raises(ConfigError, match=r"differs in rollout.group_size, train.learning_rate\. Only train.iter"):
        open_run(other, run_dir)
    with pytest.raises(ConfigError, match="differs in train.kl_beta"):
        open_run(None, run_dir, overrides=["train.kl_beta=0.5"])
    fewer = cfg.model_copy(deep=True)
    fewer.train.iterations = 1
    with pytest.raises(ConfigError, match="train.iterations: 1 is fewer than the run's 2"):
        open_run(fewer, run_dir)
    same, _, store = open_run(cfg, run_dir)  # the same config: a plain resume
    assert same == cfg and store.evaluation("after") == {"avg@8": 0.5}
    store.close()


@pytest.mark.parametrize("how", ["config", "set"])
def test_a_finished_run_is_extended_by_more_iterations(tmp_path, how):
    cfg, run_dir = _run(tmp_path)
    more = cfg.model_copy(deep=True)
    more.train.iterations = 5
    got, _, store = (
        open_run(more, run_dir) if how == "config" else open_run(None, run_dir, overrides=["train.iterations=5"])
    )
    assert got.train.iterations == 5 and store.evaluation("after") is None  # made again at the new end
    assert json.loads((run_dir / "config.json").read_text())["train"]["iterations"] == 5
    assert json.loads(store.get_meta("config") or "{}")["train"]["iterations"] == 5
    store.close()
    again, _, store = open_run(None, run_dir)  # the extension is the run's config from now on
    assert again.train.iterations == 5
    store.close()


@pytest.mark.slow
def test_env_list_names_plugin_environments(tmp_path):
    """Issue 54 (7): `env list` omitted plugin environments. It lists those of an installed package's
    'evolvekit.environments' entry point, and with a config those of its env.plugins."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    plugins = Path(__file__).resolve().parents[1] / "plugins"
    site = tmp_path / "site"
    dist = site / "coin_plugin-0.1.dist-info"  # what installing a plugin package leaves on sys.path
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: coin-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[evolvekit.environments]\ncoin = coin_env\n")

    def env_list(*args, path=""):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (path, str(plugins)) if p)}
        cmd = [sys.executable, "-m", "evolvekit.cli.main", "env", "list", "--json", *args]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
        assert res.returncode == 0, res.stderr[-1000:]
        return json.loads(res.stdout.strip().splitlines()[-1])

    assert "coin" not in env_list()
    assert "coin" in env_list(path=str(site))  # the installed entry point
    cfg = tmp_path / "c.yaml"
    cfg.write_text("env:\n  plugins: [notask_env]\n")
    assert "coin_notask" in env_list("-c", str(cfg))  # the config's env.plugins


@pytest.mark.slow
def test_tasks_synthesize_uses_the_configs_environment_unless_env_is_given(tmp_path):
    """Issue 54 (2): `tasks synthesize --env` defaulted to bfcl and overrode the config's env.name (it explored BFCL
    for 5 minutes with an MCP config). The config's environment is used: here one that cannot start, which stops
    the command at once, naming it."""
    import subprocess
    import sys

    cfg = tmp_path / "c.yaml"
    cfg.write_text("env:\n  name: mcp\n  mcp:\n    command: [./no-such-server]\n")
    cmd = [sys.executable, "-m", "evolvekit.cli.main", "tasks", "synthesize", "-c", str(cfg), "--n", "1"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert res.returncode == 2 and "env mcp" in res.stderr and "loaded embedded" not in res.stderr, res.stderr[-800:]


def test_llm_path_prints_the_embedded_models_folder(capsys):
    """Issue 54 (5): `evolvekit llm path` prints the folder a server such as `transformers serve` needs."""
    from pathlib import Path

    from evolvekit.cli.main import llm_path

    llm_path("embedded:smollm2-135m-instruct")
    folder = Path(capsys.readouterr().out.strip())
    assert (folder / "config.json").is_file() and any(folder.glob("*.safetensors"))
