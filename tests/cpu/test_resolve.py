"""Issue 55.5: one place resolves every `auto`, with its reason, and `config show` prints it."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from evolvekit.config import Config, load_config
from evolvekit.llm.local import pick_device, pick_dtype
from evolvekit.resolve import Machine, auto_fields, auto_resolutions
from evolvekit.train.trainer import autocast_dtype


def _all_auto() -> Config:
    """A config with every field that admits `auto` set to it."""
    cfg = Config()
    sets = [f"{f}=auto" for f in auto_fields(cfg)]
    return load_config(None, sets)


def test_every_auto_field_of_the_config_tree_is_resolved_with_a_reason():
    cfg = _all_auto()
    fields = auto_fields(cfg)
    assert len(fields) >= 20 and "train.advantage_estimator" in fields and "models.policy.device" in fields
    resolved = auto_resolutions(cfg, Machine())
    assert {r.field for r in resolved} == set(fields)  # a new auto field fails here until resolve.py resolves it
    assert all(r.value and r.value != "auto" and r.reason for r in resolved)
    explicit = load_config(None, ["attributing.source=grounded", "models.policy.device=cpu"])
    names = {r.field for r in auto_resolutions(explicit, Machine())}
    assert "attributing.source" not in names and "models.policy.device" not in names  # set: nothing to resolve


def test_resolutions_follow_the_machine_and_the_roles():
    cfg = _all_auto()
    cpu = {r.field: r.value for r in auto_resolutions(cfg, Machine(cuda=False, cpu_bf16=False))}
    gpu = {r.field: r.value for r in auto_resolutions(cfg, Machine(cuda=True))}
    assert (cpu["models.policy.device"], cpu["models.policy.dtype"], cpu["train.autocast"]) == ("cpu", "float32", "off")
    assert (gpu["models.policy.device"], gpu["models.policy.dtype"], gpu["train.autocast"]) == (
        "cuda",
        "bfloat16",
        "bf16",
    )
    assert cpu["train.master_weights"] == "off" and gpu["train.master_weights"] == "on"  # bf16 weights trained in full
    served = load_config(None, [f"{f}=auto" for f in auto_fields(Config())] + ["models.attributor.backend=openai"])
    out = {r.field: r for r in auto_resolutions(served, Machine())}
    assert out["attributing.source"].value == "llm" and "served attributor" in out["attributing.source"].reason
    assert "models.attributor.device" not in out  # a served role has no device here


def test_the_resolution_is_what_runs_on_this_machine():
    cfg = _all_auto()
    here = {r.field: r.value for r in auto_resolutions(cfg, Machine.probe())}
    device = pick_device("auto")
    assert here["models.policy.device"] == device.type
    assert here["models.policy.dtype"] == str(pick_dtype("auto", device)).removeprefix("torch.")
    assert here["train.autocast"] == ("bf16" if autocast_dtype("auto", device) == torch.bfloat16 else "off")


@pytest.mark.slow
def test_config_show_prints_each_resolution_and_its_reason():
    shown = subprocess.run(
        [sys.executable, "-m", "evolvekit.cli.main", "config", "show", "--set", "attributing.enabled=true"],
        capture_output=True, text=True, timeout=120,
    ).stdout  # fmt: skip
    assert "'auto' values resolved on this machine:" in shown
    assert "#   train.advantage_estimator = dual_channel  (attributing.enabled)" in shown
    assert "#   attributing.source = grounded  (an in-process attributor" in shown


_ROLES = ("policy", "explorer", "synthesizer", "judge", "attributor", "summarizer")
_LOCAL = "an in-process {0} (models.{0}.backend: local)"
_SERVED = "a served {0} (models.{0}.backend: openai)"
_NO_SEARCH = "experience search is not an action (navigating.as_tool off)"
_FP32 = "the trained parameters are fp32"
_FULL = "low-precision weights are trained in full"


def _roles(roles, device: str, dtype: str, why: str) -> dict:
    pairs = (("device", (device, why)), ("dtype", (dtype, f"weights on {device}")))
    return {f"models.{r}.{k}": v for r in roles for k, v in pairs}


def _helpers(explorer="local", synthesizer="local", judge="local", attributor="local") -> dict:
    """The helpers' resolutions (values and reasons by hand) for in-process or served roles."""
    on = {"local": "on", "openai": "off"}
    backends = {"explorer": explorer, "synthesizer": synthesizer, "judge": judge, "attributor": attributor}
    w = {r: (_LOCAL if b == "local" else _SERVED).format(r) for r, b in backends.items()}
    e, s = on[explorer], on[synthesizer]
    return {
        "questioning.scaffold": (
            e if e == s else f"{e} (explorer), {s} (synthesizer)",
            f"{w['explorer']}; {w['synthesizer']}",
        ),
        "questioning.numbers_constrained": (on[synthesizer], w["synthesizer"]),
        "questioning.reward": ("state" if judge == "local" else "judge", w["judge"]),
        "questioning.judge_constrained": (on[judge], w["judge"]),
        "navigating.extraction": ("grounded", _LOCAL.format("summarizer")),
        "attributing.source": ("grounded" if attributor == "local" else "llm", w["attributor"]),
        "attributing.constrained": (on[attributor], w["attributor"]),
    }  # fmt: skip


