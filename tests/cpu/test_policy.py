"""train/policy.py's checkpoints on a tiny random model: what ``save`` writes, what ``load_optimizer`` reads back,
and what it refuses (issue 77.2: the policy row's survivors)."""

import logging
import pickle

import pytest
import torch
from episode_doubles import RecordingEngine, logged

from evolvekit.config import TrainConfig
from evolvekit.llm.local import LocalLLM
from evolvekit.llm.tiny import make_tiny_model
from evolvekit.train.policy import Policy


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def _stepped(policy: Policy) -> Policy:
    """One optimizer step, so the optimizer holds state (AdamW's moments)."""
    loss = sum(p.float().pow(2).sum() for p in policy.model.parameters() if p.requires_grad)
    loss.backward()
    assert policy.step() is not None
    return policy


def _moments(policy: Policy) -> list[torch.Tensor]:
    return [s["exp_avg"] for s in policy.optimizer.state_dict()["state"].values()]


def test_save_writes_the_optimizer_unless_told_not_to_and_load_reads_it_back(tiny_path, tmp_path):
    policy = _stepped(Policy(LocalLLM(str(tiny_path), device="cpu"), TrainConfig(learning_rate=1e-3)))
    full = policy.save(tmp_path / "full")
    assert (full / "optimizer.pt").is_file() and not (full / "master.pt").exists()  # fp32: no master copy
    bare = policy.save(tmp_path / "bare", with_optimizer=False)
    assert not (bare / "optimizer.pt").exists()
    again = Policy(LocalLLM(str(full), device="cpu"), TrainConfig(learning_rate=1e-3))
    assert again.load_optimizer(bare) is False and _moments(again) == []  # nothing there to read
    assert again.load_optimizer(full) is True
    assert len(_moments(again)) == len(_moments(policy)) > 0
    assert all(torch.equal(a, b) for a, b in zip(_moments(again), _moments(policy)))


def test_a_policy_without_master_weights_ignores_a_checkpoints_master_copy(tiny_path, tmp_path):
    bf16 = _stepped(Policy(LocalLLM(str(tiny_path), device="cpu", dtype="bfloat16"), TrainConfig(learning_rate=1e-3)))
    path = bf16.save(tmp_path / "ckpt")
    assert (path / "master.pt").is_file()
    fp32 = Policy(LocalLLM(str(tiny_path), device="cpu"), TrainConfig(learning_rate=1e-3))
    assert fp32.master is None and fp32.load_optimizer(path) is True


ran: list[str] = []


def _record(what: str) -> dict:
    ran.append(what)
    return {"state": {}, "param_groups": []}


class _Payload:
    """A pickle that calls a function when it is loaded: what a hostile checkpoint would hold."""

    def __reduce__(self):
        return (_record, ("loaded",))


def test_a_checkpoint_whose_files_hold_code_is_refused_unrun(tiny_path, tmp_path):
    ran.clear()
    policy = Policy(LocalLLM(str(tiny_path), device="cpu"), TrainConfig())
    (tmp_path / "a").mkdir()
    torch.save(_Payload(), tmp_path / "a" / "optimizer.pt")
    with pytest.raises(pickle.UnpicklingError):
        policy.load_optimizer(tmp_path / "a")
    bf16 = _stepped(Policy(LocalLLM(str(tiny_path), device="cpu", dtype="bfloat16"), TrainConfig(learning_rate=1e-3)))
    path = bf16.save(tmp_path / "b")
    torch.save(_Payload(), path / "master.pt")
    with pytest.raises(pickle.UnpicklingError):
        bf16.load_optimizer(path)
    assert ran == []


def test_a_sharded_policy_hands_the_whole_state_to_its_shards(tiny_path, tmp_path):
    class _Shards:
        got: tuple | None = None

        def load_optimizer_state(self, optimizer, state):
            self.got = (optimizer, state)

    policy = _stepped(Policy(LocalLLM(str(tiny_path), device="cpu"), TrainConfig(learning_rate=1e-3)))
    path = policy.save(tmp_path / "ckpt")
    policy.sharded = shards = _Shards()
    assert policy.load_optimizer(path)
    optimizer, state = shards.got
    assert optimizer is policy.optimizer and set(state) == {"state", "param_groups"} and len(state["state"]) > 0
    assert policy._optimizer_state is state  # kept for the next checkpoint (FSDP2 gathers it at publish)


