"""The SGLang engine (``models.policy.engine: sglang``): a served policy that is trained. SGLang itself is not
installed here; a stand-in server speaks the three calls of SGLang's native API the engine uses (``/generate`` with
``input_ids`` and ``return_logprob``, ``/update_weights_from_disk``, ``/flush_cache``) over real HTTP, and samples
with its own copy of a tiny model, so its log-probabilities are real and its weights are only the pushed ones."""

import asyncio
import socket
import threading
import time
from pathlib import Path

import pytest
import torch

from evolvekit.engine.base import Capabilities, Engine
from evolvekit.errors import LLMError
from evolvekit.llm.base import SamplingParams
from evolvekit.llm.sglang_engine import SGLangEngine, completions_from_sglang, sglang_generate_request


def test_the_request_repeats_each_prompt_n_times_and_seeds_each_row():
    p = SamplingParams(n=2, temperature=0.7, top_p=0.9, max_new_tokens=40, stop=("</tool_call>",), seed=11)
    body = sglang_generate_request([[1, 2], [3]], p)
    assert body["input_ids"] == [[1, 2], [1, 2], [3], [3]] and body["return_logprob"] is True
    base = {"temperature": 0.7, "top_p": 0.9, "max_new_tokens": 40, "stop": ["</tool_call>"]}
    assert body["sampling_params"] == [{**base, "sampling_seed": 11 + i} for i in range(4)]
    greedy = sglang_generate_request([[1]], SamplingParams(temperature=0, top_p=0.5))
    assert greedy["sampling_params"] == {"temperature": 0.0, "top_p": 1.0, "max_new_tokens": 256}


def _row(ids, lps, text="x", finish="stop"):
    return {"text": text, "meta_info": {"output_token_logprobs": [[lp, t, None] for t, lp in zip(ids, lps)],
                                        "finish_reason": {"type": finish}}}  # fmt: skip


def test_completions_take_each_rows_tokens_and_logprobs_in_order():
    answer = [_row([4, 5], [-0.5, -1.5], "ab"), _row([6], [-0.25], "c", "length"), _row([7], [-1.0], "d")]
    answer.append(_row([8, 2], [-2.0, -3.0], "e"))
    [[a, b], [c, d]] = completions_from_sglang(answer, [[1, 2], [3]], 2)
    assert (a.token_ids, a.logprobs, a.text, a.finish_reason, a.prompt_token_ids) == ([4, 5], [-0.5, -1.5], "ab",
                                                                                      "stop", [1, 2])  # fmt: skip
    assert b.finish_reason == "length" and b.prompt_token_ids == [1, 2] and c.prompt_token_ids == [3]
    assert (d.token_ids, d.logprobs) == ([8, 2], [-2.0, -3.0])
    [[one]] = completions_from_sglang(_row([9], [-0.1]), [[1]], 1)  # one row is answered as an object
    assert one.token_ids == [9]


def test_completions_refuse_answers_that_do_not_line_up():
    with pytest.raises(LLMError, match="answered 1 results for 2 rows"):
        completions_from_sglang([_row([4], [-1.0])], [[1]], 2)
    with pytest.raises(LLMError, match="without its tokens' log-probabilities"):
        completions_from_sglang([{"text": "x", "meta_info": {}}], [[1]], 1)
    with pytest.raises(LLMError, match="answered str results"):
        completions_from_sglang("oops", [[1]], 1)


@pytest.mark.parametrize(
    "overrides, problem",
    [
        ({}, "needs models.policy.engine_url"),
        ({"engine_url": "http://127.0.0.1:30000"}, "needs models.policy.engine_weights_dir"),
        ({"engine_url": "127.0.0.1:30000", "engine_weights_dir": "/tmp/w"}, "must start with http"),
        ({"engine_url": "http://h:1", "engine_weights_dir": "/w", "backend": "openai"}, "needs models.policy.backend"),
    ],
)  # fmt: skip
def test_config_rules_of_the_sglang_engine(overrides, problem, config_problem):
    policy = {"engine": "sglang", **overrides}
    assert problem in (config_problem({"models": {"policy": policy}}) or "")
    ok = {"engine": "sglang", "engine_url": "http://127.0.0.1:30000", "engine_weights_dir": "/tmp/w"}
    assert config_problem({"models": {"policy": ok}}) is None
    assert "train.lora is not supported" in (config_problem({"models": {"policy": ok}, "train": {"lora": True}}) or "")


