"""Hostile input and faults, round three (issue 78, item 6): bounded work, one clear line, nothing lost.

Each test here fails on main at 37c233b.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from evolvekit.config import load_config
from evolvekit.errors import ConfigError
from evolvekit.safeyaml import YamlTooLarge, expanded_nodes, load_yaml


def _bomb(levels: int = 9, width: int = 9) -> str:
    """A "billion laughs" document: each level a list of ``width`` aliases to the one before (9**9 values)."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        refs = ", ".join([f"*a{i - 1}"] * width)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + "\n"


def _bomb_in_a_free_form_field() -> str:
    """The bomb as the value of a free-form field (``env.remote_params``: any JSON), where no unknown-key check stops
    it: at 37c233b `load_config` accepted it and `config show` and `run` expanded it past 3 GB."""
    return "env:\n  remote_params:\n" + "".join(f"    {line}\n" for line in _bomb().splitlines())


# ---- YAML aliases are bounded --------------------------------------------------------------------------------------


def test_expanded_nodes_counts_each_reference_of_a_shared_node_by_hand():
    node = yaml.compose("a: &x [1, 2]\nb: [*x, *x]\n")
    # root 1 + 'a' 1 + [1,2] 3 + 'b' 1 + [*x,*x] (1 + 3 + 3) = 13
    assert expanded_nodes(node, 100) == 13
    with pytest.raises(YamlTooLarge):
        expanded_nodes(node, 12)


def test_a_recursive_anchor_is_refused():
    with pytest.raises(YamlTooLarge, match="refers to itself"):
        load_yaml("a: &x [1, *x]\n")


def test_aliases_within_bounds_load_as_safe_load_does():
    text = "base: &b {lr: 0.1, steps: 3}\nrun: {<<: *b, steps: 4}\n"
    assert load_yaml(text) == yaml.safe_load(text)


def test_an_alias_bomb_in_a_config_file_is_one_config_error_in_bounded_time(tmp_path: Path):
    path = tmp_path / "bomb.yaml"
    path.write_text(_bomb_in_a_free_form_field() + "run: {name: x}\n")
    start = time.monotonic()
    with pytest.raises(ConfigError, match="aliases"):
        load_config(path)
    assert time.monotonic() - start < 5


def test_an_alias_bomb_in_an_override_is_refused():
    assert load_yaml("[&a [x, x], *a]") == [["x", "x"], ["x", "x"]]  # a small one is fine
    deep = "&a0 [x, x, x, x, x, x, x, x, x]"
    for i in range(1, 9):
        deep = f"&a{i} [{deep}, " + ", ".join([f"*a{i - 1}"] * 8) + "]"
    with pytest.raises(ConfigError, match="--set value"):
        load_config(None, [f"env.plugins={deep}"])


@pytest.mark.parametrize("command", [["config", "show"], ["config", "validate"], ["run"]])
def test_the_cli_answers_an_alias_bomb_with_exit_2_one_line_and_no_run_folder(tmp_path: Path, command):
    path = tmp_path / "bomb.yaml"
    path.write_text(_bomb_in_a_free_form_field() + f"run: {{out_dir: {tmp_path / 'runs'}}}\n")
    res = subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", *command, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert res.returncode == 2, res.stderr[-2000:]
    assert len(res.stderr.strip().splitlines()) == 1 and "aliases" in res.stderr
    assert not (tmp_path / "runs").exists()


def test_an_alias_bomb_in_an_ablation_spec_is_refused(tmp_path: Path):
    from evolvekit.report.ablate import load_spec

    path = tmp_path / "spec.yaml"
    path.write_text(_bomb() + "base: quickstart.yaml\nrows: [{name: a}]\n")
    with pytest.raises(ConfigError, match="aliases"):
        load_spec(path)


# ---- a run folder is locked; a damaged store is refused with one line ----------------------------------------------


def _new_run(tmp_path: Path):
    from evolvekit.orchestrator.run_dir import open_run

    return open_run(load_config(None, [f"run.out_dir={tmp_path}"]), None)


