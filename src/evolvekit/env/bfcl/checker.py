"""The official BFCL multi-turn checker, run on keyword-form call strings, with its instance cache freed."""

from __future__ import annotations

import re
import uuid
from typing import Any

from evolvekit.env.bfcl.data import bootstrap


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


def check(model_calls: list[list[str]], ground_truth: list[list[str]], test_entry: dict[str, Any],
          category: str) -> dict[str, Any]:
    """Run ``multi_turn_checker``; ``model_calls`` is one list of call strings per turn.

    Each call is passed as its own step, so every call is executed exactly once in order. The executor's cache
    key gets a unique prefix per check, and those instances are deleted afterwards.
    """
    bootstrap()
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    model_name = f"evolvekit_{uuid.uuid4().hex}"
    turns = [[[c] for c in turn] for turn in model_calls]
    turns += [[] for _ in range(len(ground_truth) - len(turns))]
    try:
        return multi_turn_checker(turns, ground_truth, test_entry, category, model_name)
    except Exception as err:  # the checker asserts on malformed input; report it as a failed check
        return {"valid": False, "error_type": "evolvekit:checker_exception", "error_message": f"{type(err).__name__}: {err}"}
    finally:
        _free_instances(model_name)
