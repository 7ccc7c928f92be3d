"""``evolvekit tasks``: synthesize tasks by exploring an environment, and check task files by replay."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Optional

import typer

from evolvekit.cli.common import ConfigOpt, JsonOpt, SetOpt, console, emit_json, one_line, setup_logging

tasks_app = typer.Typer(help="Self-questioning: make tasks by exploring an environment.", no_args_is_help=True)


@tasks_app.command("synthesize")
def synthesize(
    env: Optional[str] = typer.Option(None, help="environment (default: the config's env.name)"),
    n: int = typer.Option(20, help="tasks to keep"),
    out: Path = typer.Option(Path("tasks.jsonl"), help="JSONL file of the kept tasks"),
    config: Optional[Path] = ConfigOpt,
    overrides: Optional[list[str]] = SetOpt,
    max_rounds: int = typer.Option(5, help="exploration rounds at most"),
    as_json: bool = JsonOpt,
) -> None:
    """Exploration → synthesis → curation; prints the funnel (explored, synthesized, deduplicated, infeasible, kept).

    Dedup is against every task seen, the environment's real training tasks included (as in a run)."""
    from evolvekit.agent.parts import pass_probe, round_trip
    from evolvekit.config import load_config
    from evolvekit.engine.registry import policy_engine
    from evolvekit.env.registry import make_env, preflight
    from evolvekit.llm.factory import build_embedder, role_llm, sampling_for
    from evolvekit.questioning.pipeline import SynthesisSettings, known_tasks, synthesize_tasks
    from evolvekit.questioning.requests import RequestFunnel
    from evolvekit.questioning.self_examples import with_run_examples

    cfg = load_config(config, list(overrides or []) + ([f"env.name={env}"] if env else []))
    setup_logging(cfg.run.log_level)
    preflight(cfg.env)  # the environment starts before any model loads (exit 2 if it cannot)
    embedder = build_embedder(cfg.embedding)
    out.parent.mkdir(parents=True, exist_ok=True)
    explorations = out.with_name(out.stem + ".explorations.jsonl")
    # each round's kept tasks (at most n in all) and every exploration trajectory are appended as the round ends,
    # so an interrupted synthesis keeps what it finished
    with open(out, "w") as task_fh, open(explorations, "w") as trace_fh:

        def on_round(funnel, traces, kept) -> None:
            for t in traces:
                trace_fh.write(json.dumps(dataclasses.asdict(t), default=lambda o: o.model_dump()) + "\n")
            for t in kept:
                task_fh.write(t.model_dump_json() + "\n")
            task_fh.flush()
            trace_fh.flush()
            console.print(f"funnel: {funnel.as_dict()}")

        settings = SynthesisSettings.of(cfg)
        explorer = role_llm(cfg.models, "explorer")
        # as in a run: the explorer's and synthesizer's worked examples are the run's own (env.worked_examples)
        examples_funnel = RequestFunnel()
        made_env = with_run_examples(cfg, lambda: explorer, lambda: make_env(cfg.env), funnel=examples_funnel)
        r = cfg.questioning.requests
        # the policy is loaded only when it probes or round-trips
        policy = (
            policy_engine(cfg, role_llm(cfg.models, "policy"))
            if cfg.questioning.pass_filter_samples or (r.mode == "backtranslate" and r.round_trip_samples)
            else None
        )
        _, funnel, _ = synthesize_tasks(
            settings,
            n,
            explorer,
            sampling_for(cfg.models.explorer, seed=cfg.run.seed),  # as in a run: run.seed pins the samples
            role_llm(cfg.models, "synthesizer"),
            sampling_for(cfg.models.synthesizer, seed=cfg.run.seed + 1),
            made_env,
            embedder.embed,
            # as in a run: no copy of a real training or held-out task
            existing=known_tasks(settings.env, settings.eval_synthetic),
            max_rounds=max_rounds,
            on_round=on_round,
            probe=pass_probe(cfg, policy, made_env) if policy is not None else None,
            trip=round_trip(cfg, policy) if policy is not None and r.mode == "backtranslate" else None,
        )
    examples = {f"examples_{k}": v for k, v in examples_funnel.as_dict().items()}
    summary = {**funnel.as_dict(), **examples, "out": str(out), "explorations": str(explorations)}
    emit_json(summary) if as_json else sys.stdout.write(" ".join(f"{k}={v}" for k, v in summary.items()) + "\n")


def _why(row: dict) -> str:
    """One infeasible task of `tasks check` as one line: its id, and why its reference does not replay."""
    return f"{one_line(str(row['task_id'])[:64])}: {one_line(str(row['reason'])[:200])}"


@tasks_app.command("check")
def check(
    path: Path = typer.Argument(..., help="JSONL of tasks"),
    config: Optional[Path] = ConfigOpt,
    overrides: Optional[list[str]] = SetOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Replay every task's reference solution in a fresh environment and report feasibility."""
    from evolvekit.config import load_config
    from evolvekit.env.registry import make_env
    from evolvekit.env.task_file import load_task_file
    from evolvekit.errors import ConfigError, EnvError
    from evolvekit.questioning.curate import replay_feasible

    cfg = load_config(config, overrides)
    setup_logging(cfg.run.log_level)
    rows = []
    refused: list[str] = []
    for task in load_task_file(path):
        env_cfg = cfg.env.model_copy(update={"name": task.env_name})
        try:
            ok, reason = replay_feasible(task, lambda: make_env(env_cfg), refuse_invalid=True)  # noqa: B023
        except EnvError as err:  # the environment refuses the task itself (docs/environments.md: exit 2)
            refused.append(f"{task.task_id[:64]}: {str(err)[:200]}")
            continue
        rows.append({"task_id": task.task_id, "feasible": ok, "reason": reason})
    if refused:
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        raise ConfigError(f"{path}: task {refused[0]}{more}")
    summary = {
        "tasks": len(rows),
        "feasible": sum(bool(r["feasible"]) for r in rows),
        "infeasible": [r for r in rows if not r["feasible"]][:20],
    }
    bad = [r for r in rows if not r["feasible"]]
    if as_json:
        emit_json(summary)
    else:  # why each infeasible task is, in text too (the first 20; --json has the same rows)
        sys.stdout.write(f"{summary['feasible']}/{summary['tasks']} feasible\n")
        for r in bad[:20]:
            sys.stdout.write(f"infeasible {_why(r)}\n")
        if len(bad) > 20:
            sys.stdout.write(f"... and {len(bad) - 20} more infeasible\n")
    if not summary["feasible"]:  # nothing a run could train or evaluate on: a script must not read this as success
        why = f"task {_why(bad[0])}; " if bad else ""
        sys.stderr.write(f"{path}: {why}no task is feasible\n")
        raise typer.Exit(1)
