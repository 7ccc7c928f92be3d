"""The ``evolvekit`` command line."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Optional

import typer

from evolvekit.cli.common import ConfigOpt, JsonOpt, SetOpt, console, emit_json, one_line, setup_logging
from evolvekit.errors import EvolveKitError

app = typer.Typer(
    help="evolvekit: LLM agents that train themselves.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        from evolvekit.provenance import code_commit

        sys.stdout.write(f"evolvekit {version('evolvekit')} ({code_commit()})\n")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="print the version and the code's commit"
    ),
) -> None:
    """evolvekit: LLM agents that train themselves."""


llm_app = typer.Typer(help="Talk to the configured LLMs.", no_args_is_help=True)
config_app = typer.Typer(help="Inspect and validate configuration.", no_args_is_help=True)
app.add_typer(llm_app, name="llm")
app.add_typer(config_app, name="config")

from evolvekit.cli.env_cmd import env_app  # noqa: E402

app.add_typer(env_app, name="env")

from evolvekit.cli.eval_cmd import eval_command  # noqa: E402
from evolvekit.cli.experiences_cmd import experiences_app  # noqa: E402
from evolvekit.cli.run_cmd import run_command  # noqa: E402

app.add_typer(experiences_app, name="experiences")
from evolvekit.cli.tasks_cmd import tasks_app  # noqa: E402

app.add_typer(tasks_app, name="tasks")
from evolvekit.cli.report_cmd import ablate_command, dashboard_command, report_command  # noqa: E402

app.command("report")(report_command)
app.command("dashboard")(dashboard_command)
app.command("ablate")(ablate_command)

app.command("eval")(eval_command)
app.command("run")(run_command)

SetOpt = SetOpt


@config_app.command("show")
def config_show(
    config: Optional[Path] = typer.Argument(None, help="YAML config (defaults if omitted)"),
    overrides: Optional[list[str]] = SetOpt,
    show_all: bool = typer.Option(
        False,
        "--all",
        help="print every setting, also those this config never reads (switched-off sections, "
        "model roles nothing builds, another engine's or backend's fields)",
    ),
) -> None:
    """Print the validated config with every parameter's meaning and source equation: what this config reads
    (--all: everything)."""
    from evolvekit.config import (
        count_settings,
        dump_commented_yaml,
        helper_sources,
        inert_settings,
        load_config,
        paper_departures,
    )
    from evolvekit.engine.registry import engine_settings
    from evolvekit.env.registry import load_plugins
    from evolvekit.resolve import auto_resolutions

    cfg = load_config(config, overrides)
    load_plugins(cfg.env.plugins)  # a plugin's engine declares its own settings
    hidden = {} if show_all else inert_settings(cfg, engine_settings())
    shown, total = count_settings(cfg, hidden=hidden), count_settings(cfg)
    counted = f"# {shown} settings shown" + (f" of {total} (config show --all prints them all)" if hidden else "")
    sources = ", ".join(f"{role}: {src}" for role, src in helper_sources(cfg).items())
    oracle = "# ORACLE: run.oracle lets person-written gold reach training\n" if cfg.run.oracle else ""
    if cfg.env.worked_examples == "person":
        oracle += (
            "# PERSON-WRITTEN EXAMPLES: env.worked_examples: person (a person's worked examples in every prompt)\n"
        )
    away = paper_departures(cfg)
    departures = (
        f"# {len(away)} values differ from the papers' (marked '≠ paper'): " + ", ".join(away) + "\n" if away else ""
    )
    autos = [r for r in auto_resolutions(cfg) if not any(r.field == h or r.field.startswith(h + ".") for h in hidden)]
    resolved = f"# {len(autos)} 'auto' values resolved on this machine:\n" if autos else ""
    resolved += "".join(f"#   {r.field} = {r.value}  ({r.reason})\n" for r in autos)
    rules = cfg._derived
    derived = f"# {len(rules)} values follow from other settings (marked 'set by'): {', '.join(rules)}\n"
    derived = derived if rules else ""
    sys.stdout.write(
        oracle
        + f"# helper sources ('auto' resolved for these models): {sources}\n"
        + resolved
        + departures
        + derived
        + counted
        + "\n"
        + dump_commented_yaml(cfg, hidden=hidden)
        + "\n"
    )


@config_app.command("validate")
def config_validate(
    config: Path = typer.Argument(..., help="YAML config"),
    overrides: Optional[list[str]] = SetOpt,
    purpose: str = typer.Option("run", "--for", help="run (train: the default) or eval"),
) -> None:
    """Validate a config file; exit 2 with one line naming the problem. Accepts exactly what `run` accepts
    (with --for eval: what `eval` accepts, e.g. a served policy)."""
    from evolvekit.config import load_config, out_dir_problem, training_problem
    from evolvekit.errors import ConfigError

    if purpose not in ("run", "eval"):
        raise ConfigError(f"--for must be run or eval, got {purpose!r}")
    from evolvekit.orchestrator.run_dir import registry_problem

    cfg = load_config(config, overrides)
    training = purpose == "run"
    problem = (training_problem(cfg) or out_dir_problem(cfg.run.out_dir)) if training else None
    problem = problem or registry_problem(cfg, training)
    if problem is not None:
        raise ConfigError(f"{config}: {problem}")
    console.print(f"{config}: ok")


@app.command("export")
def export_command(
    source: Path = typer.Argument(..., help="a run folder (its newest intact checkpoint) or a checkpoint folder"),
    out: Path = typer.Option(..., "--out", help="the new folder: a plain Hugging Face model (LoRA merged)"),
    as_json: bool = JsonOpt,
) -> None:
    """Export a policy as a plain Hugging Face folder that AutoModelForCausalLM loads alone (LoRA merged)."""
    from evolvekit.train.export import export_policy

    setup_logging("INFO")
    folder = export_policy(source, out)
    emit_json({"out": str(folder)}) if as_json else sys.stdout.write(f"{folder}\n")


@llm_app.command("path")
def llm_path(
    name: str = typer.Argument("embedded:smollm2-135m-instruct", help="an embedded model name, or a path or hub id"),
) -> None:
    """Print the local folder of an embedded model (converted on first use), e.g. for `transformers serve`."""
    from evolvekit.llm.embedded import resolve_model_path

    setup_logging("WARNING")
    sys.stdout.write(resolve_model_path(name) + "\n")


@llm_app.command("chat")
def llm_chat(
    prompt: str = typer.Argument(..., help="user message"),
    role: str = typer.Option("policy", help="which LLM role to use"),
    config: Optional[Path] = ConfigOpt,
    overrides: Optional[list[str]] = SetOpt,
    system: Optional[str] = typer.Option(None, help="optional system message"),
    temperature: float = typer.Option(0.0, help="0 = greedy"),
    max_new_tokens: int = typer.Option(128, help="most tokens to generate"),
    seed: Optional[int] = typer.Option(None, help="sampling seed (default: none)"),
    as_json: bool = JsonOpt,
) -> None:
    """Send one message to an LLM role (the embedded model by default) and print the answer."""
    from evolvekit.config import load_config
    from evolvekit.llm.base import SamplingParams
    from evolvekit.llm.factory import role_llm
    from evolvekit.types import ChatMessage

    cfg = load_config(config, overrides)
    setup_logging(cfg.run.log_level)
    t0 = time.perf_counter()
    llm = role_llm(cfg.models, role)
    load_s = time.perf_counter() - t0
    messages = ([ChatMessage(role="system", content=system)] if system else []) + [
        ChatMessage(role="user", content=prompt)
    ]
    t1 = time.perf_counter()
    comp = llm.chat([messages], SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed))[0][0]
    gen_s = time.perf_counter() - t1
    n_tok = comp.num_completion_tokens
    if as_json:
        emit_json(
            {
                "text": comp.text,
                "model": llm.name,
                "role": role,
                "completion_tokens": n_tok,
                "prompt_tokens": comp.num_prompt_tokens,
                "finish_reason": comp.finish_reason,
                "load_s": round(load_s, 3),
                "generate_s": round(gen_s, 3),
                "tokens_per_s": round(n_tok / gen_s, 2) if gen_s > 0 else None,
            }
        )
    else:
        sys.stdout.write(comp.text + "\n")


def main() -> None:
    setup_logging("WARNING")
    try:
        app()
    except EvolveKitError as err:
        sys.stderr.write(f"error: {one_line(str(err))}\n")  # one plain line: no wrapping, no traceback
        sys.exit(2)
    except KeyboardInterrupt:
        console.print("interrupted")
        sys.exit(130)
    except OSError as err:  # a full disk, a file-size limit, a read-only mount: one line, what was written is kept
        sys.stderr.write(f"error: {one_line(os_error_line(err))}\n")
        sys.exit(1)


def os_error_line(err: OSError) -> str:
    """One line for a disk or file-system error: what failed, on which path, and the system's word for it."""
    import errno

    name = errno.errorcode.get(err.errno or 0, "")
    where = f" {err.filename}" if err.filename else ""
    hint = {
        "ENOSPC": "the disk is full; free space and run the same command again (finished work is kept)",
        "EFBIG": "a file reached the file-size limit (ulimit -f)",
        "EROFS": "the file system is read-only; give an output path on a writable one",
        "EDQUOT": "the disk quota is used up",
    }.get(name, "")
    return f"cannot write or read{where}: {err.strerror or type(err).__name__} ({name or 'OSError'})" + (
        f"; {hint}" if hint else ""
    )


if __name__ == "__main__":
    main()