def test_a_run_folder_is_locked_while_its_store_is_open(tmp_path: Path):
    from evolvekit.orchestrator.run_dir import open_run

    _, run_dir, store = _new_run(tmp_path)
    with pytest.raises(ConfigError, match="in use by another process"):
        open_run(None, run_dir)
    store.close()
    _, _, again = open_run(None, run_dir)  # released with the store
    with pytest.raises(ConfigError, match="in use"):
        open_run(None, run_dir)
    again.close()


def test_a_second_resume_from_the_command_line_is_exit_2_and_one_line(tmp_path: Path):
    _, run_dir, store = _new_run(tmp_path)
    try:
        res = subprocess.run(
            [sys.executable, "-m", "evolvekit.cli.main", "run", "--resume", str(run_dir)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        store.close()
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "in use" in res.stderr


def test_an_emptied_store_is_refused_not_started_over(tmp_path: Path):
    from evolvekit.orchestrator.run_dir import open_run

    _, run_dir, store = _new_run(tmp_path)
    store.close()
    (run_dir / "run.sqlite").write_bytes(b"")
    with pytest.raises(ConfigError, match="empty"):
        open_run(None, run_dir)
    assert (run_dir / "run.sqlite").stat().st_size == 0  # nothing written to it


def test_a_truncated_or_foreign_store_is_refused_with_one_line(tmp_path: Path):
    import sqlite3

    from evolvekit.orchestrator.run_dir import open_run

    _, run_dir, store = _new_run(tmp_path)
    for i in range(200):
        store.set_meta(f"k{i}", "x" * 2000)
    store.close()
    path = run_dir / "run.sqlite"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ConfigError, match="damaged"):
        open_run(None, run_dir)
    path.unlink()
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE other (x)")
    con.close()
    with pytest.raises(ConfigError, match="not a run's store"):
        open_run(None, run_dir)
    path.write_bytes(b"this is no database" * 100)
    res = subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", "run", "--resume", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "damaged" in res.stderr


# ---- the dashboard answers only for the loopback names -------------------------------------------------------------


def test_the_dashboard_refuses_a_foreign_host_header(tmp_path: Path):
    from fastapi.testclient import TestClient

    from evolvekit.report.dashboard import create_collection_dashboard, create_dashboard

    _, run_dir, store = _new_run(tmp_path)
    store.close()
    for app in (create_dashboard(run_dir), create_collection_dashboard(tmp_path)):
        assert TestClient(app, base_url="http://evil.example").get("/").status_code == 400
        assert TestClient(app, base_url="http://127.0.0.1:8770").get("/").status_code == 200
        assert TestClient(app, base_url="http://localhost:8770").get("/").status_code == 200
    sub = "/runs/" + run_dir.name + "/tasks"
    assert TestClient(create_collection_dashboard(tmp_path), base_url="http://evil.example").get(sub).status_code == 400


# ---- imported experience counters are validated --------------------------------------------------------------------


@pytest.mark.parametrize(
    "counters, field",
    [
        ({"use_count": -2}, "use_count"),
        ({"use_count": -1_000_000_000}, "use_count"),
        ({"success_count": -1}, "success_count"),
        ({"use_count": 1, "success_count": 5}, "success_count"),
        ({"use_count": 10**12}, "use_count"),
        ({"utility": "nan"}, "utility"),
    ],
)
def test_an_imported_experience_with_impossible_counters_is_refused_naming_the_field(tmp_path: Path, counters, field):
    import json

    from evolvekit.safejson import read_jsonl
    from evolvekit.types import Experience

    path = tmp_path / "pool.jsonl"
    good = {"when_to_use": "w", "content": "c", "use_count": 3, "success_count": 1}
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, **counters}) + "\n")
    with pytest.raises(ConfigError, match=f":2: not an experience: .*{field}|:2: not an experience: .*count"):
        read_jsonl(path, Experience, "an experience")
    assert Experience(**good).score == pytest.approx(2 / 5)  # the score is defined for every accepted counter


