"""Data-parallel updates (train/distributed.py): two gloo processes started by torchrun give the same loss,
statistics and updated weights as one process on the same batch."""

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from evolvekit.config import ModelsConfig
from evolvekit.llm.tiny import make_tiny_model

HELPERS = tuple(r for r in ModelsConfig.model_fields if r != "policy")  # every helper role

WORKER = Path(__file__).with_name("ddp_update_worker.py")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def _run(args: list[str], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize(
    "shared_prefix, sharding, launcher",
    [("on", "replicate", "torchrun"), ("off", "replicate", "accelerate"), ("off", "fsdp2", "torchrun")],
)
def test_two_gloo_processes_update_as_one(tiny, tmp_path, shared_prefix, sharding, launcher):
    """Replicas (torchrun, and accelerate launch) and FSDP2 shards: one update of two ranks equals one process's."""
    one, two = tmp_path / "one", tmp_path / "two"
    _run([sys.executable, str(WORKER), str(tiny), str(one), shared_prefix], one)
    with socket.socket() as sock:  # a free port for the rendezvous
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    if launcher == "torchrun":
        launch = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port)]
    else:
        # accelerate's multi-process launcher is --multi_gpu (with --cpu it starts one process); without GPUs the
        # ranks use gloo on the CPU
        launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                  "--main_process_port", str(port)]  # fmt: skip
    _run([*launch, str(WORKER), str(tiny), str(two), shared_prefix, sharding], two)
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
    for name, w in single["weights"].items():  # rank 0's policy (what its rollouts use) has the new weights
        torch.testing.assert_close(ranks[0]["policy"][name], w, rtol=0, atol=5e-5)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _done(path: Path) -> int:
    import sqlite3

    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute("SELECT COUNT(*) FROM iterations WHERE status='done'").fetchone()[0]
    except sqlite3.OperationalError:
        return 0
    finally:
        con.close()


@pytest.mark.slow
@pytest.mark.parametrize("sharding", ["replicate", "fsdp2"])
def test_run_under_torchrun_trains_as_one_process_and_resumes(tiny, tmp_path, sharding):
    """`torchrun --nproc_per_node 2 -m evolvekit.cli.main run CFG`: rank 0 runs the loop, rank 1 joins every
    update; the checkpoints equal a one-process run's with the same seed, and `--resume` works the same (with
    FSDP2 shards, the resumed ranks reload the whole optimizer state saved by rank 0 into their shards)."""
    import os
    import signal
    import time

    import psutil
    import yaml
    from safetensors.torch import load_file

    plugins = str(Path(__file__).resolve().parents[1] / "plugins")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([plugins, os.environ.get("PYTHONPATH", "")])}

    def config(out: Path, iterations: int) -> Path:
        data = {
            "run": {"name": "ddp", "out_dir": str(out), "seed": 3},
            "env": {"name": "coin", "plugins": ["coin_env"]},
            "rollout": {"max_steps": 1, "group_size": 4},
            "train": {
                "iterations": iterations, "tasks_per_iteration": 3, "learning_rate": 1e-3, "autocast": "off",
                "eval_before": False, "eval_after": False, "micro_batch_size": 1, "sharding": sharding,
            },
            # every role tiny: the explorer that makes the run's own worked examples too (issue 97)
            "models": {**{r: {"model": str(tiny)} for r in HELPERS},
                       "policy": {"model": str(tiny), "max_new_tokens": 9}},
        }  # fmt: skip
        out.mkdir(parents=True, exist_ok=True)
        (out / "cfg.yaml").write_text(yaml.safe_dump(data))
        return out / "cfg.yaml"

    def run(args: list[str]) -> str:
        done = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout + done.stderr

    cli = ["-m", "evolvekit.cli.main", "run", "--no-progress"]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    run([sys.executable, *cli, str(config(tmp_path / "one", 2))])
    # two ranks, killed (whole process group) inside the second iteration, then resumed with two ranks
    proc = subprocess.Popen(
        [*torchrun, "--master_port", str(_free_port()), *cli, str(config(tmp_path / "two", 2))],
        env={**env, "COIN_ENV_SLEEP": "2"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline, two = time.time() + 300, None
    while time.time() < deadline and proc.poll() is None and two is None:
        for d in (tmp_path / "two").iterdir():
            if (d / "run.sqlite").is_file() and _done(d / "run.sqlite"):
                two = d  # iteration 0 is committed; iteration 1's rollouts sleep 2 s per step
        time.sleep(0.1)
    assert two is not None, "the two-rank run committed no iteration"
    tree = psutil.Process(proc.pid).children(recursive=True)  # torchrun's workers may leave its process group
    os.killpg(proc.pid, signal.SIGKILL)
    for child in tree:
        child.kill()
    proc.wait(30)
    assert not (two / "checkpoints" / "iter-0001").exists()
    resumed = run([*torchrun, "--master_port", str(_free_port()), *cli, "--resume", str(two)])
    assert re.search(r"rank 1: took part in 1 updates", resumed), resumed[-3000:]  # rank 1 did its share
    [one] = [d for d in (tmp_path / "one").iterdir() if d.is_dir()]
    for it in ("iter-0000", "iter-0001"):
        a = load_file(str(one / "checkpoints" / it / "model.safetensors"))
        b = load_file(str(two / "checkpoints" / it / "model.safetensors"))
        for name in a:
            torch.testing.assert_close(b[name], a[name], rtol=0, atol=5e-5)
    first = load_file(str(one / "checkpoints" / "iter-0000" / "model.safetensors"))
    last = load_file(str(one / "checkpoints" / "iter-0001" / "model.safetensors"))
    assert any(not torch.equal(first[n], last[n]) for n in first)  # the second iteration trained


def test_fsdp2_refuses_what_it_does_not_shard():
    from pydantic import ValidationError

    from evolvekit.config import Config

    Config.model_validate({"train": {"sharding": "fsdp2"}})
    with pytest.raises(ValidationError, match="with train.lora use train.sharding: replicate"):
        Config.model_validate({"train": {"sharding": "fsdp2", "lora": True}})
    with pytest.raises(ValidationError, match="train.master_weights: on is for replicas"):
        Config.model_validate({"train": {"sharding": "fsdp2", "master_weights": "on"}})
