"""Hostile but fair input: it runs no code, stalls nothing, and gets a clear answer (a 4xx, or exit 2 and one line).

Each test here failed on main at e35b957 (the issue "Hostile input runs no code...").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from conftest import serving
from fastapi import HTTPException

from evolvekit.env.action_text import parse_action
from evolvekit.env.base import Action
from evolvekit.env.bfcl import data
from evolvekit.env.bfcl.env import BfclEnv
from evolvekit.env.bfcl.tools import MAX_INT, MAX_ITEMS, MAX_STRING
from evolvekit.env.service.client import RemoteEnv
from evolvekit.env.service.server import ServiceSettings, create_app
from evolvekit.errors import EnvError
from evolvekit.types import Task, ToolCall

TOKEN = "hostile-token"
H = {"Authorization": f"Bearer {TOKEN}"}
FS = {"GorillaFileSystem": {"root": {"r": {"type": "directory", "contents": {}}}}}


def _payload(marker: Path) -> str:
    """A task id that BFCL's checker would run as code: the name it eval()s is ``{model}_{id}_{class}_instance``."""
    return f"x_instance if 0 else getattr(__import__('os'),'system')('touch {marker.name}') or x"


def _evil_task(marker: Path) -> dict:
    return {
        "task_id": _payload(marker),
        "env_name": "bfcl",
        "query": ["list the files"],
        "initial_config": FS,
        "reference_solution": [[{"name": "ls", "arguments": {}}]],
        "metadata": {
            "category": "multi_turn_base",
            "bfcl_id": _payload(marker),
            "involved_classes": ["GorillaFileSystem"],
        },
    }


@pytest.fixture(scope="module")
def service():
    settings = ServiceSettings(token=TOKEN, step_timeout_s=5.0, max_body_bytes=200_000, max_instances=6)
    app = create_app(settings)
    with serving(app) as url:
        yield url, app


# -- 1. code execution through ids ---------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("with_metadata", [True, False])
def test_task_file_ids_never_reach_bfcl_eval(tmp_path, with_metadata):
    marker = tmp_path / "pwned"
    task = _evil_task(marker)
    if not with_metadata:
        task["metadata"] = {}
    path = tmp_path / "evil.jsonl"
    path.write_text(json.dumps(task) + "\n")
    out = subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", "tasks", "check", str(path), "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1])["feasible"] == 1  # the task itself is fine
    assert not marker.exists()


def test_reference_naming_a_builtin_is_refused_not_evaluated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    task = Task(
        task_id="t",
        env_name="bfcl",
        query=["x"],
        initial_config=FS,
        reference_solution=[[ToolCall(name="open", arguments={"file": "pwned", "mode": "w"})]],
    )
    with pytest.raises(EnvError, match=r"reference_solution\[0\]\[0\]: unknown tool 'open'"):
        BfclEnv().reset(task)
    assert not (tmp_path / "pwned").exists()


def test_checker_refuses_strings_it_did_not_make():
    from evolvekit.env.bfcl.checker import check, checker_entry_id

    entry = {"id": checker_entry_id(False), "initial_config": FS, "involved_classes": ["GorillaFileSystem"]}
    with pytest.raises(EnvError, match="entry id"):
        check([["ls()"]], [["ls()"]], {**entry, "id": "multi_turn_base_1"}, "multi_turn_base")
    with pytest.raises(EnvError, match="names no tool"):
        check([["open(file='x', mode='w')"]], [["ls()"]], entry, "multi_turn_base")
    with pytest.raises(EnvError, match="not a literal"):
        check([["ls(a=__import__('os'))"]], [["ls()"]], entry, "multi_turn_base")
    with pytest.raises(EnvError, match="backend classes"):
        check([["ls()"]], [["ls()"]], {**entry, "involved_classes": ["os"]}, "multi_turn_base")
    assert check([["ls()"]], [["ls()"]], entry, "multi_turn_base")["valid"]


def test_service_create_and_evaluate_run_no_code(service, tmp_path, monkeypatch):
    url, _ = service
    marker = Path(os.getcwd()) / "pwned-service"
    marker.unlink(missing_ok=True)
    r = httpx.post(url + "/create", json={"env": "bfcl", "task": _evil_task(marker)}, headers=H)
    assert r.status_code == 200, r.text
    iid = r.json()["instance_id"]
    httpx.post(url + "/step", json={"instance_id": iid, "action": {"tool_calls": [{"name": "ls"}]}}, headers=H)
    httpx.post(url + "/step", json={"instance_id": iid, "action": {"text": "done"}}, headers=H)
    r = httpx.post(url + "/evaluate", json={"instance_id": iid}, headers=H)
    assert r.status_code == 200 and r.json()["passed"]
    assert not marker.exists()
    httpx.post(url + "/release", json={"instance_id": iid}, headers=H)


