"""Data-parallel updates (train/distributed.py): two gloo processes started by torchrun give the same loss,
statistics and updated weights as one process on the same batch."""

import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from evolvekit.llm.tiny import make_tiny_model

WORKER = Path(__file__).with_name("ddp_update_worker.py")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def _run(args: list[str], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize("shared_prefix", ["on", "off"])
def test_two_gloo_processes_update_as_one(tiny, tmp_path, shared_prefix):
    one, two = tmp_path / "one", tmp_path / "two"
    _run([sys.executable, str(WORKER), str(tiny), str(one), shared_prefix], one)
    with socket.socket() as sock:  # a free port for the rendezvous
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port)]
    _run([*torchrun, str(WORKER), str(tiny), str(two), shared_prefix], two)
    single = torch.load(one / "rank0.pt")
    ranks = [torch.load(two / f"rank{r}.pt") for r in (0, 1)]
    assert single["grads"].keys() == ranks[0]["grads"].keys() and len(single["grads"]) > 10
    for name, g in single[
        "grads"
    ].items():  # the summed gradient is the single process's (to float rounding: summation order)
        assert g.abs().max() > 0
        for r in ranks:
            torch.testing.assert_close(r["grads"][name], g, rtol=1e-4, atol=1e-5 * float(g.abs().max()))
    moved = 0
    for name, w in single["weights"].items():
        moved += not torch.equal(w, single["initial"][name])
        for r in ranks:  # Adam's first step is g/(|g|+eps): where |g| ~ eps, rounding shows at ~1% of lr 1e-3
            torch.testing.assert_close(r["weights"][name], w, rtol=0, atol=5e-5)
    assert moved >= len(single["weights"]) // 2  # the update moved most tensors
    for key in ("train/loss", "train/pg_loss", "train/tokens", "train/policy_tokens", "train/grad_norm"):
        for r in ranks:
            assert r["stats"][key] == pytest.approx(single["stats"][key], rel=1e-5, abs=1e-8), key
    assert single["stats"]["train/optimizer_steps"] == ranks[0]["stats"]["train/optimizer_steps"] == 1
