"""Rollout engines are registered backends (issue 79, item 2): a plugin module adds one under its name with its own
devices, rules and settings; `run` and `config validate` ask the same rules (``registry_problem``), `config show`
hides an engine's settings under another, and the builder makes the engine in one place (``rollout_engine``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evolvekit.config import inert_settings, load_config
from evolvekit.engine import registry
from evolvekit.engine.registry import ENGINES, engine_settings, register_engine, rollout_engine
from evolvekit.engine.spec import EngineBackend
from evolvekit.env.registry import load_plugins

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"


@pytest.fixture
def pinned(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGINS))
    load_plugins(["pinned_engine"])
    import pinned_engine

    pinned_engine.BUILT.clear()
    return pinned_engine


def test_the_built_in_engines_are_registered_with_their_own_settings():
    assert {"native", "continuous_batching", "vllm", "sglang"} <= set(ENGINES)
    own = engine_settings()
    assert own["vllm"] == ("gpu_memory_utilization", "kv_cache_bytes", "engine_eager")
    assert own["sglang"] == ("engine_url", "engine_weights_dir", "timeout_s") and own["native"] == ()
    assert ENGINES["vllm"].holds_weights and ENGINES["sglang"].holds_weights
    assert not ENGINES["native"].holds_weights and "mps" not in ENGINES["vllm"].devices


def test_a_plugin_engine_is_one_module_one_registration_one_config_value(pinned, config_problem):
    base = {"env": {"plugins": ["pinned_engine"]}, "models": {"policy": {"engine": "pinned"}}}
    assert config_problem(base) is None
    opts = {"temperature": 0.5, "label": "x"}
    with_opts = {**base, "models": {"policy": {"engine": "pinned", "engine_options": opts}}}
    assert config_problem(with_opts) is None
    cfg = load_config(None, ["env.plugins=[pinned_engine]", "models.policy.engine=pinned", "run.seed=7"])
    cfg = cfg.model_copy(update={"models": cfg.models.model_copy(update={"policy": cfg.models.policy.model_copy(
        update={"engine_options": opts})})})  # fmt: skip
    policy = object()
    engine = rollout_engine(cfg, policy)  # type: ignore[arg-type]
    built = pinned.BUILT[-1]
    assert engine.llm is policy and built.seed == 7 and built.policy is policy
    assert built.options is not None and built.options.model_dump() == {**opts, "limits": {}}  # the plugin's model
    # its own setting shows in `config show`; another engine's do not
    hidden = inert_settings(cfg, engine_settings())
    assert "models.policy.engine_options" not in hidden and "models.policy.kv_cache_bytes" in hidden


@pytest.mark.parametrize(
    "policy, problem",
    [
        ({"engine": "warp"}, "models.policy.engine: unknown engine 'warp' (registered: continuous_batching, native, "),
        ({"engine": "pinned", "device": "cuda:1"}, "models.policy.engine: pinned runs on cpu (not cuda)"),
        ({"engine": "pinned", "engine_options": {"temperature": -1}}, "models.policy.engine_options.temperature: "),
        ({"engine": "pinned", "engine_options": {"colour": 1}}, "models.policy.engine_options.colour: Extra inputs"),
        (
            {"engine": "vllm", "engine_options": {"y": 1, "x": 2}},
            "models.policy.engine_options: engine vllm takes no options (given: x, y)",
        ),
        ({"engine": "pinned", "engine_options": {"limits": {"a": "many"}}}, "models.policy.engine_options.limits.a: "),
        ({"engine": "vllm", "device": "mps"}, "models.policy.engine: vllm runs on cpu, cuda (not mps)"),
    ],
)
def test_an_engine_a_config_cannot_use_is_one_line(pinned, config_problem, policy, problem):
    said = config_problem({"env": {"plugins": ["pinned_engine"]}, "models": {"policy": policy}})
    assert said is not None and said.startswith(problem)


def test_the_engine_rules_hold_for_every_engine_that_holds_its_own_weights(monkeypatch, config_problem):
    """An engine with its own copy of the weights needs an in-process policy and no LoRA adapter, whichever it is;
    every engine but native leaves Ray's and Evolving-RL's rollouts (they run the native engine)."""
    copy = EngineBackend("copying", "a copy of the weights", build=lambda r: r.policy, holds_weights=True)
    monkeypatch.setitem(ENGINES, "copying", copy)
    assert config_problem({"models": {"policy": {"engine": "copying"}}}) is None
    lora = config_problem({"models": {"policy": {"engine": "copying"}}, "train": {"lora": True}})
    assert lora == (
        "models.policy.engine: copying with train.lora is not supported yet (the adapter would have to be merged "
        "before each weight push); use engine: native or train.lora: false"
    )
    ray = config_problem({"models": {"policy": {"engine": "copying"}}, "rollout": {"backend": "ray"}})
    assert ray == (
        "models.policy.engine: copying serves the rollouts of rollout.backend: local without evolving_rl (Ray "
        "workers and Evolving-RL's stages run the native engine); use engine: native"
    )
    served = {"engine": "copying", "backend": "openai", "base_url": "http://127.0.0.1:1/v1"}
    assert "needs models.policy.backend: local" in (config_problem({"models": {"policy": served}}) or "")
    # the native engine is what Ray workers, Evolving-RL's stages and a served policy's run sample with: accepted
    from evolvekit.engine.registry import engine_problem

    for sets in (["rollout.backend=ray"], ["evolving_rl.enabled=true", "navigating.enabled=false"]):
        assert engine_problem(load_config(None, ["models.policy.engine=native", *sets])) is None
    native_served = ["models.policy.backend=openai", "models.policy.base_url=http://127.0.0.1:1/v1"]
    assert engine_problem(load_config(None, native_served)) is None
    monkeypatch.setitem(ENGINES, "copying", EngineBackend("copying", "no copy", build=lambda r: r.policy))
    assert config_problem({"models": {"policy": {"engine": "copying"}}, "train": {"lora": True}}) is None


def test_a_second_engine_under_a_taken_name_is_refused():
    with pytest.raises(ValueError, match="engine 'vllm' is already registered"):
        register_engine(EngineBackend("vllm", "another", build=lambda r: r.policy))
    assert registry.ENGINES["vllm"].summary.startswith("an in-process vLLM")


def test_only_the_policy_role_has_engine_settings(config_problem):
    """Issue 79.4: model settings are typed per role; a helper's `engine` is refused by name, not ignored."""
    from evolvekit.config import ModelConfig, PolicyModelConfig

    helper = set(ModelConfig.model_fields)
    assert {"engine", "engine_options", "kv_cache_bytes", "engine_url"} <= set(PolicyModelConfig.model_fields) - helper
    said = config_problem({"models": {"judge": {"engine": "vllm"}}})
    assert said is not None and "models.judge.engine" in said
    assert config_problem({"models": {"judge": {"packed_weights": False}}}) is None  # a local helper reads it