# -- 2. a tool call cannot stall the service -----------------------------------------------------------------
def test_huge_power_is_refused_at_once_and_healthz_keeps_answering(service):
    url, _ = service
    r = httpx.post(url + "/create", json={"env": "bfcl", "sandbox_config": {"classes": ["MathAPI"]}}, headers=H)
    iid = r.json()["instance_id"]
    stop, worst = threading.Event(), [0.0]

    def probe():
        while not stop.is_set():
            t0 = time.perf_counter()
            assert httpx.get(url + "/healthz").status_code == 200
            worst[0] = max(worst[0], time.perf_counter() - t0)
            time.sleep(0.05)

    def small_step() -> float:
        t0 = time.perf_counter()
        call = {"name": "power", "arguments": {"base": 2, "exponent": 3}}
        httpx.post(url + "/step", json={"instance_id": iid, "action": {"tool_calls": [call]}}, headers=H)
        return time.perf_counter() - t0

    # "at once": within a second, or within 5 small steps' time when the machine is busy (both are far below the
    # minutes 3**20_000_000's digits would take)
    bound = max(1.0, 5 * max(small_step() for _ in range(3)))
    thread = threading.Thread(target=probe)
    thread.start()
    try:
        for exponent in (20_000_000, 10**15):
            t0 = time.perf_counter()
            r = httpx.post(
                url + "/step",
                json={
                    "instance_id": iid,
                    "action": {"tool_calls": [{"name": "power", "arguments": {"base": 3, "exponent": exponent}}]},
                },
                headers=H,
                timeout=30,
            )
            assert r.status_code == 200 and time.perf_counter() - t0 < bound
            result = r.json()["call_results"][0]
            assert not result["ok"] and "more than 1000 digits" in result["output"]
        r = httpx.post(
            url + "/step",
            json={
                "instance_id": iid,
                "action": {"tool_calls": [{"name": "power", "arguments": {"base": 2, "exponent": 10}}]},
            },
            headers=H,
        )
        assert r.json()["call_results"][0]["output"] == '{"result": 1024}'
    finally:
        stop.set()
        thread.join()
    assert worst[0] < bound
    httpx.post(url + "/release", json={"instance_id": iid}, headers=H)


def _extremes(spec: dict) -> list:
    typ = spec.get("type", "any")
    if typ == "integer":
        return [MAX_INT, -MAX_INT, 0]
    if typ == "float":
        return [1.0e308, -1.0e308, float(MAX_INT), 5e-324]
    if typ == "string":
        return ["x" * MAX_STRING, f"1-{MAX_INT}", "../" * 3000, "*" * MAX_STRING]
    if typ in ("array", "tuple"):
        return [[1e308] * MAX_ITEMS, ["x" * 64] * MAX_ITEMS, [[1] * 10] * 100]
    if typ == "dict":
        return [{f"k{i}": "v" * 64 for i in range(MAX_ITEMS)}]
    if typ == "boolean":
        return [True, False]
    return ["x" * MAX_STRING]


def test_every_bfcl_tool_returns_quickly_on_extreme_arguments():
    """The audit behind the input bounds (docs/environments.md): every tool of every backend, called with the
    largest values the bounds let through, returns within a second. A value-dependent cost that the per-tool rules
    in tools.py miss shows up here."""
    tasks = data.load_tasks("multi_turn_base")
    slow, calls = [], 0
    for cls in data.BACKEND_CLASSES:
        task = next(t for t in tasks if cls in t.metadata["involved_classes"])
        for doc in data.tool_docs(cls):
            props = doc.get("parameters", {}).get("properties", {})
            options = {k: _extremes(v) for k, v in props.items()}
            for i in range(max([len(o) for o in options.values()] or [1])):
                env = BfclEnv()
                env.reset(task)
                if cls == "TwitterAPI":  # most of its tools refuse before doing anything without a login
                    env.step(
                        Action(
                            tool_calls=[
                                ToolCall(
                                    name="authenticate_twitter", arguments={"username": "john", "password": "john123"}
                                )
                            ]
                        )
                    )
                call = ToolCall(name=doc["name"], arguments={k: o[i % len(o)] for k, o in options.items()})
                t0 = time.perf_counter()
                env.step(Action(tool_calls=[call]))
                calls += 1
                if time.perf_counter() - t0 > 1.0:
                    slow.append((cls, doc["name"], i))
                env.close()
    assert calls > 300 and not slow


# -- 3. body and instance limits ------------------------------------------------------------------------------
def _chunks(total: int, size: int = 65536):
    sent = 0
    while sent < total:
        n = min(size, total - sent)
        sent += n
        yield b" " * n


@pytest.mark.parametrize("total", [10_000_000, 100_000_000])
def test_chunked_oversized_bodies_get_413(service, total):
    url, _ = service
    r = httpx.post(url + "/create", content=_chunks(total), headers={**H, "Content-Type": "application/json"})
    assert r.status_code == 413