# ---- sizes have upper bounds ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field",
    ["rollout.group_size", "train.eval_k", "env.family_tasks", "rollout.max_steps", "train.tasks_per_iteration",
     "train.iterations", "rollout.concurrency", "questioning.n_depth"],
)  # fmt: skip
def test_a_size_past_its_bound_is_one_config_error_naming_the_field(field):
    section, name = field.split(".")
    start = time.monotonic()
    with pytest.raises(ConfigError, match=rf"{section}\.{name}"):
        load_config(None, [f"{field}=1000000000"])
    assert time.monotonic() - start < 5


# ---- legal JSON Schema types render; an episode always closes its environment --------------------------------------


def test_a_union_type_renders_and_validates_as_json_schema_means_it():
    from evolvekit.env.base import ToolSchema
    from evolvekit.env.bfcl.tools import render_compact, validate_call
    from evolvekit.types import ToolCall

    tool = ToolSchema(
        name="find",
        description="Find a thing.",
        parameters={
            "type": "object",
            "properties": {"q": {"type": ["string", "null"]}, "n": {"type": "number"}, "odd": "not a schema"},
            "required": ["q", 7],
        },
    )
    assert render_compact([tool]) == "find(q: str|null, n?: float, odd?: any) - Find a thing."
    assert validate_call(ToolCall(name="find", arguments={"q": None}), tool) == (None, [])
    _, warnings = validate_call(ToolCall(name="find", arguments={"q": 3}), tool)
    assert warnings == ["argument 'q' of find should be str|null, got int"]


class _Tracked:
    """An environment that counts its closes (a server or a JVM in real life)."""

    closed = 0

    def __init__(self):
        from evolvekit.env.base import ResetResult, ToolSchema

        self.reset_result = ResetResult(
            observation="go", tools=[ToolSchema(name="t", description="d", parameters={"type": "object"})]
        )

    def reset(self, task=None, sandbox_config=None):
        return self.reset_result

    def close(self):
        type(self).closed += 1


def _episode(make_env):
    from types import SimpleNamespace

    from evolvekit.agent.rollout import RolloutJob, run_episode
    from evolvekit.agent.templates import TemplateSettings
    from evolvekit.types import Task

    engine = SimpleNamespace(caps=SimpleNamespace(token_ids=False), llm=None)  # a chat-only engine, never called
    job = RolloutJob(task=Task(task_id="t", env_name="x", query="q"), group_id="g")
    return run_episode(engine, job, make_env, "compact", TemplateSettings(), 3)  # type: ignore[arg-type]


def test_a_start_that_fails_after_reset_closes_its_environment(monkeypatch):
    from evolvekit.agent import rollout

    def broken(*a, **kw):
        raise TypeError("unhashable type: 'list'")

    monkeypatch.setattr(rollout, "initial_context", broken)
    _Tracked.closed = 0
    with pytest.raises(StopIteration) as end:
        next(_episode(_Tracked))
    assert end.value.value.flags.failed and "reset" in end.value.value.error
    assert _Tracked.closed == 1


def test_an_episode_dropped_by_its_driver_closes_its_environment():
    _Tracked.closed = 0
    episode = _episode(_Tracked)
    messages = next(episode)  # the first prompt: the episode waits for its completion
    assert messages and _Tracked.closed == 0
    episode.close()  # the driver gives up (its batch failed)
    assert _Tracked.closed == 1


# ---- a shared panel runs no code unless asked ----------------------------------------------------------------------


