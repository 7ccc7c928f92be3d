"""The policy's rollouts through vLLM (``models.policy.engine: vllm``), colocated with the trainer on one GPU.

The third backend of the token-level seam (``engine/base.py``): token ids in, sampled token ids with their
log-probabilities out (``generate_ids``), ``update_weights`` and ``reset_prefix_cache``. vLLM holds its own copy of
the weights, so it is not ``in_process``: the trainer pushes the policy's weights after every update
(``Policy.publish``), through vLLM's ``collective_rpc`` into each worker's ``model.load_weights`` (the worker
extension ``WeightLoader`` below; vLLM's RLHF examples and TRL's colocate mode do the same). The engine starts from
the policy's folder and receives the policy's current weights at once, so a resumed run samples from its
checkpoint's weights.

Log-probabilities are vLLM's default ``raw_logprobs`` (the model's distribution before temperature and top-p), which
is what ``Completion.logprobs`` means (temperature 1). ``stop_on_balanced_json`` is the native engine's own stop and
is not applied here (generation runs to a stop string, EOS or ``max_new_tokens``).

vLLM is not a dependency: it needs CUDA, and is imported only when this engine is built. Run where it is installed
(tests/gpu/test_vllm_engine.py); the conversions below are plain functions, tested everywhere.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

from evolvekit.errors import LLMError
from evolvekit.llm.base import Completion, SamplingParams
from evolvekit.llm.embedded import resolve_model_path
from evolvekit.llm.local import LocalLLM, OverLocal

log = logging.getLogger(__name__)

WORKER_EXTENSION = "evolvekit.llm.vllm_engine.WeightLoader"


def vllm_sampling_kwargs(params: SamplingParams) -> dict[str, Any]:
    """``vllm.SamplingParams`` arguments for ``params``: the same n, temperature (0: greedy), top-p, token limit,
    stop strings and seed, and the sampled token's own log-probability (``logprobs=0``)."""
    greedy = params.temperature == 0
    return {
        "n": params.n,
        "temperature": 0.0 if greedy else params.temperature,
        "top_p": 1.0 if greedy else params.top_p,
        "max_tokens": params.max_new_tokens,
        "stop": list(params.stop) or None,
        "seed": params.seed,
        "logprobs": 0,
    }


def completions_from_vllm(outputs: Sequence[Any], prompts: Sequence[Sequence[int]]) -> list[list[Completion]]:
    """Completions from vLLM's ``RequestOutput``s (one per prompt, in order): each ``CompletionOutput``'s token ids,
    the log-probability vLLM reported for each sampled token, its text (vLLM leaves the stop string out) and
    ``finish_reason`` ("stop": EOS or a stop string; "length")."""
    if len(outputs) != len(prompts):
        raise LLMError(f"vLLM returned {len(outputs)} results for {len(prompts)} prompts")
    result = []
    for out, prompt in zip(outputs, prompts):
        comps = []
        for c in out.outputs:
            ids = list(c.token_ids)
            steps = c.logprobs or []
            if len(steps) != len(ids):
                raise LLMError(f"vLLM returned {len(steps)} log-probabilities for {len(ids)} tokens")
            comps.append(
                Completion(
                    text=c.text,
                    token_ids=ids,
                    logprobs=[float(step[t].logprob) for step, t in zip(steps, ids)],
                    prompt_token_ids=list(prompt),
                    finish_reason="length" if c.finish_reason == "length" else "stop",
                )
            )
        result.append(comps)
    return result


class WeightLoader:
    """vLLM worker extension (``worker_extension_cls``): loads named tensors into the worker's model."""

    model_runner: Any  # set by vLLM's worker, which this class is mixed into

    def evolvekit_load_weights(self, weights: list[tuple[str, Any]]) -> int:
        device = next(self.model_runner.model.parameters()).device
        self.model_runner.model.load_weights(weights=[(n, t.to(device)) for n, t in weights])
        return len(weights)


class VLLMEngine(OverLocal):
    """``generate_ids`` / ``update_weights`` / ``reset_prefix_cache`` over an in-process ``vllm.LLM``."""

    def __init__(self, local: LocalLLM, gpu_memory_utilization: float = 0.3, seed: int = 0) -> None:
        try:
            import vllm
        except ImportError:
            raise LLMError(
                "models.policy.engine: vllm needs the vllm package on a CUDA machine (pip install vllm); "
                "use engine: native"
            ) from None
        self.local = local
        self.name = f"vllm:{local.name}"
        self.tokenizer, self.eos_ids = local.tokenizer, local.eos_ids
        dtype = str(next(local.model.parameters()).dtype).removeprefix("torch.")
        self.llm = vllm.LLM(
            model=resolve_model_path(local.name),
            tokenizer=resolve_model_path(local.name),
            dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            enable_prefix_caching=True,
            seed=seed,
            worker_extension_cls=WORKER_EXTENSION,
        )
        self._vllm = vllm
        self.update_weights(local.model.state_dict())  # the policy's weights (a checkpoint's, on resume)
        log.info("vLLM engine started (%s, gpu_memory_utilization %.2f)", dtype, gpu_memory_utilization)

    def generate_ids(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]:
        if not prompts:
            return []
        from vllm.inputs import TokensPrompt

        outs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
            self._vllm.SamplingParams(**vllm_sampling_kwargs(params)),
            use_tqdm=False,
        )
        return completions_from_vllm(outs, prompts)

    def update_weights(self, state_dict: dict[str, Any]) -> None:
        """The trainer's weights into every vLLM worker (copied through host memory), then the prefix cache dropped
        (its KV belongs to the old weights)."""
        weights = [(name, t.detach().to("cpu")) for name, t in state_dict.items()]
        self.llm.collective_rpc("evolvekit_load_weights", args=(weights,))
        self.reset_prefix_cache()

    def reset_prefix_cache(self) -> None:
        """vLLM's prefix cache and the policy's own (other callers of the policy, synthesis say, read it)."""
        self.llm.reset_prefix_cache()
        self.local.reset_prefix_cache()