def test_save_replaces_an_interrupted_saves_leftovers_and_makes_its_folders(tiny_path, tmp_path):
    policy = Policy(LocalLLM(str(tiny_path), device="cpu"), TrainConfig())
    target = tmp_path / "runs" / "deep" / "ckpt"  # folders that do not exist yet
    leftover = target.with_name("ckpt.tmp")
    leftover.mkdir(parents=True)
    (leftover / "half-written.bin").write_text("x")
    path = policy.save(target, with_optimizer=False)
    assert path == target and not leftover.exists() and not (path / "half-written.bin").exists()
    assert (path / "trainer_state.json").is_file()


def test_a_sharded_policy_saves_the_state_its_shards_gathered(tiny_path, tmp_path):
    policy = Policy(LocalLLM(str(tiny_path), device="cpu"), TrainConfig())
    policy.sharded = object()  # FSDP2: the whole state was gathered at publish
    policy._optimizer_state = {"state": {}, "param_groups": [{"gathered": 1}]}
    path = policy.save(tmp_path / "ckpt")
    assert torch.load(path / "optimizer.pt", weights_only=True) == policy._optimizer_state


def test_save_over_an_earlier_checkpoint_and_its_state_file(tiny_path, tmp_path):
    import json
    import time

    policy = Policy(LocalLLM(str(tiny_path), device="cpu"), TrainConfig())
    path = policy.save(tmp_path / "ckpt", with_optimizer=False)
    (path / "stale.txt").write_text("from the earlier save")
    before = time.time()
    policy.save(tmp_path / "ckpt")
    assert not (path / "stale.txt").exists() and (path / "optimizer.pt").is_file()
    state = json.loads((path / "trainer_state.json").read_text())
    assert set(state) == {"lora", "saved"} and state["lora"] is False and before <= state["saved"] <= time.time()


def test_zero_grad_drops_the_gradients(tiny_path):
    policy = _stepped(Policy(LocalLLM(str(tiny_path), device="cpu"), TrainConfig()))
    loss = sum(p.float().sum() for p in policy.model.parameters())
    loss.backward()
    policy.zero_grad()
    assert all(p.grad is None for p in policy.model.parameters())


def test_publish_sends_weights_only_to_an_engine_with_its_own_copy_and_syncs_shards(tiny_path):
    policy = Policy(LocalLLM(str(tiny_path), device="cpu"), TrainConfig())
    served, local, plain = RecordingEngine(True, False), RecordingEngine(True, True), RecordingEngine(False, False)
    for engine in (served, local, plain):
        policy.model.train()
        policy.publish(engine)
        assert not policy.model.training and engine.resets == 1
    assert len(served.updates) == 1 and set(served.updates[0]) == set(policy.model.state_dict())
    assert local.updates == [] and plain.updates == []

    class _Shards:
        def sync_to(self, llm):
            self.synced = llm

        def full_optimizer_state(self, optimizer):
            return {"of": optimizer}

    policy.sharded = shards = _Shards()
    policy.publish(RecordingEngine(False, True))
    assert shards.synced is policy.llm and policy._optimizer_state == {"of": policy.optimizer}


def test_save_makes_the_folders_it_needs(tiny_path, tmp_path):
    policy = Policy(LocalLLM(str(tiny_path), device="cpu"), TrainConfig())
    assert (policy.save(tmp_path / "new" / "deeper" / "ckpt", with_optimizer=False) / "trainer_state.json").is_file()


def test_a_data_parallel_step_sums_the_trainable_gradients_first(tiny_path):
    class _Ranks:
        reduced: list = []

        def all_reduce_grads(self, params):
            self.reduced.append(list(params))

    ranks = _Ranks()
    policy = Policy(LocalLLM(str(tiny_path), device="cpu"), TrainConfig(learning_rate=1e-3), parallel=ranks)
    _stepped(policy)
    trainable = [p for p in policy.model.parameters() if p.requires_grad]
    assert len(ranks.reduced) == 1 and [id(p) for p in ranks.reduced[0]] == [id(p) for p in trainable]


