"""Cold start (EvolveR): the warm-up pairs, the schedule, and a run that warms up, checkpoints and evaluates."""

from __future__ import annotations

import json

import pytest
import torch

from evolvekit.config import load_config
from evolvekit.env.bfcl.families import get_family
from evolvekit.llm.tiny import make_tiny_model
from evolvekit.orchestrator.build import build_loop
from evolvekit.orchestrator.run_dir import open_run
from evolvekit.train.sft import lr_factor


def test_lr_schedule_warms_up_then_decays():
    assert [round(lr_factor(s, 10, 0.2), 3) for s in range(10)] == [
        0.5,
        1.0,
        1.0,
        0.875,
        0.75,
        0.625,
        0.5,
        0.375,
        0.25,
        0.125,
    ]


def test_cold_start_metrics_by_hand():
    from evolvekit.train.sft import SFTStats

    stats = SFTStats(
        examples=5, steps=2, epochs=1, losses=[0.75, 0.25], seconds=3.5, tokens=900, shared_prefix_tokens=40
    )
    assert stats.as_metrics() == {
        "cold_start/examples": 5.0,
        "cold_start/steps": 2.0,
        "cold_start/seconds": 3.5,
        "cold_start/tokens": 900.0,
        "cold_start/shared_prefix_tokens": 40.0,
        "cold_start/loss_first": 0.75,
        "cold_start/loss_last": 0.25,
    }
    assert "cold_start/loss_first" not in SFTStats(examples=1).as_metrics()  # no step, no loss


def test_lr_schedule_edges_by_hand():
    # one warm-up step (10 x 0.1), then the decay starts at the full rate
    assert [round(lr_factor(s, 10, 0.1), 4) for s in (0, 1, 2, 9)] == [1.0, 1.0, 0.8889, 0.1111]
    assert [lr_factor(s, 2, 0.1) for s in (0, 1)] == [1.0, 1.0]  # one step left after warm-up decays from 1