def _table(sets: list[str], machine: Machine) -> dict:
    cfg = load_config(None, [f"{f}=auto" for f in auto_fields(Config())] + sets)
    return {r.field: (r.value, r.reason) for r in auto_resolutions(cfg, machine)}


def test_each_resolution_and_its_reason_by_hand():
    """What `config show` prints, whole, for four configurations and two machines (issue 55.5)."""
    off = {"train.advantage_estimator": ("grpo", "attributing is off"), "cold_start.teach_search": ("off", _NO_SEARCH)}
    assert _table([], Machine(cuda=False, cpu_bf16=False)) == {
        **_roles(_ROLES, "cpu", "float32", "no CUDA on this machine"),
        "train.autocast": ("off", "the CPU lacks AVX512-BF16"),
        "train.master_weights": ("off", _FP32),
        **off,
        **_helpers(),
    }
    assert _table([], Machine(cuda=True, cpu_bf16=True)) == {
        **_roles(_ROLES, "cuda", "bfloat16", "CUDA is available"),
        "train.autocast": ("bf16", "the policy is on CUDA"),
        "train.master_weights": ("on", _FULL),
        **off,
        **_helpers(),
    }
    # served explorer, judge and attributor; the policy's device (cuda:1) and dtype set; experience search an action
    served = ["models.explorer.backend=openai", "models.judge.backend=openai", "models.attributor.backend=openai"]
    sets = served + ["attributing.enabled=true", "navigating.enabled=true", "navigating.as_tool=true"]
    assert _table(sets + ["models.policy.dtype=bfloat16", "models.policy.device=cuda:1"], Machine()) == {
        **_roles(("synthesizer", "summarizer"), "cpu", "float32", "no CUDA on this machine"),
        "train.autocast": ("bf16", "the policy is on CUDA"),
        "train.master_weights": ("on", _FULL),
        "train.advantage_estimator": ("dual_channel", "attributing.enabled"),
        "cold_start.teach_search": ("on", "navigating.as_tool"),
        **_helpers(explorer="openai", judge="openai", attributor="openai"),
    }
    # a served synthesizer; fp16 weights on a CPU without AVX512-BF16: trained in full, no autocast
    table = _table(["models.synthesizer.backend=openai", "models.policy.dtype=float16"], Machine())
    assert table == {
        **_roles(("explorer", "judge", "attributor", "summarizer"), "cpu", "float32", "no CUDA on this machine"),
        "models.policy.device": ("cpu", "no CUDA on this machine"),
        "train.autocast": ("off", "the CPU lacks AVX512-BF16"),
        "train.master_weights": ("on", _FULL),
        **off,
        **_helpers(synthesizer="openai"),
    }
    # GiGPO; fp16 weights sharded by FSDP2 over two ranks or bf16 weights under LoRA are not kept in fp32 masters;
    # AVX512-BF16 autocast
    fsdp2 = ["attributing.enabled=true", "attributing.source=gigpo", "models.policy.dtype=float16"]
    fsdp2 += ["train.sharding=fsdp2"]
    gigpo = _table(fsdp2, Machine(cpu_bf16=True, ranks=2))
    assert gigpo["train.advantage_estimator"] == ("gigpo", "attributing.enabled with source gigpo")
    assert gigpo["train.master_weights"] == ("off", "FSDP2's fp32 shards over 2 ranks are the master weights")
    assert gigpo["train.autocast"] == ("bf16", "the CPU has AVX512-BF16")
    # one process shards nothing (train/policy.py trains the plain copy): its fp16 weights get fp32 masters. The
    # BFCL recipe's short run on one GPU printed "off" here while the run kept them (results/gpu_tests_h200.txt)
    assert _table(fsdp2, Machine(cpu_bf16=True))["train.master_weights"] == ("on", _FULL)
    lora = _table(["models.policy.dtype=bfloat16", "train.lora=true"], Machine())
    assert lora["train.master_weights"] == ("off", "the trained parameters are fp32 (LoRA's adapters)")
    # a device set by hand decides an `auto` dtype, whatever the machine
    by_hand = _table(["models.policy.device=cuda:1"], Machine())
    assert by_hand["models.policy.dtype"] == ("bfloat16", "weights on cuda:1")


