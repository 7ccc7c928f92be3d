"""The Ray backend on a local Ray started by the test (fractional CPUs, 127.0.0.1): rollout workers and
environment actors produce the same trajectories as the in-process backend, and weight sync works."""

from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from evolvekit.agent.ray_backend import RayEnv, RayRolloutPool, WorkerSpec, init_ray  # noqa: E402
from evolvekit.agent.rollout import RolloutJob, run_rollouts  # noqa: E402
from evolvekit.config import EnvConfig, load_config  # noqa: E402
from evolvekit.engine.base import Engine  # noqa: E402
from evolvekit.env.registry import env_tasks, make_env  # noqa: E402
from evolvekit.llm.base import SamplingParams  # noqa: E402
from evolvekit.llm.local import LocalLLM  # noqa: E402
from evolvekit.llm.tiny import make_tiny_model  # noqa: E402

PLUGINS = str(Path(__file__).resolve().parents[1] / "plugins")


@pytest.fixture(scope="module")
def local_ray():
    init_ray(num_cpus=2, runtime_env={"env_vars": {"PYTHONPATH": PLUGINS, "TOKENIZERS_PARALLELISM": "false"}})
    yield
    ray.shutdown()


@pytest.mark.slow
def test_env_actor_proxy(local_ray, monkeypatch):
    monkeypatch.syspath_prepend(PLUGINS)
    cfg = EnvConfig(name="bfcl", family="arith")
    task = env_tasks(cfg, "test")[0]
    env = RayEnv(cfg, num_cpus=0.1)
    from evolvekit.env.action_text import format_call, parse_action

    reset = env.reset(task)
    assert len(reset.tools) == 4
    env.step(parse_action(format_call(task.reference_solution[0][0])))
    env.step(parse_action("done"))
    assert env.evaluate().score == 1.0
    env.close()


@pytest.mark.slow
def test_workers_match_local_rollouts_and_sync_weights(local_ray, tmp_path, monkeypatch, tiny_sets):
    monkeypatch.syspath_prepend(PLUGINS)
    base = make_tiny_model(tmp_path / "seed0", seed=0)
    other = LocalLLM(str(make_tiny_model(tmp_path / "seed1", seed=1)), device="cpu")
    cfg = load_config(
        None,
        [
            "env.name=coin",
            "env.plugins=[coin_env]",
            *tiny_sets,  # every helper role tiny too (issue 97)
            f"models.policy.model={base}",
            "rollout.backend=ray",
            "rollout.ray_workers=2",
            "rollout.ray_worker_cpus=0.5",
            "rollout.max_steps=1",
        ],
    )
    tasks = env_tasks(cfg.env, "train")
    jobs = [RolloutJob(task=t, group_id=f"g{i}") for i, t in enumerate(tasks[:5])]
    params = SamplingParams(temperature=0.0, max_new_tokens=6)
    # the run's own worked examples, made by the driver: every worker's prompts show them as the driver's do
    from evolvekit.env.examples import ShownExamples
    from evolvekit.types import ChatMessage

    shown = [
        ChatMessage(role="user", content="Flip the coin (EXAMPLE-7)."),
        ChatMessage(role="assistant", content="ok"),
    ]
    pool = RayRolloutPool(WorkerSpec.of(cfg), examples=lambda: shown)
    try:
        pool.sync_weights(other.model)  # the workers now hold the seed-1 weights, not the seed-0 file they loaded
        remote = pool.run(jobs, params)
    finally:
        pool.shutdown()
    local = run_rollouts(
        jobs, lambda: ShownExamples(make_env(cfg.env), lambda: shown), Engine(other), cfg.rollout, params,
        show_progress=False,
    )  # fmt: skip
    assert "EXAMPLE-7" in other.tokenizer.decode(remote[0].steps[0].prompt_token_ids)
    assert [t.task_id for t in remote] == [j.task.task_id for j in jobs]  # job order kept across workers
    assert [t.group_id for t in remote] == [j.group_id for j in jobs]
    assert [t.steps[0].completion_token_ids for t in remote] == [t.steps[0].completion_token_ids for t in local]
    assert all(t.outcome_reward is not None and not t.flags.failed for t in remote)


