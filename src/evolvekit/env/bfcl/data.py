"""BFCL v3 multi-turn data: entries, tool docs, ground truth, and the fixed train/dev/test split.

``BFCL_PROJECT_ROOT`` is pointed at a private temp dir before anything from ``bfcl_eval`` is imported (importing
its utilities otherwise creates result/score folders inside site-packages).
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.resources
import inspect
import json
import os
import random
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from evolvekit.errors import EnvError
from evolvekit.types import Task, TaskSource, ToolCall

CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
BACKEND_CLASSES = (
    "GorillaFileSystem",
    "MathAPI",
    "MessageAPI",
    "TwitterAPI",
    "TicketAPI",
    "TradingBot",
    "TravelAPI",
    "VehicleControlAPI",
)
ADDITIONAL_FUNCTION_PROMPT = "I have updated some more functions you can choose from. What about now?"
SPLIT_SEED = 20251122
SPLIT_FRACTIONS = (0.6, 0.2, 0.2)  # train / dev / test of the 200 base tasks


def bootstrap() -> None:
    """Point BFCL_PROJECT_ROOT at a temp dir (idempotent)."""
    if not os.environ.get("BFCL_PROJECT_ROOT"):
        os.environ["BFCL_PROJECT_ROOT"] = tempfile.mkdtemp(prefix="evolvekit-bfcl-")


def data_dir() -> Path:
    bootstrap()
    try:
        import bfcl_eval
    except ImportError:
        raise EnvError(
            "bfcl-eval is not installed; run scripts/setup.sh (pip install --no-deps bfcl-eval==2026.3.23 mpmath)"
        ) from None
    return Path(bfcl_eval.__file__).parent / "data"


class BfclTaskMeta(BaseModel):
    """BFCL-specific fields of ``Task.metadata``."""

    model_config = ConfigDict(extra="allow")
    category: str
    bfcl_id: str = ""  # the BFCL entry id, for people; never passed to BFCL's code (checker.checker_entry_id)
    involved_classes: list[str]
    missed_function: dict[str, list[str]] = Field(default_factory=dict)  # turn index -> held-out function names
    excluded_function: list[str] = Field(default_factory=list)
    family: str | None = None  # task family (families.py): a tool subset with worked examples
    allowed_tools: list[str] = Field(default_factory=list)  # restrict the visible/callable tools (empty = all)


@functools.lru_cache(maxsize=None)
def _read_jsonl(path: str) -> tuple[dict, ...]:
    with open(path) as fh:
        return tuple(json.loads(line) for line in fh if line.strip())


def _check_category(category: str) -> None:
    if category not in CATEGORIES:
        raise EnvError(f"unknown BFCL category '{category}'; known: {', '.join(CATEGORIES)}")


def load_entries(category: str) -> list[dict]:
    _check_category(category)
    return [dict(e) for e in _read_jsonl(str(data_dir() / f"BFCL_v4_{category}.json"))]


def load_ground_truth(category: str) -> dict[str, list[list[str]]]:
    _check_category(category)
    rows = _read_jsonl(str(data_dir() / "possible_answer" / f"BFCL_v4_{category}.json"))
    return {r["id"]: r["ground_truth"] for r in rows}


@functools.lru_cache(maxsize=None)
def tool_docs(class_name: str) -> tuple[dict, ...]:
    bootstrap()
    from bfcl_eval.constants.executable_backend_config import MULTI_TURN_FUNC_DOC_FILE_MAPPING

    if class_name not in MULTI_TURN_FUNC_DOC_FILE_MAPPING:
        raise EnvError(f"unknown BFCL backend class '{class_name}'")
    return _read_jsonl(str(data_dir() / "multi_turn_func_doc" / MULTI_TURN_FUNC_DOC_FILE_MAPPING[class_name]))


def backend_class(class_name: str) -> type:
    bootstrap()
    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

    if class_name not in BACKEND_CLASSES:
        raise EnvError(f"unsupported BFCL backend class '{class_name}'; supported: {', '.join(BACKEND_CLASSES)}")
    return getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)


def is_stateless(class_name: str) -> bool:
    from bfcl_eval.constants.executable_backend_config import STATELESS_CLASSES

    return class_name in STATELESS_CLASSES


@functools.lru_cache(maxsize=None)
def method_params(class_name: str, method: str) -> tuple[str, ...]:
    fn = getattr(backend_class(class_name), method)
    return tuple(p for p in inspect.signature(fn).parameters if p != "self")


def owner_of(tool: str, classes: list[str]) -> str | None:
    for cls in classes:
        if any(d["name"] == tool for d in tool_docs(cls)):
            return cls
    return None


def parse_call_string(call: str, classes: list[str]) -> ToolCall:
    """Parse a ground-truth call string like ``sort('a.txt')`` with ``ast`` (never eval) into keyword form."""
    try:
        node = ast.parse(call.strip(), mode="eval").body
    except SyntaxError as err:
        raise EnvError(f"cannot parse BFCL call {call!r}: {err}") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise EnvError(f"BFCL call {call!r} is not a plain function call")
    name = node.func.id
    owner = owner_of(name, classes)
    if owner is None:
        raise EnvError(f"BFCL call {call!r} names no tool of {classes}")
    args: dict[str, Any] = {}
    params = method_params(owner, name)
    for i, arg in enumerate(node.args):
        args[params[i]] = ast.literal_eval(arg)
    for kw in node.keywords:
        if kw.arg is None:  # **kwargs: not a plain keyword call
            raise ValueError("a call with ** arguments")
        args[kw.arg] = ast.literal_eval(kw.value)
    return ToolCall(name=name, arguments=args)


def entry_to_task(entry: dict, category: str, ground_truth: list[list[str]] | None) -> Task:
    turns = []
    missed = {str(k): list(v) for k, v in (entry.get("missed_function") or {}).items()}
    for i, msgs in enumerate(entry["question"]):
        text = "\n".join(m["content"] for m in msgs if m.get("role") == "user")
        if not text and str(i) in missed:
            text = ADDITIONAL_FUNCTION_PROMPT
        turns.append(text)
    classes = list(entry["involved_classes"])
    reference = None
    if ground_truth is not None:
        reference = [[parse_call_string(c, classes) for c in turn] for turn in ground_truth]
    meta = BfclTaskMeta(
        category=category,
        bfcl_id=entry["id"],
        involved_classes=classes,
        missed_function=missed,
        excluded_function=list(entry.get("excluded_function") or []),
    )
    return Task(
        task_id=entry["id"],
        env_name="bfcl",
        query=turns,
        initial_config=entry.get("initial_config", {}),
        reference_solution=reference,
        source=TaskSource.REAL,
        metadata=meta.model_dump(),
    )


def load_tasks(category: str, split: str | None = None, backends: list[str] | None = None) -> list[Task]:
    """All tasks of a category (optionally one split of the base tasks, optionally only given backend classes)."""
    gts = load_ground_truth(category)
    entries = load_entries(category)
    if split is not None and split != "all":
        ids = set(split_ids(split))
        entries = [e for e in entries if _base_id(e["id"]) in ids]
    if backends:
        allowed = set(backends)
        entries = [e for e in entries if set(e["involved_classes"]) <= allowed]
    return [entry_to_task(e, category, gts.get(e["id"])) for e in entries]


def _base_id(bfcl_id: str) -> str:
    return "multi_turn_base_" + bfcl_id.rsplit("_", 1)[1]


@functools.lru_cache(maxsize=None)
def _splits() -> dict[str, tuple[str, ...]]:
    """The fixed partition of the 200 base tasks: shuffled with ``SPLIT_SEED``, then 60/20/20 (docs/environments.md).

    It is stored in ``splits/base_split.json`` so it never changes with Python's RNG; this function only
    regenerates it when the file is missing.
    """
    stored = importlib.resources.files("evolvekit.env.bfcl") / "splits" / "base_split.json"
    if stored.is_file():
        data = json.loads(stored.read_text())
        return {k: tuple(v) for k, v in data.items()}
    return {k: tuple(v) for k, v in compute_splits().items()}


def compute_splits() -> dict[str, list[str]]:
    ids = [e["id"] for e in load_entries("multi_turn_base")]
    rng = random.Random(SPLIT_SEED)
    rng.shuffle(ids)
    n_train, n_dev = int(len(ids) * SPLIT_FRACTIONS[0]), int(len(ids) * SPLIT_FRACTIONS[1])
    key = lambda s: int(s.rsplit("_", 1)[1])  # noqa: E731
    return {
        "train": sorted(ids[:n_train], key=key),
        "dev": sorted(ids[n_train : n_train + n_dev], key=key),
        "test": sorted(ids[n_train + n_dev :], key=key),
    }


def split_ids(split: str) -> tuple[str, ...]:
    splits = _splits()
    if split not in splits:
        raise EnvError(f"unknown split '{split}'; known: {', '.join(splits)}, all")
    return splits[split]
