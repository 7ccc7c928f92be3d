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