@pytest.mark.parametrize("where", ["mcp", "plugins"])
def test_a_panel_whose_config_runs_code_is_refused_with_the_commands_shown(tmp_path: Path, where):
    import json
    import os

    from evolvekit.agent.panel import make_panel
    from evolvekit.types import Task

    marker = tmp_path / "ran"
    config = load_config(None, []).model_dump(mode="json")
    if where == "mcp":
        config["env"] = {**config["env"], "name": "mcp", "family": None}
        config["env"]["mcp"] = {**config["env"]["mcp"], "command": ["sh", "-c", f"touch {marker}"]}
    else:
        (tmp_path / "evil_plugin.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
        config["env"] = {**config["env"], "plugins": ["evil_plugin"]}
    # the policy's own weights, so that nothing but the code check stands between the panel and its commands
    task = Task(task_id="t", env_name=config["env"]["name"], query="What is 1 plus 1?")
    panel = make_panel("abc", config, 1, [task], config["models"]["policy"]["model"], {})
    path = tmp_path / "panel.json"
    path.write_text(json.dumps(json.loads(panel.model_dump_json())))
    res = subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", "eval", "--panel", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])},
    )
    assert not marker.exists()  # nothing of the panel ran
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "--run-panel-code" in res.stderr and ("touch" in res.stderr or "evil_plugin" in res.stderr)
    from evolvekit.agent.panel import panel_code_fields

    assert panel_code_fields(config)


def test_a_panel_of_plain_data_names_no_code():
    from evolvekit.agent.panel import panel_code_fields

    assert panel_code_fields(load_config(None, []).model_dump(mode="json")) == {}


def test_a_process_that_joins_or_only_reads_a_run_takes_no_lock(tmp_path: Path):
    from evolvekit.orchestrator.run_dir import open_run

    _, run_dir, store = _new_run(tmp_path)
    _, _, joined = open_run(None, run_dir, lock=False)  # a data-parallel rank; `experiences query`
    joined.close()
    store.close()


# ---- small exits (issue 78.5) --------------------------------------------------------------------------------------


def test_tasks_check_exits_1_when_no_task_is_feasible(tmp_path: Path):
    import json

    meta = {"category": "synthetic", "involved_classes": ["MathAPI"]}
    bad = {"task_id": "t1", "env_name": "bfcl", "query": "Add 1 and 2.", "metadata": meta,
           "reference_solution": [[{"name": "divide", "arguments": {"a": 1, "b": 0}}]]}  # fmt: skip
    good = {**bad, "reference_solution": [[{"name": "add", "arguments": {"a": 1, "b": 2}}]]}
    path = tmp_path / "tasks.jsonl"
    for task, code, feasible in ((bad, 1, 0), (good, 0, 1)):
        path.write_text(json.dumps(task) + "\n")
        res = subprocess.run(
            [sys.executable, "-m", "evolvekit.cli.main", "tasks", "check", str(path), "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == code, res.stderr
        assert json.loads(res.stdout.strip().splitlines()[-1])["feasible"] == feasible
        assert res.stderr.strip().endswith("no task is feasible") == (code == 1)


def test_an_interrupted_eval_says_where_its_episodes_are_and_how_to_continue():
    from evolvekit.cli.eval_cmd import resume_hint

    out = Path("runs/eval-1/results.jsonl")
    hint = resume_hint(out, ["eval", "--limit", "2", "--set", "env.family=arith plus"])
    assert "runs/eval-1/results.episodes.jsonl" in hint
    assert hint.endswith("evolvekit eval --limit 2 --set 'env.family=arith plus' --out runs/eval-1/results.jsonl")
    assert resume_hint(out, ["eval", "--out", "x.jsonl"]).endswith("evolvekit eval --out x.jsonl")


def test_the_eval_command_prints_the_hint_when_interrupted(tmp_path: Path, monkeypatch):
    from typer.testing import CliRunner

    from evolvekit.cli import eval_cmd
    from evolvekit.cli.main import app

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(eval_cmd, "_evaluate", interrupted)
    monkeypatch.setattr(sys, "argv", ["evolvekit", "eval", "--limit", "1"])
    out = tmp_path / "r.jsonl"
    res = CliRunner().invoke(app, ["eval", "--limit", "1", "--out", str(out)])
    assert res.exit_code == 130  # typer's answer to Ctrl-C
    assert f"to continue, run: evolvekit eval --limit 1 --out {out}" in res.stderr


# ---- the OpenAI-compatible backend: one deadline, a size cap, one line for what is no completion -------------------


class _RawServer:
    """A loopback HTTP server that answers every POST with ``mode``'s reply, written by hand."""

    def __init__(self, mode: str):
        import socket
        import threading

        self.mode, self.sock = mode, socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        import threading

        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn):
        try:
            conn.recv(65536)
            body = {
                "trickle": b'{"choices": []}',
                "endless": b"",
                "text": b"<html>not json</html>",
                "deep": b"[" * 5000 + b"]" * 5000,
                "list": b"[1, 2]",
                "types": b'{"choices": [{"message": 5, "logprobs": {"content": [{"logprob": "x"}]}}]}',
            }[self.mode]
            if self.mode == "endless":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
                chunk = b"x" * 65536
                while not self.stop.is_set():
                    conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                return
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
            if self.mode == "trickle":
                for byte in head + body:
                    if self.stop.is_set():
                        return
                    conn.sendall(bytes([byte]))
                    time.sleep(0.2)
                return
            conn.sendall(head + body)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self):
        self.stop.set()
        self.sock.close()


