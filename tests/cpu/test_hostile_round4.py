"""Hostile input, round four (issue 99): the run folder is the run's. Each test here fails on main at e7b585b.
(The number bounds and run.name: tests/cpu/test_config.py; task files: tests/cpu/test_task_files.py.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from evolvekit.config import load_config
from evolvekit.errors import ConfigError


def _closed_run(tmp_path: Path) -> Path:
    from evolvekit.orchestrator.run_dir import open_run

    _, run_dir, store = open_run(load_config(None, [f"run.out_dir={tmp_path / 'runs'}"]), None)
    store.close()
    return run_dir


@pytest.mark.parametrize("link", ["checkpoints", "checkpoints/iter-0000", "run.sqlite"])
def test_resume_refuses_a_run_folder_whose_own_paths_are_symlinks_leading_out(tmp_path: Path, link: str):
    from evolvekit.orchestrator.run_dir import open_run

    run_dir = _closed_run(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    target = run_dir / link
    if link == "run.sqlite":
        (outside / "run.sqlite").write_bytes(target.read_bytes())
        target.unlink()
        target.symlink_to(outside / "run.sqlite")
    else:
        target.parent.mkdir(exist_ok=True)
        target.symlink_to(outside, target_is_directory=True)
    with pytest.raises(ConfigError, match="symlink leading out of the run folder"):
        open_run(None, run_dir)
    assert list(outside.iterdir()) == ([outside / "run.sqlite"] if link == "run.sqlite" else [])  # nothing written


def test_a_symlink_inside_the_run_folder_is_no_escape(tmp_path: Path):
    from evolvekit.orchestrator.run_dir import leads_out, open_run

    run_dir = _closed_run(tmp_path)
    (run_dir / "kept").mkdir()
    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints" / "iter-0000").symlink_to(run_dir / "kept", target_is_directory=True)
    assert leads_out(run_dir) is None
    _, _, store = open_run(None, run_dir)
    store.close()


def test_resume_from_the_command_line_with_an_escaping_checkpoints_link_is_exit_2_and_one_line(tmp_path: Path):
    run_dir = _closed_run(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    (run_dir / "checkpoints").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    res = subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", "run", "--resume", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr[-2000:]
    assert "checkpoints is a symlink" in res.stderr


# ---- MCP tool names (issue 99.5) ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "names, says",
    [
        (["save", "save", "save"], "'save' twice"),
        (["s\u202eevas"], "control, invisible or space"),  # shows as "save"
        (["zero\u200bwidth"], "control, invisible or space"),
        (["nul\x00"], "control, invisible or space"),
        (["s\u0430ve"], "mixes scripts (CYRILLIC, LATIN)"),  # a Cyrillic а among Latin letters
        (["see", "\u0455\u0435\u0435"], "look the same"),  # all-Cyrillic ѕее beside Latin see
        (["cafe", "cafe\u0301"], "look the same"),
    ],
)
def test_misleading_mcp_tool_names_are_refused_naming_the_server(names: list[str], says: str):
    from types import SimpleNamespace

    from evolvekit.env.mcp import tool_schemas
    from evolvekit.errors import EnvError

    tools = [SimpleNamespace(name=n, description="d", input_schema={}) for n in names]
    with pytest.raises(EnvError, match="the MCP server 'files' lists") as err:
        tool_schemas(tools, set(), "files")
    assert says in str(err.value) and "\n" not in str(err.value)


def test_plain_tool_names_of_any_one_script_pass():
    from types import SimpleNamespace

    from evolvekit.env.mcp import tool_schemas

    names = ["read_file", "write-file", "git.commit", "сохранить", "保存"]
    tools = [SimpleNamespace(name=n, description="d", input_schema={}) for n in names]
    assert list(tool_schemas(tools, set())) == names


# ---- disk faults while writing a checkpoint (issue 99.3) -------------------------------------------------------------

_SAVE_UNDER_A_SIZE_LIMIT = r"""
import json, resource, signal, sys
from pathlib import Path
from evolvekit.config import TrainConfig
from evolvekit.llm.local import LocalLLM
from evolvekit.train.trainer import GRPOTrainer

model, out, limit = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
tr = GRPOTrainer(LocalLLM(str(model), device="cpu"), TrainConfig(autocast="off"))
for p in tr.policy.model.parameters():  # one optimizer step: Adam's state, twice the weights, for optimizer.pt
    p.grad = p.detach() * 0
tr.policy.optimizer.step()
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
try:
    tr.save(out)
    print(json.dumps({"saved": True}))
except OSError as err:
    print(json.dumps({"errno": err.errno, "filename": err.filename, "strerror": err.strerror}))
"""


@pytest.mark.parametrize("limit", [4096, None])  # safetensors' weights fail; or (None) torch's optimizer state
def test_a_checkpoint_write_past_a_file_size_limit_is_an_oserror_naming_the_path_and_leaves_nothing(
    tmp_path: Path, limit: int | None
):
    """torch's RuntimeError ("enforce fail at inline_container.cc") and safetensors' SafetensorError were not
    OSErrors: the command line printed a 76-line traceback. Now the save raises the OSError they stand for, naming
    the checkpoint, and removes its half-written folder; the command line prints it as one line."""
    import json

    from evolvekit.cli.main import os_error_line
    from evolvekit.llm.tiny import make_tiny_model

    model = make_tiny_model(tmp_path / "model")
    if limit is None:  # the weights fit, the optimizer state (twice their size) does not
        limit = sum(f.stat().st_size for f in model.glob("*.safetensors")) + 2**16
    out = tmp_path / "checkpoints" / "iter-0001"
    res = subprocess.run(
        [sys.executable, "-c", _SAVE_UNDER_A_SIZE_LIMIT, str(model), str(out), str(limit)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got.get("filename") == str(out), got
    assert got["errno"] is not None
    writer = "SafetensorError" if limit == 4096 else "RuntimeError: [enforce fail at inline_container"
    assert writer in got["strerror"], got
    assert not out.exists() and not out.with_name("iter-0001.tmp").exists()
    line = os_error_line(OSError(got["errno"], got["strerror"], got["filename"]))
    assert "\n" not in line and str(out) in line


def test_write_failure_translates_only_writer_errors():
    import errno

    from evolvekit.train.checkpoint import write_failure

    p = Path("/runs/x/checkpoints/iter-0001")
    torch_err = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")
    got = write_failure(p, torch_err)
    assert isinstance(got, OSError) and got.filename == str(p) and "inline_container" in got.strerror
    safetensors_like = type("SafetensorError", (Exception,), {})("Error while serializing: I/O error: (os error 28)")
    assert write_failure(p, safetensors_like).errno == errno.ENOSPC  # type: ignore[union-attr]
    assert write_failure(p, RuntimeError("CUDA out of memory")) is None  # a bug stays a bug
    assert write_failure(p, ValueError("inline_container")) is None
