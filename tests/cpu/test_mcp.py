"""MCP tool servers as environments, against real servers installed by scripts/setup.sh: npm's filesystem server
(under .venv/mcp-node) and PyPI's git server (the `mcp` extra). Each episode has its own server process and
sandbox; evaluation replays the reference in a fresh instance and compares the state probe."""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from evolvekit.config import EnvConfig, load_config
from evolvekit.env.base import Action
from evolvekit.env.mcp import mcp_available
from evolvekit.env.registry import env_tasks, make_env
from evolvekit.errors import EnvError
from evolvekit.types import Task, TaskSource, ToolCall

ROOT = Path(__file__).resolve().parents[2]
FS_SERVER = ROOT / ".venv/mcp-node/node_modules/.bin/mcp-server-filesystem"
pytestmark = pytest.mark.skipif(mcp_available() is not None, reason=str(mcp_available()))
needs_fs = pytest.mark.skipif(not FS_SERVER.exists(), reason="npm's MCP filesystem server is not installed (setup.sh)")


def _cfg(name: str, **mcp) -> EnvConfig:
    cfg = load_config(ROOT / "configs" / name).env  # run.paths_from: its paths are read from the checkout's root
    return cfg.model_copy(update={"mcp": cfg.mcp.model_copy(update=mcp)})


def _call(name: str, **arguments) -> Action:
    return Action(tool_calls=[ToolCall(name=name, arguments=arguments)])


def _task(query: str, *calls: ToolCall) -> Task:
    return Task(
        task_id="t-" + str(abs(hash(query))), env_name="mcp", query=query, source=TaskSource.SYNTHETIC,
        reference_solution=[list(calls)],
    )  # fmt: skip


def _servers() -> list[psutil.Process]:
    procs = psutil.Process(os.getpid()).children(recursive=True)
    return [p for p in procs if p.status() != psutil.STATUS_ZOMBIE and "mcp-server" in " ".join(p.cmdline())]


def _wait_no_servers() -> int:
    deadline = time.monotonic() + 5
    while (n := len(_servers())) and time.monotonic() < deadline:
        time.sleep(0.1)
    return n


WRITE = ToolCall(name="write_file", arguments={"path": "/sandbox/todo.txt", "content": "call mum"})


@needs_fs
def test_filesystem_episode_aliases_paths_scores_by_state_and_frees_everything():
    env = make_env(_cfg("mcp_filesystem.yaml").model_copy(update={"worked_examples": "person"}))
    hidden = make_env(_cfg("mcp_filesystem.yaml"))  # the default: a person's examples are not shown (issue 76)
    assert hidden.reset(_task("List /sandbox.")).examples == []
    hidden.close()
    reset = env.reset(_task("Save 'call mum' in /sandbox/todo.txt", WRITE))
    assert {t.name for t in reset.tools} == {
        "list_directory",
        "create_directory",
        "write_file",
        "read_text_file",
        "move_file",
    }
    # the configured worked examples ran on a fresh sandbox: real outputs, shown as chat turns
    assert [m.role for m in reset.examples[:3]] == ["user", "assistant", "user"]
    assert "[FILE] monday.txt" in reset.examples[2].content
    sandbox = env.sandbox
    assert (sandbox / "notes/monday.txt").read_text() == "meeting at 10\n"  # seeded
    listing = env.step(_call("list_directory", path="/sandbox"))
    assert "[DIR] notes" in listing.observation and "[FILE] shopping.txt" in listing.observation
    assert str(sandbox) not in env.step(_call("create_directory", path="/sandbox/a")).observation  # aliased back
    denied = env.step(_call("read_text_file", path="/etc/hostname"))
    assert not denied.call_results[0].ok and "outside allowed directories" in denied.observation
    unknown = env.step(_call("delete_everything", path="/sandbox"))
    assert unknown.call_results[0].unknown_tool and not unknown.call_results[0].ok
    hidden = env.step(_call("directory_tree", path="/sandbox"))  # listed by the server, not offered by the config
    assert hidden.call_results[0].unknown_tool
    assert env.evaluate().score == 0.0  # nothing written yet
    assert env.step(Action(tool_calls=[WRITE])).call_results[0].ok
    assert (sandbox / "todo.txt").read_text() == "call mum"
    # the extra folder 'a' is part of the state: the reference did not make it
    result = env.evaluate()
    assert result.score == 0.0 and result.details["state_matches"] is False
    env.close()
    assert not sandbox.exists() and _wait_no_servers() == 0

    env = make_env(_cfg("mcp_filesystem.yaml"))
    env.reset(_task("Save 'call mum' in /sandbox/todo.txt", WRITE))
    env.step(Action(tool_calls=[WRITE]))
    assert env.evaluate().score == 1.0
    wrong = make_env(_cfg("mcp_filesystem.yaml"))
    wrong.reset(_task("Save 'call mum' in /sandbox/todo.txt", WRITE))
    wrong.step(_call("write_file", path="/sandbox/todo.txt", content="call dad"))
    assert wrong.evaluate().score == 0.0
    env.close(), wrong.close()
    assert _wait_no_servers() == 0


