"""``evolvekit experiences``: build, query, export and import a run's experience pool."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from evolvekit.cli.common import JsonOpt, console, emit_json, setup_logging

experiences_app = typer.Typer(help="Inspect and share a run's experience pool (self-navigating).", no_args_is_help=True)

RunOpt = typer.Option(..., "--run", help="run directory (runs/<name>-<timestamp>)")


def _open(run: Path, writes: bool = True):
    """The run's config, store and pool; a command that ``writes`` the pool locks the run folder (refused while the
    run is going), one that only reads does not."""
    from evolvekit.llm.factory import build_embedder
    from evolvekit.navigating.pool import ExperiencePool
    from evolvekit.orchestrator.run_dir import open_run

    cfg, run_dir, store = open_run(None, run, lock=writes)
    setup_logging(cfg.run.log_level)
    pool = ExperiencePool(build_embedder(cfg.embedding).embed, cfg.navigating.theta_sim)
    pool.load(store.experiences())
    return cfg, store, pool


def _save(store, pool, iteration: int | None = None) -> None:
    stored = {e.experience_id for e in store.experiences()}
    current = {e.experience_id for e in pool.items}
    with store.transaction() as c:
        store.delete_experiences(c, sorted(stored - current))
        store.put_experiences(c, pool.items, iteration if iteration is not None else -1, pool.vectors)


@experiences_app.command("build")
def build(run: Path = RunOpt, as_json: bool = JsonOpt) -> None:
    """Extract experiences from every stored training trajectory of a run (the summarizer role) into its pool."""
    from evolvekit.engine.registry import seam
    from evolvekit.llm.factory import role_llm, sampling_for
    from evolvekit.navigating.extract import ExperienceExtractor, llm_equivalence

    cfg, store, pool = _open(run)
    llm = role_llm(cfg.models, "summarizer")
    params = sampling_for(cfg.models.summarizer)
    pool.equivalent = llm_equivalence(llm, params)
    extractor = ExperienceExtractor(
        seam(llm), params, cfg.navigating.validate_experiences, cfg.reward.success_threshold
    )
    report = extractor.extract(store.trajectories(None, "train"), store.task_index())
    actions = [pool.add(e).action for e in report.experiences]
    _save(store, pool)
    summary = {
        "pool_size": len(pool),
        "added": actions.count("added"),
        "merged": actions.count("merged"),
        "calls": report.calls,
        "unparseable": report.unparseable,
        "rejected": report.rejected,
    }
    store.close()
    emit_json(summary) if as_json else console.print(summary)


@experiences_app.command("query")
def query(
    text: str = typer.Argument(..., help="a task description"),
    run: Path = RunOpt,
    k: int = typer.Option(5, help="top-k"),
    as_json: bool = JsonOpt,
) -> None:
    """Retrieve the top-k experiences for a task (Eq. 14, without the LLM refine step)."""
    _, store, pool = _open(run, writes=False)
    hits = [
        {
            "experience_id": e.experience_id,
            "similarity": round(s, 4),
            "score": round(e.score, 4),
            "when_to_use": e.when_to_use,
            "content": e.content,
        }
        for e, s in pool.retrieve(text, k)
    ]
    store.close()
    if as_json:
        emit_json({"query": text, "results": hits})
    else:
        for h in hits:
            sys.stdout.write(f"[{h['similarity']:.3f}] when to use: {h['when_to_use']}\n    {h['content']}\n")


@experiences_app.command("export")
def export(run: Path = RunOpt, out: Path = typer.Option(..., "--out", help="JSONL file to write")) -> None:
    """Write the pool as JSONL (one experience per line) to share it with another run."""
    _, store, pool = _open(run, writes=False)
    n = pool.export_jsonl(out)
    store.close()
    console.print(f"{n} experiences -> {out}")


@experiences_app.command("import")
def import_(path: Path = typer.Argument(..., help="JSONL written by `experiences export`"), run: Path = RunOpt) -> None:
    """Add a shared pool to a run's pool (near-duplicates are merged at θ_sim)."""
    from evolvekit.errors import ConfigError

    if not path.is_file():
        raise ConfigError(f"no such file: {path}")
    _, store, pool = _open(run)
    actions = [r.action for r in pool.import_jsonl(path)]
    _save(store, pool)
    store.close()
    console.print(f"imported {actions.count('added')} new, merged {actions.count('merged')}; pool size {len(pool)}")


@experiences_app.command("from-family")
def from_family(
    family: str = typer.Argument(..., help="task family, e.g. arith"),
    out: Path = typer.Option(..., "--out", help="JSONL file to write (for navigating.seed_file)"),
) -> None:
    """Write a task family's worked examples as experiences (JSONL), to seed a pool (navigating.seed_file)."""
    from evolvekit.env.bfcl.families import get_family
    from evolvekit.navigating.seed import family_experiences

    items = family_experiences(get_family(family))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(e.model_dump_json() + "\n" for e in items))
    console.print(f"{len(items)} experiences -> {out}")