def test_instance_limit_holds_under_concurrent_creates(service):
    url, app = service
    before = len(app.state.service.instances)
    limit = app.state.service.settings.max_instances
    codes: list[int] = []

    def create():
        codes.append(
            httpx.post(
                url + "/create", json={"env": "bfcl", "sandbox_config": {"classes": ["MathAPI"]}}, headers=H, timeout=30
            ).status_code
        )

    threads = [threading.Thread(target=create) for _ in range(limit * 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(app.state.service.instances) <= limit
    assert codes.count(200) == limit - before and set(codes) == {200, 503}
    for iid in list(app.state.service.instances):
        httpx.post(url + "/release", json={"instance_id": iid}, headers=H)


# -- 4. former 500s are 4xx naming the field -----------------------------------------------------------------
def _deep(n: int) -> dict:
    node: dict = {"type": "file", "content": "x"}
    for _ in range(n):
        node = {"d": node}
    return node


def _task(**over) -> dict:
    base = {
        "task_id": "t1",
        "env_name": "bfcl",
        "query": ["list the files"],
        "initial_config": FS,
        "reference_solution": [[{"name": "ls", "arguments": {}}]],
    }
    return {**base, **over}


@pytest.mark.parametrize(
    "body, field",
    [
        ({"sandbox_config": {"initial_config": ["not", "a", "dict"]}}, "sandbox_config.initial_config"),
        (
            {
                "sandbox_config": {
                    "classes": ["GorillaFileSystem"],
                    "initial_config": {"GorillaFileSystem": {"root": 5}},
                }
            },
            "initial_config.GorillaFileSystem",
        ),
        ({"sandbox_config": {"classes": "MathAPI"}}, "sandbox_config.classes"),
        ({"task": _task(query=[])}, "task.query"),
        ({"task": _task(query="")}, "task.query"),
        (
            {"task": _task(metadata={"category": "multi_turn_base", "involved_classes": "GorillaFileSystem"})},
            "task.metadata.involved_classes",
        ),
        (
            {"task": _task(metadata={"category": 5, "involved_classes": ["GorillaFileSystem"]})},
            "task.metadata.category",
        ),
        (
            {"task": _task(initial_config={"GorillaFileSystem": {"root": _deep(300)}})},
            "initial_config.GorillaFileSystem",
        ),
        (
            {"task": _task(initial_config={"GorillaFileSystem": {"root": _deep(28)}})},
            "task.initial_config.GorillaFileSystem",
        ),
        ({"task": _task(reference_solution=[[{"name": "bad name!", "arguments": {}}]])}, "task.reference_solution"),
    ],
)
def test_bad_create_bodies_get_4xx_naming_the_field(service, body, field):
    url, _ = service
    r = httpx.post(url + "/create", json={"env": "bfcl", **body}, headers=H)
    assert 400 <= r.status_code < 500, r.text
    assert field in r.json()["detail"]


def test_results_too_large_to_print_are_an_error_observation(service):
    url, _ = service
    iid = httpx.post(
        url + "/create", json={"env": "bfcl", "sandbox_config": {"classes": ["MathAPI"]}}, headers=H
    ).json()["instance_id"]
    r = httpx.post(
        url + "/step",
        json={
            "instance_id": iid,
            "action": {"tool_calls": [{"name": "power", "arguments": {"base": 10, "exponent": 5000}}]},
        },
        headers=H,
    )
    assert r.status_code == 200 and not r.json()["call_results"][0]["ok"]
    from evolvekit.env.bfcl.tools import stringify_result

    assert stringify_result(10**5000).startswith("Error: the result cannot be shown")


def test_client_turns_a_non_json_error_into_an_env_error():
    def handler(request):
        return httpx.Response(500, text="Internal Server Error")

    client = httpx.Client(base_url="http://svc", transport=httpx.MockTransport(handler))
    with pytest.raises(EnvError, match="/create answered 500: Internal Server Error"):
        RemoteEnv("http://svc", client=client).reset(None)

    def garbage(request):
        return httpx.Response(200, json={"instance_id": 3})

    client = httpx.Client(base_url="http://svc", transport=httpx.MockTransport(garbage))
    with pytest.raises(EnvError, match="/create answered a malformed reply"):
        RemoteEnv("http://svc", client=client).reset(None)


# -- 7. the tool-call parser is linear and bounded ----------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        "[" * 1000,
        "{" * 100_000,
        "{" * 300_000,
        '{"a":[' * 5000,
        '[{"' * 50_000,
        '{"name":"f","arguments":' + '{"x":' * 256 + "1" + "}" * 257,
        '<tool_call>{"name":"f","arguments":"' + "[" * 5000 + '"}</tool_call>',
    ],
)
def test_parser_handles_adversarial_text_quickly_with_a_parse_error(text):
    t0 = time.perf_counter()
    action = parse_action(text)
    assert time.perf_counter() - t0 < 0.5
    assert action.parse_error and not action.tool_calls