@pytest.mark.slow
def test_lora_workers_receive_only_the_adapters_and_match_the_driver(local_ray, tmp_path, monkeypatch, tiny_sets):
    from evolvekit.config import TrainConfig
    from evolvekit.llm.lora import policy_weights
    from evolvekit.train.trainer import GRPOTrainer
    from evolvekit.types import TrainingSample

    monkeypatch.syspath_prepend(PLUGINS)
    base = make_tiny_model(tmp_path / "base", seed=0)
    cfg = load_config(
        None,
        [
            "env.name=coin",
            "env.plugins=[coin_env]",
            *tiny_sets,  # every helper role tiny too (issue 97)
            f"models.policy.model={base}",
            "rollout.backend=ray",
            "rollout.ray_workers=1",
            "rollout.ray_worker_cpus=0.5",
            "rollout.max_steps=1",
            "train.lora=true",
            "train.lora_rank=4",
        ],
    )
    driver = LocalLLM(str(base), device="cpu")
    trainer = GRPOTrainer(driver, TrainConfig(lora=True, lora_rank=4, learning_rate=5e-2, kl_beta=0.0, autocast="off"))
    sample = TrainingSample(
        trajectory_id="t",
        group_id="g",
        token_ids=list(range(1, 17)),
        loss_mask=[0] * 6 + [1] * 10,
        token_advantages=[0.0] * 6 + [1.0] * 10,
        experience_mask=[0] * 16,
    )
    trainer.update([sample])  # the adapters move away from their zero start
    kind, state = policy_weights(driver.model)
    assert kind == "lora" and state and all("lora_" in k for k in state)
    full = sum(v.numel() for v in driver.model.get_base_model().state_dict().values())
    assert sum(v.numel() for v in state.values()) < full / 5  # far less than the model
    tasks = env_tasks(cfg.env, "train")
    jobs = [RolloutJob(task=t, group_id=f"g{i}") for i, t in enumerate(tasks[:3])]
    params = SamplingParams(temperature=0.0, max_new_tokens=6)
    pool = RayRolloutPool(WorkerSpec.of(cfg))
    try:
        assert pool.gpus == 0.0  # no GPU in this cluster
        pool.sync_weights(driver.model)
        assert pool.shipped_tensors == len(state)
        remote = pool.run(jobs, params)
    finally:
        pool.shutdown()
    local = run_rollouts(jobs, lambda: make_env(cfg.env), Engine(driver), cfg.rollout, params, show_progress=False)
    assert [t.steps[0].completion_token_ids for t in remote] == [t.steps[0].completion_token_ids for t in local]
    # the tokens' log-probabilities are the trained adapters' (a worker without them gives other values)
    untrained = LocalLLM(str(base), device="cpu")
    plain = run_rollouts(jobs, lambda: make_env(cfg.env), Engine(untrained), cfg.rollout, params, show_progress=False)
    for r, lo, p in zip(remote, local, plain):
        assert r.steps[0].completion_logprobs == pytest.approx(lo.steps[0].completion_logprobs, abs=1e-4)
        assert max(abs(a - b) for a, b in zip(lo.steps[0].completion_logprobs, p.steps[0].completion_logprobs)) > 1e-3


def test_worker_gpus_share_the_cluster():
    from evolvekit.agent.ray_backend import worker_gpus

    assert worker_gpus(None, 0.0, 2) == 0.0
    assert worker_gpus(None, 8.0, 2) == 1.0 and worker_gpus(None, 1.0, 4) == 0.25
    assert worker_gpus(0.5, 8.0, 2) == 0.5


def test_a_worker_is_sent_what_it_reads_of_the_config_not_the_whole_config():
    """Issue 55: the Ray pool took the whole config and shipped it to every worker. It now takes a ``WorkerSpec``:
    the policy's model, the environment, the rollout section and the LoRA rank, which round-trips through JSON."""
    cfg = load_config(None, ["env.family=arith", "rollout.ray_workers=3", "train.lora_rank=4"])
    spec = WorkerSpec.of(cfg)
    assert set(WorkerSpec.model_fields) == {"policy", "env", "rollout", "lora_rank"}
    assert spec.policy == cfg.models.policy and spec.env == cfg.env and spec.rollout == cfg.rollout
    assert spec.lora_rank == 4 and spec.rollout.ray_workers == 3
    assert WorkerSpec.model_validate_json(spec.model_dump_json()) == spec
