"""Metric sinks: JSONL (one line per iteration), TensorBoard event files, a learning-curve PNG, and the trackers of
``train.report_to`` (W&B offline, MLflow's file store).

The run store is the source of truth; the JSONL and PNG are rewritten from it after every iteration, so a
resumed run never duplicates or loses a line. TensorBoard purges steps at or after the resume point.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Sequence

from evolvekit.agent.evaluate import avg_at_k, best_at_k
from evolvekit.errors import ConfigError
from evolvekit.types import Trajectory

log = logging.getLogger(__name__)


def rollout_metrics(
    trajectories: Sequence[Trajectory], success_threshold: float = 0.5, prefix: str = "rollout/"
) -> dict[str, float]:
    """Reward, success (``Trajectory.succeeded`` at reward.success_threshold), parse rate, steps and token counts
    over a batch of trajectories."""
    if not trajectories:
        return {}
    n = len(trajectories)
    steps = [s for t in trajectories for s in t.steps]
    rewards = [float(t.outcome_reward or 0.0) for t in trajectories]
    by_task: dict[str, list[float]] = {}
    for t, r in zip(trajectories, rewards):
        by_task.setdefault(t.task_id, []).append(r)
    return {
        prefix + "reward_mean": sum(rewards) / n,
        prefix + "success_rate": sum(t.succeeded(success_threshold) for t in trajectories) / n,
        prefix + "best_of_group": best_at_k(list(by_task.values())),
        prefix + "avg_of_group": avg_at_k(list(by_task.values())),
        prefix + "steps_mean": len(steps) / n,
        prefix + "parse_error_rate": (sum(s.parse_error is not None for s in steps) / len(steps)) if steps else 0.0,
        prefix + "tool_call_rate": (sum(bool(s.tool_calls) for s in steps) / len(steps)) if steps else 0.0,
        prefix + "truncated_rate": sum(t.flags.truncated for t in trajectories) / n,
        prefix + "failed": float(sum(t.flags.failed for t in trajectories)),
        prefix + "prompt_tokens": float(sum(t.prompt_tokens for t in trajectories)),
        prefix + "completion_tokens": float(sum(t.completion_tokens for t in trajectories)),
        # the cost of a step (issue 54: long environments): what the policy read and wrote per step, on average
        prefix + "prompt_tokens_per_step": (sum(t.prompt_tokens for t in trajectories) / len(steps)) if steps else 0.0,
        prefix + "completion_tokens_per_step": (
            sum(t.completion_tokens for t in trajectories) / len(steps) if steps else 0.0
        ),
    }


class WandbTracker:
    """W&B, offline: the run's files under ``<run>/wandb`` (``wandb sync`` uploads them later); a resumed run
    continues the same W&B run (its id is the run folder's name)."""

    def __init__(self, run_dir: Path, config: dict) -> None:
        import wandb

        self.run = wandb.init(
            mode="offline", dir=str(run_dir), project="evolvekit", name=run_dir.name, id=_tracker_id(run_dir),
            config=config, resume="allow", settings=wandb.Settings(console="off", silent=True),
        )  # fmt: skip

    def log(self, iteration: int, metrics: dict[str, float]) -> None:
        self.run.log(dict(metrics), step=iteration)

    def close(self) -> None:
        self.run.finish()


class MlflowTracker:
    """MLflow with a file store under ``<run>/mlruns`` (``mlflow ui --backend-store-uri <run>/mlruns``); a resumed
    run continues the same MLflow run (its id is kept in ``<run>/mlruns/evolvekit_run_id``)."""

    def __init__(self, run_dir: Path, config: dict) -> None:
        import os

        import mlflow

        # the file store needs no database server (mlflow-skinny has no SQLAlchemy); MLflow 3 asks for this opt-in
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.mlflow = mlflow
        store = run_dir / "mlruns"
        store.mkdir(parents=True, exist_ok=True)
        mlflow.set_tracking_uri(store.resolve().as_uri())
        mlflow.set_experiment("evolvekit")
        kept = store / "evolvekit_run_id"
        if kept.is_file():
            self.active = mlflow.start_run(run_id=kept.read_text().strip())
        else:
            self.active = mlflow.start_run(run_name=run_dir.name)
            kept.write_text(self.active.info.run_id)
            mlflow.log_params({k: str(v)[:500] for k, v in _flat(config).items()})

    def log(self, iteration: int, metrics: dict[str, float]) -> None:
        self.mlflow.log_metrics({_mlflow_key(k): float(v) for k, v in metrics.items()}, step=iteration)

    def close(self) -> None:
        self.mlflow.end_run()


def _tracker_id(run_dir: Path) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in run_dir.name)[:64]