def test_parser_is_linear_in_the_text_length():
    def cost(n: int) -> float:
        text = '{"a": 1, ' * n  # many candidate starts, each decode fails
        t0 = time.perf_counter()
        parse_action(text)
        return time.perf_counter() - t0

    small, large = cost(2_000), cost(20_000)
    assert large < 30 * small + 0.05  # 10x the text: ~10x the time, never ~100x
    assert parse_action("x" * 100_000 + '{"name": "add", "arguments": {"a": 1}}').tool_calls[0].name == "add"


def test_a_lone_surrogate_from_an_environment_or_model_is_stored_not_a_crash(tmp_path):
    """Issue 52 (5): "\\ud800" in an observation, a request or a model's text used to crash put_tasks and the step
    insert (UnicodeEncodeError); the data model makes every string storable at construction and assignment."""
    from evolvekit.store.sqlite import RunStore
    from evolvekit.types import Step, Task, Trajectory

    store = RunStore(tmp_path / "run.sqlite")
    task = Task(task_id="t", env_name="x", query="add \ud800 and 2", metadata={"note\udfff": ["x\ud800"]})
    step = Step(index=0, action_text="\ud801", tool_calls=[], observation="ok")
    step.observation = "result \udc00"  # assignment is checked too
    traj = Trajectory(task_id="t", group_id="g", steps=[step])
    with store.transaction() as c:
        store.put_tasks(c, [task], 0)
        store.put_trajectories(c, [traj], 0, "train")
    back = store.trajectories(0)[0].steps[0]
    assert back.observation == "result \ufffd" and back.action_text == "\ufffd"
    assert store.task_index()["t"].query == "add \ufffd and 2"
    store.close()


def test_storable_replaces_surrogates_anywhere_and_keeps_clean_containers_as_they_are():
    """The fast path of ``storable`` (one C JSON pass, no walk) is taken only when nothing needs replacing."""
    from evolvekit.types import ToolCall, storable

    wide = {f"k{i}": i for i in range(16)}  # 16 entries and more: the one-pass check first
    assert storable({**wide, "a": ["x\ud800", {"k\udfff": 1}]}) == {**wide, "a": ["x\ufffd", {"k\ufffd": 1}]}
    clean = {**wide, "a": ["x", {"k": 1.5, "n": None}], "b": float("nan")}
    assert storable(clean) is clean
    call = ToolCall(name="f")
    assert storable([call] * 16 + ["b\ud800"]) == [call] * 16 + ["b\ufffd"]  # not JSON: opaque, still walked
    assert storable({**wide, (1, 2): "x\ud800"}) == {**wide, (1, 2): "x\ufffd"}  # a key JSON cannot write: walked
    assert storable({"narrow": "x\ud800"}) == {"narrow": "\ufffd".join(["x", ""])}


def test_json_depth_path_names_the_first_container_past_the_limit():
    from evolvekit.safejson import json_depth_path

    value = {"a": [1, {"b": [[]]}], "c": "x"}  # depths: root 1, a 2, a.1 3, a.1.b 4, a.1.b.0 5
    assert json_depth_path(value, 5) is None
    assert json_depth_path(value, 4) == "a.1.b.0"
    assert json_depth_path(value, 3) == "a.1.b"
    assert json_depth_path(value, 0) == "(root)" and json_depth_path("x" * 10, 0) is None
    deep: list = []
    for _ in range(5000):  # deeper than any recursion limit
        deep = [deep]
    assert json_depth_path({"z": deep}, 32).startswith("z.0.0.0") and json_depth_path({"z": deep}, 5002) is None


@pytest.mark.parametrize(
    "text, limit, shallow",
    [
        ('{"a": [1, {"b": [[]]}]}', 5, True),
        ('{"a": [1, {"b": [[]]}]}', 4, False),
        ("[]", 1, True),
        ("[]", 0, False),
        ("7", 0, True),
        ('{"a": "[[[[[["}', 5, False),  # brackets in a string: maybe deeper, so the exact check decides
        ('[{"a": "]"}]', 5, False),  # a string's bracket interleaves with the structure's
        ('[{"x": 1}, {"y": [2]}, [3]]', 3, True),
        ('[{"x": 1}, {"y": [2]}, [3]]', 2, False),
    ],
)
def test_surely_shallow_is_never_wrong_when_it_says_shallow(text, limit, shallow):
    from evolvekit.safejson import json_depth_path, surely_shallow

    assert surely_shallow(text.encode(), limit) is shallow
    if shallow:  # the fast answer agrees with the exact one
        assert json_depth_path(json.loads(text), limit) is None


