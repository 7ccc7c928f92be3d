"""The BFCL v3 multi-turn environment.

Every episode builds its own backend instances (``_load_scenario`` from the task's initial config) and drops
them at ``close()``. Tool calls are validated against the visible tool schemas and executed as bound methods of
those instances; model text never reaches ``eval``/``exec``. Scoring runs the official multi-turn checker on the
keyword-form strings of the calls that were actually executed.
"""

from __future__ import annotations

import copy
import json
import logging
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evolvekit.config import EnvConfig
from evolvekit.env.action_text import format_call
from evolvekit.env.base import (
    NO_CALL_ERROR,
    Action,
    CallResult,
    EnvInfo,
    EnvProfile,
    EvalResult,
    ResetResult,
    StepResult,
    ToolSchema,
)
from evolvekit.env.bfcl import data
from evolvekit.env.bfcl.checker import check, checker_entry_id
from evolvekit.env.bfcl.fs_leaves import FsLeaves, distance_change
from evolvekit.env.bfcl.tools import bound_call, call_string, doc_to_schema, stringify_result, validate_call
from evolvekit.env.cancel import checkpoint
from evolvekit.env.registry import register_env, register_task_source
from evolvekit.errors import EnvError
from evolvekit.safejson import json_depth_path
from evolvekit.types import StepGrounding, Task, TaskSource, ToolCall, Trajectory

log = logging.getLogger(__name__)

_FS = "GorillaFileSystem"  # the backend whose state grows with the agent's calls (env/bfcl/fs_leaves.py)
MAX_CONFIG_DEPTH = 24  # nesting of an initial_config (BFCL's own deepest file trees are far shallower)
# Work per request is linear in what it states, within these caps (docs/environments.md names them). BFCL's own
# multi-turn entries have at most a handful of turns, tens of reference calls and a few hundred state leaves.
MAX_TURNS = 64  # user turns of one task
MAX_REFERENCE_CALLS = 512  # calls of one reference solution, all turns together
MAX_CALLS_PER_STEP = 32  # tool calls of one action; more are refused, not executed
# Methods that never change their backend's state, read from bfcl-eval's source and checked on data: the test
# tests/cpu/test_bfcl_env.py::test_read_only_methods_leave_the_state_unchanged runs every call of them in the
# dataset's reference solutions, and probe calls, and compares the whole state before and after. A step whose
# calls are all read-only touches no backend, so grounding walks nothing (a `pwd` on a large file system walked it
# whole). A method missing here is only walked, never wrong.
READ_ONLY: dict[str, frozenset[str]] = {
    "GorillaFileSystem": frozenset({"pwd", "ls", "cat", "find", "grep", "wc", "du", "diff", "tail", "sort"}),
    "TradingBot": frozenset(
        {
            "get_stock_info",
            "get_order_details",
            "get_watchlist",
            "get_account_info",
            "get_available_stocks",
            "get_current_time",
        }  # fmt: skip
    ),
    "TravelAPI": frozenset(
        {
            "compute_exchange_rate",
            "get_nearest_airport_by_city",
            "list_all_airports",
            "get_credit_card_balance",
            "retrieve_invoice",
        }  # fmt: skip (not get_flight_cost: it caches the prices it quotes, in the state)
    ),
    "VehicleControlAPI": frozenset(
        {
            "get_zipcode_based_on_city",
            "check_tire_pressure",
            "estimate_distance",
            "find_nearest_tire_shop",
            "estimate_drive_feasibility_by_mileage",
            "liter_to_gallon",
            "gallon_to_liter",
            "displayCarStatus",
            "get_outside_temperature_from_google",
        }  # fmt: skip
    ),
    "MessageAPI": frozenset({"view_messages_sent", "get_user_id"}),
    "TicketAPI": frozenset({"get_ticket"}),
}
MAX_CONFIG_LEAVES = 20_000  # leaves of an initial_config (file contents, entries, balances, ...)


class SandboxConfig(BaseModel):
    """The ``sandbox_config`` of a task-less (exploration) episode."""

    model_config = ConfigDict(extra="forbid")
    classes: list[str] = Field(default_factory=list)
    initial_config: dict[str, dict[str, Any]] = Field(default_factory=dict)
    tools: list[str] | None = None  # a subset of the classes' tools (a task family)
    long_context: bool = False
    family: str | None = None