def test_cold_start_loop_batches_each_epoch_schedules_the_rate_and_follows_its_seed(monkeypatch, caplog):
    """The loop around ``batch_backward`` with a stand-in for it (and a one-parameter model): which pairs each
    optimizer step sees, the learning rate it steps with, fresh gradients per step, the counts, the log and the
    clock."""
    import logging
    from types import SimpleNamespace

    from evolvekit.config import ColdStartConfig, TrainConfig
    from evolvekit.train import sft
    from evolvekit.types import TrainingSample

    def run(seed):
        seen, fresh, lrs, resets = [], [], [], []

        class Recording(torch.optim.AdamW):
            def step(self, closure=None):
                lrs.append(self.param_groups[0]["lr"])
                return super().step(closure)

        def backward(trainer, batch, stats):
            fresh.append(trainer.model.weight.grad is None)
            seen.append([s.trajectory_id for s in batch])
            trainer.model.weight.grad = torch.full_like(trainer.model.weight, 3.0)
            return float(len(seen))

        clock = iter([100.0, 103.46])
        monkeypatch.setattr(sft, "batch_backward", backward)
        monkeypatch.setattr(torch.optim, "AdamW", Recording)
        monkeypatch.setattr(sft, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
        model = torch.nn.Linear(2, 1, bias=False)
        llm = SimpleNamespace(reset_prefix_cache=lambda: resets.append(True))
        trainer = SimpleNamespace(model=model, cfg=TrainConfig(max_grad_norm=1.0), llm=llm)
        blank = {"token_ids": [1, 2], "loss_mask": [0, 1], "token_advantages": [0.0] * 2, "experience_mask": [0] * 2}
        pairs = [TrainingSample(trajectory_id=f"t{i}", group_id="g", **blank) for i in range(5)]
        cfg = ColdStartConfig(enabled=True, epochs=2, batch_size=2, learning_rate=0.5, warmup_ratio=0.2)
        stats = sft.sft_warmup(trainer, pairs, cfg, seed=seed)
        assert resets == [True] and not model.training
        return stats, seen, fresh, lrs

    with caplog.at_level(logging.INFO, logger="evolvekit.train.sft"):
        stats, seen, fresh, lrs = run(7)
    assert [len(b) for b in seen] == [2, 2, 1, 2, 2, 1]  # 3 steps an epoch, the last one short
    every = [f"t{i}" for i in range(5)]
    assert sorted(sum(seen[:3], [])) == every and sorted(sum(seen[3:], [])) == every  # each pair once an epoch
    assert fresh == [True] * 6  # gradients reset before every step
    # 6 steps, round(6 x 0.2) = 1 warm-up step, then linear decay: 0.5 x [1, 5/5, 4/5, 3/5, 2/5, 1/5]
    assert lrs == pytest.approx([0.5, 0.5, 0.4, 0.3, 0.2, 0.1])
    assert (stats.steps, stats.epochs, stats.examples, stats.losses) == (6, 2, 5, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert stats.seconds == 3.5  # 3.46 s on the clock, to a tenth
    assert "cold start epoch 1/2: loss 3.0000" in caplog.messages
    assert "cold start epoch 2/2: loss 6.0000" in caplog.messages
    assert run(7)[1] == seen  # the seed fixes the order
    assert run(8)[1] != seen


def test_reference_pairs_mask_the_calls_and_the_closing_turn_only(tmp_path):
    from evolvekit.agent.templates import TemplateSettings
    from evolvekit.config import EnvConfig
    from evolvekit.env.registry import make_env
    from evolvekit.llm.local import LocalLLM
    from evolvekit.train.sft import reference_pairs

    llm = LocalLLM(str(make_tiny_model(tmp_path / "m")), device="cpu")
    tasks = get_family("arith").tasks("train", 2)
    env = lambda: make_env(EnvConfig(name="bfcl", family="arith"))  # noqa: E731
    pairs = reference_pairs(tasks, env, llm, "compact", TemplateSettings(), limit=5)
    calls_only = reference_pairs(tasks, env, llm, "compact", TemplateSettings(), limit=5, closing="")
    assert len(pairs) == 2 and len(calls_only) == 2
    eot = llm.tokenizer.convert_tokens_to_ids("<|im_end|>")
    for task, s, c in zip(tasks, pairs, calls_only):
        call = task.reference_solution[0][0]
        target = llm.decode([t for t, m in zip(c.token_ids, c.loss_mask) if m])
        assert target.startswith("<tool_call>") and target.endswith("</tool_call>") and f'"{call.name}"' in target
        assert str(task.query) in llm.decode(s.token_ids[: s.loss_mask.index(1)])  # the rollout's prompt
        # masked runs: [calls + end of turn], then [closing + end of turn]; the replayed tool result is context
        runs, cur = [], []
        for t, m in zip(s.token_ids, s.loss_mask):
            if m:
                cur.append(t)
            elif cur:
                runs, cur = runs + [cur], []
        runs += [cur] if cur else []
        assert len(runs) == 2 and runs[0][-1] == eot and runs[1][-1] == eot
        assert llm.decode(runs[0][:-1]) == target and llm.decode(runs[1][:-1]) == "Done."
        between = llm.decode(s.token_ids[len(c.token_ids) + 1 : len(s.token_ids) - len(runs[1])])
        assert "Tool results:" in between and '"result"' in between  # the executed reference's observation


def _llm_and_env(path):
    """A policy from the model folder ``path`` and a factory of `arith` environments (with the family's worked
    examples: long shared prompts, which the shared-prefix and autocast checks below need)."""
    from evolvekit.config import EnvConfig
    from evolvekit.env.registry import make_env
    from evolvekit.llm.local import LocalLLM

    cfg = EnvConfig(name="bfcl", family="arith", worked_examples="person")
    return LocalLLM(str(path), device="cpu"), lambda: make_env(cfg)


def _arith(tmp_path):
    return _llm_and_env(make_tiny_model(tmp_path / "m"))


def _pairs_and_trainer(path, shared: bool, micro: int, n: int = 5, autocast: str = "off"):
    from evolvekit.agent.templates import TemplateSettings
    from evolvekit.config import TrainConfig
    from evolvekit.train.sft import reference_pairs
    from evolvekit.train.trainer import GRPOTrainer

    torch.manual_seed(0)
    llm, env = _llm_and_env(path)
    pairs = reference_pairs(get_family("arith").tasks("train", n), env, llm, "compact", TemplateSettings(), limit=n)
    cfg = TrainConfig(shared_prefix=shared, micro_batch_size=micro, autocast=autocast, learning_rate=0.0)
    return pairs, GRPOTrainer(llm, cfg)


@pytest.mark.parametrize("micro", [1, 2, 8])
def test_cold_start_batch_shares_its_prompt_prefix_with_the_same_loss_and_gradients(tmp_path, micro):
    from evolvekit.train.sft import SFTStats, batch_backward
    from evolvekit.train.trainer import sequence_logprobs

    path = make_tiny_model(tmp_path / "m")
    out = {}
    for shared in (False, True):
        pairs, trainer = _pairs_and_trainer(path, shared, micro)
        trainer.model.zero_grad(set_to_none=True)
        stats = SFTStats()
        loss = batch_backward(trainer, pairs, stats)
        grads = {k: p.grad.detach().clone() for k, p in trainer.model.named_parameters() if p.grad is not None}
        out[shared] = (loss, grads, stats, sum(len(s.token_ids) for s in pairs))
    (loss0, g0, st0, n0), (loss1, g1, st1, _) = out[False], out[True]
    # the loss by hand: one pass over the whole batch, the token mean of the targets' negative log-likelihood
    pairs, plain = _pairs_and_trainer(path, False, micro)
    batch = plain._collate(pairs)
    with torch.no_grad():
        lp, _ = sequence_logprobs(plain.model, batch["ids"], batch["attn"], None)
    expected = float(-(lp * batch["mask"]).sum() / sum(sum(p.loss_mask) for p in pairs))
    assert loss0 == pytest.approx(expected, rel=1e-5)
    assert st0.tokens == n0 and st0.shared_prefix_tokens == 0
    # every pair starts with the rollout's system prompt, tools and worked examples: far more than half is shared
    assert st1.shared_prefix_tokens > n0 / 2 and st1.tokens + st1.shared_prefix_tokens == n0
    assert loss1 == pytest.approx(loss0, rel=1e-5) and loss0 > 0
    assert g0.keys() == g1.keys() and g0
    for k in g0:
        assert torch.allclose(g0[k], g1[k], atol=1e-6, rtol=1e-4), (k, (g0[k] - g1[k]).abs().max())
    two = SFTStats()
    batch_backward(trainer, pairs[:2], two)  # two pairs share too; one pair has nothing to share
    assert two.shared_prefix_tokens > 0


def test_cold_start_plain_batch_runs_under_the_trainers_autocast(tmp_path):
    from evolvekit.train.sft import SFTStats, batch_backward
    from evolvekit.train.trainer import sequence_logprobs

    path = make_tiny_model(tmp_path / "m")
    pairs, trainer = _pairs_and_trainer(path, False, 2, autocast="bf16")
    batch = trainer._collate(pairs[:2])
    n_tokens = sum(sum(p.loss_mask) for p in pairs[:2])
    with torch.no_grad():
        by_dtype = {
            amp: float(-(sequence_logprobs(trainer.model, batch["ids"], batch["attn"], amp)[0] * batch["mask"]).sum())
            / n_tokens
            for amp in (torch.bfloat16, None)
        }
    assert by_dtype[torch.bfloat16] != pytest.approx(by_dtype[None], rel=1e-5)  # bf16 rounding shows
    loss = batch_backward(trainer, pairs[:2], SFTStats())
    assert loss == pytest.approx(by_dtype[torch.bfloat16], rel=1e-5)


def test_cold_start_warmup_reports_the_shared_prefix_and_trains(tmp_path):
    from evolvekit.config import ColdStartConfig
    from evolvekit.train.sft import sft_warmup

    pairs, trainer = _pairs_and_trainer(make_tiny_model(tmp_path / "m"), True, 2, n=4)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    stats = sft_warmup(trainer, pairs, ColdStartConfig(enabled=True, epochs=1, batch_size=2, learning_rate=1e-3))
    assert stats.steps == 2 and len(stats.losses) == 2 and min(stats.losses) > 0
    # both batches counted: each pair's tokens either forwarded or saved by the shared prefix
    assert stats.tokens + stats.shared_prefix_tokens == sum(len(p.token_ids) for p in pairs)
    assert stats.as_metrics()["cold_start/shared_prefix_tokens"] > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))