def test_request_bodies_are_decoded_and_validated_off_the_event_loop(monkeypatch):
    """Issue 52 (soak): a large body's decoding, depth check and validation held the event loop for tens of ms, so
    /healthz waited behind it. Every body is now read in a worker thread: no running event loop there."""
    import asyncio

    from evolvekit.env.service import server

    threads = []
    real = server._validated

    def spy(*args):
        try:
            asyncio.get_running_loop()
            threads.append("event loop")
        except RuntimeError:
            threads.append("worker")
        return real(*args)

    monkeypatch.setattr(server, "_validated", spy)
    with serving(create_app(ServiceSettings())) as url:
        r = httpx.post(url + "/create", json={"env": "bfcl", "task": _task()}, timeout=60)
        iid = r.json()["instance_id"]
        httpx.post(url + "/step", json={"instance_id": iid, "action": {"text": "hi"}}, timeout=60)
        httpx.post(url + "/info", json={"instance_id": iid}, timeout=60)
        httpx.post(url + "/evaluate", json={"instance_id": iid}, timeout=60)
        assert httpx.post(url + "/release", json={"instance_id": iid}, timeout=60).status_code == 200
        deep = httpx.post(url + "/step", content=b"[" * 100 + b"]" * 100, timeout=60,
                          headers={"Content-Type": "application/json"})  # fmt: skip
        assert deep.status_code == 422 and "nested deeper" in deep.json()["detail"]
    assert threads == ["worker"] * 6


def test_a_request_stating_too_many_calls_or_turns_is_refused_before_validation():
    """Issue 52 (soak): a 30,000-call step or a 2,000-turn task was validated model by model before the environment
    refused it; the service's request caps refuse it on one length check (422 naming the field). At the cap the
    request goes through and the environment's own, lower cap answers (BFCL: 32 calls, an error observation)."""
    from evolvekit.env.service.schemas import MAX_CALLS_PER_REQUEST, MAX_TURNS_PER_REQUEST

    with serving(create_app(ServiceSettings())) as url:
        iid = httpx.post(url + "/create", json={"env": "bfcl", "task": _task()}, timeout=60).json()["instance_id"]
        call = {"name": "ls", "arguments": {}}
        over = {"instance_id": iid, "action": {"tool_calls": [call] * (MAX_CALLS_PER_REQUEST + 1)}}
        r = httpx.post(url + "/step", json=over, timeout=60)
        assert r.status_code == 422 and "action.tool_calls" in r.json()["detail"], r.text[:300]
        at = {"instance_id": iid, "action": {"tool_calls": [call] * MAX_CALLS_PER_REQUEST}}
        r = httpx.post(url + "/step", json=at, timeout=60)
        assert r.status_code == 200 and "32" in r.json()["observation"]
        for key in ("query", "reference_solution"):
            task = _task()
            task[key] = ["ls"] * (MAX_TURNS_PER_REQUEST + 1) if key == "query" else [[]] * (MAX_TURNS_PER_REQUEST + 1)
            r = httpx.post(url + "/create", json={"env": "bfcl", "task": task}, timeout=60)
            assert r.status_code == 422 and f"task.{key}" in r.json()["detail"], r.text[:300]


def test_only_create_takes_the_large_body_limit():
    """A step, evaluate or release body has its own, smaller limit (its JSON is decoded holding the GIL); /create keeps
    the large one for a task's initial state. Chunked bodies are counted the same way."""
    settings = ServiceSettings(max_body_bytes=300_000, max_call_body_bytes=100_000)
    with serving(create_app(settings)) as url:
        text = "x" * 150_000
        for path in ("/step", "/evaluate", "/release", "//step"):
            r = httpx.post(url + path, json={"instance_id": "nope", "action": {"text": text}}, timeout=60)
            assert r.status_code == 413 and "100000" in r.json()["detail"], (path, r.status_code)
        r = httpx.post(url + "/create", json={"env": "bfcl", "task": _task(query=[text])}, timeout=60)
        assert r.status_code == 200, r.text[:300]
        chunks = iter([b'{"instance_id": "', b"n" * 120_000, b'"}'])
        r = httpx.post(url + "/step", content=chunks, headers={"Content-Type": "application/json"}, timeout=60)
        assert r.status_code == 413


def test_the_service_refuses_foreign_host_headers_and_non_json_bodies():
    """Issue 52 (8): a web page must not drive the loopback service: a rebound Host name gets 421, a text/plain or
    form POST (no CORS preflight) gets 415; the loopback names with any port pass."""
    from evolvekit.env.service.server import host_name

    assert host_name("127.0.0.1:8765") == "127.0.0.1" and host_name("[::1]:80") == "::1"
    assert host_name("LocalHost") == "localhost" and host_name("evil.example:80") == "evil.example"
    with serving(create_app(ServiceSettings())) as url:
        assert httpx.get(url + "/healthz").status_code == 200
        assert httpx.get(url + "/healthz", headers={"Host": "localhost:1"}).status_code == 200
        r = httpx.get(url + "/healthz", headers={"Host": "attacker.example"})
        assert r.status_code == 421 and "Host" in r.json()["detail"]
        r = httpx.post(url + "/create", content=b'{"env": "bfcl"}', headers={"Content-Type": "text/plain"})
        assert r.status_code == 415 and "application/json" in r.json()["detail"]
        r = httpx.post(url + "/create", content=b"env=bfcl")  # a form without a content type
        assert r.status_code == 415