def test_machine_probe_reads_torch_and_no_machine_means_this_one():
    assert Machine.probe() == Machine(
        cuda=torch.cuda.is_available(), cpu_bf16=bool(torch.cpu._is_avx512_bf16_supported())
    )
    cfg = _all_auto()
    assert auto_resolutions(cfg) == auto_resolutions(cfg, Machine.probe())


def test_auto_fields_finds_auto_in_a_literal_or_a_default_at_any_depth():
    from typing import Literal

    from pydantic import BaseModel

    class Inner(BaseModel):
        mode: Literal["auto", "x"] = "x"
        n: int = 0

    class Outer(BaseModel):
        inner: Inner = Inner()
        name: str = "auto"
        kind: Literal["a", "b"] = "a"

    assert auto_fields(Outer()) == ["inner.mode", "name"]


@pytest.mark.parametrize("dtype", ["auto", "bfloat16"])
def test_config_show_and_a_started_run_agree_on_every_resolved_value(tmp_path, dtype):
    """Issue 79.3: what `config show` prints for the policy's device and dtype, autocast and master weights is what
    the run's builder makes (build_trainer, the function `run` calls), on this machine; bf16 weights turn master
    weights on. A decision copied into resolve.py and changed on one side only fails here."""
    from evolvekit.llm.tiny import make_tiny_model
    from evolvekit.orchestrator.build import trainer_from_store
    from evolvekit.orchestrator.run_dir import open_run

    tiny = make_tiny_model(tmp_path / "tiny")
    autos = [f"{f}=auto" for f in auto_fields(Config())]
    sets = [*autos, f"models.policy.model={tiny}", f"models.policy.dtype={dtype}", f"run.out_dir={tmp_path}"]
    cfg, _run_dir, store = open_run(load_config(None, sets), None)
    try:
        policy, trainer = trainer_from_store(cfg, store)
        shown = {r.field: r.value for r in auto_resolutions(cfg, Machine.probe())}
        ran = {
            "models.policy.device": policy.device.type,
            "models.policy.dtype": str(next(policy.model.parameters()).dtype).removeprefix("torch."),
            "train.autocast": "bf16" if trainer.amp == torch.bfloat16 else "off",
            "train.master_weights": "on" if trainer.policy.master is not None else "off",
        }
        if dtype != "auto":
            ran.pop("models.policy.dtype")  # set by hand: nothing to resolve
            assert ran["train.master_weights"] == "on"
        assert {k: shown[k] for k in ran} == ran
    finally:
        store.close()


def test_the_shared_decisions_by_hand():
    """The four decisions the run and `config show` share (resolve.py), case by case."""
    from evolvekit.resolve import autocast_for, device_for, dtype_for, keeps_master

    devices = (device_for("auto", True), device_for("auto", False), device_for("cuda:1", False))
    assert devices == ("cuda", "cpu", "cuda:1")
    assert (dtype_for("auto", "cuda:1"), dtype_for("auto", "cpu"), dtype_for("float16", "cpu")) == (
        "bfloat16", "float32", "float16",
    )  # fmt: skip
    assert [autocast_for("auto", d, b) for d, b in (("cuda", False), ("cpu", True), ("cpu", False))] == [
        "bf16", "bf16", "off",
    ]  # fmt: skip
    assert (autocast_for("off", "cuda", True), autocast_for("bf16", "cpu", False)) == ("off", "bf16")
    cases = [(s, low, sharded) for s in ("auto", "on", "off") for low in (True, False) for sharded in (True, False)]
    kept = {c for c in cases if keeps_master(*c)}
    assert kept == {("auto", True, False), ("on", True, False)}  # low precision, not sharded, not switched off


def test_machine_probe_reads_the_launched_ranks_cuda_and_a_torch_without_the_bf16_probe(monkeypatch):
    """The probe's three facts from their sources: WORLD_SIZE (as torchrun sets it), torch's CUDA answer, and a torch
    without the AVX512-BF16 probe read as a CPU without it."""
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported")
    assert Machine.probe() == Machine(cuda=True, cpu_bf16=False, ranks=3)


def test_a_served_policy_is_updated_nowhere_so_its_autocast_follows_the_cpu():
    """A served policy (`evolvekit eval`) has no local device: the update's autocast is the CPU's, even where CUDA
    is; fp32 weights under LoRA are trained as they are (no "LoRA's adapters" clause without low precision)."""
    served = _table(["models.policy.backend=openai"], Machine(cuda=True, cpu_bf16=False))
    assert served["train.autocast"] == ("off", "the CPU lacks AVX512-BF16")
    assert "models.policy.device" not in served
    lora = _table(["models.policy.dtype=float32", "train.lora=true"], Machine())
    assert lora["train.master_weights"] == ("off", _FP32)
