"""The environment's parts of a run, built from config: its tasks, read once (the training tasks the training side
may see, the held-out ones evaluation scores), and its factory, told once whether person-written gold distances
may be measured (orchestrator/build.py connects them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from evolvekit.config import Config
from evolvekit.env.base import Environment, ReferenceDistances
from evolvekit.env.registry import env_tasks, has_task_source, make_env
from evolvekit.env.task_file import load_task_file
from evolvekit.errors import EnvError
from evolvekit.types import Task


@dataclass(frozen=True)
class RunTasks:
    """A run's tasks: ``train``, the person-written training tasks the training side may see (none at λ = 1);
    ``first``, the person-written task the environment's start may need; ``eval_split``, the environment's own
    held-out split (when the run evaluates); ``held``, the other held-out sets by name (synthesized tasks, panels)."""

    train: list[Task] = field(default_factory=list)
    first: Task | None = None
    eval_split: list[Task] = field(default_factory=list)
    held: list[tuple[str, list[Task]]] = field(default_factory=list)
    evaluating: bool = False


def run_tasks(cfg: Config) -> RunTasks:
    """Read the run's tasks once. An environment nobody wrote tasks for trains on its own synthesized tasks alone
    (λ = 1); otherwise its person-written tasks are needed, and their absence is one line naming what to do
    (``env_tasks``). At λ = 1 no person-written training task reaches the training side, not even its request
    (issue 51). Evaluation with nothing to evaluate is one line too."""
    own = has_task_source(cfg.env)
    person = env_tasks(cfg.env, cfg.env.train_split) if own or cfg.questioning.trains_on_real else []
    synthetic = load_task_file(cfg.train.eval_synthetic) if cfg.train.eval_synthetic else []
    panels = [(Path(p).stem, load_task_file(p)) for p in cfg.train.eval_panels]  # held out, scored by the check only
    evaluating = bool(cfg.train.eval_before or cfg.train.eval_after or cfg.train.eval_every)
    if evaluating and not own and not synthetic and not panels:
        raise EnvError(
            f"held-out evaluation: environment '{cfg.env.name}' has no tasks of its own; give held-out synthesized "
            "tasks (train.eval_synthetic: a file from `evolvekit tasks synthesize` with another seed) or turn "
            "train.eval_before, train.eval_after and train.eval_every off"
        )
    return RunTasks(
        train=person if cfg.questioning.trains_on_real else [],
        first=person[0] if person else None,
        eval_split=env_tasks(cfg.env, cfg.env.eval_split) if evaluating and own else [],
        held=([("synthetic", synthetic)] if synthetic else []) + panels,
        evaluating=evaluating,
    )


def bare_env_factory(cfg: Config) -> Callable[[], Environment]:
    """The configured environment's factory; each environment is told, as it is built, whether it may measure
    person-written gold distances (only under ``run.oracle``: src/evolvekit/boundary.py)."""

    def bare_env() -> Environment:
        env = make_env(cfg.env)
        if isinstance(env, ReferenceDistances):
            env.person_reference_distances = cfg.run.oracle
        return env

    return bare_env