def test_reference_pairs_skip_tasks_without_a_reference_stop_at_the_limit_and_keep_the_rollout_prompt(tmp_path):
    from evolvekit.agent.rollout import initial_context
    from evolvekit.agent.templates import TemplateSettings
    from evolvekit.env.action_text import format_call
    from evolvekit.train.sft import reference_pairs

    llm, env = _arith(tmp_path)
    t0, t1, t2 = get_family("arith").tasks("train", 3)
    none = t0.model_copy(update={"task_id": "none", "reference_solution": None})
    empty = t0.model_copy(update={"task_id": "empty", "reference_solution": []})
    no_calls = t0.model_copy(update={"task_id": "no-calls", "reference_solution": [[]]})
    call = t1.reference_solution[0][0]
    two = t1.model_copy(update={"task_id": "two", "reference_solution": [[call, call]]})
    tasks = [none, t0, empty, no_calls, two, t2]
    ts = TemplateSettings()
    assert [p.trajectory_id for p in reference_pairs(tasks, env, llm, "compact", ts, limit=2)] == [t0.task_id, "two"]
    pairs = reference_pairs(tasks, env, llm, "compact", ts, limit=9)
    assert [p.trajectory_id for p in pairs] == [t0.task_id, "two", t2.task_id]
    for task, pair in zip((t0, two, t2), pairs):
        e = env()
        prompt, _ = initial_context(e.reset(task), "compact", ts).tokenize(llm)
        e.close()
        assert pair.token_ids[: len(prompt)] == prompt and pair.loss_mask.index(1) == len(prompt)
        assert pair.group_id == task.task_id and set(pair.loss_mask) == {0, 1}
        assert pair.token_advantages == [0.0] * len(pair.token_ids) and pair.experience_mask == [0] * len(
            pair.token_ids
        )
    first = pairs[1].loss_mask.index(1)
    end = pairs[1].loss_mask.index(0, first)  # the calls and their end of turn
    assert llm.decode(pairs[1].token_ids[first : end - 1]) == format_call(call) + format_call(call)