def test_a_non_finite_gradient_skips_the_step_and_drops_the_gradients(tiny_path, caplog):
    policy = Policy(LocalLLM(str(tiny_path), device="cpu"), TrainConfig(learning_rate=1e-3))
    before = [p.detach().clone() for p in policy.model.parameters()]
    loss = sum(p.float().sum() for p in policy.model.parameters()) * float("nan")
    loss.backward()
    with caplog.at_level(logging.WARNING, logger="evolvekit.train.policy"):
        assert policy.step() is None
    assert logged(caplog, "evolvekit.train.policy") == ["non-finite gradient norm; skipping this optimizer step"]
    assert all(p.grad is None for p in policy.model.parameters())
    assert all(torch.equal(b, p.detach()) for b, p in zip(before, policy.model.parameters()))


def test_a_policy_with_nothing_to_train_is_refused(tiny_path):
    llm = LocalLLM(str(tiny_path), device="cpu")
    llm.model.requires_grad_(False)
    with pytest.raises(ValueError) as err:
        Policy(llm, TrainConfig())
    assert str(err.value) == "the policy has no trainable parameters"


def _squares(model) -> torch.Tensor:
    """One forward pass of the real model (FSDP2 gathers its shards in the forward hooks)."""
    ids = torch.tensor([[1, 5, 9, 3, 7]])
    return model(ids).logits.float().pow(2).mean()


def test_fsdp2_trains_a_sharded_copy_like_one_process_and_publishes_it(tiny_path, tmp_path, world_of_one):
    plain = Policy(LocalLLM(str(tiny_path), device="cpu"), TrainConfig(learning_rate=1e-2))
    llm = LocalLLM(str(tiny_path), device="cpu")
    sharded = Policy(llm, TrainConfig(learning_rate=1e-2, sharding="fsdp2"), parallel=world_of_one)
    assert sharded.sharded is not None and sharded.sharded.loss_scale == 1.0 == sharded.loss_scale
    assert sharded.model is sharded.sharded.model and sharded.model is not llm.model  # the update runs the shards
    assert sharded.master is None  # the fp32 shards are the masters
    early = sharded.save(tmp_path / "before-publish")  # no state gathered yet: no optimizer file to resume from
    assert not (early / "optimizer.pt").exists() and sharded.load_optimizer(early) is False
    norms = []
    for policy in (plain, sharded):
        _squares(policy.model).backward()
        norms.append(policy.step())
    assert isinstance(norms[1], float) and norms[1] == pytest.approx(norms[0], rel=1e-4)
    sharded.publish(RecordingEngine(False, True))  # rank 0's copy gets the shards' weights
    for name, weight in plain.model.state_dict().items():
        assert torch.allclose(llm.model.state_dict()[name].float(), weight.float(), atol=1e-5), name
    gathered = sharded._optimizer_state
    assert gathered is not None and len(gathered["state"]) == len(plain.optimizer.state_dict()["state"])
    path = sharded.save(tmp_path / "ckpt")
    again = Policy(LocalLLM(str(path), device="cpu"), TrainConfig(sharding="fsdp2"), parallel=world_of_one)
    assert again.load_optimizer(path) and again._optimizer_state is not None
    again.publish(RecordingEngine(False, True))
    for key, moments in gathered["state"].items():
        assert torch.equal(again._optimizer_state["state"][key]["exp_avg"], moments["exp_avg"]), key


def test_fsdp2_is_not_used_without_a_process_group_or_when_replicating(tiny_path, world_of_one):
    alone = Policy(LocalLLM(str(tiny_path), device="cpu"), TrainConfig(sharding="fsdp2"))
    replicated = Policy(LocalLLM(str(tiny_path), device="cpu"), TrainConfig(), parallel=world_of_one)
    for policy in (alone, replicated):
        assert policy.sharded is None and policy.model is policy.llm.model and policy.loss_scale == 1.0
