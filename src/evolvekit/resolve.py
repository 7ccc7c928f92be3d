"""Every ``auto`` setting of a config resolved in one place, each with its reason (issue 55.5).

``config show`` prints the list; the run calls the same functions (``config.py``: ``attribution_source``,
``synthetic_reward``, ``advantage_estimator``, ...; here: ``device_for``, ``dtype_for``, ``autocast_for`` and
``keeps_master``, which ``llm/local.py``, ``train/trainer.py`` and ``train/policy.py`` call), so what is printed is
what runs, with no copy of a decision (issue 79.3; tests/cpu/test_resolve.py builds a run and compares). Machine facts
(CUDA, a CPU with AVX512-BF16, the launched ranks) are probed once, or given (tests).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, get_args

from pydantic import BaseModel

from evolvekit.config import (
    Config,
    ModelConfig,
    advantage_estimator,
    attribution_source,
    attributor_constrained,
    extraction_mode,
    forced_choice,
    judge_mode,
    synthetic_reward,
    teach_search_on,
)

ROLES = ("policy", "explorer", "synthesizer", "judge", "attributor", "summarizer")


@dataclass(frozen=True)
class Machine:
    """The facts of this machine an ``auto`` reads."""

    cuda: bool = False
    cpu_bf16: bool = False  # AVX512-BF16 / AMX: bf16 autocast pays off on this CPU
    ranks: int = 1  # processes torchrun / accelerate launch started (train.sharding fsdp2 shards only over > 1)

    @classmethod
    def probe(cls) -> Machine:
        import os

        import torch

        try:
            bf16 = bool(torch.cpu._is_avx512_bf16_supported())
        except AttributeError:  # pragma: no cover - older torch
            bf16 = False
        ranks = int(os.environ.get("WORLD_SIZE", "1"))  # as train/distributed.py's launched_world_size reads it
        return cls(cuda=torch.cuda.is_available(), cpu_bf16=bf16, ranks=ranks)


@dataclass(frozen=True)
class Resolution:
    field: str  # the dotted config path
    value: str  # what ``auto`` became
    reason: str


def _on(flag: bool) -> str:
    return "on" if flag else "off"


def device_for(setting: str, cuda: bool) -> str:
    """A local model's device: ``auto`` is CUDA where there is one, else the CPU."""
    return ("cuda" if cuda else "cpu") if setting == "auto" else setting


def dtype_for(setting: str, device: str) -> str:
    """A local model's weights: ``auto`` is bf16 on a GPU, fp32 on the CPU."""
    return ("bfloat16" if device.startswith("cuda") else "float32") if setting == "auto" else setting


def autocast_for(setting: str, device: str, cpu_bf16: bool) -> str:
    """The update's autocast: ``auto`` is bf16 on CUDA or on a CPU with AVX512-BF16/AMX, else off."""
    if setting != "auto":
        return setting
    return "bf16" if device.startswith("cuda") or cpu_bf16 else "off"


def keeps_master(setting: str, low_precision: bool, sharded: bool) -> bool:
    """fp32 master weights for the trained parameters: ``auto`` keeps them for low-precision trainable parameters
    unless FSDP2's fp32 shards already are the masters (``on`` likewise: there is nothing to keep for fp32)."""
    return setting != "off" and low_precision and not sharded


def auto_resolutions(cfg: Config, machine: Machine | None = None) -> list[Resolution]:
    """Each field of ``cfg`` set to ``auto`` (a served role's device and dtype do not apply), resolved."""
    m = machine if machine is not None else Machine.probe()
    out: list[Resolution] = []

    def add(field: str, setting: str, value: str, reason: str) -> None:
        if setting == "auto":
            out.append(Resolution(field, value, reason))

    models = cfg.models
    for role in ROLES:
        mc: ModelConfig = getattr(models, role)
        if mc.backend != "local":
            continue
        device = device_for(mc.device, m.cuda)
        add(f"models.{role}.device", mc.device, device, "CUDA is available" if m.cuda else "no CUDA on this machine")
        add(f"models.{role}.dtype", mc.dtype, dtype_for(mc.dtype, device), f"weights on {device}")
    pol = models.policy
    policy_device = device_for(pol.device, m.cuda) if pol.backend == "local" else "cpu"
    policy_gpu = policy_device.startswith("cuda")
    cpu = "the CPU has AVX512-BF16" if m.cpu_bf16 else "the CPU lacks AVX512-BF16"
    autocast = autocast_for(cfg.train.autocast, policy_device, m.cpu_bf16)
    add("train.autocast", cfg.train.autocast, autocast, "the policy is on CUDA" if policy_gpu else cpu)
    # LoRA trains fp32 adapters; FSDP2 shards only over more than one launched process (train/policy.py)
    low = dtype_for(pol.dtype, policy_device) in ("bfloat16", "float16")
    sharded = cfg.train.sharding == "fsdp2" and m.ranks > 1
    master = keeps_master(cfg.train.master_weights, low and not cfg.train.lora, sharded)
    if master:
        why = "low-precision weights are trained in full"
    elif sharded:
        why = f"FSDP2's fp32 shards over {m.ranks} ranks are the master weights"
    else:
        why = "the trained parameters are fp32" + (" (LoRA's adapters)" if low and cfg.train.lora else "")
    add("train.master_weights", cfg.train.master_weights, _on(master), why)
    est = advantage_estimator(cfg)
    why = "attributing.enabled" + (" with source gigpo" if est == "gigpo" else "")
    add(
        "train.advantage_estimator",
        cfg.train.advantage_estimator,
        est,
        why if cfg.attributing.enabled else "attributing is off",
    )
    q = cfg.questioning
    local = "an in-process {} (models.{}.backend: local)"
    served = "a served {} (models.{}.backend: openai)"

    def where(role: str) -> str:
        return (local if getattr(models, role).backend == "local" else served).format(role, role)

    explore, target = forced_choice(q.scaffold, models.explorer), forced_choice(q.scaffold, models.synthesizer)
    add("questioning.scaffold", q.scaffold,
        _on(explore) if explore == target else f"{_on(explore)} (explorer), {_on(target)} (synthesizer)",
        f"{where('explorer')}; {where('synthesizer')}")  # fmt: skip
    add("questioning.numbers_constrained", q.numbers_constrained,
        _on(forced_choice(q.numbers_constrained, models.synthesizer)), where("synthesizer"))  # fmt: skip
    add("questioning.reward", q.reward, synthetic_reward(cfg), where("judge"))
    add("questioning.judge_constrained", q.judge_constrained, _on(judge_mode(cfg) == "constrained"), where("judge"))
    add("navigating.extraction", cfg.navigating.extraction, extraction_mode(cfg), where("summarizer"))
    add("attributing.source", cfg.attributing.source, attribution_source(cfg), where("attributor"))
    add("attributing.constrained", cfg.attributing.constrained, _on(attributor_constrained(cfg)), where("attributor"))
    teach = teach_search_on(cfg)
    why = "navigating.as_tool" if teach else "experience search is not an action (navigating.as_tool off)"
    add("cold_start.teach_search", cfg.cold_start.teach_search, _on(teach), why)
    return out


def auto_fields(model: BaseModel, at: str = "") -> list[str]:
    """Every field of the config tree whose type admits ``auto`` (the test that each one is resolved above)."""
    found = []
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        path = f"{at}{name}"
        if isinstance(value, BaseModel):
            found += auto_fields(value, path + ".")
        elif "auto" in _words(info.annotation) or info.default == "auto":
            found.append(path)
    return found


def _words(annotation: Any) -> tuple:
    return tuple(a for a in get_args(annotation) if isinstance(a, str))
