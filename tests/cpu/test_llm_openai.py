"""The OpenAI-compatible backend against a small HTTP server started by the test."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from evolvekit.errors import LLMError
from evolvekit.llm.base import SamplingParams
from evolvekit.llm.openai_compat import OpenAICompatLLM
from evolvekit.types import ChatMessage


class Server:
    def __init__(self, script):
        self.script = list(script)  # status codes to answer in order; then 200 forever
        self.requests = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append((self.path, dict(self.headers), body))
                status = outer.script.pop(0) if outer.script else 200
                if status == "slow":
                    import time

                    time.sleep(1.0)
                    status = 200
                lazy = status == "lazy"  # a server that ignores n and logprobs
                if lazy:
                    status = 200
                payload = {
                    "choices": [
                        {
                            "message": {"role": "assistant", "content": f"echo {body['messages'][-1]['content']}"},
                            "logprobs": {"content": [{"token": "echo", "logprob": -0.5}]},
                            "finish_reason": "stop",
                        }
                        for _ in range(1 if lazy else body.get("n", 1))
                    ],
                    "usage": {"prompt_tokens": 11, "completion_tokens": 4 * body.get("n", 1)},
                }
                if lazy:
                    for c in payload["choices"]:
                        c.pop("logprobs")
                if body.get("return_token_ids"):  # what vLLM answers
                    payload["prompt_token_ids"] = [1, 2, 3]
                    for c in payload["choices"]:
                        c["token_ids"] = [7]
                data = json.dumps(payload if status == 200 else {"error": "x"}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()


@pytest.fixture
def server_factory():
    servers = []

    def make(script=()):
        s = Server(script)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.close()


def _msgs(text="hi"):
    return [[ChatMessage(role="user", content=text)]]


def test_success_sends_key_and_params(server_factory, monkeypatch):
    s = server_factory()
    monkeypatch.setenv("MY_KEY", "sekret")
    llm = OpenAICompatLLM("m", base_url=s.url, api_key_env="MY_KEY")
    out = llm.chat(_msgs("hello") * 2, SamplingParams(n=2, temperature=0.5, max_new_tokens=9, stop=("x",), seed=3))
    assert [len(g) for g in out] == [2, 2] and out[0][0].text == "echo hello" and out[0][0].logprobs == [-0.5]
    path, headers, body = s.requests[0]
    assert path == "/v1/chat/completions"
    assert headers["Authorization"] == "Bearer sekret"
    assert body["n"] == 2 and body["max_tokens"] == 9 and body["stop"] == ["x"]
    # each conversation of the call its own seed (the seed plus its index): equal conversations, a GRPO group's
    # rollouts sent together, are not sampled alike
    assert sorted(b["seed"] for _, _, b in s.requests) == [3, 4]


def test_retries_on_429_and_5xx(server_factory):
    s = server_factory([429, 503])
    llm = OpenAICompatLLM("m", base_url=s.url, backoff_s=0.01)
    assert llm.chat(_msgs(), SamplingParams())[0][0].text == "echo hi"
    assert len(s.requests) == 3


def test_back_off_doubles_from_backoff_s(server_factory, caplog):
    """The retry schedule (tenacity since issue 54 (9)): backoff_s, then twice that, one warning per retry."""
    s = server_factory([503, 429])
    llm = OpenAICompatLLM("m", base_url=s.url, backoff_s=0.2, max_retries=3)
    with caplog.at_level("WARNING"):
        assert llm.chat(_msgs(), SamplingParams())[0][0].text == "echo hi"
    lines = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert lines == [
        "openai backend: HTTP 503, retrying in 0.2s (1/3)",
        "openai backend: HTTP 429, retrying in 0.4s (2/3)",
    ]


def test_gives_up_after_retries(server_factory):
    s = server_factory([500] * 10)
    llm = OpenAICompatLLM("m", base_url=s.url, backoff_s=0.01, max_retries=2)
    with pytest.raises(LLMError, match="gave up after 3 attempts"):
        llm.chat(_msgs(), SamplingParams())


def test_a_timed_out_request_is_not_sent_again(server_factory):
    """Issue 54 (5): a request the server had when it timed out was re-sent while the server still worked on it (16
    requests for 4 rollouts). Now it is one error naming models.<role>.timeout_s, after one request."""
    s = server_factory(["slow"])
    llm = OpenAICompatLLM("m", base_url=s.url, backoff_s=0.01, timeout_s=0.3, role="judge")
    with pytest.raises(LLMError, match=r"models.judge.timeout_s = 0.3 s .*not re-sent"):
        llm.chat(_msgs(), SamplingParams())
    assert len(s.requests) == 1


def test_a_request_that_never_reached_the_server_is_retried(server_factory):
    import socket

    with socket.socket() as sock:  # a port with nothing listening: connection refused, nothing was sent
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    llm = OpenAICompatLLM("m", base_url=f"http://127.0.0.1:{port}/v1", backoff_s=0.01, max_retries=2)
    with pytest.raises(LLMError, match="gave up after 3 attempts .*ConnectError"):
        llm.chat(_msgs(), SamplingParams())


def test_a_server_that_ignores_n_or_logprobs_is_named_once(server_factory, caplog):
    s = server_factory(["lazy", "lazy"])
    llm = OpenAICompatLLM("m", base_url=s.url, role="policy")
    with caplog.at_level("WARNING"):
        out = llm.chat(_msgs() * 2, SamplingParams(n=2))
    assert [len(g) for g in out] == [1, 1] and out[0][0].logprobs == []
    lines = [r.getMessage() for r in caplog.records]
    assert sum("ignores n" in ln for ln in lines) == 1 and sum("ignores logprobs" in ln for ln in lines) == 1


@pytest.mark.parametrize("status,needle", [(401, "api_key_env"), (404, "models.judge.model")])
def test_auth_and_not_found_name_the_setting(server_factory, status, needle):
    s = server_factory([status])
    llm = OpenAICompatLLM("m", base_url=s.url, role="judge")
    with pytest.raises(LLMError, match=needle):
        llm.chat(_msgs(), SamplingParams())
    assert len(s.requests) == 1


def test_missing_base_url_is_clear(monkeypatch):
    monkeypatch.delenv("EVOLVEKIT_OPENAI_BASE_URL", raising=False)
    with pytest.raises(LLMError, match="models.policy.base_url"):
        OpenAICompatLLM("m")


def test_exact_token_ids_when_the_server_returns_them(server_factory):
    s = server_factory()
    plain = OpenAICompatLLM("m", base_url=s.url).chat(_msgs(), SamplingParams())[0][0]
    assert plain.prompt_token_ids == [] and plain.token_ids == []
    assert "return_token_ids" not in s.requests[0][2]
    exact = OpenAICompatLLM("m", base_url=s.url, return_token_ids=True).chat(_msgs(), SamplingParams())[0][0]
    assert s.requests[1][2]["return_token_ids"] is True
    assert exact.prompt_token_ids == [1, 2, 3] and exact.token_ids == [7]
    assert (exact.num_prompt_tokens, exact.num_completion_tokens) == (3, 1)  # exact ids win over usage


def test_token_counts_come_from_usage_without_token_ids(server_factory):
    s = server_factory()
    outs = OpenAICompatLLM("m", base_url=s.url).chat(_msgs(), SamplingParams(n=2))[0]
    assert [(c.num_prompt_tokens, c.num_completion_tokens) for c in outs] == [(11, 4), (11, 4)]  # n shares usage


def test_concurrency_is_config(server_factory):
    from evolvekit.config import config_from_dict
    from evolvekit.llm.factory import build_llm

    s = server_factory()
    cfg = config_from_dict({"models": {"judge": {"backend": "openai", "base_url": s.url, "concurrency": 3}}})
    assert build_llm(cfg.models.judge, "judge").concurrency == 3


def test_a_helpers_timed_out_request_is_dropped_and_counted_not_the_whole_job(server_factory, caplog):
    """Issue 78.2: one request over timeout_s aborted a whole synthesis. A helper role drops that one request (an
    empty answer, counted and warned) and the rest of the batch is answered; the policy's still ends the job."""
    s = server_factory(["slow"])
    llm = OpenAICompatLLM("m", base_url=s.url, timeout_s=0.3, role="synthesizer", drop_timed_out=True, concurrency=1)
    with caplog.at_level("WARNING", logger="evolvekit.llm.openai_compat"):
        out = llm.chat(_msgs("a") + _msgs("b"), SamplingParams(n=2))
    assert [[c.text for c in g] for g in out] == [["", ""], ["echo b", "echo b"]]
    assert llm.dropped == 1 and len(s.requests) == 2 and "1 dropped so far" in caplog.text
    from evolvekit.config import load_config
    from evolvekit.llm.factory import build_llm

    models = load_config(None, ["models.judge.backend=openai", f"models.judge.base_url={s.url}"]).models
    assert build_llm(models.judge, "judge").drop_timed_out is True  # type: ignore[attr-defined]
    policy = load_config(None, ["models.policy.backend=openai", f"models.policy.base_url={s.url}"]).models.policy
    assert build_llm(policy, "policy").drop_timed_out is False  # type: ignore[attr-defined]