def test_env_serve_beyond_loopback_without_a_token_exits_2_in_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "EVOLVEKIT_ENV_TOKEN"}
    out = subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", "env", "serve", "--host", "0.0.0.0", "--port", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0 and "token" in out.stderr, out.stderr


@pytest.mark.parametrize(
    "line, cause",
    [
        ('"reference_solution":[[{"name":"__import__","arguments":{"a":1}}]]', "unknown tool '__import__'"),
        ('"reference_solution":[[{"name":"add","arguments":{"a":NaN,"b":1}}]]', "not finite"),
    ],
)
@pytest.mark.slow
def test_tasks_check_refuses_a_task_the_environment_refuses_with_exit_2(tmp_path, line, cause):
    """Issue 52 (10): docs/environments.md says a reference naming anything but a tool of the task (or a non-finite
    argument) is refused, exit 2 for `tasks check`; it used to count as infeasible and exit 0."""
    path = tmp_path / "tasks.jsonl"
    meta = '"metadata":{"category":"synthetic","involved_classes":["MathAPI"]}'
    path.write_text('{"task_id":"t1","env_name":"bfcl","query":"x",' + line + "," + meta + "}\n")
    out = subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", "tasks", "check", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and cause in out.stderr, out.stderr


def test_a_seed_past_what_the_generators_accept_is_a_config_error():
    from evolvekit.config import load_config
    from evolvekit.errors import ConfigError

    with pytest.raises(ConfigError, match="run.seed"):
        load_config(None, [f"run.seed={2**70}"])


def test_a_task_over_the_turn_or_reference_caps_is_refused_at_once():
    """Issue 52 (1): 2,000 turns in a 125 KB body took 81.6 s at /create (a snapshot of the whole state per turn of
    the reference replay); the caps refuse it before any work, naming the field."""
    from evolvekit.env.bfcl.env import MAX_REFERENCE_CALLS, MAX_TURNS

    env = BfclEnv()
    many = ["touch a"] * (MAX_TURNS + 1)
    t0 = time.perf_counter()
    with pytest.raises(EnvError, match="task.query: .* turns"):
        env.reset(Task.model_validate(_task(query=many, reference_solution=[[]] * len(many))))
    calls = [[{"name": "ls", "arguments": {}}] * (MAX_REFERENCE_CALLS + 1)]
    with pytest.raises(EnvError, match="task.reference_solution: .* calls"):
        env.reset(Task.model_validate(_task(reference_solution=calls)))
    assert time.perf_counter() - t0 < 1.0


def test_reset_replays_no_reference_and_steps_replay_only_the_turns_reached():
    """The reference end state of a turn is replayed lazily, once, for the turns the episode reaches: a reset does
    no replay at all, and a 60-turn task whose episode stays in turn 0 snapshots one turn."""
    turns = [f"make folder d{i}" for i in range(60)]
    ref = [[{"name": "mkdir", "arguments": {"dir_name": f"d{i}"}}] for i in range(60)]
    env = BfclEnv()
    env.reset(Task.model_validate(_task(query=turns, reference_solution=ref)))
    assert env.reference_ends == {} and env._shadow is None
    res = env.step(Action(tool_calls=[ToolCall(name="mkdir", arguments={"dir_name": "d0"})]))
    assert list(env.reference_ends) == [0] and res.grounding.distance_after == 0 < res.grounding.distance_before
    env.close()


def test_more_calls_in_one_step_than_the_cap_are_refused_not_executed():
    """Issue 52 (6): three steps of 30,000 `touch` calls took 5.9-12.3 s each."""
    from evolvekit.env.bfcl.env import MAX_CALLS_PER_STEP

    env = BfclEnv()
    env.reset(Task.model_validate(_task()))
    calls = [ToolCall(name="touch", arguments={"file_name": f"f{i}"}) for i in range(MAX_CALLS_PER_STEP + 1)]
    res = env.step(Action(tool_calls=calls))
    assert res.error == "too_many_calls" and not res.call_results[0].ok
    from evolvekit.env.bfcl.env import _state_leaves

    assert not any("f0" in k for k in _state_leaves(env.instances))  # nothing ran
    ok = env.step(Action(tool_calls=calls[:MAX_CALLS_PER_STEP]))
    assert all(r.ok for r in ok.call_results) and any("f0" in k for k in _state_leaves(env.instances))
    env.close()