def _mlflow_key(key: str) -> str:
    """MLflow allows letters, digits and ``_-. /`` in names; anything else (e.g. '@' in avg@8) becomes '_at_'."""
    return "".join(c if c.isalnum() or c in "_-. /" else ("_at_" if c == "@" else "_") for c in key)


def _flat(tree: dict, prefix: str = "") -> dict:
    out: dict = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


class MetricsSink:
    """Every iteration's metrics: ``metrics.jsonl`` and the learning curve, and the trackers of ``train.report_to``
    (TensorBoard event files, W&B offline, MLflow's file store), each built once here."""

    def __init__(
        self,
        run_dir: Path,
        start_iteration: int,
        tensorboard: bool = True,
        report_to: tuple[str, ...] = (),
        config: dict | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.writer = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.writer = SummaryWriter(log_dir=str(self.run_dir / "tensorboard"), purge_step=start_iteration)
            except ImportError:  # pragma: no cover - tensorboard is a core dependency
                log.warning("tensorboard is not installed; no event files are written")
        self.trackers: list[WandbTracker | MlflowTracker] = []
        kinds: dict[str, type[WandbTracker] | type[MlflowTracker]] = {"wandb": WandbTracker, "mlflow": MlflowTracker}
        for name in report_to:
            if name not in kinds:
                continue
            try:
                self.trackers.append(kinds[name](self.run_dir, config or {}))
            except ImportError:
                raise ConfigError(
                    f"train.report_to: {name} is not installed (pip install -e '.[tracking]' -c constraints.txt)"
                ) from None

    def write(
        self,
        iteration: int,
        metrics: dict[str, float],
        all_metrics: dict[int, dict[str, float]],
        evaluations: dict[str, dict],
    ) -> None:
        if self.writer is not None:
            for k, v in metrics.items():
                self.writer.add_scalar(k, v, iteration)
            self.writer.flush()
        for tracker in self.trackers:
            tracker.log(iteration, metrics)
        with open(self.run_dir / "metrics.jsonl", "w") as fh:
            for it in sorted(all_metrics):
                fh.write(json.dumps({"iteration": it, **all_metrics[it]}) + "\n")
        self.plot(all_metrics, evaluations)

    def plot(self, all_metrics: dict[int, dict[str, float]], evaluations: dict[str, dict]) -> Path:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        its = sorted(all_metrics)
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.plot(
            its, [all_metrics[i].get("rollout/success_rate", 0.0) for i in its], "o-", label="train rollouts: success"
        )
        ax.plot(
            its,
            [all_metrics[i].get("rollout/reward_mean", 0.0) for i in its],
            ".--",
            alpha=0.6,
            label="train rollouts: reward",
        )
        # the x axis counts policy updates done: iteration i's rollouts were sampled after i updates, an evaluation
        # after iteration i's update after i + 1; before training at 0, after training at the run's last iteration
        eval_its = [i for i in its if any(k.startswith("eval/avg@") for k in all_metrics[i])]
        if eval_its:
            key = next(k for k in all_metrics[eval_its[0]] if k.startswith("eval/avg@"))
            ys = [all_metrics[i][key] for i in eval_its]
            ax.plot([i + 1 for i in eval_its], ys, "s-", label=f"held-out {key[5:]}")
        for phase, marker in (("before", "^"), ("after", "v")):
            ev = evaluations.get(phase)
            if ev:
                avg = next((k for k in ev if k.startswith("avg@")), None)
                if avg:
                    x = evaluation_x(phase, ev, len(its))
                    ax.plot([x], [ev[avg]], marker, markersize=10, label=f"held-out {avg} {phase}")
        ax.set_xlabel("policy updates done")
        ax.set_ylabel("rate")
        ax.set_ylim(-0.05, 1.05)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
        ax.set_title(self.run_dir.name)
        path = self.run_dir / "learning_curve.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return path

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        for tracker in self.trackers:
            tracker.close()


def evaluation_x(phase: str, summary: dict, updates: int) -> float:
    """Where a held-out evaluation stands on a curve whose x counts policy updates done: before training at 0, after
    training at the iteration it recorded (the run's iterations, each one update), else at ``updates``."""
    if phase == "before":
        return 0.0
    recorded = summary.get("iteration")
    return float(recorded) if isinstance(recorded, (int, float)) and recorded >= 0 else float(updates)
