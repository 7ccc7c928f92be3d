"""The official BFCL multi-turn checker, run on keyword-form call strings, with its instance cache freed.

BFCL's executor ``eval()``s two kinds of strings: the call strings, and an instance name it builds from the
model name, the test entry's id and the class name (``{model}_{id}_{class}_instance``, with only ``- . / :``
replaced). This module is the one door to that code, and it lets nothing through that we did not make:

- the entry id and the model name are generated here (:func:`checker_entry_id`, a uuid), never taken from a task;
- the classes must be BFCL backend classes;
- every call string must parse (``ast``, never ``eval``) as one plain call of a tool of those classes with
  keyword arguments that are Python literals (:func:`assert_safe_call`).

Anything else raises ``EnvError`` before BFCL's code sees it.
"""

from __future__ import annotations

import ast
import re
import uuid
from typing import Any

from evolvekit.env.bfcl.data import BACKEND_CLASSES, bootstrap, tool_docs
from evolvekit.errors import EnvError

_ENTRY_ID = re.compile(r"^multi_turn_(base|long_context)_[0-9a-f]{32}$")


def checker_entry_id(long_context: bool) -> str:
    """A fresh id for the checker's test entry. BFCL derives the category from it (``id.rsplit('_', 1)[0]``)
    and reads only whether it contains ``long_context``; the rest is a uuid, so it is never anyone's input."""
    return f"multi_turn_{'long_context' if long_context else 'base'}_{uuid.uuid4().hex}"


def assert_safe_call(call: str, tools: set[str]) -> None:
    """Raise ``EnvError`` unless ``call`` is exactly ``tool(k=literal, ...)`` with ``tool`` in ``tools``."""
    try:
        node = ast.parse(call, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise EnvError(f"call string {call[:80]!r} does not parse") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.args:
        raise EnvError(f"call string {call[:80]!r} is not a keyword call of a tool")
    if node.func.id not in tools:
        raise EnvError(f"call string {call[:80]!r} names no tool of the task's classes")
    for kw in node.keywords:
        if kw.arg is None:
            raise EnvError(f"call string {call[:80]!r} unpacks arguments")
        try:
            ast.literal_eval(kw.value)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            raise EnvError(f"argument {kw.arg!r} of {node.func.id} is not a literal") from None


def _assert_safe_entry(test_entry: dict[str, Any], calls: list[str]) -> None:
    if not isinstance(test_entry.get("id"), str) or not _ENTRY_ID.match(test_entry["id"]):
        raise EnvError("the checker's entry id must come from checker_entry_id()")
    classes = test_entry.get("involved_classes")
    if not isinstance(classes, list) or not all(isinstance(c, str) and c in BACKEND_CLASSES for c in classes):
        raise EnvError(f"involved_classes must be BFCL backend classes ({', '.join(BACKEND_CLASSES)})")
    tools = {d["name"] for c in classes for d in tool_docs(c)}
    for call in calls:
        assert_safe_call(call, tools)


def _free_instances(prefix: str) -> None:
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    key = re.sub(r"[-./:]", "_", prefix)
    for name in [n for n in vars(multi_turn_utils) if n.startswith(key)]:
        del vars(multi_turn_utils)[name]


def live_instance_count() -> int:
    """How many backend instances the executor still caches (tests check this returns to its baseline)."""
    bootstrap()
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    return sum(1 for n in vars(multi_turn_utils) if n.endswith("_instance"))


def check(
    model_calls: list[list[str]], ground_truth: list[list[str]], test_entry: dict[str, Any], category: str
) -> dict[str, Any]:
    """Run ``multi_turn_checker``; ``model_calls`` is one list of call strings per turn.

    Each call is passed as its own step, so every call is executed exactly once in order. The executor's cache
    key gets a unique prefix per check, and those instances are deleted afterwards. ``test_entry['id']`` must come
    from :func:`checker_entry_id`; every string is checked before BFCL's ``eval``-based code runs.
    """
    bootstrap()
    _assert_safe_entry(test_entry, [c for turn in model_calls + ground_truth for c in turn])
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    model_name = f"evolvekit_{uuid.uuid4().hex}"
    turns = [[[c] for c in turn] for turn in model_calls]
    turns += [[] for _ in range(len(ground_truth) - len(turns))]
    try:
        return multi_turn_checker(turns, ground_truth, test_entry, category, model_name)
    except Exception as err:  # the checker asserts on malformed input; report it as a failed check
        return {
            "valid": False,
            "error_type": "evolvekit:checker_exception",
            "error_message": f"{type(err).__name__}: {err}",
        }
    finally:
        _free_instances(model_name)
