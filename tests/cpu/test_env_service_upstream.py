"""Upstream AgentEvolver's environment-service protocol, as its env_service/interface.md documents it, answered by
our service: raw HTTP with the bodies upstream's client sends ({env_type, task_id, instance_id, messages, params})
and the replies it reads ({success, data}). A BFCL episode runs end to end and is scored by the official checker;
task ids from outside are looked up among ours only."""

import httpx
import pytest
from conftest import serving

from evolvekit.env.bfcl.families import get_family
from evolvekit.env.service.server import ServiceSettings, create_app


@pytest.fixture(scope="module")
def url():
    with serving(create_app(ServiceSettings(step_timeout_s=30.0))) as u:
        yield u


def _post(url, endpoint, **fields):
    # exactly what upstream's client sends: all five keys, empty dicts for absent messages/params
    body = {"env_type": "default", "task_id": None, "instance_id": None, "messages": {}, "params": {}, **fields}
    return httpx.post(f"{url}/{endpoint}", json=body, timeout=60)


def test_a_bfcl_family_episode_through_upstreams_protocol(url):
    r = _post(url, "get_env_profile", env_type="bfcl", params={"split": "test", "family": "arith"})
    assert r.status_code == 200 and r.json()["success"] is True
    ids = r.json()["data"]
    assert ids[:2] == ["arith-test-0000", "arith-test-0001"]
    task = get_family("arith").tasks("test", 1)[0]
    (call,) = task.reference_solution[0]

    r = _post(url, "create", env_type="bfcl", task_id=ids[0])
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    iid = data["info"]["instance_id"]
    assert data["info"]["task_id"] == ids[0] and data["reward"] == 0.0 and data["is_terminated"] is False
    roles = [m["role"] for m in data["state"]]
    assert roles[0] == "system" and roles[-1] == "user" and data["state"][-1]["content"] == task.query
    assert "add" in data["state"][0]["content"]  # the tools are in the system prompt

    r = _post(url, "get_info", instance_id=iid)
    assert r.status_code == 200 and {t["name"] for t in r.json()["data"]["tools"]} == {
        "add",
        "subtract",
        "multiply",
        "divide",
    }
    # the assistant's text is parsed by our parser, as a policy would write it
    args = ", ".join(f'"{k}": {v}' for k, v in call.arguments.items())
    text = f'<tool_call>{{"name": "{call.name}", "arguments": {{{args}}}}}</tool_call>'
    r = _post(url, "step", instance_id=iid, messages={"role": "assistant", "content": text})
    assert r.status_code == 200, r.text
    step = r.json()["data"]
    assert step["state"][0]["role"] == "user" and call.name in step["state"][0]["content"]
    assert step["is_terminated"] is False and step["info"]["instance_id"] == iid
    r = _post(url, "step", instance_id=iid, messages={"role": "assistant", "content": "Done."})
    assert r.json()["data"]["is_terminated"] is True
    r = _post(url, "evaluate", instance_id=iid)
    assert r.status_code == 200 and r.json() == {"success": True, "data": 1.0}  # the official checker passed
    r = _post(url, "release", instance_id=iid)
    assert r.status_code == 200 and r.json()["success"] is True
    assert _post(url, "evaluate", instance_id=iid).status_code == 404


def test_a_wrong_answer_scores_zero_and_the_client_may_name_its_instance(url):
    task_id = get_family("arith").tasks("test", 2)[1].task_id
    r = _post(url, "create", env_type="bfcl", task_id=task_id, instance_id="my-instance_1")
    assert r.json()["data"]["info"]["instance_id"] == "my-instance_1"
    _post(url, "step", instance_id="my-instance_1", messages={"role": "assistant", "content": "No idea."})
    assert _post(url, "evaluate", instance_id="my-instance_1").json()["data"] == 0.0
    assert _post(url, "release", instance_id="my-instance_1").json()["data"] is True


@pytest.mark.parametrize(
    "endpoint,fields,status,needle",
    [
        ("create", {"env_type": "bfcl", "task_id": "__import__('os').system('id')"}, 404, "no task"),
        ("create", {"env_type": "bfcl"}, 422, "task_id"),
        ("create", {"env_type": "bfcl", "task_id": "arith-test-0000", "instance_id": "../x"}, 422, "instance_id"),
        ("create", {"env_type": "nope", "task_id": "t"}, 404, "no task"),
        ("step", {"instance_id": "missing", "messages": {"role": "assistant", "content": "x"}}, 404, "missing"),
        ("step", {"env_type": "bfcl"}, 422, "instance_id"),
        ("get_env_profile", {"env_type": "bfcl", "params": {"split": "everything"}}, 422, "params"),
        ("get_env_profile", {"env_type": "nope"}, 400, "nope"),
        ("evaluate", {"instance_id": "x", "surprise": 1}, 422, "surprise"),
    ],
)
def test_bad_upstream_requests_get_a_4xx_naming_the_problem(url, endpoint, fields, status, needle):
    r = _post(url, endpoint, **fields)
    assert r.status_code == status, r.text
    assert needle in r.json()["detail"]


