"""One GRPO update on a group-shaped batch: our trainer (shared-prefix and plain) vs. TRL's GRPOTrainer.

    .venv/bin/pip install -c constraints.txt trl==1.16.0      # TRL is only needed for this benchmark
    .venv/bin/python benchmarks/speed/train_step.py --batch 8 --prompt 448 --completion 64

The batch is one GRPO group: ``--batch`` samples sharing one ``--prompt``-token prompt, each with its own
``--completion``-token completion and advantage. Every side: the same SmolLM2-135M weights, full fine-tune, AdamW,
β = 0.001 KL against the same frozen reference (a perturbed copy, so the KL term is not zero), ε = 0.28, bf16
autocast when the CPU supports it (``--autocast``), micro-batches of ``--micro``, one optimizer step over the batch
(on-policy). TRL's side calls ``GRPOTrainer.compute_loss`` (loss_type "dapo", a token-level mean like ours) on the
prepared batch, so generation is excluded from every timing. The first (warm-up) step of each side starts from the
same weights, and its loss is checked equal across the three. Prints wall seconds of the timed (second) step,
tokens/s (the batch's tokens per second of update) and the speed ratio of each of ours against TRL.
``--device cuda`` runs our two sides on a GPU (TRL's side stays CPU-only and is reported as not run).
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
import time


def _batch(args, vocab):
    import torch

    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(10, vocab - 10, (1, args.prompt), generator=g).expand(args.batch, -1).clone()  # one group
    completion = torch.randint(10, vocab - 10, (args.batch, args.completion), generator=g)
    adv = torch.linspace(-1.0, 1.5, args.batch)  # not mean-zero: the surrogate term of the loss is not zero either
    return prompt, completion, adv


def _sync(args) -> None:
    import torch

    if args.device.startswith("cuda"):
        torch.cuda.synchronize()


def _bf16(args) -> bool:
    """bf16 autocast exactly where our trainer would use it (``auto``: CUDA, or a CPU with AVX512-BF16), so both
    sides run the same precision: on a CPU without native bf16 both run fp32."""
    import torch

    from evolvekit.train.trainer import autocast_dtype

    return autocast_dtype(args.autocast, torch.device(args.device)) is not None


def _reference(model, device: str = "cpu"):
    """The frozen KL reference shared by every side: the initial weights plus small seeded noise."""
    import torch

    ref = copy.deepcopy(model).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 1e-3)
    return ref.to(device)


def ours(args, model, tok, prompt, completion, adv, shared=True):
    from evolvekit.config import TrainConfig
    from evolvekit.llm.local import LocalLLM
    from evolvekit.train.trainer import GRPOTrainer
    from evolvekit.types import TrainingSample

    ref = _reference(model, args.device)
    llm = LocalLLM(tokenizer=tok, hf_model=model, device=args.device)
    cfg = TrainConfig(
        micro_batch_size=args.micro, kl_beta=0.001, learning_rate=1e-6, autocast=args.autocast, shared_prefix=shared
    )
    trainer = GRPOTrainer(llm, cfg, reference_model=ref)
    P, C = prompt.shape[1], completion.shape[1]
    samples = [
        TrainingSample(
            trajectory_id=f"t{i}",
            group_id="g",
            token_ids=prompt[i].tolist() + completion[i].tolist(),
            loss_mask=[0] * P + [1] * C,
            token_advantages=[float(adv[i])] * (P + C),
            experience_mask=[0] * (P + C),
        )
        for i in range(len(adv))
    ]
    first = trainer.update(samples)  # warm-up, from the initial weights: its loss is compared
    _sync(args)
    t0 = time.perf_counter()
    trainer.update(samples)
    _sync(args)
    return time.perf_counter() - t0, first.loss


def ours_plain(args, model, tok, prompt, completion, adv):
    return ours(args, model, tok, prompt, completion, adv, shared=False)


def trl(args, model, tok, prompt, completion, adv):
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    if args.device != "cpu":
        raise NotImplementedError("the TRL side runs on CPU only")

    ref = _reference(model)
    B = len(adv)
    with tempfile.TemporaryDirectory() as out:
        targs = GRPOConfig(
            output_dir=out,
            use_cpu=True,
            report_to=[],
            beta=0.001,
            epsilon=0.28,
            loss_type="dapo",
            per_device_train_batch_size=B,
            num_generations=B,
            learning_rate=1e-6,
            bf16=_bf16(args),
            gradient_accumulation_steps=1,
            logging_steps=10_000,
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
            args=targs,
            train_dataset=Dataset.from_dict({"prompt": ["x"] * B}),
            processing_class=tok,
        )
        trainer.create_optimizer()
        trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train(), which we bypass
        opt = trainer.optimizer
        model.train()
        amp = torch.autocast("cpu", dtype=torch.bfloat16) if _bf16(args) else torch.autocast("cpu", enabled=False)

        def step():
            total = 0.0
            opt.zero_grad(set_to_none=True)
            n_items = torch.tensor(float(B * completion.shape[1]))
            for lo in range(0, B, args.micro):
                sl = slice(lo, lo + args.micro)
                p, c = prompt[sl], completion[sl]
                ids = torch.cat([p, c], 1)
                with torch.no_grad(), amp:
                    ref_logits = ref(input_ids=ids, logits_to_keep=c.shape[1] + 1).logits[:, :-1].float()
                ref_lp = torch.log_softmax(ref_logits, -1).gather(-1, c.unsqueeze(-1)).squeeze(-1)
                inputs = {
                    "prompt_ids": p,
                    "prompt_mask": torch.ones_like(p),
                    "completion_ids": c,
                    "completion_mask": torch.ones_like(c),
                    "advantages": adv[sl],
                    "ref_per_token_logps": ref_lp,
                    "old_per_token_logps": None,
                    "num_items_in_batch": n_items,
                }
                with amp:
                    loss = trainer.compute_loss(model, inputs)
                loss.backward()
                total += float(loss.detach())
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            return total

        first = step()  # warm-up, from the initial weights: its loss is compared
        t0 = time.perf_counter()
        step()
        return time.perf_counter() - t0, first


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=448)
    ap.add_argument("--completion", type=int, default=64)
    ap.add_argument("--micro", type=int, default=4)
    ap.add_argument("--autocast", choices=["auto", "off"], default="auto")
    ap.add_argument("--model", default="embedded:smollm2-135m-instruct")
    ap.add_argument("--device", default="cpu", help="where our trainer runs (cpu, cuda); TRL's side runs on cpu only")
    args = ap.parse_args()

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evolvekit.llm.embedded import resolve_model_path

    path = resolve_model_path(args.model)
    tok = AutoTokenizer.from_pretrained(path)
    prompt, completion, adv = _batch(args, len(tok))
    tokens = args.batch * (args.prompt + args.completion)
    rows = {}
    for name, fn in (("evolvekit", ours), ("evolvekit_plain", ours_plain), ("trl", trl)):
        try:
            model = AutoModelForCausalLM.from_pretrained(path)
            dt, loss = fn(args, model, tok, prompt, completion, adv)
            rows[name] = {"seconds": round(dt, 2), "tokens_per_s": round(tokens / dt, 1), "first_loss": round(loss, 6)}
        except ImportError as err:
            rows[name] = {"error": f"not installed: {err}"}
        except NotImplementedError as err:
            rows[name] = {"error": str(err)}
        print(f"{name:>16}: {rows[name]}", flush=True)
    out = {
        "batch": args.batch,
        "prompt": args.prompt,
        "completion": args.completion,
        "micro": args.micro,
        "autocast": args.autocast,
        "device": args.device,
        "bf16": _bf16(args),
        **rows,
    }
    if "seconds" in rows.get("trl", {}):
        trl_row = rows["trl"]
        for name in ("evolvekit", "evolvekit_plain"):
            out[f"{name}_vs_trl"] = round(trl_row["seconds"] / rows[name]["seconds"], 2)
        losses = [rows[n]["first_loss"] for n in ("evolvekit", "evolvekit_plain", "trl")]
        out["same_loss"] = max(losses) - min(losses) <= 1e-3 * max(1e-3, max(abs(x) for x in losses))
        print(
            f"speed vs TRL: shared-prefix {out['evolvekit_vs_trl']}x, plain {out['evolvekit_plain_vs_trl']}x; "
            f"first-step losses {losses} -> same: {out['same_loss']}"
        )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