def test_bfcl_work_past_its_deadline_stops_between_calls_and_inside_state_walks():
    """Issue 52 (6): after a 504 the worker thread ran on. Under a deadline (env/cancel.py) a BFCL step stops at the
    first call past it, and a state walk (grounding) at the first object past it; with no deadline nothing
    changes."""
    import time

    from evolvekit.env.bfcl.env import _plain
    from evolvekit.env.cancel import Cancelled, deadline

    env = BfclEnv()
    env.reset(Task.model_validate(_task()))
    calls = [ToolCall(name="touch", arguments={"file_name": f"f{i}"}) for i in range(3)]
    with deadline(time.monotonic() - 1), pytest.raises(Cancelled):
        env.step(Action(tool_calls=calls))
    assert env.executed[-1] == []  # not one call ran
    with deadline(time.monotonic() - 1), pytest.raises(Cancelled):
        _plain(env.instances)
    with deadline(time.monotonic() + 60):
        assert all(r.ok for r in env.step(Action(tool_calls=calls)).call_results)
    env.close()


def test_a_read_only_call_walks_no_state(monkeypatch):
    """Issue 52 (6): a no-op `pwd` on a 1.7 MB file system walked the whole state for grounding. A step of read-only
    calls (env/bfcl/env.py: READ_ONLY) touches no backend; a writing file-system call re-walks only what it changed
    (env/bfcl/fs_leaves.py; tests/cpu/test_bfcl_fs_leaves.py), and a writing call to another backend walks that one."""
    import evolvekit.env.bfcl.env as bfcl_env

    env = BfclEnv()
    env.reset(Task.model_validate(_task()))
    env.step(Action(tool_calls=[ToolCall(name="ls", arguments={})]))  # the episode's one initial walk
    walks = []
    real = bfcl_env._state_leaves
    monkeypatch.setattr(bfcl_env, "_state_leaves", lambda instances: walks.append(list(instances)) or real(instances))
    for name in ("pwd", "ls", "du"):
        assert env.step(Action(tool_calls=[ToolCall(name=name, arguments={})])).call_results[0].ok
    assert walks == []
    res = env.step(Action(tool_calls=[ToolCall(name="touch", arguments={"file_name": "new.txt"})]))
    assert walks == [] and res.grounding.state_changed
    env._fs_leaves = None  # without the file system's record, the touched backend is walked whole
    res = env.step(Action(tool_calls=[ToolCall(name="touch", arguments={"file_name": "two.txt"})]))
    assert walks == [["GorillaFileSystem"]] and res.grounding.state_changed
    env.close()


def test_an_initial_config_over_the_state_cap_is_refused():
    """Issue 52 (6): a 1.7 MB initial_config made every no-op step take 4-9 s (grounding walks the whole state)."""
    from evolvekit.env.bfcl.env import MAX_CONFIG_LEAVES

    big = {f"f{i}": {"type": "file", "content": "x"} for i in range(MAX_CONFIG_LEAVES)}
    config = {"GorillaFileSystem": {"root": {"r": {"type": "directory", "contents": big}}}}
    with pytest.raises(EnvError, match="task.initial_config: more than"):
        BfclEnv().reset(Task.model_validate(_task(initial_config=config)))


class _Hostile:
    """A local HTTP server that answers every request with one of three hostile replies."""

    def __init__(self, mode: str) -> None:
        import http.server

        mode_ = mode

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _reply(self):
                # read the request body first: closing with it unread makes the kernel reset the connection, and
                # the client then sees a reset instead of the hostile reply (a race seen in CI)
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if mode_ == "trickle":  # a valid reply, one byte every 0.2 s: no single read ever times out
                    body = b'{"detail": "' + b"x" * 200 + b'"}'
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    for b in body:
                        self.wfile.write(bytes([b]))
                        self.wfile.flush()
                        time.sleep(0.2)
                elif mode_ == "headers":  # the status line and headers themselves, one byte every 0.2 s
                    head = b"HTTP/1.1 200 OK\r\nX-Pad: " + b"x" * 200 + b"\r\nContent-Length: 2\r\n\r\n{}"
                    try:
                        for b in head:
                            self.wfile.write(bytes([b]))
                            self.wfile.flush()
                            time.sleep(0.2)
                    except OSError:
                        pass
                    self.close_connection = True
                elif mode_ == "deep":
                    body = b"[" * 100_000 + b"]" * 100_000
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                else:  # huge: 64 MiB announced and sent
                    self.send_response(200)
                    self.send_header("Content-Length", str(64 * 2**20))
                    self.end_headers()
                    try:
                        for _ in range(64):
                            self.wfile.write(b"0" * 2**20)
                    except OSError:
                        pass

            do_GET = do_POST = _reply

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __exit__(self, *exc) -> None:
        self.server.shutdown()


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode, cause", [("trickle", "within"), ("headers", "within"), ("deep", "nested deeper"), ("huge", "over")]
)
def test_every_outbound_client_has_a_deadline_and_caps_its_reply(mode, cause):
    """Issue 52 (4): a server sending 1 byte/s hung the clients even with step_timeout_s=5; a deeply nested reply
    raised RecursionError; a 1 GB /schema reply took the client to 1 GB. Each is now one EnvError line. The
    deadline covers the status line and headers too: trickled, they took 45 s past every per-read timeout."""
    from evolvekit.config import EnvConfig
    from evolvekit.env.agentevolver import AgentEvolverClient
    from evolvekit.env.openenv import OpenEnvEnv

    with _Hostile(mode) as url:
        clients = [
            lambda: RemoteEnv(url, timeout_s=2.0).profile(),
            lambda: AgentEvolverClient(EnvConfig(name="agentevolver", service_url=url, step_timeout_s=1.0)).call("x"),
            lambda: OpenEnvEnv(EnvConfig(name="openenv", step_timeout_s=2.0, openenv={"url": url}))._get("/schema"),
        ]
        for call in clients:
            t0 = time.perf_counter()
            with pytest.raises(EnvError, match=cause):
                call()
            assert time.perf_counter() - t0 < 15


