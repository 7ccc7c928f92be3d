"""``evolvekit eval``: held-out evaluation of a policy (local checkpoint or served model)."""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Optional

import typer

from evolvekit.cli.common import ConfigOpt, JsonOpt, SetOpt, emit_json, examples_provenance, setup_logging

log = logging.getLogger(__name__)


def _experience_lookup(cfg, path: Path):
    """Test-time experience (e.g. Evolving-RL skills): top-k retrieval from an exported pool, injected as a span."""
    from evolvekit.errors import ConfigError
    from evolvekit.llm.factory import build_embedder
    from evolvekit.navigating.pool import ExperiencePool

    if not path.is_file():
        raise ConfigError(f"no such file: {path}")
    pool = ExperiencePool(build_embedder(cfg.embedding).embed, theta_sim=2.0)  # keep every imported entry
    pool.import_jsonl(path)

    def lookup(task):
        hits = pool.retrieve("\n".join(task.turns), cfg.navigating.inject_count)
        if not hits:
            return None, ()
        return (
            "\n\n".join(f"When to use: {e.when_to_use}\nContent: {e.content}" for e, _ in hits),
            tuple(e.experience_id for e, _ in hits),
        )

    return lookup


def _tasks(cfg, category: str, subset: str, limit: Optional[int]) -> list:
    from evolvekit.env.bfcl.data import load_tasks
    from evolvekit.env.registry import env_tasks
    from evolvekit.errors import EnvError

    if cfg.env.family or cfg.env.name != "bfcl":
        tasks = env_tasks(cfg.env, subset)
    else:
        tasks = load_tasks(category, None if subset == "all" else subset, cfg.env.backends or None)
    if limit is not None:
        tasks = tasks[:limit]
    if not tasks:
        raise EnvError(f"no tasks in {category}/{subset} with backends {cfg.env.backends}")
    return tasks


def _evaluate(
    cfg,
    tasks: list,
    k: int,
    out: Path,
    experiences: Optional[Path] = None,
    estimate: bool = True,
    llm=None,
    shown=None,
    engine=None,
    template=None,
):
    """One evaluation, as the run's own held-out evaluation makes it (its sampling, engine, worked examples and
    context template); ``llm`` (the policy), ``engine`` (what it samples through), ``shown`` (the run's own
    examples, ``examples_once``) and ``template`` (``rollout_template``) may be shared between evaluations of one
    command (the leaderboard's categories), else made here."""
    from evolvekit.agent.evaluate import EpisodeJournal, PaceEstimate, evaluate_policy, write_results
    from evolvekit.agent.parts import policy_sampling, rollout_template
    from evolvekit.engine.registry import policy_engine
    from evolvekit.env.registry import make_env, preflight
    from evolvekit.llm.factory import role_llm, role_llm_or
    from evolvekit.questioning.self_examples import examples_once, with_run_examples

    preflight(cfg.env, tasks[0])  # one episode starts before the model loads: exit 2 now, not a silent score of 0
    # what makes two evaluations the same: their tasks, k, and every setting but the run's name and folder
    settings = cfg.model_dump(mode="json", exclude={"run": {"name", "out_dir", "log_level"}})
    what = {"tasks": [t.task_id for t in tasks], "k": k, "experiences": str(experiences or ""), "config": settings}
    key = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]
    journal = EpisodeJournal(episodes_path(out), key)  # refuses another's before loading
    llm = llm if llm is not None else role_llm(cfg.models, "policy")
    episodes = len(tasks) * k
    params = policy_sampling(cfg, seed=cfg.run.seed)
    log.info(
        "evaluation: %d tasks x %d samples = %d episodes, each at most %d steps of at most %d generated tokens "
        "(at most %d generated tokens in all; rollout.max_steps, models.policy.max_new_tokens, env.action_max_tokens)",
        len(tasks), k, episodes, cfg.rollout.max_steps, params.max_new_tokens,
        episodes * cfg.rollout.max_steps * params.max_new_tokens,
    )  # fmt: skip
    lookup = _experience_lookup(cfg, experiences) if experiences else None
    engine = engine if engine is not None else policy_engine(cfg, llm)  # the configured engine, as in a run
    # the worked examples a run with this config and seed shows (env.worked_examples: self: made by the explorer on
    # the first reset; the explorer is the policy itself when it is the same local model)
    explorer = lambda: role_llm_or(cfg.models, "explorer", llm)  # noqa: E731
    left = episodes - len(journal.finished())
    if shown is None and cfg.env.worked_examples == "self":
        shown = examples_once(cfg, explorer, lambda: make_env(cfg.env))
    if shown is not None and left > 0:  # made once, before the episodes start: not part of their pace
        started = time.perf_counter()
        shown()
        log.info("the run's own worked examples: %.1f s (once, before the episodes)", time.perf_counter() - started)
    made_env = with_run_examples(cfg, explorer, lambda: make_env(cfg.env), shown)
    # minutes from the evaluation's own first episodes, once they finish: no episode is run for the estimate
    pace = PaceEstimate(left, cfg.rollout.concurrency) if estimate and left > 0 else None
    report, trajs = evaluate_policy(
        tasks,
        made_env,
        engine,
        cfg.rollout,
        params,
        k,
        cfg.env.tool_rendering,
        experience_for=lookup,
        journal=journal,
        pace=pace,
        template=template if template is not None else rollout_template(cfg),  # sliding_window, self_managing
    )
    write_results(out, report, trajs)
    return report


