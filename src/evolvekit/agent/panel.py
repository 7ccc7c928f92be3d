"""Versioned evaluation panels: what an evaluation ran, written so that anyone re-runs it exactly (issue 54: results
that others cannot reproduce are this field's first complaint, AgentEvolver #46, ReMe #123/#213, AgentGym #41).

A panel holds the tasks themselves (with a hash each), the sample count k, the run seed and sampling settings (in the
whole config), the code commit, the policy's weights hash, and the figures it gave. ``evolvekit eval --panel-out``
writes one; ``evolvekit eval --panel`` re-runs it and says whether the figures were reproduced."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evolvekit.errors import ConfigError
from evolvekit.types import Task

PANEL_VERSION = 1
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf")


class Panel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: int = PANEL_VERSION
    code: str  # the commit of the code that made it (provenance.code_commit)
    config: dict[str, Any]  # the whole validated config: env, rollout, sampling, run.seed
    k: int
    tasks: list[Task]
    task_hashes: list[str]
    model: str  # models.policy.model as evaluated
    model_sha256: str
    results: dict[str, Any] = Field(default_factory=dict)  # the figures it gave (avg@k, best@k, ...)


def task_hash(task: Task) -> str:
    return hashlib.sha256(task.model_dump_json().encode()).hexdigest()[:16]


def weights_sha256(model: str) -> str:
    """A hash of a policy's weight files (every safetensors/bin/gguf file under its folder, in name order), or of
    its name when it is not a local folder (a served model: its name is all evolvekit knows)."""
    from evolvekit.llm.embedded import resolve_model_path

    folder = Path(resolve_model_path(model))
    digest = hashlib.sha256()
    files = sorted(p for p in folder.rglob("*") if p.suffix in WEIGHT_SUFFIXES) if folder.is_dir() else []
    if not files:
        digest.update(model.encode())
    for path in files:
        digest.update(path.relative_to(folder).as_posix().encode())
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def make_panel(code: str, config: dict, k: int, tasks: list[Task], model: str, results: dict) -> Panel:
    return Panel(
        code=code,
        config=config,
        k=k,
        tasks=tasks,
        task_hashes=[task_hash(t) for t in tasks],
        model=model,
        model_sha256=weights_sha256(model),
        results=results,
    )


def read_panel(path: Path) -> Panel:
    """A panel file, checked: its version, and that each task still hashes to what was written."""
    try:
        panel = Panel.model_validate_json(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, ValidationError) as err:
        raise ConfigError(f"--panel {path}: not a panel file ({str(err).splitlines()[0][:200]})") from None
    if panel.version != PANEL_VERSION:
        raise ConfigError(f"--panel {path}: version {panel.version}, this evolvekit reads {PANEL_VERSION}")
    changed = [t.task_id for t, h in zip(panel.tasks, panel.task_hashes) if task_hash(t) != h]
    if changed or len(panel.tasks) != len(panel.task_hashes):
        raise ConfigError(f"--panel {path}: tasks changed since it was written: {', '.join(changed[:5])}")
    return panel


def panel_code_fields(config: dict[str, Any]) -> dict[str, Any]:
    """The settings of a panel's config that run code on the machine that evaluates it (a panel is data someone may
    share): ``env.mcp.command`` starts a program, ``env.plugins`` imports Python modules. Empty when there is none."""
    env = config.get("env")
    env = env if isinstance(env, dict) else {}
    mcp = env.get("mcp")
    mcp = mcp if isinstance(mcp, dict) else {}
    found = {"env.mcp.command": mcp.get("command"), "env.plugins": env.get("plugins")}
    return {k: v for k, v in found.items() if v}


def reproduced(panel: Panel, results: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The figures (avg@k, best@k, mean score) that differ from the panel's: name -> (panel's, now)."""
    keys = [key for key in panel.results if "@" in key or key == "mean_score"]
    return {key: (panel.results[key], results.get(key)) for key in keys if results.get(key) != panel.results[key]}


def panel_json(panel: Panel) -> str:
    return json.dumps(json.loads(panel.model_dump_json()), indent=1) + "\n"