def test_reference_pairs_fall_back_to_the_calls_alone_where_the_template_does_not_reproduce_them(
    tmp_path, monkeypatch, caplog
):
    import logging

    from evolvekit.agent.rollout import initial_context
    from evolvekit.agent.templates import TemplateSettings
    from evolvekit.env.action_text import format_call
    from evolvekit.train import sft

    llm, env = _arith(tmp_path)
    [task] = get_family("arith").tasks("train", 1)
    monkeypatch.setattr(sft, "_episode_tokens", lambda *a: None)
    with caplog.at_level(logging.WARNING, logger="evolvekit.train.sft"):
        [pair] = sft.reference_pairs([task], env, llm, "compact", TemplateSettings(), limit=1)
    e = env()
    prompt, _ = initial_context(e.reset(task), "compact", TemplateSettings()).tokenize(llm)
    e.close()
    calls = llm.encode(format_call(task.reference_solution[0][0]))
    assert pair.token_ids == prompt + calls and pair.loss_mask == [0] * len(prompt) + [1] * len(calls)
    assert [r.getMessage() for r in caplog.records if r.name == "evolvekit.train.sft"] == [
        f"cold start: the chat template does not reproduce the call tokens of {task.task_id}; calls only"
    ]


class _Chars:
    """A stand-in tokenizer: one token per character."""

    def encode(self, text):
        return [ord(c) for c in text]


class _Context:
    """A stand-in chat context over ``_Chars``: the prompt, then each assistant message (``shout``: as upper case, so
    the template does not reproduce it), its end of turn (9, unless ``no_end``) and the observation."""

    def __init__(self, prompt, shout=False, no_end=False):
        self.prompt, self.turns, self.shout, self.no_end = list(prompt), [], shout, no_end

    def add_assistant(self, text):
        self.turns.append((text.upper() if self.shout else text, None))

    def add_observation(self, text):
        self.turns[-1] = (self.turns[-1][0], text)

    def tokenize(self, llm):
        ids = list(self.prompt)
        for text, obs in self.turns:
            ids += llm.encode(text) + ([] if self.no_end else [9]) + llm.encode(obs or "")
        return ids, None


def test_episode_tokens_by_hand():
    from evolvekit.train.sft import _episode_tokens

    a, b, c, x, y, o, k = (ord(ch) for ch in "abcxyok")
    ids, mask = _episode_tokens(_Context([5, 6]), _Chars(), [5, 6], [0, 0], [("ab", "x"), ("c", "y")], "ok")
    assert ids == [5, 6, a, b, 9, x, c, 9, y, o, k, 9]
    assert mask == [0, 0, 1, 1, 1, 0, 1, 1, 0, 1, 1, 1]
    assert _episode_tokens(_Context([5], shout=True), _Chars(), [5], [0], [("ab", "x")], "ok") is None
    # no end-of-turn token after the action and nothing after it: nothing to learn the end of a turn from
    assert _episode_tokens(_Context([5], no_end=True), _Chars(), [5], [0], [("ab", "")], "ok") is None