@pytest.mark.parametrize(
    "mode, needle",
    [("trickle", "within"), ("endless", "over"), ("text", "no chat completion"), ("deep", "no chat completion"),
     ("list", "no chat completion"), ("types", "no chat completion")],
)  # fmt: skip
def test_a_hostile_chat_server_is_one_llm_error_in_bounded_time_and_memory(mode, needle):
    import resource

    from evolvekit.errors import LLMError
    from evolvekit.llm.base import SamplingParams
    from evolvekit.llm.openai_compat import OpenAICompatLLM
    from evolvekit.types import ChatMessage

    server = _RawServer(mode)
    # the trickle meets the deadline (2 s); every other reply is cut by its own check, well within 60 s
    llm = OpenAICompatLLM("m", base_url=server.url, timeout_s=2.0 if mode == "trickle" else 60.0, max_retries=0)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.monotonic()
    try:
        with pytest.raises(LLMError, match=needle):
            llm.chat([[ChatMessage(role="user", content="hi")]], SamplingParams(max_new_tokens=4))
    finally:
        llm.close()
        server.close()
    assert time.monotonic() - start < (10 if mode == "trickle" else 60)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 512 * 1024  # KiB: under 0.5 GiB more


def test_llm_chat_against_a_server_that_answers_no_json_is_exit_2_and_one_line():
    server = _RawServer("text")
    try:
        res = subprocess.run(
            [sys.executable, "-m", "evolvekit.cli.main", "llm", "chat", "hi", "--set", "models.policy.backend=openai",
             "--set", f"models.policy.base_url={server.url}", "--set", "models.policy.max_retries=0"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        server.close()
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr[-1500:]
    assert "no chat completion" in res.stderr


# ---- a served explorer or synthesizer says that it runs without the scaffold (issue 78.2) --------------------------


def test_a_served_explorer_or_synthesizer_is_told_once_that_it_runs_without_the_scaffold(caplog):
    from evolvekit.questioning import pipeline

    class _Served:
        name = "served-135m"

    pipeline._UNSCAFFOLDED.clear()
    with caplog.at_level("WARNING", logger="evolvekit.questioning.pipeline"):
        assert pipeline.scaffold_on("auto", _Served()) is False  # type: ignore[arg-type]
        assert pipeline.scaffold_on("auto", _Served()) is False  # type: ignore[arg-type]
        assert pipeline.scaffold_on("auto", _Served(), "synthesizer") is False  # type: ignore[arg-type]
        assert pipeline.scaffold_on("off", _Served(), "judge") is False  # type: ignore[arg-type]
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and "explorer (served-135m) is served" in said[0] and "synthesizer" in said[1]


# ---- MCP tool lists and results are capped -------------------------------------------------------------------------


def test_an_mcp_tool_list_past_the_cap_or_a_huge_schema_is_one_env_error_and_descriptions_are_cut():
    from types import SimpleNamespace

    from evolvekit.env import mcp
    from evolvekit.errors import EnvError

    def tool(i, description="d", schema=None):
        return SimpleNamespace(name=f"t{i}", description=description, input_schema=schema or {"type": "object"})

    with pytest.raises(EnvError, match="lists 10,000 tools, more than a prompt can show"):
        mcp.tool_schemas([tool(i) for i in range(10_000)], set())
    assert len(mcp.tool_schemas([tool(i) for i in range(10_000)], {"t1", "t2"})) == 2  # env.mcp.tools chooses
    big = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(2000)}}
    with pytest.raises(EnvError, match="parameter schema of"):
        mcp.tool_schemas([tool(0, schema=big)], set())
    [shown] = mcp.tool_schemas([tool(0, description="x" * 100_000)], set()).values()
    assert len(shown.description) < mcp.MAX_TOOL_DESCRIPTION_CHARS + 60 and "characters cut" in shown.description