LEADERBOARD_CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")


def unweighted_overall(accuracies: dict[str, float], categories: tuple[str, ...] = LEADERBOARD_CATEGORIES) -> float:
    """BFCL's "Multi Turn Overall Acc": the unweighted mean of the categories' accuracies, a category not evaluated
    counting 0 (bfcl-eval's ``calculate_unweighted_accuracy`` as its leaderboard calls it, with
    ``display_na_if_category_missing=False``; that module needs pandas, so its two lines are restated here)."""
    return sum(accuracies.get(c, 0.0) for c in categories) / len(categories)


def _leaderboard(
    cfg, subset: str, limit: Optional[int], out: Path, experiences: Optional[Path], estimate: bool = True
) -> dict:
    """BFCL's multi-turn leaderboard score: per category the share of tasks solved in one attempt (BFCL's checker
    on every turn), and their unweighted mean (``unweighted_overall``)."""
    from evolvekit.agent.parts import rollout_template
    from evolvekit.engine.registry import policy_engine
    from evolvekit.env.registry import make_env
    from evolvekit.llm.factory import role_llm, role_llm_or
    from evolvekit.questioning.self_examples import examples_once

    per: dict[str, dict] = {}
    llm = role_llm(cfg.models, "policy")  # one policy and one set of the run's own examples for every category
    engine = policy_engine(cfg, llm)  # one engine over it, as in a run
    shown = examples_once(cfg, lambda: role_llm_or(cfg.models, "explorer", llm), lambda: make_env(cfg.env))
    template = rollout_template(cfg)  # one context template (and summarizer) for every category, as in a run
    for category in LEADERBOARD_CATEGORIES:
        tasks = _tasks(cfg, category, subset, limit)
        where = out.with_name(f"{out.stem}.{category}{out.suffix}")
        report = _evaluate(
            cfg, tasks, 1, where, experiences, estimate, llm=llm, shown=shown, engine=engine, template=template
        )
        correct = round(report.avg_at_k * report.tasks)
        per[category] = {"accuracy": report.avg_at_k, "total_count": report.tasks, "correct_count": correct}
    overall = unweighted_overall({c: v["accuracy"] for c, v in per.items()})
    return {
        **{c: round(v["accuracy"], 4) for c, v in per.items()},
        **{f"{c}/tasks": v["total_count"] for c, v in per.items()},
        "multi_turn_overall": round(overall, 4),
        "subset": subset,
        "results": str(out.parent),
    }