@pytest.mark.slow
def test_oracle_run_with_cold_start_warms_up_checkpoints_and_never_uses_held_out_tasks(tmp_path, tiny_sets):
    tiny = make_tiny_model(tmp_path / "tiny")
    fam = get_family("arith")
    train, held = fam.tasks("train", 3), fam.tasks("test", 1)
    tasks_file = tmp_path / "warm.jsonl"
    tasks_file.write_text("".join(t.model_dump_json() + "\n" for t in train + held))  # one held-out task sneaks in
    cfg = load_config(
        None,
        [
            f"run.out_dir={tmp_path}",
            "env.family=arith",
            *tiny_sets,  # every helper role tiny too (issue 97)
            f"models.policy.model={tiny}",
            "models.policy.max_new_tokens=8",
            "rollout.max_steps=2",
            "rollout.group_size=2",
            "train.iterations=1",
            "train.tasks_per_iteration=1",
            "train.eval_tasks=1",
            "train.eval_k=1",
            "train.autocast=off",
            "cold_start.enabled=true",
            f"cold_start.tasks_file={tasks_file}",
            "run.oracle=true",  # the family's tasks are person-written: their references are gold
            "cold_start.epochs=3",
            "cold_start.batch_size=2",
        ],
    )
    cfg, run_dir, store = open_run(cfg, None)
    summary = build_loop(cfg, run_dir, store, show_progress=False).run()
    cold = summary["cold_start"]
    assert cold["cold_start/examples"] == 3  # the held-out task was filtered out
    assert cold["cold_start/steps"] == 6 and cold["cold_start/loss_last"] < cold["cold_start/loss_first"]
    assert summary["eval_cold_start"] is not None and "avg@1" in summary["eval_cold_start"]
    assert [r.iteration for r in store.checkpoints()][:1] == [-1]
    assert json.loads(store.get_meta("cold_start")) == cold
    store.close()


def test_cold_start_without_verified_tasks_is_a_config_error(tmp_path):
    from evolvekit.errors import ConfigError

    # a rule of the config tree itself: refused when the config is loaded, before any run folder exists
    with pytest.raises(ConfigError, match="cold_start.enabled needs verified tasks"):
        load_config(None, [f"run.out_dir={tmp_path}", "env.family=arith", "cold_start.enabled=true"])


def test_cold_start_can_teach_the_search_action(tmp_path):
    """EvolveR's retrieval-as-action: with ``search``, each pair first calls search_experience with the task (a
    target), sees the pool's answer (not a target), then makes the reference calls and closes."""
    from evolvekit.agent.templates import TemplateSettings
    from evolvekit.config import EnvConfig
    from evolvekit.env.action_text import format_call
    from evolvekit.env.registry import make_env
    from evolvekit.llm.local import LocalLLM
    from evolvekit.train.sft import reference_pairs
    from evolvekit.types import ToolCall

    llm = LocalLLM(str(make_tiny_model(tmp_path / "m")), device="cpu")
    tasks = get_family("arith").tasks("train", 2)
    env = lambda: make_env(EnvConfig(name="bfcl", family="arith"))  # noqa: E731
    asked = []

    def search(query):
        asked.append(query)
        return "- When to use: two numbers | Content: call the tool named in the request"

    pairs = reference_pairs(tasks, env, llm, "compact", TemplateSettings(), limit=5, search=search)
    assert asked == [t.turns[0] for t in tasks]
    for task, s in zip(tasks, pairs):
        runs, cur = [], []
        for t, m in zip(s.token_ids, s.loss_mask):
            if m:
                cur.append(t)
            elif cur:
                runs.append(llm.decode(cur))
                cur = []
        runs.append(llm.decode(cur))
        assert len(runs) == 3  # [search call + eot], [reference calls + eot], [closing + eot]
        search_call = format_call(ToolCall(name="search_experience", arguments={"query": task.turns[0]}))
        assert runs[0] == search_call + "<|im_end|>"
        assert f'"{task.reference_solution[0][0].name}"' in runs[1] and runs[2].startswith("Done.")
        assert "call the tool named in the request" in llm.decode(s.token_ids)  # the answer is context


def test_search_action_defaults_follow_navigating_as_tool():
    cfg = load_config(None, ["navigating.enabled=true", "navigating.as_tool=true"])
    assert cfg.reward.format == "evolver" and cfg.reward.w_format == 0.1
    assert (
        load_config(None, ["navigating.enabled=true", "navigating.as_tool=true", "reward.w_format=0"]).reward.w_format
        == 0
    )
    assert load_config(None, []).reward.format == "calls"