def test_our_own_protocol_still_answers_on_the_shared_paths(url):
    task = get_family("arith").tasks("test", 1)[0]
    r = httpx.post(f"{url}/create", json={"env": "bfcl", "task": task.model_dump(mode="json")}, timeout=60)
    assert r.status_code == 200 and "reset" in r.json()
    iid = r.json()["instance_id"]
    r = httpx.post(f"{url}/step", json={"instance_id": iid, "action": {"text": "hi"}}, timeout=60)
    assert r.status_code == 200 and "observation" in r.json()
    assert httpx.post(f"{url}/release", json={"instance_id": iid}).json() == {"released": iid}
    r = httpx.post(f"{url}/create", json={"env": "bfcl", "tsk": 1}, timeout=60)
    assert r.status_code == 422 and "tsk" in r.json()["detail"]


def test_the_agentevolver_client_env_runs_an_episode_against_our_service(url):
    """env.name agentevolver (a client of upstream's protocol) against our service in that mode."""
    from evolvekit.agent.rollout import initial_context
    from evolvekit.agent.templates import TemplateSettings
    from evolvekit.config import EnvConfig
    from evolvekit.env.action_text import parse_action
    from evolvekit.env.registry import env_tasks, make_env

    cfg = EnvConfig(name="agentevolver", service_url=url, remote_env_type="bfcl", remote_params={"family": "arith"})
    tasks = env_tasks(cfg, "test")
    assert tasks[0].task_id == "arith-test-0000" and tasks[0].env_name == "agentevolver"
    ref = get_family("arith").tasks("test", 1)[0]
    env = make_env(cfg)
    reset = env.reset(tasks[0])
    assert reset.observation == ref.query and reset.system and "add" in reset.system
    # the service builds its environments with make_env: a person's worked examples stay behind
    # env.worked_examples: person (issue 76), so none is served, and none is shown on this side either
    assert reset.examples == []
    ctx = initial_context(reset, "compact", TemplateSettings())
    assert reset.system in str(ctx.messages[0].content)  # the service's system message replaces our tool prompt
    (call,) = ref.reference_solution[0]
    args = ", ".join(f'"{k}": {v}' for k, v in call.arguments.items())
    step = env.step(parse_action(f'<tool_call>{{"name": "{call.name}", "arguments": {{{args}}}}}</tool_call>'))
    assert call.name in step.observation and not step.done
    assert env.step(parse_action("Done.")).done
    result = env.evaluate()
    assert result.score == 1.0 and result.passed
    iid = env.info().instance_id
    env.close()
    assert _post(url, "evaluate", instance_id=iid).status_code == 404  # released


@pytest.mark.parametrize(
    "reply, needle",
    [
        ("not json", "not JSON"),
        ('{"success": true}', "no 'data'"),
        ('{"success": true, "data": {"state": "x"}}', "malformed reply"),
        ('{"success": false, "data": null}', "reported failure"),
    ],
)
def test_the_agentevolver_client_turns_malformed_replies_into_env_errors(reply, needle):
    from evolvekit.config import EnvConfig
    from evolvekit.env.agentevolver import AgentEvolverEnv
    from evolvekit.errors import EnvError
    from evolvekit.types import Task

    transport = httpx.MockTransport(lambda request: httpx.Response(200, text=reply))
    cfg = EnvConfig(name="agentevolver", service_url="http://svc")
    env = AgentEvolverEnv(cfg, client=httpx.Client(base_url="http://svc", transport=transport))
    with pytest.raises(EnvError, match=needle) as err:
        env.reset(Task(task_id="t1", env_name="agentevolver", query="q"))
    assert "/create" in str(err.value)


@pytest.mark.parametrize("endpoint", ["profile", "create", "step", "evaluate", "info"])
@pytest.mark.parametrize("reply", ["<html>502</html>", '{"surprise": 1}', "[1, 2]"])
def test_our_client_turns_any_malformed_reply_into_an_env_error_naming_the_endpoint(endpoint, reply):
    from evolvekit.env.base import Action
    from evolvekit.env.service.client import RemoteEnv
    from evolvekit.errors import EnvError

    transport = httpx.MockTransport(lambda request: httpx.Response(200, text=reply))
    env = RemoteEnv("http://svc", client=httpx.Client(base_url="http://svc", transport=transport))
    env.instance_id = "i1"
    call = {
        "profile": env.profile,
        "create": lambda: env.reset(None, {"classes": ["MathAPI"]}),
        "step": lambda: env.step(Action(text="hi")),
        "evaluate": env.evaluate,
        "info": env.info,
    }[endpoint]
    with pytest.raises(EnvError, match=f"/{endpoint}"):
        call()


def test_upstreams_double_slash_path_reaches_the_route(url):
    """Issue 54: upstream's own client lists tasks at //get_env_profile (its base URL ends in '/'); it failed."""
    body = {"env_type": "bfcl", "task_id": None, "instance_id": None, "messages": {}, "params": {"split": "test"}}
    r = httpx.post(f"{url}//get_env_profile", json={**body, "params": {"split": "test", "family": "arith"}}, timeout=60)
    assert r.status_code == 200 and r.json()["data"][0] == "arith-test-0000"
