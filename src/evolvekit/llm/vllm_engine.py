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

vLLM is not a dependency, and is imported only when this engine is built: its CUDA build (``vllm``) on a GPU, or its
CPU build (``vllm-cpu``, which pins this project's torch 2.13.0+cpu) with ``device: cpu``, which scripts/setup.sh
puts in an overlay environment of its own, .venv/vllm-cpu (scripts/setup_vllm_cpu.sh; vLLM's fastapi pin conflicts
with the main one). The engine tests (tests/with_vllm) run wherever vLLM is installed, on the device its build
serves; the main suite runs them in that overlay (tests/cpu/test_vllm_cpu.py). The conversions below are plain
functions, tested everywhere.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import torch

from evolvekit.errors import LLMError
from evolvekit.llm.base import Completion, SamplingParams, offset_seed
from evolvekit.llm.embedded import resolve_model_path
from evolvekit.llm.local import LocalLLM, OverLocal

log = logging.getLogger(__name__)

WORKER_EXTENSION = "evolvekit.llm.vllm_engine.WeightLoader"


def vllm_sampling_kwargs(params: SamplingParams) -> dict[str, Any]:
    """``vllm.SamplingParams`` arguments for ``params``: the same n, temperature (0: greedy), top-p, token limit,
    stop strings and seed (``generate_ids`` gives prompt i the seed plus i: ``offset_seed``), and the sampled token's
    own log-probability (``logprobs=0``)."""
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


def device_mismatch(vllm_device: str, policy_device: str) -> str | None:
    """Why a vLLM build that serves ``vllm_device`` ("cuda", "cpu": ``current_platform.device_type``) cannot sample
    for a policy on ``policy_device``, or None: vLLM loads the weights on its own platform's device, and the trainer
    pushes its tensors there."""
    if vllm_device == policy_device:
        return None
    build = "vllm-cpu" if policy_device == "cpu" else "vllm (its CUDA build)"
    return (
        f"models.policy.engine: vllm: the installed vLLM runs on {vllm_device}, the policy on {policy_device}; "
        f"install {build} or set models.policy.device to {vllm_device}"
    )


WIRE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def tensor_to_wire(name: str, t: torch.Tensor) -> tuple[str, str, list[int], bytes]:
    """One named tensor as plain values vLLM's message encoder carries to its workers unchanged: name, dtype,
    shape and raw bytes. (A tensor passed as such inside ``collective_rpc``'s untyped arguments arrives as vLLM's
    encoded form, a list, not a tensor: measured with vllm-cpu 0.28.)"""
    dtype = str(t.dtype).removeprefix("torch.")
    if dtype not in WIRE_DTYPES:
        raise LLMError(f"vLLM weight push: {name} has dtype {dtype}; expected one of {sorted(WIRE_DTYPES)}")
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    return name, dtype, list(t.shape), flat.view(torch.uint8).numpy().tobytes()


def tensor_from_wire(dtype: str, shape: Sequence[int], data: bytes) -> torch.Tensor:
    """The inverse of ``tensor_to_wire``: a CPU tensor of ``dtype`` and ``shape`` over a copy of ``data``."""
    raw = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    return raw.view(WIRE_DTYPES[dtype]).reshape(list(shape))


class WeightLoader:
    """vLLM worker extension (``worker_extension_cls``): loads named tensors (``tensor_to_wire``'s form) into the
    worker's model through the worker's own ``reload_weights``, vLLM's in-place reload for RL: it restores each
    layer's checkpoint-format loaders and processes the weights again after loading. (Calling the model's
    ``load_weights`` a second time fails on CPU, where the linear layers were repacked after the first load and lost
    their loaders: measured with vllm-cpu 0.28.)"""

    model_runner: Any  # set by vLLM's worker, which this class is mixed into
    reload_weights: Any  # the worker's (vllm.v1.worker.gpu_worker.Worker, which the CPU worker extends)

    def evolvekit_load_weights(self, weights: list[tuple[str, str, list[int], bytes]]) -> int:
        device = next(self.model_runner.model.parameters()).device
        tensors = [(name, tensor_from_wire(dtype, shape, data).to(device)) for name, dtype, shape, data in weights]
        self.reload_weights(weights_iterator=tensors, is_checkpoint_format=True)
        for head in tied_heads(self.model_runner.model):
            head.quant_method.process_weights_after_loading(head)
        return len(tensors)


def tied_heads(model: torch.nn.Module) -> list[Any]:
    """The output heads of ``model`` that share their weight with its input embedding (``tie_word_embeddings``,
    SmolLM2's case). vLLM's reload loads no weight into such a head, so it never processes it again; on CPU the head
    computes through a copy it packed at start-up (``cpu_linear``) and would keep the first weights: measured with
    vllm-cpu 0.28, after a push the tokens' log-probabilities were those of the new input embedding and the old output
    head. Processing it again repacks the new weight (on a GPU, where an unquantized head keeps no copy, it does
    nothing)."""
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding

    embeddings = {
        m.weight.data_ptr()
        for m in model.modules()
        if isinstance(m, VocabParallelEmbedding) and not isinstance(m, ParallelLMHead) and m.weight.numel()
    }
    return [
        m
        for m in model.modules()
        if isinstance(m, ParallelLMHead) and m.weight.numel() and m.weight.data_ptr() in embeddings
    ]


# the KV cache vLLM's CPU build gets unless models.policy.kv_cache_bytes says otherwise: an explicit size, because on
# CPU gpu_memory_utilization is a share of the machine's memory that every other process also uses (on a machine
# busy with other work the CPU engine refused to start: "Available memory on node 0 ... less than requested memory for
# kv"). 512 MiB holds 512 MiB / (2 · 30 layers · 3 KV heads · 64 dims · 4 bytes) = 11,650 tokens of SmolLM2-135M fp32.
CPU_KV_CACHE_BYTES = 512 * 2**20


def kv_cache_size(device_type: str, configured: int | None) -> int | None:
    """The KV cache's explicit size in bytes for a vLLM on ``device_type``: the configured one, else
    ``CPU_KV_CACHE_BYTES`` on CPU; None on a GPU without one (``gpu_memory_utilization`` sizes it there)."""
    if configured is not None:
        return configured
    return CPU_KV_CACHE_BYTES if device_type == "cpu" else None


class VLLMEngine(OverLocal):
    """``generate_ids`` / ``update_weights`` / ``reset_prefix_cache`` over an in-process ``vllm.LLM``."""

    def __init__(
        self,
        local: LocalLLM,
        gpu_memory_utilization: float = 0.3,
        seed: int = 0,
        eager: bool = False,
        kv_cache_bytes: int | None = None,
    ) -> None:
        try:
            import vllm
            from vllm.platforms import current_platform
        except ImportError:
            raise LLMError(
                "models.policy.engine: vllm needs the vllm package (pip install vllm on a CUDA machine; on CPU, "
                "scripts/setup_vllm_cpu.sh); use engine: native"
            ) from None
        problem = device_mismatch(str(current_platform.device_type), local.device.type)
        if problem:
            raise LLMError(problem)
        self.local = local
        self.name = f"vllm:{local.name}"
        self.tokenizer, self.eos_ids = local.tokenizer, local.eos_ids
        dtype = str(next(local.model.parameters()).dtype).removeprefix("torch.")
        kv_bytes = kv_cache_size(str(current_platform.device_type), kv_cache_bytes)
        sized = {"kv_cache_memory_bytes": kv_bytes} if kv_bytes is not None else {}
        self.llm = vllm.LLM(
            model=resolve_model_path(local.name),
            tokenizer=resolve_model_path(local.name),
            dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            enable_prefix_caching=True,
            seed=seed,
            worker_extension_cls=WORKER_EXTENSION,
            enforce_eager=eager,
            # On CPU a seeded request whose prompt is prefilled in chunks fails: vLLM rewinds the request's
            # generator over the discarded sample of a partial prefill, and a CPU generator has no offset ("CPU
            # Generator does not use offset", measured with vllm-cpu 0.28 on six 1,500-token prompts). Whole prompts
            # only, there; rollouts are always seeded.
            enable_chunked_prefill=current_platform.device_type != "cpu",
            **sized,
        )
        self._vllm = vllm
        self.update_weights(local.model.state_dict())  # the policy's weights (a checkpoint's, on resume)
        log.info(
            "vLLM engine started on %s (%s, %s)",
            current_platform.device_type,
            dtype,
            f"KV cache {kv_bytes} bytes"
            if kv_bytes is not None
            else f"gpu_memory_utilization {gpu_memory_utilization:.2f}",
        )

    def generate_ids(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]:
        if not prompts:
            return []
        from vllm.inputs import TokensPrompt

        kwargs = vllm_sampling_kwargs(params)
        outs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
            [self._vllm.SamplingParams(**{**kwargs, "seed": offset_seed(params.seed, i)}) for i in range(len(prompts))],
            use_tqdm=False,
        )
        return completions_from_vllm(outs, prompts)

    def update_weights(self, state_dict: dict[str, Any]) -> None:
        """The trainer's weights into every vLLM worker (copied through host memory), then the prefix cache dropped
        (its KV belongs to the old weights)."""
        weights = [tensor_to_wire(name, t) for name, t in state_dict.items()]
        self.llm.collective_rpc("evolvekit_load_weights", args=(weights,))
        self.reset_prefix_cache()

    def reset_prefix_cache(self) -> None:
        """vLLM's prefix cache and the policy's own (other callers of the policy, synthesis say, read it)."""
        self.llm.reset_prefix_cache()
        self.local.reset_prefix_cache()
