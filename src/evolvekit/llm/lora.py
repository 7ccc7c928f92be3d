"""The LoRA structure of a trained policy (peft), shared by the trainer and the rollout workers that mirror it."""

from __future__ import annotations

from typing import Any


def with_lora(model: Any, rank: int) -> Any:
    """``model`` with LoRA adapters on every linear layer (rank r, α = 2r, no dropout); a PeftModel is returned
    as it is (e.g. resumed from a LoRA checkpoint)."""
    from peft import LoraConfig, PeftModel, get_peft_model

    if isinstance(model, PeftModel):
        return model
    cfg = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")
    return get_peft_model(model, cfg)


def policy_weights(model: Any) -> tuple[str, dict]:
    """What a copy of the policy needs to match ``model``: ("lora", the adapter weights only) for a LoRA model,
    else ("full", every weight), on the CPU."""
    from peft import PeftModel, get_peft_model_state_dict

    if isinstance(model, PeftModel):
        return "lora", {k: v.detach().cpu() for k, v in get_peft_model_state_dict(model).items()}
    return "full", {k: v.detach().cpu() for k, v in model.state_dict().items()}


def load_policy_weights(model: Any, kind: str, state: dict, rank: int) -> Any:
    """Load what ``policy_weights`` gave into a copy of the policy; returns the (possibly LoRA-wrapped) model."""
    if kind == "lora":
        from peft import set_peft_model_state_dict

        model = with_lora(model, rank)
        set_peft_model_state_dict(model, state)
        return model
    model.load_state_dict(state)
    return model