def _field_error(where: str, err: ValidationError) -> EnvError:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    return EnvError(f"{where}{'.' + loc if loc else ''}: {first['msg']}")


class BfclEnv:
    name = "bfcl"

    def __init__(self, backends: list[str] | None = None, long_context: bool | None = None) -> None:
        data.bootstrap()
        self.default_backends = list(backends or [])
        self.long_context_override = long_context
        self.instance_id = uuid.uuid4().hex[:12]
        # step distances to a person-written task's reference end state (``ReferenceDistances``): the composition
        # turns them off unless run.oracle, since the information boundary drops them anyway (src/evolvekit/boundary.py)
        self.person_reference_distances = True
        self._reset_state()

    def _reset_state(self) -> None:
        self.task: Task | None = None
        self.meta: data.BfclTaskMeta | None = None
        self.instances: dict[str, Any] = {}
        self.method_owner: dict[str, str] = {}
        self.visible: dict[str, ToolSchema] = {}  # shown to the agent
        self.callable: dict[str, ToolSchema] = {}  # executable (visible + held-out miss_func functions)
        self.turn_index = 0
        self.turns: list[str] = []
        self.executed: list[list[str]] = []  # keyword-form call strings actually executed, per turn
        self.steps = 0
        self.done = False
        self.sandbox = False
        # per turn reached, the stateful backends' leaves after the reference solution's calls up to that turn,
        # replayed lazily on a private shadow of the backends (only the turns the episode reaches, once each)
        self.reference_ends: dict[int, dict[str, Any]] = {}
        self._shadow: dict[str, Any] | None = None
        self._shadow_turn = -1  # the last reference turn replayed on the shadow
        self._replay: tuple[list[list[ToolCall]], dict, bool] | None = None
        # incremental grounding (issue 52): each stateful backend's leaves as of the last step, the reference end
        # states split by backend, and each backend's distance to a turn's end for its current leaves; a step walks
        # only the backends its calls touched
        self._leaves: dict[str, dict[str, Any]] | None = None
        self._fs_leaves: FsLeaves | None = None  # the file system's leaves, re-walked only where a call wrote
        self._ends_by_class: dict[int, dict[str, dict[str, Any]]] = {}
        self._dist: dict[tuple[int, str], int] = {}

    # -- protocol ------------------------------------------------------------------------------------------
    def profile(self) -> list[EnvProfile]:
        from evolvekit.env.bfcl.profiles import load_profile

        classes = self.default_backends or list(data.BACKEND_CLASSES)
        return [load_profile(c) for c in classes]

    def reset(self, task: Task | None = None, sandbox_config: dict[str, Any] | None = None) -> ResetResult:
        self.close()
        self._reset_state()
        if task is None:
            return self._reset_sandbox(sandbox_config or {})
        if not task.turns or not all(isinstance(t, str) and t.strip() for t in task.turns):
            raise EnvError("task.query: must be a non-empty message (or a list of them)")
        if len(task.turns) > MAX_TURNS:
            raise EnvError(f"task.query: {len(task.turns)} turns, more than the {MAX_TURNS} a task may have")
        ref_calls = sum(len(t) for t in task.reference_solution or [])
        if ref_calls > MAX_REFERENCE_CALLS:
            raise EnvError(
                f"task.reference_solution: {ref_calls} calls, more than the {MAX_REFERENCE_CALLS} a reference may have"
            )
        self.task = task
        self.meta = _task_meta(task, list(self.default_backends or ["GorillaFileSystem"]))
        _check_initial_config(task.initial_config, "task.initial_config")
        # miss_func: held-out functions are hidden from the tool list until their turn. As in the official
        # executor they stay callable (BFCL's own ground truth calls one early: miss_func_49).
        # ``excluded_function`` is a data field the official pipeline never applies, so neither do we.
        hidden = {name for names in self.meta.missed_function.values() for name in names}
        long_context = self._long_context(self.meta.category)
        self._build_instances(self.meta.involved_classes, task.initial_config, long_context, hidden)
        self.turns = task.turns
        self.executed = [[]]
        self._reveal(0)
        if task.reference_solution is not None:
            self._reference_strings(task.reference_solution)  # refuse a bad reference now, not at evaluate()
            stateful = not all(data.is_stateless(c) for c in self.instances)  # stateless: no state to approach
            if stateful and (self.person_reference_distances or task.source == TaskSource.SYNTHETIC):
                self._replay = (task.reference_solution, task.initial_config, long_context)
        examples = []
        if self.meta.allowed_tools:
            self._restrict(self.meta.allowed_tools, self.meta.involved_classes)
        if self.meta.family:
            from evolvekit.env.bfcl.families import get_family

            examples = [m for demo in get_family(self.meta.family).demonstrations for m in demo.messages(format_call)]
        return ResetResult(
            observation=self.turns[0], tools=self.tools(), turn_index=0, num_turns=len(self.turns), examples=examples
        )

    def _reset_sandbox(self, raw: dict[str, Any]) -> ResetResult:
        """Sandbox mode: the backends of ``config.classes`` (or the env's default backends) with no task."""
        try:
            config = SandboxConfig.model_validate(raw)
        except ValidationError as err:
            raise _field_error("sandbox_config", err) from None
        _check_initial_config(config.initial_config, "sandbox_config.initial_config")
        self.sandbox = True
        classes = list(config.classes or self.default_backends or ["GorillaFileSystem"])
        self._build_instances(classes, config.initial_config, config.long_context, set())
        if config.tools:
            self._restrict(config.tools, classes)
        self.turns = [""]
        self.executed = [[]]
        desc = ", ".join(classes)
        examples = []
        if config.family:  # a family's worked examples show the call format to the explorer too
            from evolvekit.env.bfcl.families import get_family

            examples = [m for d in get_family(config.family).demonstrations for m in d.messages(format_call)]
        state = describe_state(config.initial_config)
        return ResetResult(
            observation=f"Sandbox of {desc}: explore freely with the tools." + (f"\n{state}" if state else ""),
            tools=self.tools(),
            turn_index=0,
            num_turns=1,
            examples=examples,
        )

    def _restrict(self, tools: list[str], classes: list[str]) -> None:
        unknown = set(tools) - set(self.visible)
        if unknown:
            raise EnvError(f"tools {sorted(unknown)} are not offered by {classes}")
        self.visible = {k: v for k, v in self.visible.items() if k in set(tools)}
        self.callable = dict(self.visible)

    def _long_context(self, category: str) -> bool:
        if self.long_context_override is not None:
            return self.long_context_override
        return "long_context" in category

    @staticmethod
    def _new_instance(cls_name: str, initial_config: dict, long_context: bool) -> Any:
        inst = data.backend_class(cls_name)()
        if not data.is_stateless(cls_name):
            scenario = initial_config.get(cls_name, {})
            if not isinstance(scenario, dict):
                raise EnvError(f"initial_config.{cls_name}: must be an object, got {type(scenario).__name__}")
            try:
                inst._load_scenario(copy.deepcopy(scenario), long_context=long_context)
            except Exception as err:  # BFCL's loaders index into the config without checking its shape
                raise EnvError(
                    f"initial_config.{cls_name}: not a valid {cls_name} scenario "
                    f"({type(err).__name__}: {str(err)[:120]})"
                ) from None
        return inst

    def _build_instances(self, classes: list[str], initial_config: dict, long_context: bool, hidden: set[str]) -> None:
        for cls_name in classes:
            inst = self._new_instance(cls_name, initial_config, long_context)
            self.instances[cls_name] = inst
            for doc in data.tool_docs(cls_name):
                self.method_owner[doc["name"]] = cls_name
                self.callable[doc["name"]] = doc_to_schema(doc)
                if doc["name"] not in hidden:
                    self.visible[doc["name"]] = self.callable[doc["name"]]

    def _reveal(self, turn: int) -> bool:
        if self.meta is None:
            return False
        names = self.meta.missed_function.get(str(turn), [])
        for name in names:
            owner = self.method_owner.get(name)
            if owner is None:
                continue
            doc = next(d for d in data.tool_docs(owner) if d["name"] == name)
            self.visible[name] = doc_to_schema(doc)
        return bool(names)

    def _reference_end(self, turn: int) -> dict[str, Any] | None:
        """The state the reference solution reaches by the end of ``turn`` (stateful backends' leaves), replayed on a
        private shadow of the backends as far as that turn and no further; None when there is nothing to approach
        (no reference, or every backend stateless). Turns are reached in order, so each reference call runs at most
        once per episode and a snapshot is taken only for the turns the episode reaches."""
        if self._replay is None:
            return None
        reference, initial_config, long_context = self._replay
        turn = min(turn, len(reference) - 1)
        if turn in self.reference_ends:
            return self.reference_ends[turn]
        if self._shadow is None:
            self._shadow = {c: self._new_instance(c, initial_config, long_context) for c in self.instances}
        while self._shadow_turn < turn:
            self._shadow_turn += 1
            for call in reference[self._shadow_turn]:
                checkpoint()
                try:
                    owner = self._shadow[self.method_owner[call.name]]
                    getattr(owner, call.name)(**copy.deepcopy(call.arguments))
                except Exception as err:  # a reference call that fails does so for the agent too
                    log.debug("reference call %s failed on replay: %s", call.name, err)
        self.reference_ends[turn] = _state_leaves(self._shadow)
        return self.reference_ends[turn]

    def _grounding(self, before: dict[str, Any], turn: int) -> StepGrounding:
        """The plain definition: every leaf walked and compared (kept as the reference of ``_step_grounding``)."""
        after = _state_leaves(self.instances)
        end = self._reference_end(turn)
        return StepGrounding(
            state_changed=after != before,
            distance_before=None if end is None else _distance(before, end),
            distance_after=None if end is None else _distance(after, end),
        )

    def _class_leaves(self) -> dict[str, dict[str, Any]]:
        """Each stateful backend's leaves as of now (walked once per episode, then kept up to date per step)."""
        if self._leaves is None:
            self._leaves = {}
            for c, inst in self.instances.items():
                if c == _FS:
                    self._fs_leaves = FsLeaves(c, inst, _state_leaves)
                    self._leaves[c] = self._fs_leaves.leaves
                elif not data.is_stateless(c):
                    self._leaves[c] = _state_leaves({c: inst})
        return self._leaves

    def _end_of(self, turn: int) -> dict[str, dict[str, Any]] | None:
        end = self._reference_end(turn)
        if end is None:
            return None
        key = min(turn, len(self._replay[0]) - 1) if self._replay is not None else turn
        if key not in self._ends_by_class:
            split: dict[str, dict[str, Any]] = {c: {} for c in self._class_leaves()}
            for leaf, value in end.items():
                split.setdefault(_leaf_class(leaf), {})[leaf] = value
            self._ends_by_class[key] = split
        return self._ends_by_class[key]

    def _class_distance(self, turn: int, cls: str, leaves: dict[str, Any], end: dict[str, dict[str, Any]]) -> int:
        if (turn, cls) not in self._dist:
            self._dist[(turn, cls)] = _distance(leaves, end.get(cls, {}))
        return self._dist[(turn, cls)]

    def _step_grounding(self, touched: set[str], turn: int) -> StepGrounding:
        """``_grounding`` without walking unchanged state: the backends the step's calls did not touch keep their
        leaves and their distances to the turn's reference end; a touched one is walked and compared again (the file
        system: only what its calls changed, env/bfcl/fs_leaves.py, its distances moved by the change).
        Equal to ``_grounding`` (tests/cpu/test_bfcl_env.py checks it step by step)."""
        before = self._class_leaves()
        end = self._end_of(turn)
        d_before = d_after = None
        if end is not None:  # before the file system's leaves move on (they change in place)
            d_before = sum(self._class_distance(turn, c, before[c], end) for c in before)
        after = dict(before)
        changed = set()
        for cls in touched & before.keys():
            if cls == _FS and self._fs_leaves is not None:
                delta = self._fs_leaves.settle()
                if delta:
                    changed.add(cls)
                    for t, c in [k for k in self._dist if k[1] == cls]:  # each kept distance moves by the change
                        self._dist[(t, c)] += distance_change(delta, (self._end_of(t) or {}).get(cls, {}))
                continue
            now = _state_leaves({cls: self.instances[cls]})
            if now != before[cls]:
                after[cls] = now
                changed.add(cls)
                for key in [k for k in self._dist if k[1] == cls]:
                    del self._dist[key]  # distances of the old leaves, at every turn
        if end is not None:
            d_after = sum(self._class_distance(turn, c, after[c], end) for c in after)
            only_reference = sum(len(v) for c, v in end.items() if c not in before)  # backends the agent lacks
            d_before, d_after = (d_before or 0) + only_reference, d_after + only_reference
        self._leaves = after
        return StepGrounding(state_changed=bool(changed), distance_before=d_before, distance_after=d_after)

    def tools(self) -> list[ToolSchema]:
        return list(self.visible.values())

    def step(self, action: Action) -> StepResult:
        if self.done:
            return StepResult(
                observation="Error: the episode is over.", done=True, turn_index=self.turn_index, error="episode_done"
            )
        self.steps += 1
        if action.parse_error is not None and not action.tool_calls:
            return StepResult(
                observation=NO_CALL_ERROR.format(err=action.parse_error),
                turn_index=self.turn_index,
                error="parse_error",
            )
        turn = self.turn_index
        if not action.tool_calls:
            return self._end_turn().model_copy(update={"grounding": self._step_grounding(set(), turn)})
        if len(action.tool_calls) > MAX_CALLS_PER_STEP:
            return StepResult(
                observation=f"Error: {len(action.tool_calls)} tool calls in one message; at most "
                f"{MAX_CALLS_PER_STEP} are executed per step, so none was.",
                turn_index=self.turn_index,
                call_results=[CallResult(name=c.name[:64], ok=False, output="refused") for c in action.tool_calls[:1]],
                error="too_many_calls",
            )
        self._class_leaves()  # the state before the calls (walked once per episode)
        results, touched = [], set()
        for call in action.tool_calls:
            owner = self.method_owner.get(call.name)
            if owner is not None and call.name not in READ_ONLY.get(owner, ()):
                touched.add(owner)
                if owner == _FS and self._fs_leaves is not None:
                    self._fs_leaves.before_call()  # what this call may change, kept to compare after
            results.append(self._execute(call))
        obs = "\n".join(f"[{r.name}] " + "".join(f"Warning: {w}. " for w in r.warnings) + r.output for r in results)
        return StepResult(
            observation=obs,
            turn_index=self.turn_index,
            call_results=results,
            grounding=self._step_grounding(touched, turn),
        )

    def _end_turn(self) -> StepResult:
        if self.sandbox or self.turn_index + 1 >= len(self.turns):
            self.done = True
            return StepResult(observation="", done=True, turn_index=self.turn_index)
        self.turn_index += 1
        self.executed.append([])
        changed = self._reveal(self.turn_index)
        return StepResult(
            observation=self.turns[self.turn_index],
            turn_index=self.turn_index,
            new_turn=True,
            tools=self.tools() if changed else None,
        )

    def _execute(self, call: ToolCall) -> CallResult:
        checkpoint()  # a step past its request's deadline stops here, between calls (env/cancel.py)
        schema = self.callable.get(call.name)
        if schema is None:
            return CallResult(
                name=call.name,
                ok=False,
                unknown_tool=True,
                output=f"Error: unknown tool '{call.name}'. Available tools: {', '.join(self.visible)}",
            )
        problem, warnings = validate_call(call, schema)
        problem = problem or bound_call(call)
        if problem is not None:
            return CallResult(name=call.name, ok=False, output=f"Error: {problem}")
        try:
            rendered = call_string(call)
        except ValueError as err:
            return CallResult(name=call.name, ok=False, output=f"Error: {err}")
        method = getattr(self.instances[self.method_owner[call.name]], call.name)
        self.executed[-1].append(rendered)
        try:
            result = method(**copy.deepcopy(call.arguments))  # backends keep (and mutate) passed lists
        except Exception as err:  # a backend bug or bad value: report, never crash
            return CallResult(name=call.name, ok=False, output=f"Error during execution: {err}", warnings=warnings)
        # BFCL backends report a refused call by returning {"error": ...} ("User not authenticated", "No such
        # file"): the call ran but did nothing, so it is not a successful call (exploration, feasibility replay)
        refused = isinstance(result, dict) and "error" in result
        return CallResult(name=call.name, ok=not refused, output=stringify_result(result), warnings=warnings)

    def evaluate(self, trajectory: Trajectory | None = None) -> EvalResult:
        """Score with the official checker against the task's reference solution (BFCL ground truth)."""
        if self.task is None or self.meta is None:
            raise EnvError("evaluate() needs an episode started with a task (sandbox episodes have no score)")
        if self.task.reference_solution is None:
            raise EnvError(f"task {self.task.task_id} has no reference solution to check against")
        ground_truth = self._reference_strings(self.task.reference_solution)
        completed = len(self.executed) if self.done else len(self.executed) - 1
        if completed < len(ground_truth):
            return EvalResult(
                score=0.0,
                passed=False,
                details={
                    "error_type": "multi_turn:force_terminated",
                    "error_message": f"episode ended after {completed} of {len(ground_truth)} turns",
                },
            )
        # the id that BFCL's checker turns into code is generated, never the task's (see checker.py)
        entry = {
            "id": checker_entry_id(self._long_context(self.meta.category)),
            "initial_config": self.task.initial_config,
            "involved_classes": self.meta.involved_classes,
        }
        result = check(self.executed[: len(ground_truth)], ground_truth, entry, self.meta.category)
        passed = bool(result.get("valid"))
        details = (
            {"error_type": result.get("error_type"), "error_message": result.get("error_message")} if not passed else {}
        )
        return EvalResult(score=1.0 if passed else 0.0, passed=passed, details=details)

    def _reference_strings(self, reference: list[list[ToolCall]]) -> list[list[str]]:
        """The reference solution as call strings, each naming a tool of the task's classes (else ``EnvError``)."""
        out = []
        for t, turn in enumerate(reference):
            strings = []
            for c, call in enumerate(turn):
                where = f"task.reference_solution[{t}][{c}]"
                if call.name not in self.method_owner:
                    classes = self.meta.involved_classes if self.meta else []
                    raise EnvError(f"{where}: unknown tool '{call.name[:60]}' (not a tool of {classes})")
                problem = bound_call(call)
                if problem is not None:
                    raise EnvError(f"{where}: {problem}")
                try:
                    strings.append(call_string(call))
                except ValueError as err:
                    raise EnvError(f"{where}: {err}") from None
            out.append(strings)
        return out

    def info(self) -> EnvInfo:
        return EnvInfo(
            env_name=self.name,
            instance_id=self.instance_id,
            task_id=self.task.task_id if self.task else None,
            sandbox=self.sandbox,
            turn_index=self.turn_index,
            num_turns=len(self.turns),
            steps=self.steps,
            done=self.done,
        )

    def state_key(self) -> str:
        """The environment state, for GiGPO's anchor-state step groups: the turn index and a hash of every backend
        instance's whole attribute tree (files, folders, balances, logins, the current directory, ...). Random
        generators and object identities are left out, so equal states hash equally across episodes."""
        import hashlib
        import json

        snapshot = {name: _plain(inst) for name, inst in sorted(self.instances.items())}
        blob = json.dumps([self.turn_index, snapshot], sort_keys=True, default=str)
        return hashlib.sha1(blob.encode()).hexdigest()

    def executed_calls(self) -> list[list[str]]:
        return [list(t) for t in self.executed]

    def close(self) -> None:
        self.instances = {}


