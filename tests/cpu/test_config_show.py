"""`config show` prints what a config reads; `--all` prints every setting (issue 79.4)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from evolvekit.config import (
    Config,
    config_from_dict,
    count_settings,
    dump_commented_yaml,
    inert_settings,
    load_config,
    roles_in_use,
)
from evolvekit.engine.registry import engine_settings

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "configs" / "quickstart.yaml"


def test_the_quickstart_shows_what_it_reads_and_the_committed_count():
    cfg = load_config(QUICKSTART)
    hidden = inert_settings(cfg, engine_settings())
    # the roles the quickstart builds: the state check scores synthesized tasks, credit is grounded
    assert roles_in_use(cfg) == {"policy", "explorer", "synthesizer", "summarizer"}
    assert {"cold_start", "coevolve", "evolving_rl", "models.judge", "models.attributor"} <= set(hidden)
    assert not {"questioning", "navigating", "attributing", "models.policy", "train", "rollout"} & set(hidden)
    shown, total = count_settings(cfg, hidden=hidden), count_settings(cfg)
    doc = (ROOT / "docs" / "training.md").read_text()
    committed = re.search(r"\*\*(\d+) settings shown of (\d+)\*\*", doc)
    assert committed and (shown, total) == (int(committed[1]), int(committed[2]))
    text = dump_commented_yaml(cfg, hidden=hidden)
    data = yaml.safe_load(text)
    assert data["coevolve"] == {"enabled": False} and "judge" not in data["models"]
    assert "engine_url" not in data["models"]["policy"] and "base_url" not in data["models"]["explorer"]
    # the shorter print is the same config
    assert config_from_dict(data, "shown").model_dump() == cfg.model_dump()


def test_hidden_parts_follow_the_config():
    served = load_config(None, ["models.policy.backend=openai", "models.policy.base_url=http://127.0.0.1:1/v1"])
    hidden = inert_settings(served, engine_settings())
    assert "models.policy.device" in hidden and "models.policy.base_url" not in hidden
    vllm = inert_settings(load_config(None, ["models.policy.engine=vllm"]), engine_settings())
    assert "models.policy.kv_cache_bytes" not in vllm and "models.policy.engine_url" in vllm
    assert "models.policy.timeout_s" in vllm  # a local policy's server timeout: read only by a served engine
    sglang = inert_settings(load_config(None, ["models.policy.engine=sglang"]), engine_settings())
    assert not {"models.policy.engine_url", "models.policy.timeout_s"} & set(sglang)
    assert {"models.policy.kv_cache_bytes", "models.policy.engine_options"} <= set(sglang)
    # the run's own worked examples explore with questioning's settings, even with questioning off
    assert "questioning" not in inert_settings(load_config(None, ["env.worked_examples=self"]), engine_settings())
    assert "questioning" in inert_settings(load_config(None, ["env.worked_examples=none"]), engine_settings())
    judge = load_config(None, ["questioning.enabled=true", "questioning.reward=judge"])
    assert "judge" in roles_in_use(judge) and "models.judge" not in inert_settings(judge, engine_settings())
    everything = Config()
    assert count_settings(everything, hidden={}) == count_settings(everything) > 250


@pytest.mark.slow
def test_config_show_prints_the_count_and_all_prints_everything():
    def show(*extra: str) -> str:
        res = subprocess.run(
            [sys.executable, "-m", "evolvekit.cli.main", "config", "show", str(QUICKSTART), *extra],
            capture_output=True, text=True, timeout=120, cwd=ROOT,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        return res.stdout

    short, full = show(), show("--all")
    assert re.search(r"^# \d+ settings shown of \d+ \(config show --all prints them all\)$", short, re.M)
    judge = count_settings(Config().models.judge)  # a helper role's settings: no engine settings (issue 79.4)
    assert "settings not shown" in short and f"# judge: {judge} settings not shown" in short
    assert "not shown (" not in full and re.search(r"^# \d+ settings shown$", full, re.M)
    assert "models.judge.device" not in short.split("\n\n")[0] and "engine_url: null" in full