@needs_fs
def test_a_read_only_task_is_not_solved_by_doing_nothing():
    read = ToolCall(name="read_text_file", arguments={"path": "/sandbox/shopping.txt"})
    env = make_env(_cfg("mcp_filesystem.yaml"))
    env.reset(_task("What is on the shopping list?", read))
    idle = env.evaluate()
    assert idle.score == 0.0 and idle.details["state_matches"] and idle.details["missing_outputs"] == 1
    env.step(Action(tool_calls=[read]))
    assert env.evaluate().score == 1.0
    env.close()
    off = make_env(_cfg("mcp_filesystem.yaml", check_outputs=False))
    off.reset(_task("What is on the shopping list?", read))
    assert off.evaluate().score == 1.0  # switched off: the state alone is compared
    off.close()


@needs_fs
def test_two_concurrent_episodes_never_see_each_others_files():
    cfg = _cfg("mcp_filesystem.yaml")
    a, b = make_env(cfg), make_env(cfg)
    a.reset(None), b.reset(None)
    assert a.sandbox != b.sandbox
    outs: dict[str, str] = {}

    def work(env, name):
        env.step(_call("write_file", path=f"/sandbox/{name}.txt", content=name))
        outs[name] = env.step(_call("list_directory", path="/sandbox")).observation

    threads = [threading.Thread(target=work, args=(e, n)) for e, n in ((a, "alpha"), (b, "beta"))]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert "alpha.txt" in outs["alpha"] and "beta.txt" not in outs["alpha"]
    assert "beta.txt" in outs["beta"] and "alpha.txt" not in outs["beta"]
    assert not (a.sandbox / "beta.txt").exists() and not (b.sandbox / "alpha.txt").exists()
    a.close(), b.close()
    assert _wait_no_servers() == 0


@pytest.mark.slow
def test_git_server_probe_compares_branches_and_commits():
    cfg = _cfg("mcp_git.yaml")
    branch = ToolCall(name="git_create_branch", arguments={"repo_path": "/sandbox", "branch_name": "feature"})
    env = make_env(cfg)
    reset = env.reset(_task("Start a branch called feature.", branch))
    assert "git_commit" in {t.name for t in reset.tools}
    log = env.step(_call("git_log", repo_path="/sandbox")).observation
    assert "initial state" in log and "2000-01-01" in log
    assert env.evaluate().score == 0.0
    env.step(_call("git_create_branch", repo_path="/sandbox", branch_name="other"))
    assert env.evaluate().score == 0.0  # a different branch: the probe's branch list differs
    env.close()
    env = make_env(cfg)
    env.reset(_task("Start a branch called feature.", branch))
    env.step(Action(tool_calls=[branch]))
    assert env.evaluate().score == 1.0
    env.close()
    # a commit gives the same id in any sandbox (git's dates and identity are fixed in the server)
    ids = []
    for _ in range(2):
        env = make_env(cfg)
        env.reset(None)
        (env.sandbox / "new.txt").write_text("x")
        env.step(_call("git_add", repo_path="/sandbox", files=["new.txt"]))
        ids.append(env.step(_call("git_commit", repo_path="/sandbox", message="add new")).observation)
        env.close()
    assert ids[0] == ids[1] and "Changes committed successfully" in ids[0]
    assert _wait_no_servers() == 0