class _StandIn:
    """SGLang's native API as far as the engine uses it, over a tiny model of its own (uvicorn, a thread)."""

    def __init__(self, model_dir: Path) -> None:
        import uvicorn
        from fastapi import FastAPI, Request
        from fastapi.responses import JSONResponse

        from evolvekit.llm.local import LocalLLM

        self.llm = LocalLLM(str(model_dir), device="cpu", packed_weights=False)
        self.loads: list[str] = []
        self.flushes = 0
        self.fail_load = False
        self.fail_generate = False
        self.delay_s = 0.0
        app = FastAPI()

        @app.post("/generate")
        async def generate(request: Request):
            if self.fail_generate:
                return JSONResponse({"error": "scheduler died"}, status_code=500)
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            body = await request.json()
            rows, sp = body["input_ids"], body["sampling_params"]
            out = []
            for i, ids in enumerate(rows):
                s = sp[i] if isinstance(sp, list) else sp
                params = SamplingParams(temperature=s["temperature"], top_p=s["top_p"], stop=tuple(s.get("stop", ())),
                                        max_new_tokens=s["max_new_tokens"], seed=s.get("sampling_seed"))  # fmt: skip
                [[c]] = self.llm.generate_ids([ids], params)
                out.append(_row(c.token_ids, c.logprobs, c.text, c.finish_reason))
            return out

        @app.post("/update_weights_from_disk")
        async def update(request: Request):
            body = await request.json()
            if self.fail_load:
                return {"success": False, "message": "shape mismatch in model.layers.0"}
            from safetensors.torch import load_file

            folder = Path(body["model_path"])
            assert (folder / "config.json").is_file()
            state = load_file(str(folder / "model.safetensors"))
            missing, unexpected = self.llm.model.load_state_dict(state, strict=False)
            assert not unexpected and set(missing) <= {"lm_head.weight"}  # tied to the embeddings
            self.llm.reset_prefix_cache()
            self.loads.append(str(folder))
            return {"success": True, "message": "ok"}

        @app.post("/flush_cache")
        async def flush():
            self.flushes += 1
            return {"success": True}

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def _plain(model, prompt, tokens):
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        lp = torch.log_softmax(model(ids).logits[0].float(), -1)
    return [float(lp[len(prompt) - 1 + i, t]) for i, t in enumerate(tokens)]


@pytest.fixture()
def tiny_pair(tmp_path):
    from evolvekit.llm.local import LocalLLM
    from evolvekit.llm.tiny import make_tiny_model

    model_dir = make_tiny_model(tmp_path / "model")
    server = _StandIn(make_tiny_model(tmp_path / "other", seed=1))  # the server starts with other weights
    try:
        yield LocalLLM(str(model_dir), device="cpu", packed_weights=False), server
    finally:
        server.close()