def test_the_service_creates_only_served_environments_within_their_own_caps():
    """Issue 52 (3): without a token, /create {"env": "scienceworld"} started a 186 MB JVM for anyone; `env serve`
    now serves only the environments named on its command line, heavy ones under their own cap, and computes a
    profile once, off the event loop."""
    settings = ServiceSettings(envs=("bfcl",), heavy_limits={"bfcl": 2}, step_timeout_s=30.0)
    with serving(create_app(settings)) as url:
        r = httpx.post(url + "/create", json={"env": "scienceworld"})
        assert r.status_code == 403 and "not served here" in r.json()["detail"]
        assert httpx.get(url + "/profile", params={"env": "scienceworld"}).status_code == 403
        ids = [httpx.post(url + "/create", json={"env": "bfcl"}).json()["instance_id"] for _ in range(2)]
        r = httpx.post(url + "/create", json={"env": "bfcl"})
        assert r.status_code == 503 and "'bfcl'" in r.json()["detail"]
        httpx.post(url + "/release", json={"instance_id": ids[0]})
        assert httpx.post(url + "/create", json={"env": "bfcl"}).status_code == 200  # a released slot is free again
        first = httpx.get(url + "/profile", params={"env": "bfcl"}, timeout=60)
        t0 = time.perf_counter()
        again = httpx.get(url + "/profile", params={"env": "bfcl"})
        assert first.json() == again.json() and time.perf_counter() - t0 < 1.0


def test_a_heavy_environment_starts_at_most_its_rate_per_minute():
    """Issue 52 (3): heavy environments have a start rate besides their cap: past N starts in a rolling minute the
    service answers 429 with Retry-After, even after releasing (a cap bounds how many live; a rate, how fast a client
    can make the service start JVMs)."""
    from evolvekit.env.service.server import EnvService

    settings = ServiceSettings(envs=("bfcl",), heavy_starts_per_minute={"bfcl": 2}, step_timeout_s=30.0)
    with serving(create_app(settings)) as url:
        for _ in range(2):
            r = httpx.post(url + "/create", json={"env": "bfcl"})
            assert r.status_code == 200
            httpx.post(url + "/release", json={"instance_id": r.json()["instance_id"]})
        r = httpx.post(url + "/create", json={"env": "bfcl"})
        assert r.status_code == 429 and "in the last minute" in r.json()["detail"]
        assert 1 <= int(r.headers["Retry-After"]) <= 61
    service = EnvService(ServiceSettings(heavy_starts_per_minute={"x": 1}))
    service._rate("x", now=0.0)
    with pytest.raises(HTTPException):
        service._rate("x", now=59.0)
    service._rate("x", now=60.5)  # the minute has rolled on


def test_env_serve_refuses_an_unknown_environment_in_one_line():
    out = subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", "env", "serve", "--env", "no-such-env", "--port", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "no-such-env" in out.stderr, out.stderr


def test_error_replies_name_the_problem_without_echoing_the_input():
    """Issue 52 (10): 4xx bodies echoed up to 1.9 MB of the client's input."""
    with serving(create_app(ServiceSettings(max_body_bytes=3_000_000))) as url:
        huge = "q" * 1_500_000
        task = _task(reference_solution=[[{"name": "no_such_tool_" + huge, "arguments": {}}]])
        r = httpx.post(url + "/create", json={"env": "bfcl", "task": task}, timeout=60)
        assert 400 <= r.status_code < 500 and len(r.content) < 2_000, (r.status_code, len(r.content))