def test_configuration_rules_and_the_task_file(tmp_path):
    from pydantic import ValidationError

    from evolvekit.config import Config, mcp_problem

    def problem(**mcp):
        return mcp_problem(EnvConfig.model_validate({"name": "mcp", "mcp": mcp}))

    with pytest.raises(ValidationError, match="exactly one"):  # the config tree applies the rules
        Config.model_validate({"env": {"name": "mcp"}})
    assert mcp_problem(EnvConfig(name="bfcl")) is None

    assert "exactly one" in problem()
    assert "exactly one" in problem(command=["x"], url="http://127.0.0.1:1/mcp")
    assert "sandbox: none" in problem(url="http://127.0.0.1:1/mcp")
    assert "probe" in problem(url="http://127.0.0.1:1/mcp", sandbox="none")
    assert problem(url="http://127.0.0.1:1/mcp", sandbox="none", probe=[{"name": "get_state"}]) is None
    assert "alias" in problem(command=["x"], alias="sandbox")
    assert problem(command=["x"]) is None
    cfg = EnvConfig(name="mcp", mcp={"command": ["x"]})
    with pytest.raises(EnvError, match="tasks synthesize --env mcp"):
        env_tasks(cfg, "train")
    tasks = [_task(f"Save note {i} in /sandbox/n{i}.txt", WRITE) for i in range(40)]
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(t.model_dump_json() + "\n" for t in tasks))
    cfg.mcp.tasks_file = str(path)
    train, test = env_tasks(cfg, "train"), env_tasks(cfg, "test")
    assert len(train) + len(test) == 40 and 2 <= len(test) <= 20
    assert not {t.task_id for t in train} & {t.task_id for t in test}
    assert env_tasks(cfg, "test") == test  # the split is a function of the request
    # a whole held-out panel, in its order (eval --subset all); read from a file, every task is person-written
    assert env_tasks(cfg, "all") == [t.model_copy(update={"source": TaskSource.REAL}) for t in tasks]
    with pytest.raises(EnvError, match="splits train and test"):
        env_tasks(cfg, "dev")
    bad = make_env(EnvConfig(name="mcp", mcp={"command": ["/nonexistent/mcp-server"]}))
    with pytest.raises(EnvError, match="cannot start the MCP server"):
        bad.reset(None)
    assert _wait_no_servers() == 0


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", *args], cwd=cwd, capture_output=True, text=True, timeout=1200
    )


