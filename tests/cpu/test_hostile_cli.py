"""Hostile but fair input at the command line: a bad config, task file, panel or experience file gets exit 2 and one
line, before any model loads or any run folder is made, and changes nothing (the service's and environments' side
is test_hostile.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


# -- 5. bad configs and files: exit 2, one line, no run folder --------------------------------------------------
def _evolvekit(*args, cwd):
    """The CLI's real entry point (``main()``) in this process: exit code and output, as a subprocess would see
    them, at a fraction of the start-up cost (test_cli_subprocess_... checks one case through a real process)."""
    import contextlib
    import io

    from evolvekit.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    old_argv, old_cwd = sys.argv, os.getcwd()
    sys.argv = ["evolvekit", *args]
    os.chdir(cwd)
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        sys.argv = old_argv
        os.chdir(old_cwd)
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


@pytest.mark.slow
def test_cli_subprocess_bad_value_exits_2_with_one_line(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "evolvekit.cli.main",
            "run",
            QUICKSTART,
            "--set",
            "train.learning_rate=nan",
            "--set",
            f"run.out_dir={tmp_path / 'runs'}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (
        out.returncode == 2
        and out.stderr.strip().splitlines() == [out.stderr.strip()]
        and "train.learning_rate" in out.stderr
    )
    assert not (tmp_path / "runs").exists()


QUICKSTART = str(Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml")


@pytest.mark.parametrize(
    "override",
    [
        "train.iterations=-3",
        "rollout.group_size=0",
        "rollout.group_size=-1",
        "train.micro_batch_size=0",
        "train.eval_k=0",
        "train.eval_tasks=-1",
        "train.tasks_per_iteration=0",
        "rollout.max_steps=0",
        "train.learning_rate=-1",
        "train.learning_rate=nan",
        "models.policy.max_new_tokens=-5",
        "run.out_dir=/proc/x",
        "run.name=../escape",
        "models.policy.backend=openai",
        "coevolve.enabled=true questioning.enabled=false",
        "evolving_rl.enabled=true navigating.enabled=true",
    ],
)
def test_bad_run_configs_exit_2_with_one_line_and_no_run_folder(tmp_path, override):
    sets = [a for o in override.split() for a in ("--set", o)]
    out = _evolvekit("run", QUICKSTART, "--set", f"run.out_dir={tmp_path / 'runs'}", *sets, cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-500:]
    assert len(out.stderr.strip().splitlines()) == 1 and out.stderr.startswith("error: ")
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    # `config validate` accepts exactly what `run` accepts
    val = _evolvekit("config", "validate", QUICKSTART, *sets, cwd=tmp_path)
    assert val.returncode == 2 and len(val.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("content", [b"\xff\xfe\x00 binary \x89PNG", b"train: {iterations: [", b"- a\n- b\n"])
def test_bad_config_files_exit_2_with_one_line(tmp_path, content):
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    for args in (["run", str(path)], ["config", "validate", str(path)]):
        out = _evolvekit(*args, cwd=tmp_path)
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr[-500:]
        assert str(path) in out.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "content, expect",
    [
        (b"{not json\n", ":1: not a task"),
        (os.urandom(2000), "not UTF-8"),
        (b'{"task_id": 5}\n', "task_id"),
        (b'{"a":' * 3000 + b"1" + b"}" * 3000 + b"\n", ":1: not a task"),
        (b"[1, 2]\n", "not a task"),
    ],
)
def test_tasks_check_on_garbage_exits_2_with_one_line(tmp_path, content, expect):
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(content)
    out = _evolvekit("tasks", "check", str(path), cwd=tmp_path)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr[-500:]
    assert expect in out.stderr


def test_experiences_import_of_garbage_exits_2_and_changes_nothing(tmp_path):
    from evolvekit.navigating.pool import ExperiencePool
    from evolvekit.types import Experience

    pool = ExperiencePool(lambda texts: __import__("numpy").ones((len(texts), 4), dtype="float32") / 2)
    good = Experience(when_to_use="adding numbers", content="call add").model_dump_json()
    path = tmp_path / "pool.jsonl"
    path.write_text(good + "\n" + "garbage\n")
    from evolvekit.errors import ConfigError

    with pytest.raises(ConfigError, match=":2: not an experience"):
        pool.import_jsonl(path)
    assert len(pool) == 0  # the good first line was not half-imported


@pytest.mark.parametrize("folder", ["empty", "not-a-model", "missing"])
def test_eval_policy_without_a_model_exits_2_with_one_line(tmp_path, folder):
    target = tmp_path / folder
    if folder != "missing":
        target.mkdir()
    if folder == "not-a-model":
        (target / "config.json").write_text("{}")
    out = _evolvekit("eval", "--policy", str(target), "--limit", "1", "--k", "1", cwd=tmp_path)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr[-800:]
    assert str(target) in out.stderr


@pytest.mark.slow
def test_an_unknown_environment_is_refused_before_any_model_or_folder(tmp_path):
    """Issue 52 (10): an unknown env.name was reported only after the models had loaded."""
    out = subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", "run", QUICKSTART, "--set", "env.name=nope",
         "--set", f"run.out_dir={tmp_path}/runs"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2 and "env.name" in out.stderr and out.stderr.count("\n") == 1, out.stderr
    assert not (tmp_path / "runs").exists()


def test_imported_experiences_are_capped_per_field_and_per_file(tmp_path):
    """Issue 52 (10): imported experiences had no size cap."""
    from pydantic import ValidationError

    from evolvekit.errors import ConfigError
    from evolvekit.navigating import pool as pool_mod
    from evolvekit.types import MAX_EXPERIENCE_CHARS, Experience

    with pytest.raises(ValidationError):
        Experience(when_to_use="w", content="c" * (MAX_EXPERIENCE_CHARS + 1))
    path = tmp_path / "pool.jsonl"
    path.write_text(Experience(when_to_use="w", content="c").model_dump_json() + "\n")
    big = tmp_path / "big.jsonl"
    big.write_text('{"when_to_use": "w", "content": "' + "c" * (MAX_EXPERIENCE_CHARS + 1) + '"}\n')
    pool = pool_mod.ExperiencePool(lambda texts: __import__("numpy").ones((len(texts), 4)), theta_sim=2.0)
    with pytest.raises(ConfigError, match="big.jsonl:1"):
        pool.import_jsonl(big)
    old = pool_mod.MAX_IMPORT_EXPERIENCES
    try:
        pool_mod.MAX_IMPORT_EXPERIENCES = 0
        with pytest.raises(ConfigError, match="more than the 0"):
            pool.import_jsonl(path)
    finally:
        pool_mod.MAX_IMPORT_EXPERIENCES = old
    assert len(pool) == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "body, needle",
    [
        ("not json {", "not a panel file"),
        ('{"version": 1}', "not a panel file"),
        (
            '{"version": 99, "code": "x", "config": {}, "k": 1, "tasks": [], "task_hashes": [], "model": "m", '
            '"model_sha256": "0"}',
            "version 99",
        ),
    ],
)
def test_a_hostile_panel_file_is_one_line_exit_2(tmp_path, body, needle):
    """A panel (eval --panel) comes from outside: a malformed one is refused in one line before anything loads; its
    config is validated like any config and its tasks are checked against their hashes (test_eval_cli)."""
    path = tmp_path / "panel.json"
    path.write_text(body)
    out = subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", "eval", "--panel", str(path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and needle in out.stderr, out.stderr


def test_eval_with_an_engine_it_cannot_build_exits_2_before_any_model(tmp_path):
    """`eval` builds the configured rollout engine (issue 79.2), so it asks the engine's rules first, as `config
    validate --for eval` does: one line, no model loaded, no results file."""
    out_file = tmp_path / "r.jsonl"
    sets = ["--set", "models.policy.engine=warp"]
    out = _evolvekit("eval", "--limit", "1", "--k", "1", "--out", str(out_file), *sets, cwd=tmp_path)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr[-500:]
    assert "models.policy.engine: unknown engine 'warp'" in out.stderr and not out_file.exists()
    val = _evolvekit("config", "validate", QUICKSTART, "--for", "eval", *sets, cwd=tmp_path)
    assert val.returncode == 2 and "unknown engine 'warp'" in val.stderr