@pytest.mark.slow
def test_the_engine_samples_the_policy_and_follows_its_updates(tiny_pair, tmp_path):
    local, server = tiny_pair
    (tmp_path / "weights" / "push-000007").mkdir(parents=True)  # an earlier process's push (a resumed run)
    engine = SGLangEngine(local, server.url, tmp_path / "weights", timeout_s=30)
    assert [p.name for p in (tmp_path / "weights").iterdir()] == ["push-000001"]
    assert Capabilities.of(engine) == Capabilities(token_ids=True, weight_updates=True, prefix_cache=True)
    assert len(server.loads) == 1  # the policy's weights, pushed at start: the server's own were another model's
    prompts = [[1, 5, 9, 13, 17], [1, 7, 7]]
    outs = engine.generate_ids(prompts, SamplingParams(n=2, temperature=1.0, max_new_tokens=6, seed=5))
    for prompt, comps in zip(prompts, outs):
        assert len(comps) == 2
        for c in comps:
            assert c.prompt_token_ids == prompt and c.token_ids
            assert c.logprobs == pytest.approx(_plain(local.model, prompt, c.token_ids), abs=1e-4)
    from evolvekit.config import TrainConfig
    from evolvekit.train.trainer import GRPOTrainer
    from evolvekit.types import TrainingSample

    trainer = GRPOTrainer(local, TrainConfig(learning_rate=1e-2, kl_beta=0.0), engine=Engine(engine))
    before = {k: v.clone() for k, v in local.model.state_dict().items()}
    sample = TrainingSample(
        trajectory_id="t", group_id="g", token_ids=[1, 5, 9, 13, 17, 4, 6], loss_mask=[0] * 5 + [1, 1],
        token_advantages=[0.0] * 5 + [1.0, 1.0], experience_mask=[0] * 7,
    )  # fmt: skip
    trainer.update([sample])  # ends with Policy.publish: the new weights to the server, its prefix cache dropped
    assert any(not torch.equal(before[k], v) for k, v in local.model.state_dict().items())
    assert len(server.loads) == 2 and server.flushes == 1
    assert [p.name for p in (tmp_path / "weights").iterdir()] == ["push-000002"]  # the previous push removed
    [[c]] = engine.generate_ids([prompts[0]], SamplingParams(n=1, temperature=1.0, max_new_tokens=6, seed=6))
    assert c.logprobs == pytest.approx(_plain(local.model, prompts[0], c.token_ids), abs=1e-4)
    # failures are one line naming the server
    server.fail_load = True
    with pytest.raises(LLMError, match="did not load the policy's weights: shape mismatch"):
        engine.update_weights(local.model.state_dict())
    # a reply over the size cap, and one that does not arrive within the deadline: one line each, no hang
    engine.max_reply_bytes = 200
    with pytest.raises(LLMError, match=r"/generate: the reply is over 200 bytes"):
        engine.generate_ids(prompts, SamplingParams(max_new_tokens=6))
    engine.max_reply_bytes, engine.deadline_s, server.delay_s = 2**20, 0.5, 3.0
    with pytest.raises(LLMError, match=r"/generate: no complete reply within 0.5s"):
        engine.generate_ids(prompts, SamplingParams(max_new_tokens=6))
    server.delay_s, engine.deadline_s = 0.0, 30.0
    server.fail_generate = True
    with pytest.raises(LLMError, match=r"/generate answered HTTP 500"):
        engine.generate_ids(prompts, SamplingParams())
    server.close()
    with pytest.raises(LLMError, match="SGLang server http://127.0.0.1"):
        engine.generate_ids(prompts, SamplingParams())


@pytest.mark.slow
def test_a_run_trains_the_policy_whose_rollouts_the_server_samples(tiny_pair, tmp_path, monkeypatch):
    """`evolvekit run` with engine: sglang: the rollouts come from the server, the update trains the in-process
    policy, and after the run the server holds the weights of the run's checkpoint."""
    import yaml

    from evolvekit.config import load_config
    from evolvekit.orchestrator.build import build_loop
    from evolvekit.orchestrator.run_dir import open_run

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "plugins"))
    local, server = tiny_pair
    data = {
        "run": {"name": "served", "out_dir": str(tmp_path / "runs"), "seed": 1},
        "env": {"name": "coin", "plugins": ["coin_env"]},
        "rollout": {"max_steps": 1, "group_size": 4},
        "train": {"iterations": 1, "tasks_per_iteration": 2, "learning_rate": 1e-3, "kl_beta": 0.0,
                  "eval_before": False, "eval_after": False, "autocast": "off"},
        "models": {"policy": {"model": local.name, "max_new_tokens": 9, "device": "cpu", "engine": "sglang",
                              "engine_url": server.url, "engine_weights_dir": str(tmp_path / "pushed")}},
    }  # fmt: skip
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(data))
    cfg, run_dir, store = open_run(load_config(path), None)
    build_loop(cfg, run_dir, store, show_progress=False).run()
    assert len(server.loads) == 2  # at start, and after the one update
    from safetensors.torch import load_file

    trained = load_file(str(Path(store.latest_checkpoint().path) / "model.safetensors"))
    served = server.llm.model.state_dict()
    assert all(torch.equal(trained[k], served[k]) for k in trained)
    assert any(not torch.equal(trained[k], local.model.state_dict()[k]) for k in trained)  # it did train
    store.close()