def episodes_path(out: Path) -> Path:
    """Where an evaluation writes each episode as it finishes (``<out>.episodes.jsonl``)."""
    return out.with_name(out.stem + ".episodes.jsonl")


def resume_hint(out: Path, argv: list[str]) -> str:
    """What an interrupted ``eval`` prints: where its finished episodes are, and the command that continues it (the
    same arguments, with ``--out`` added when it was not given)."""
    import shlex

    given = any(a == "--out" or a.startswith("--out=") for a in argv)
    command = ["evolvekit", *argv, *([] if given else ["--out", str(out)])]
    return f"interrupted: the finished episodes are kept in {episodes_path(out)}; to continue, run: " + " ".join(
        shlex.quote(a) for a in command
    )


def _panel_and_config(panel_in: Path, policy: str | None, run_code: bool):
    """A versioned panel and the config it fixes: refused while it names code to run (unless ``run_code``) or, for
    the same policy, when the weights differ from the panel's."""
    from evolvekit.agent.panel import panel_code_fields, read_panel, weights_sha256
    from evolvekit.config import config_from_dict
    from evolvekit.errors import ConfigError

    panel = read_panel(panel_in)
    data = dict(panel.config)
    code = panel_code_fields(data)
    if code and not run_code:
        shown = "; ".join(f"{k}: {v}" for k, v in code.items())
        raise ConfigError(
            f"--panel {panel_in}: its config runs code ({shown[:300]}); read it, then pass --run-panel-code to run it"
        )
    if policy:
        data["models"] = {**data.get("models", {}), "policy": {**data["models"]["policy"], "model": policy}}
    cfg = config_from_dict(data, str(panel_in))
    if not policy and weights_sha256(cfg.models.policy.model) != panel.model_sha256:
        raise ConfigError(
            f"--panel {panel_in}: the weights of {cfg.models.policy.model} differ from the panel's "
            f"({panel.model_sha256}); give --policy to evaluate another policy on this panel"
        )
    return panel, cfg