_SHOWN_ENTRIES = 40  # a state description names at most this many files and folders
_SHOWN_CHARS = 300  # and shows at most this much of another backend's scenario


def describe_state(initial_config: dict[str, Any]) -> str:
    """What a sandbox's initial state holds, in words, for the explorer (its tools then act on names that exist):
    GorillaFileSystem's current directory with its files and folders, one level into each folder; another stateful
    backend's scenario as (shortened) JSON. Empty for no state."""
    parts = []
    for cls, scenario in initial_config.items():
        if not isinstance(scenario, dict) or not scenario:
            continue
        root = scenario.get("root") if cls == "GorillaFileSystem" else None
        if isinstance(root, dict) and len(root) == 1:
            name, node = next(iter(root.items()))
            parts.append(f"Current directory: {name}. It holds: {_entries(node, 1)}.")
        else:
            text = json.dumps(scenario, sort_keys=True, default=str)
            parts.append(f"{cls}: {text[:_SHOWN_CHARS]}" + ("..." if len(text) > _SHOWN_CHARS else ""))
    return "\n".join(parts)


def _entries(node: Any, depth: int) -> str:
    """A directory's entries: files by name, folders as ``name/`` with their own entries ``depth`` levels down."""
    contents = node.get("contents") if isinstance(node, dict) else None
    if not isinstance(contents, dict) or not contents:
        return "nothing"
    shown = []
    for name, child in list(contents.items())[:_SHOWN_ENTRIES]:
        if isinstance(child, dict) and child.get("type") == "directory":
            shown.append(f"{name}/ ({_entries(child, depth - 1)})" if depth > 0 else f"{name}/")
        else:
            shown.append(str(name))
    more = len(contents) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def _plain(obj: Any, seen: frozenset[int] = frozenset(), depth: int = 0) -> Any:
    """A JSON-able copy of a backend's state: objects become their attribute dicts; cycles (a folder's parent),
    random generators and anything deeper than 64 levels are cut."""
    import random

    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if depth > 64 or id(obj) in seen or isinstance(obj, random.Random):
        return None
    seen = seen | {id(obj)}
    if isinstance(obj, dict):
        return {str(k): _plain(v, seen, depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        items = [_plain(v, seen, depth + 1) for v in obj]
        return sorted(items, key=str) if isinstance(obj, (set, frozenset)) else items
    if hasattr(obj, "__dict__"):
        checkpoint()  # once per object of the walk: a huge state's walk stops at its request's deadline
        return {
            "__class__": type(obj).__name__,
            **{k: _plain(v, seen, depth + 1) for k, v in vars(obj).items() if k != "parent" and not callable(v)},
        }
    return type(obj).__name__


def _plain_leaves(instances: dict[str, Any]) -> dict[str, Any]:
    """The plain definition of ``_state_leaves``: each backend's ``_plain`` copy, then its leaves (kept as the
    reference of the one-pass walk; tests/cpu/test_bfcl_env.py compares them)."""
    out: dict[str, Any] = {}
    for name, inst in sorted(instances.items()):
        if not data.is_stateless(name):
            _walk_plain(name, _plain(inst), out)
    return out


def _walk_plain(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _walk_plain(f"{prefix}/{k}", v, out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _walk_plain(f"{prefix}[{i}]", v, out)
    else:
        out[prefix] = value


def _state_leaves(instances: dict[str, Any]) -> dict[str, Any]:
    """The stateful backends' state as flat ``path -> value`` leaves (stateless backends have none): the leaves of
    ``_plain``'s copy, found in one pass over the objects without building the copy (issue 52: a writing call walks
    its backend; on a 77,000-leaf file system this pass takes 0.056 s, copy-then-walk 0.096 s). Sets, and dicts
    whose keys collide as text, go through ``_plain`` for its exact ordering and overwriting."""
    import random

    out: dict[str, Any] = {}
    ancestors: set[int] = set()
    scalars = (bool, int, float, str)
    exact = {bool, int, float, str, type(None)}  # a leaf written in the loop (no call); subclasses go through go()

    def go(prefix: str, obj: Any, depth: int) -> None:
        if obj is None or isinstance(obj, scalars):
            out[prefix] = obj
            return
        if depth > 64 or id(obj) in ancestors or isinstance(obj, random.Random):
            out[prefix] = None
            return
        if isinstance(obj, dict):
            keys = [k if type(k) is str else str(k) for k in obj]
            if len(set(keys)) != len(keys):  # text keys collide: _plain keeps the last value at the first place
                _walk_plain(prefix, _plain(obj, frozenset(ancestors), depth), out)
                return
            ancestors.add(id(obj))
            for k, v in zip(keys, obj.values()):
                if type(v) in exact:
                    out[f"{prefix}/{k}"] = v
                else:
                    go(f"{prefix}/{k}", v, depth + 1)
            ancestors.discard(id(obj))
        elif isinstance(obj, (list, tuple)):
            ancestors.add(id(obj))
            for i, v in enumerate(obj):
                if type(v) in exact:
                    out[f"{prefix}[{i}]"] = v
                else:
                    go(f"{prefix}[{i}]", v, depth + 1)
            ancestors.discard(id(obj))
        elif isinstance(obj, (set, frozenset)):  # sorted by their plain items' text, as _plain does
            _walk_plain(prefix, _plain(obj, frozenset(ancestors), depth), out)
        elif hasattr(obj, "__dict__"):
            checkpoint()  # once per object of the walk: a huge state's walk stops at its request's deadline
            ancestors.add(id(obj))
            out[f"{prefix}/__class__"] = type(obj).__name__
            for k, v in vars(obj).items():
                if type(v) in exact:
                    if k != "parent":
                        out[f"{prefix}/{k}"] = v
                elif k != "parent" and not callable(v):
                    go(f"{prefix}/{k}", v, depth + 1)
            ancestors.discard(id(obj))
        else:
            out[prefix] = type(obj).__name__

    for name, inst in sorted(instances.items()):
        if not data.is_stateless(name):
            go(name, inst, 0)
    return out


def _leaf_class(leaf: str) -> str:
    """The backend a leaf path belongs to (``GorillaFileSystem/root/...`` -> ``GorillaFileSystem``)."""
    cut = min((i for i in (leaf.find("/"), leaf.find("[")) if i >= 0), default=len(leaf))
    return leaf[:cut]


def _distance(a: dict[str, Any], b: dict[str, Any]) -> int:
    """Leaves that differ between two states (present in one only, or with another value)."""
    return sum(1 for k in a.keys() | b.keys() if k not in a or k not in b or a[k] != b[k])


def _leaf_count(value: Any, limit: int) -> int:
    """Leaves of a JSON value, counting stops once past ``limit`` (so a huge value costs at most ``limit`` steps)."""
    count, stack = 0, [value]
    while stack and count <= limit:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        else:
            count += 1
    return count


def _check_initial_config(config: Any, where: str) -> None:
    if not isinstance(config, dict):
        raise EnvError(f"{where}: must be an object of backend class -> scenario")
    if _leaf_count(config, MAX_CONFIG_LEAVES) > MAX_CONFIG_LEAVES:
        raise EnvError(f"{where}: more than {MAX_CONFIG_LEAVES} values (files, entries, balances) in one state")
    deep = json_depth_path(config, MAX_CONFIG_DEPTH)
    if deep is not None:
        raise EnvError(f"{where}.{deep}: nested deeper than {MAX_CONFIG_DEPTH} levels")
    unknown = [c for c in config if c not in data.BACKEND_CLASSES]
    if unknown:
        raise EnvError(f"{where}: unknown backend class {unknown[0][:60]!r}; known: {', '.join(data.BACKEND_CLASSES)}")


def _task_meta(task: Task, default: list[str]) -> data.BfclTaskMeta:
    """A task's BFCL metadata. A synthesized task made in a sandbox that named no backend class (plain BFCL, every
    default backend) has none: its classes are those of its initial config, else ``default``, the backends such a
    sandbox runs."""
    raw: dict[str, Any] = dict(task.metadata)
    if "involved_classes" not in raw or (task.source == TaskSource.SYNTHETIC and not raw["involved_classes"]):
        raw.setdefault("category", "synthetic")
        raw.setdefault("bfcl_id", task.task_id)
        raw["involved_classes"] = list(task.initial_config) or list(default)
    try:
        meta = data.BfclTaskMeta.model_validate(raw)
    except ValidationError as err:
        raise _field_error("task.metadata", err) from None
    unknown = [c for c in meta.involved_classes if c not in data.BACKEND_CLASSES]
    if unknown or not meta.involved_classes:
        raise EnvError(
            f"task.metadata.involved_classes: must name BFCL backend classes ({', '.join(data.BACKEND_CLASSES)})"
            + (f"; unknown {unknown[0][:60]!r}" if unknown else "")
        )
    return meta


@register_env("bfcl", "BFCL v3 multi-turn (bfcl-eval 2026.3.23): 8 tool backends, 4 categories, official checker")
def _make(cfg: EnvConfig) -> BfclEnv:
    return BfclEnv(backends=cfg.backends)


@register_task_source("bfcl")
def _tasks(cfg: EnvConfig, split: str) -> list[Task]:
    """A task family's split when ``env.family`` is set, else BFCL tasks of the categories (base-id split)."""
    if cfg.family:
        from evolvekit.env.bfcl.families import get_family

        return get_family(cfg.family).tasks(split, cfg.family_tasks)
    out: list[Task] = []
    for category in cfg.categories:
        out += data.load_tasks(category, split, cfg.backends or None)
    return out