@pytest.mark.slow
@needs_fs
def test_self_questioning_on_an_mcp_server_then_training_on_what_it_kept(tmp_path, tiny_roles):
    """`tasks synthesize --env mcp` on the filesystem server (no tasks of its own) keeps tasks whose reference
    replays; `tasks check` replays them again; `run` trains on them (its roles on the tiny model: the pipeline, not
    the policy's skill, is under test)."""
    out = tmp_path / "tasks.jsonl"
    common = ["-c", str(ROOT / "configs/mcp_filesystem.yaml"), "--set", "questioning.grounding_threshold=0"]
    # the scaffolded synthesizer's own requests, as before issue 96: the explorer's successful calls here create
    # directories with odd paths the 135M model seldom writes exactly, and its policy seldom solves a request's
    # round trip, so the back-translated requests keep no task in this budget (a limit of issue 96, in its note)
    common += ["--set", "questioning.requests.mode=documented"]
    syn = _cli(
        "tasks", "synthesize", "--env", "mcp", *common, "--n", "2", "--max-rounds", "3", "--out", str(out),
        "--json", "--set", "questioning.explore_runs=2", "--set", "questioning.explore_steps=4",
        cwd=ROOT,
    )  # fmt: skip
    assert syn.returncode == 0, syn.stderr[-2000:]
    funnel = json.loads(syn.stdout.strip().splitlines()[-1])
    kept = [Task.model_validate_json(line) for line in out.read_text().splitlines()]
    assert funnel["kept"] == len(kept) >= 1 and funnel["explored_calls"] >= 1
    assert all(t.env_name == "mcp" and t.reference_solution for t in kept)
    check = _cli("tasks", "check", str(out), *common, "--json", cwd=ROOT)
    assert check.returncode == 0, check.stderr[-2000:]
    assert json.loads(check.stdout)["feasible"] == len(kept)
    run = _cli(
        "run", str(ROOT / "configs/mcp_filesystem.yaml"), "--set", f"env.mcp.tasks_file={out}",
        "--set", f"run.out_dir={tmp_path / 'runs'}", "--set", "train.iterations=1", "--set", "train.eval_before=false",
        "--set", "train.eval_after=false", "--set", "env.mcp.test_share=0.01", "--set", "rollout.group_size=2",
        "--set", "rollout.max_steps=3", "--set", "models.policy.max_new_tokens=64", *tiny_roles,
        cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    from evolvekit.store.sqlite import RunStore

    store = RunStore(next((tmp_path / "runs").rglob("run.sqlite")))
    trained = store.trajectories(0, "train")
    # the run's tasks are the kept ones, every episode scored by the server's state
    assert trained and {t.task_id for t in trained} <= {t.task_id for t in kept}
    assert all(t.outcome_reward is not None and not t.flags.failed for t in trained)
    assert _wait_no_servers() == 0


@pytest.mark.slow
def test_a_shared_server_at_a_streamable_http_url(tmp_path):
    """env.mcp.url: no sandbox, reset calls bring the shared server back, probe calls are the state."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, str(ROOT / "tests/plugins/mcp_counter_server.py"), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while socket.socket().connect_ex(("127.0.0.1", port)) and time.monotonic() < deadline:
            time.sleep(0.2)
        cfg = EnvConfig(
            name="mcp",
            mcp={
                "url": f"http://127.0.0.1:{port}/mcp",
                "sandbox": "none",
                "probe": [{"name": "get_count"}],
                "reset_calls": [{"name": "reset"}],
                "tools": ["increment", "get_count"],
            },
        )
        task = _task("Add 5 to the counter.", ToolCall(name="increment", arguments={"by": 5}))
        env = make_env(cfg)
        reset = env.reset(task)
        assert {t.name for t in reset.tools} == {"increment", "get_count"}
        step = env.step(_call("increment", by=5))
        assert step.call_results[0].ok and "count is now 5" in step.observation
        assert env.evaluate().score == 1.0
        env.reset(task)  # the reset call set the shared counter back to 0
        assert "count = 0" in env.step(_call("get_count")).observation
        env.step(_call("increment", by=4))
        assert env.evaluate().score == 0.0
        bad = env.step(_call("increment", by="five"))
        assert not bad.call_results[0].ok  # the server's own argument validation: an error observation
        env.close()
    finally:
        server.terminate()
        server.wait(10)


@needs_fs
def test_the_alias_is_translated_in_paths_not_inside_file_contents():
    """Issue 52 (7): the alias was rewritten inside file contents, so a correct call writing "see /sandbox/notes"
    stored the episode's real temporary path and was scored as failed against the reference's own sandbox."""
    note = ToolCall(name="write_file", arguments={"path": "/sandbox/todo.txt", "content": "see /sandbox/notes"})
    env = make_env(_cfg("mcp_filesystem.yaml"))
    env.reset(_task("Write 'see /sandbox/notes' to /sandbox/todo.txt", note))
    assert env.step(Action(tool_calls=[note])).call_results[0].ok
    assert (env.sandbox / "todo.txt").read_text() == "see /sandbox/notes"  # the path translated, the words kept
    assert env.evaluate().score == 1.0
    env.close()


@pytest.mark.slow
def test_a_server_printing_garbage_is_one_clear_error_and_a_few_log_lines(caplog):
    """Issue 52 (9): a server printing garbage produced 17,310 tracebacks in 18 s, and the start-up error hid its
    cause inside "ExceptionGroup ... (1 sub-exception)"."""
    import logging

    server = str(ROOT / "tests/plugins/mcp_garbage_server.py")
    cfg = EnvConfig(name="mcp", mcp={"command": [sys.executable, server], "sandbox": "none",
                                     "probe": [{"name": "x"}], "startup_timeout_s": 3})  # fmt: skip
    env = make_env(cfg)
    with caplog.at_level(logging.ERROR, logger="mcp"), pytest.raises(EnvError) as err:
        env.reset(None)
    env.close()
    assert "ExceptionGroup" not in str(err.value) and "sub-exception" not in str(err.value), err.value
    assert len([r for r in caplog.records if r.name.startswith("mcp")]) <= 6


def test_sandboxes_of_dead_processes_are_swept(tmp_path):
    """Issue 52 (9): a kill -9 of the parent left its sandboxes in the temporary folder forever."""
    from evolvekit.env.mcp import SANDBOX_PREFIX, sweep_orphan_sandboxes

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    orphan = tmp_path / f"{SANDBOX_PREFIX}{dead.stdout.strip()}-abc"
    mine = tmp_path / f"{SANDBOX_PREFIX}{os.getpid()}-abc"
    for p in (orphan, mine):
        (p / "notes").mkdir(parents=True)
    assert sweep_orphan_sandboxes(str(tmp_path)) == 1
    assert not orphan.exists() and mine.exists()


@pytest.mark.slow
def test_start_up_is_bounded_as_a_whole_not_per_message():
    """Issue 52 (9): `startup_timeout_s=5` took 17-18 s, because it bounded each message of the start-up, not the
    start-up. A server answering each message in 1.5 s (inside a 2 s per-message timeout) needs 3 s for its two
    answers; it must be refused at 2 s, with the setting named."""
    import time

    server = str(ROOT / "tests/plugins/mcp_slow_server.py")
    cfg = EnvConfig(name="mcp", mcp={"command": [sys.executable, server, "1.5"], "sandbox": "none",
                                     "probe": [{"name": "x"}], "startup_timeout_s": 2})  # fmt: skip
    env = make_env(cfg)
    start = time.monotonic()
    with pytest.raises(EnvError, match="startup_timeout_s"):
        env.reset(None)
    took = time.monotonic() - start
    env.close()
    assert took < 2.9, f"start-up refused after {took:.2f}s, not at its 2 s bound"


@pytest.mark.slow
def test_a_slow_but_timely_server_starts_and_serves_calls():
    """The start-up deadline ends once the server is up: calls after it are not cut off by it."""
    server = str(ROOT / "tests/plugins/mcp_slow_server.py")
    cfg = EnvConfig(name="mcp", mcp={"command": [sys.executable, server, "0.3"], "sandbox": "none",
                                     "probe": [{"name": "x"}], "startup_timeout_s": 2})  # fmt: skip
    env = make_env(cfg)
    env.reset(None)
    assert [t.name for t in env.session.tools] == ["noop"]
    import time

    time.sleep(2.2)  # past the start-up deadline
    ok, output, unknown = env.session.call("noop", {})
    assert ok and output == "done" and not unknown, output
    env.close()