def test_an_mcp_result_is_cut_at_the_cap_however_many_blocks_it_has():
    from types import SimpleNamespace

    from evolvekit.env import mcp

    one = SimpleNamespace(content=[SimpleNamespace(text="y" * 500_000)])
    many = SimpleNamespace(content=[SimpleNamespace(text="z" * 100) for _ in range(100_000)])
    for result in (one, many):
        text = mcp.result_text(result)
        assert len(text) < mcp.MAX_RESULT_CHARS + 60 and text.endswith("more characters cut]")
    assert mcp.result_text(SimpleNamespace(content=[SimpleNamespace(text="ok"), SimpleNamespace(type="image")])) == (
        "ok\n[image]"
    )


# ---- disk errors are one line each ---------------------------------------------------------------------------------


def test_a_disk_error_is_one_line_naming_the_path_and_what_to_do():
    import errno

    from evolvekit.cli.main import os_error_line

    full = os_error_line(OSError(errno.ENOSPC, "No space left on device", "runs/x/run.sqlite"))
    assert full.startswith("cannot write or read runs/x/run.sqlite: No space left on device (ENOSPC); the disk is full")
    assert "(EFBIG); a file reached the file-size limit" in os_error_line(OSError(errno.EFBIG, "File too large", "f"))
    assert "(EROFS); the file system is read-only" in os_error_line(OSError(errno.EROFS, "Read-only file system"))


def test_a_command_that_cannot_write_its_output_says_so_in_one_line(tmp_path: Path):
    (tmp_path / "a-file").write_text("not a folder")
    res = subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", "eval", "--set", "env.family=arith", "--limit", "1",
         "--no-estimate", "--out", str(tmp_path / "a-file" / "r.jsonl")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 1 and len(res.stderr.strip().splitlines()) == 1, res.stderr[-1500:]
    assert res.stderr.startswith(f"error: cannot write or read {tmp_path / 'a-file'}")


def test_report_reads_a_run_whose_folder_it_cannot_write(tmp_path: Path, monkeypatch):
    import os

    from evolvekit.report import figures

    _, run_dir, store = _new_run(tmp_path)
    store.set_meta("probe", "x")
    store.close()
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # what a read-only mount answers
    opened: list[str] = []
    connect = figures.sqlite3.connect
    monkeypatch.setattr(figures.sqlite3, "connect", lambda db, **kw: opened.append(db) or connect(db, **kw))
    con = figures.connect_ro(run_dir)
    try:
        assert con.execute("SELECT value FROM meta WHERE key='probe'").fetchone() == ("x",)
    finally:
        con.close()
    # opened immutable: SQLite cannot make a WAL store's shared-memory file on a read-only mount, so a plain mode=ro
    # open fails there (as root in a test the folder stays writable, so the open itself is what is checked)
    assert opened and opened[0].endswith("?mode=ro&immutable=1"), opened


# ---- the OpenEnv client: deep replies and unasked messages ---------------------------------------------------------


