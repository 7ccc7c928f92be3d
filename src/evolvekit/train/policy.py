"""The trained policy's state: the model (LoRA-wrapped, or FSDP2-sharded across ranks), its optimizer, the fp32
master weights of a low-precision model, and the engine that generates with it (issue 55.3).

The trainer computes losses; the policy owns everything an optimizer step changes and everything a checkpoint
holds. ``step()`` is one optimizer step (gradients summed over data-parallel ranks, onto the master copy, clipped;
a non-finite norm skips the step); ``publish(engine)`` ends an update by making the new weights the ones rollouts
generate with; ``save``/``load_optimizer`` write and read checkpoints that ``LocalLLM`` loads.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import time
from pathlib import Path
from typing import Any, cast

import torch

from evolvekit.config import TrainConfig
from evolvekit.engine.base import Engine
from evolvekit.resolve import keeps_master
from evolvekit.train.checkpoint import write_checksums, write_failure
from evolvekit.train.distributed import DataParallel, ShardedPolicy
from evolvekit.train.master import MasterWeights, needs_master

log = logging.getLogger(__name__)


class Policy:
    """Model, tokenizer, optimizer and master weights of the policy being trained (``llm``: an in-process engine
    backend, ``llm/local.py``; the trainer updates its model in place, so rollouts see every update)."""

    def __init__(self, llm: Any, cfg: TrainConfig, parallel: DataParallel | None = None) -> None:
        self.llm, self.cfg, self.parallel = llm, cfg, parallel
        self.device = llm.device
        self.tokenizer = llm.tokenizer
        if cfg.lora:
            from evolvekit.llm.lora import with_lora

            self.llm.model = with_lora(self.llm.model, cfg.lora_rank)
        # train.sharding fsdp2: the ranks train one sharded copy (train/distributed.py)
        self.sharded = ShardedPolicy(llm.model, parallel) if parallel is not None and cfg.sharding == "fsdp2" else None
        self.model: Any = self.sharded.model if self.sharded is not None else llm.model
        self._optimizer_state: dict | None = None  # fsdp2: the whole optimizer state, gathered for checkpoints
        params = [p for p in self.model.parameters() if p.requires_grad]
        if not params:
            raise ValueError("the policy has no trainable parameters")
        # resolve.py: keeps_master, what `config show` prints (fp32 parameters have nothing to keep; FSDP2's fp32
        # shards are the masters)
        use_master = keeps_master(cfg.master_weights, needs_master(params), sharded=self.sharded is not None)
        self.master = MasterWeights(params) if use_master else None
        self.optim_params = self.master.optim_params if self.master is not None else params
        self.optimizer = torch.optim.AdamW(
            self.optim_params,
            lr=cfg.learning_rate,
            weight_decay=cfg.weight_decay,
            betas=(cfg.adam_beta1, cfg.adam_beta2),
        )
        if cfg.gradient_checkpointing:
            self.model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})

    @property
    def loss_scale(self) -> float:
        """What each rank's loss is multiplied by before backward (FSDP2 averages over ranks; see ShardedPolicy)."""
        return self.sharded.loss_scale if self.sharded is not None else 1.0

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def step(self) -> float | None:
        """One optimizer step from the accumulated gradients: summed over data-parallel ranks (FSDP2 does it
        itself), moved onto the fp32 master copy, clipped to ``max_grad_norm``. Returns the gradient norm, or None
        when it was not finite (the step is skipped and the gradients dropped)."""
        if self.sharded is None and self.parallel is not None:
            self.parallel.all_reduce_grads([q for q in self.model.parameters() if q.requires_grad])
        if self.master is not None:  # low-precision gradients onto the fp32 copies (train/master.py)
            self.master.to_master_grads()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.optim_params, self.cfg.max_grad_norm)
        if self.sharded is not None:  # FSDP2: the norm is a DTensor over the shards
            grad_norm = cast(Any, grad_norm).full_tensor()
        if not math.isfinite(float(grad_norm)):
            log.warning("non-finite gradient norm; skipping this optimizer step")
            self.zero_grad()
            return None
        self.optimizer.step()
        if self.master is not None:
            self.master.to_model()
        return float(grad_norm)

    def publish(self, engine: Engine) -> None:
        """End of an update: the engine generates with the new weights (FSDP2: rank 0's full copy is synced from
        the shards, and the optimizer state gathered for checkpoints; an engine holding its own copy of the weights
        receives them), its cached prefix KV dropped."""
        self.model.eval()
        if self.sharded is not None:
            self.sharded.sync_to(self.llm)
            self._optimizer_state = self.sharded.full_optimizer_state(self.optimizer)
        if engine.caps.weight_updates and not engine.caps.in_process:  # an engine with its own copy (vLLM)
            engine.update_weights(self.model.state_dict())
        engine.reset_prefix_cache()  # the sampler's cached prefix KV belongs to the old weights

    # -- checkpoints -----------------------------------------------------------------------------------------------
    def save(self, path: Path, with_optimizer: bool = True) -> Path:
        """Write a checkpoint folder that ``LocalLLM`` / ``evolvekit eval --policy`` load (atomic rename)."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        try:
            self._write(tmp, with_optimizer)
        except Exception as err:
            shutil.rmtree(tmp, ignore_errors=True)  # the space back; the last good checkpoint is untouched
            failure = write_failure(path, err)
            if failure is None or failure is err:
                raise
            raise failure from None  # torch's or safetensors' own write error: one line naming the path
        shutil.rmtree(path, ignore_errors=True)
        tmp.rename(path)
        return path

    def _write(self, tmp: Path, with_optimizer: bool) -> None:
        """The checkpoint's files, in the folder ``tmp`` (``save`` renames it into place once all are written)."""
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        self.llm.model.save_pretrained(tmp)  # the policy itself (under fsdp2, the full copy synced after each update)
        self.tokenizer.save_pretrained(tmp)
        if with_optimizer:
            optimizer_state = self._optimizer_state if self.sharded is not None else self.optimizer.state_dict()
            if optimizer_state is not None:  # FSDP2 before its first publish: nothing gathered, nothing to resume
                torch.save(optimizer_state, tmp / "optimizer.pt")
            if self.master is not None:  # the exact fp32 weights, which the saved bf16 ones only round
                torch.save(self.master.state_dict(), tmp / "master.pt")
        (tmp / "trainer_state.json").write_text(json.dumps({"lora": self.cfg.lora, "saved": time.time()}))
        write_checksums(tmp)  # a resume verifies them (train/checkpoint.py)

    def load_optimizer(self, path: Path) -> bool:
        opt = Path(path) / "optimizer.pt"
        if not opt.is_file():
            return False
        state = torch.load(opt, map_location=self.device, weights_only=True)
        if self.sharded is not None:
            self.sharded.load_optimizer_state(self.optimizer, state)
            self._optimizer_state = state
        else:
            self.optimizer.load_state_dict(state)
        master = Path(path) / "master.pt"
        if self.master is not None and master.is_file():
            self.master.load_state_dict(torch.load(master, map_location=self.device, weights_only=True))
        return True