def test_evaluation_samples_through_the_configured_engine_under_the_rules_that_apply_to_it(pinned, monkeypatch):
    """`eval` and `tasks synthesize`'s pass probe build the configured engine over the policy (``policy_engine``),
    as a run does; `eval` and `config validate --for eval` ask the engine's own rules, not training's stages', and
    a served policy samples through its server."""
    from evolvekit.engine.registry import engine_problem, policy_engine
    from evolvekit.orchestrator.run_dir import registry_problem

    cfg = load_config(None, ["env.plugins=[pinned_engine]", "models.policy.engine=pinned", "run.seed=3"])
    policy = object()
    engine = policy_engine(cfg, policy)  # type: ignore[arg-type]
    assert engine.llm is policy and pinned.BUILT[-1].seed == 3  # built by the registered backend
    served = load_config(None, ["models.policy.backend=openai", "models.policy.base_url=http://127.0.0.1:1/v1"])
    before = len(pinned.BUILT)
    assert policy_engine(served, policy).llm is policy and len(pinned.BUILT) == before  # type: ignore[arg-type]
    # training's stage rules do not bind evaluation; the engine's own do
    copy = EngineBackend("copying", "a copy of the weights", build=lambda r: r.policy, holds_weights=True)
    monkeypatch.setitem(ENGINES, "copying", copy)
    ray = load_config(None, ["models.policy.engine=copying", "rollout.backend=ray", "train.lora=true"])
    assert engine_problem(ray) is not None and engine_problem(ray, training=False) is None
    unknown = load_config(None, ["models.policy.engine=warp"])
    assert (registry_problem(unknown, training=False) or "").startswith("models.policy.engine: unknown engine 'warp'")
    served_unknown = served.model_copy(
        update={"models": served.models.model_copy(update={"policy": served.models.policy.model_copy(
            update={"engine": "warp"})})})  # fmt: skip
    assert registry_problem(served_unknown, training=False) is None  # its server samples: no engine is built