def eval_command(
    env: Optional[str] = typer.Option(None, help="environment (default: the config's env.name, bfcl)"),
    split: str = typer.Option("multi_turn_base", help="BFCL category"),
    subset: Optional[str] = typer.Option(None, help="train/dev/test/all (default: env.eval_split)"),
    k: int = typer.Option(8, help="samples per task (avg@k, best@k)"),
    limit: Optional[int] = typer.Option(None, help="only the first N tasks"),
    policy: Optional[str] = typer.Option(None, help="policy checkpoint folder (default: models.policy.model)"),
    config: Optional[Path] = ConfigOpt,
    overrides: Optional[list[str]] = SetOpt,
    out: Optional[Path] = typer.Option(
        None,
        help="per-task results JSONL (default under runs/eval-...); each episode is written to "
        "<out>.episodes.jsonl as it finishes, and a re-run with the same --out continues from there",
    ),
    experiences: Optional[Path] = typer.Option(
        None, help="JSONL pool (evolvekit experiences export): inject the best match into every rollout"
    ),
    panel_out: Optional[Path] = typer.Option(
        None, "--panel-out", help="write a versioned panel: the tasks, k, config, commit, weights hash and figures"
    ),
    panel_in: Optional[Path] = typer.Option(
        None,
        "--panel",
        help="re-run a panel exactly (its tasks, k, config and seed) and say whether its figures were reproduced; "
        "with --policy, evaluate another policy on it",
    ),
    panel_code: bool = typer.Option(
        False,
        "--run-panel-code",
        help="let a --panel file's config run what it names (env.mcp.command, env.plugins); without it such a panel "
        "is refused with the commands shown",
    ),
    leaderboard: bool = typer.Option(
        False,
        "--leaderboard",
        help="BFCL's multi-turn leaderboard score: the four multi-turn categories, one attempt per task (k = 1), "
        "each category's accuracy and their unweighted mean, computed by bfcl-eval's own function",
    ),
    estimate: bool = typer.Option(
        True,
        "--estimate/--no-estimate",
        help="once the evaluation's first episodes finish (a wave of rollout.concurrency, or a tenth), log the minutes "
        "the others take at their pace, with a range (no episode is run for it)",
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Evaluate the policy: avg@k and best@k with per-task results written to a file."""
    from evolvekit.agent.panel import make_panel, panel_json, reproduced
    from evolvekit.config import load_config
    from evolvekit.errors import ConfigError
    from evolvekit.orchestrator.run_dir import registry_problem
    from evolvekit.provenance import code_commit

    panel = None
    if panel_in is not None:
        chosen = config is not None or overrides or env or subset or limit is not None
        if chosen or k != 8 or split != "multi_turn_base":
            raise ConfigError("--panel fixes the tasks, k and config; give only --policy, --out and --panel-out")
        panel, cfg = _panel_and_config(panel_in, policy, panel_code)
    else:
        sets = (
            list(overrides or [])
            + ([f"env.name={env}"] if env else [])
            + ([f"models.policy.model={policy}"] if policy else [])
        )
        cfg = load_config(config, sets)
    setup_logging(cfg.run.log_level)
    problem = registry_problem(cfg, training=False)  # what `config validate --for eval` says, before any model
    if problem is not None:
        raise ConfigError(problem)
    out = out or Path(cfg.run.out_dir) / f"eval-{datetime.now():%Y%m%d-%H%M%S}" / "results.jsonl"
    t0 = time.perf_counter()
    if leaderboard:
        if panel is not None or cfg.env.name != "bfcl" or cfg.env.family:
            raise ConfigError(
                "--leaderboard scores BFCL's own multi-turn categories: env.name bfcl, no env.family, no --panel"
            )
        scores = _leaderboard(cfg, subset or "all", limit, out, experiences, estimate)
        scores["seconds"] = round(time.perf_counter() - t0, 1)
        emit_json(scores) if as_json else sys.stdout.write(" ".join(f"{k_}={v}" for k_, v in scores.items()) + "\n")
        return
    if panel is not None:
        tasks, k = list(panel.tasks), panel.k
    else:
        tasks = _tasks(cfg, split, subset or cfg.env.eval_split, limit)
    try:
        report = _evaluate(cfg, tasks, k, out, experiences, estimate)
    except KeyboardInterrupt:
        sys.stderr.write(resume_hint(out, sys.argv[1:]) + "\n")
        raise
    # what was evaluated: a family's tasks (its split), another environment's tasks, or a BFCL category
    what = (
        {"family": cfg.env.family, "split": subset or cfg.env.eval_split}
        if cfg.env.family
        else {"env": cfg.env.name, "split": subset or cfg.env.eval_split}
        if cfg.env.name != "bfcl"
        else {"category": split, "split": subset or cfg.env.eval_split}
    )
    summary = {**report.summary(), **what, **examples_provenance(cfg.env.worked_examples), "results": str(out)}
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    if panel is not None:
        summary["panel"] = str(panel_in)
        if not policy:  # the same policy: were the panel's figures reproduced?
            differ = reproduced(panel, report.summary())
            summary["reproduced"] = not differ
            for key, (then, now) in differ.items():
                log.warning("panel %s: %s was %s, now %s", panel_in, key, then, now)
    if panel_out is not None:
        config_json = cfg.model_dump(mode="json")
        made = make_panel(code_commit(), config_json, k, tasks, cfg.models.policy.model, report.summary())
        panel_out.parent.mkdir(parents=True, exist_ok=True)
        panel_out.write_text(panel_json(made))
        summary["panel_out"] = str(panel_out)
    if as_json:
        emit_json(summary)
    else:
        sys.stdout.write(" ".join(f"{k_}={v}" for k_, v in summary.items()) + "\n")