def _ws_serving(handler):
    import threading

    from websockets.sync.server import serve

    server = serve(handler, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"ws://127.0.0.1:{server.socket.getsockname()[1]}/ws"


def test_an_openenv_reply_nested_thousands_deep_is_one_env_error():
    from evolvekit.env.openenv import OpenEnvSession
    from evolvekit.errors import EnvError

    def handler(ws):
        for _ in ws:
            ws.send('{"type": "observation", "data": ' + "[" * 50_000 + "]" * 50_000 + "}")

    server, url = _ws_serving(handler)
    session = OpenEnvSession(url, 5.0)
    try:
        with pytest.raises(EnvError, match="nests deeper than"):
            session.request("reset", {})
    finally:
        session.close()
        server.shutdown()


def test_an_openenv_reply_is_its_own_requests_not_a_leftover_of_the_last():
    import json

    from evolvekit.env.openenv import OpenEnvSession

    def handler(ws):
        for n, raw in enumerate(ws):
            kind = json.loads(raw)["type"]
            ws.send(json.dumps({"type": "observation", "data": {"answer_to": kind, "n": n}}))
            if n == 0:  # a burst of extra replies after the first
                for i in range(5):
                    ws.send(json.dumps({"type": "observation", "data": {"answer_to": "nothing", "extra": i}}))

    server, url = _ws_serving(handler)
    session = OpenEnvSession(url, 5.0)
    try:
        assert session.request("reset", {})[1]["answer_to"] == "reset"
        time.sleep(0.3)  # the burst has arrived
        assert session.request("step", {"n": 1})[1] == {"answer_to": "step", "n": 1}
    finally:
        session.close()
        server.shutdown()


# ---- the dashboard: figures as a table, trajectories by request (issue 78.5) ---------------------------------------


def test_the_dashboard_shows_evaluations_as_a_table_and_trajectories_by_request(tmp_path: Path):
    from fastapi.testclient import TestClient

    from evolvekit.report.dashboard import create_dashboard, evaluation_table
    from evolvekit.types import Task, TaskSource, Trajectory

    table = evaluation_table(
        {"after": {"avg@8": 0.5, "iteration": 3, "tasks": 32}, "before": {"avg@8": 0.25, "iteration": 0, "tasks": 32}}
    )
    assert table.index("<td>before</td>") < table.index("<td>after</td>")
    assert "<th>avg@8</th>" in table and "<td>0.250</td>" in table and "<td>32</td>" in table
    _, run_dir, store = _new_run(tmp_path)
    task = Task(task_id="t<1>", env_name="bfcl", query="Add <b>2</b> and 3.", source=TaskSource.SYNTHETIC)
    with store.transaction() as c:
        store.put_tasks(c, [task], 0)
        store.put_trajectories(c, [Trajectory(task_id="t<1>", outcome_reward=1.0)] * 1, 0, "train")
        store.put_trajectories(c, [Trajectory(task_id="t<1>", outcome_reward=0.0)], 0, "train")
        store.put_trajectories(c, [Trajectory(task_id="held", outcome_reward=0.0)], 0, "eval_before")
        store.put_evaluation(c, "before", {"avg@1": 0.0, "tasks": 2, "k": 1, "split": "test", "sampling_se": 0.25})
    store.close()
    client = TestClient(create_dashboard(run_dir), base_url="http://127.0.0.1:8770")
    # issue 78.1: the dashboard says what a figure rests on, and warns as the run's last lines do
    overview = client.get("/").text
    assert "held-out test: 2 tasks x 1 samples (sampling error 0.250); WARNING: too few held-out samples" in overview
    page = client.get("/requests").text
    assert "Add &lt;b&gt;2&lt;/b&gt; and 3." in page and "<td>2</td><td>0.50</td>" in page
    assert "/trajectories?task=t%3C1%3E" in page
    only = client.get("/trajectories", params={"task": "t<1>"}).text
    assert only.count("<tr><td><a href=") == 2 and "held" not in only
