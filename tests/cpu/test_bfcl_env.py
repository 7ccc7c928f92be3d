import pytest

from evolvekit.env.base import Action
from evolvekit.env.bfcl import data
from evolvekit.env.bfcl.checker import live_instance_count
from evolvekit.env.bfcl.env import BfclEnv
from evolvekit.env.bfcl.tools import call_string, render_compact
from evolvekit.env.replay import replay
from evolvekit.errors import EnvError
from evolvekit.types import ToolCall


@pytest.fixture(scope="module")
def base_tasks():
    return {t.task_id: t for t in data.load_tasks("multi_turn_base")}


@pytest.mark.slow
@pytest.mark.parametrize("category", data.CATEGORIES)
def test_ground_truth_replays_pass_official_checker(category):
    tasks = data.load_tasks(category)
    assert len(tasks) == 200
    env = BfclEnv()
    before = live_instance_count()
    failed = [t.task_id for t in tasks if not replay(env, t).passed]
    assert failed == []
    assert live_instance_count() == before  # the checker's module-level cache is freed


def test_wrong_replay_fails(base_tasks):
    task = base_tasks["multi_turn_base_0"]
    wrong = [list(turn) for turn in task.reference_solution]
    wrong[0] = wrong[0][:-1]  # drop the final mv of turn 0
    result = replay(BfclEnv(), task, wrong)
    assert not result.passed and result.score == 0.0
    assert result.details["error_type"].startswith("multi_turn:")


def test_force_terminated_episode_fails(base_tasks):
    task = base_tasks["multi_turn_base_0"]
    env = BfclEnv()
    env.reset(task)
    for call in task.reference_solution[0]:
        env.step(Action(tool_calls=[call]))
    assert env.evaluate().details["error_type"] == "multi_turn:force_terminated"


def test_turns_are_delivered_one_by_one(base_tasks):
    task = base_tasks["multi_turn_base_0"]
    env = BfclEnv()
    first = env.reset(task)
    assert first.observation == task.turns[0] and first.num_turns == 4
    r = env.step(Action(text="done"))
    assert r.new_turn and r.observation == task.turns[1] and not r.done
    for _ in range(3):
        r = env.step(Action(text="done"))
    assert r.done
    assert env.step(Action(text="again")).error == "episode_done"


def test_errors_become_observations_not_crashes(base_tasks):
    env = BfclEnv()
    env.reset(base_tasks["multi_turn_base_0"])
    r = env.step(Action(tool_calls=[ToolCall(name="rm_rf_everything", arguments={})]))
    assert "unknown tool" in r.observation and not r.call_results[0].ok
    r = env.step(Action(tool_calls=[ToolCall(name="cd", arguments={"folder": "x", "bogus": 1})]))
    assert "unknown argument" in r.observation
    r = env.step(Action(tool_calls=[ToolCall(name="cd", arguments={})]))
    assert "missing required" in r.observation
    r = env.step(Action(tool_calls=[ToolCall(name="cd", arguments={"folder": "no_such_dir"})]))
    assert r.call_results[0].output  # the backend's own error text, as an observation
    assert not r.call_results[0].ok  # {"error": ...}: the backend refused it, so it is not a successful call
    r = env.step(Action(tool_calls=[ToolCall(name="ls", arguments={})]))
    assert r.call_results[0].ok and "error" not in r.call_results[0].output
    r = env.step(Action(parse_error="no JSON found"))
    assert r.error == "parse_error" and "could not parse" in r.observation
    assert env.executed_calls()[0] == ["cd(folder='no_such_dir')", "ls()"]  # only validated calls were executed


def test_model_text_never_reaches_eval():
    with pytest.raises(ValueError):
        call_string(ToolCall(name="__import__('os').system", arguments={}))
    with pytest.raises(ValueError):
        call_string(ToolCall(name="cd", arguments={"folder) or exit(": "x"}))
    assert call_string(ToolCall(name="cd", arguments={"folder": "a'); exit('"})) == "cd(folder=\"a'); exit('\")"


def test_miss_func_reveals_function_at_its_turn():
    task = next(t for t in data.load_tasks("multi_turn_miss_func") if t.task_id == "multi_turn_miss_func_0")
    missed = task.metadata["missed_function"]  # {'3': ['sort']}
    turn, names = next(iter(missed.items()))
    env = BfclEnv()
    reset = env.reset(task)
    assert not set(names) & {t.name for t in reset.tools}
    revealed = None
    for _ in range(int(turn)):
        revealed = env.step(Action(text="ok"))
    assert revealed.new_turn and revealed.tools is not None
    assert set(names) <= {t.name for t in revealed.tools}
    # the turn that adds functions is BFCL's fixed prompt (the task's own message for that turn)
    assert revealed.observation == data.ADDITIONAL_FUNCTION_PROMPT == task.turns[int(turn)]


def test_episodes_are_isolated(base_tasks):
    task = base_tasks["multi_turn_base_0"]
    a, b = BfclEnv(), BfclEnv()
    a.reset(task)
    b.reset(task)
    a.step(Action(tool_calls=[ToolCall(name="mkdir", arguments={"dir_name": "only_in_a"})]))
    ls_b = b.step(Action(tool_calls=[ToolCall(name="ls", arguments={})])).observation
    ls_a = a.step(Action(tool_calls=[ToolCall(name="ls", arguments={})])).observation
    assert "only_in_a" in ls_a and "only_in_a" not in ls_b
    # the task's stored initial config is never mutated by an episode
    assert "only_in_a" not in str(task.initial_config)


def test_split_is_fixed_and_disjoint():
    train, dev, test = (set(data.split_ids(s)) for s in ("train", "dev", "test"))
    assert (len(train), len(dev), len(test)) == (120, 40, 40)
    assert not (train & dev or train & test or dev & test)
    assert data.compute_splits()["test"] == list(data.split_ids("test"))
    assert len(data.load_tasks("multi_turn_miss_param", "test")) == 40
    with pytest.raises(EnvError):
        data.split_ids("nope")


def test_backend_filter_and_sandbox():
    only_fs = data.load_tasks("multi_turn_base", backends=["GorillaFileSystem"])
    assert only_fs and all(t.metadata["involved_classes"] == ["GorillaFileSystem"] for t in only_fs)
    env = BfclEnv(backends=["MathAPI"])
    r = env.reset(None, {"classes": ["MathAPI"], "tools": ["add", "multiply"]})
    assert {t.name for t in r.tools} == {"add", "multiply"}
    out = env.step(Action(tool_calls=[ToolCall(name="add", arguments={"a": 2, "b": 3})]))
    assert '"result": 5' in out.observation
    assert (
        "unknown tool" in env.step(Action(tool_calls=[ToolCall(name="divide", arguments={"a": 1, "b": 2})])).observation
    )
    with pytest.raises(EnvError):
        env.evaluate()


def test_profiles_and_compact_rendering():
    env = BfclEnv(backends=["MathAPI"])
    [profile] = env.profile()
    assert profile.name == "MathAPI" and any(op.startswith("add:") for op in profile.entities[0].operations)
    reset = env.reset(None, {"classes": ["MathAPI"]})
    text = render_compact(reset.tools)
    assert "add(a: float, b: float) - Add two numbers." in text
    assert len(text.splitlines()) == len(reset.tools)


def test_a_sandbox_state_description_survives_odd_and_hostile_configs():
    """The sandbox's first observation describes its initial state from a caller's config (the env service passes a
    request body's): odd shapes degrade to "nothing" or shortened JSON, long listings are cut, and the names are only
    ever text in the observation."""
    from evolvekit.env.bfcl.env import describe_state

    many = {f"f{i}.txt": {"type": "file", "content": ""} for i in range(100)}
    fs = lambda root: {"GorillaFileSystem": {"root": root}}  # noqa: E731
    empty = "Current directory: w. It holds: nothing."
    assert describe_state(fs({"w": {"type": "directory", "contents": ["x"]}})) == empty
    assert describe_state(fs({"w": "not a folder"})) == empty
    assert describe_state(fs({"w": {"contents": many}})).endswith("f39.txt and 60 more.")
    two_roots = describe_state(fs({"a": {}, "b": {}}))  # not one root folder: shown as shortened JSON
    assert two_roots.startswith("GorillaFileSystem: {") and len(two_roots) <= len("GorillaFileSystem: ") + 303
    hostile = "__import__('os').system('echo pwned')"
    env = BfclEnv()
    config = fs({hostile: {"type": "directory", "contents": {hostile: {"type": "file", "content": hostile}}}})
    out = env.reset(None, {"classes": ["GorillaFileSystem"], "initial_config": config})
    assert f"Current directory: {hostile}. It holds: {hostile}." in out.observation
    with pytest.raises(EnvError):  # a malformed or unknown scenario is refused with a clear error, never described
        env.reset(None, {"classes": ["GorillaFileSystem"], "initial_config": fs({"w": {"contents": {"x": {}}}})})
    with pytest.raises(EnvError):
        env.reset(None, {"classes": ["GorillaFileSystem"], "initial_config": {"os.system": {}}})


def test_incremental_grounding_equals_the_plain_walk_step_by_step():
    """Issue 52 (6): grounding walked the whole state at every step (a 1.7 MB state made every no-op 4-9 s). A step
    now walks only the backends its calls touched and keeps the others' distances; this is the exactness test
    against the plain definition (``_grounding``: every leaf walked), over real tasks and perturbed call orders."""
    import random

    from evolvekit.env.bfcl.env import _state_leaves

    rng = random.Random(0)
    compared = changed = 0
    for category in ("multi_turn_base", "multi_turn_miss_func"):
        for task in data.load_tasks(category)[:12]:
            env = BfclEnv()
            env.reset(task)
            calls = [c for turn in task.reference_solution or [] for c in turn]
            steps = []
            for c in calls:
                steps.append([c])
                if rng.random() < 0.3:
                    steps.append([rng.choice(calls)])  # a repeated or out-of-order call
                if rng.random() < 0.2:
                    steps.append([])  # end the turn early
            steps.append([ToolCall(name="no_such_tool", arguments={})])
            for step in steps:
                if env.done:
                    break
                turn, before = env.turn_index, _state_leaves(env.instances)
                res = env.step(Action(tool_calls=step, text="" if step else "Done."))
                if res.grounding is None:
                    continue
                assert res.grounding == env._grounding(before, turn), (task.task_id, step)
                compared += 1
                changed += res.grounding.state_changed
            env.close()
    assert compared > 100 and changed > 20  # steps that changed state, and many that did not


@pytest.mark.slow
def test_read_only_methods_leave_the_state_unchanged():
    """Issue 52 (6): a `pwd` walked the whole file system for grounding. Calls declared read-only (READ_ONLY) touch
    no backend, so that declaration must hold: every read-only call of the dataset's reference solutions (four
    categories), and probe calls of the file system's at every step, leave the whole state as it was."""
    import copy

    from evolvekit.env.bfcl.env import READ_ONLY, _state_leaves

    probes = [("pwd", {}), ("ls", {"a": True}), ("du", {"human_readable": True}), ("find", {})]
    exercised: set[tuple[str, str]] = set()
    for category in ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context"):
        for task in data.load_tasks(category):
            env = BfclEnv()
            env.reset(task)
            for call in [c for turn in task.reference_solution or [] for c in turn]:
                owner = env.method_owner.get(call.name)
                fs = env.instances.get("GorillaFileSystem")
                checks = [(owner, call.name, call.arguments)] if call.name in READ_ONLY.get(owner, ()) else []
                checks += [("GorillaFileSystem", n, a) for n, a in probes] if fs is not None else []
                for cls, name, args in checks:
                    before = _state_leaves(env.instances)
                    try:
                        getattr(env.instances[cls], name)(**copy.deepcopy(args))
                    except Exception:  # noqa: BLE001 - a failing call must leave the state as it was too
                        pass
                    assert _state_leaves(env.instances) == before, (task.task_id, cls, name, args)
                    exercised.add((cls, name))
                try:  # then the reference call itself, read-only or not, moves the state on
                    getattr(env.instances[owner], call.name)(**copy.deepcopy(call.arguments))
                except Exception:  # noqa: BLE001
                    pass
            env.close()
    declared = {(cls, name) for cls, names in READ_ONLY.items() for name in names}
    assert declared <= exercised, sorted(declared - exercised)  # a declaration nothing checked is not kept


def test_the_one_pass_state_walk_equals_copy_then_walk():
    """Issue 52: a writing call walks its backend's state. The one-pass walk (``_state_leaves``) must give exactly
    the leaves of the plain definition (``_plain`` copy, then its leaves): on every multi_turn_base task's backends
    after each reference call, and on odd objects (cycles, sets, text keys that collide, deep nesting, random
    generators, int subclasses, callables, a ``parent`` link)."""
    import copy
    import enum
    import random

    from evolvekit.env.bfcl.env import _plain_leaves, _state_leaves

    compared = 0
    for task in data.load_tasks("multi_turn_base")[:40]:
        env = BfclEnv()
        env.reset(task)
        assert _state_leaves(env.instances) == _plain_leaves(env.instances)
        for call in [c for turn in task.reference_solution or [] for c in turn]:
            owner = env.method_owner.get(call.name)
            try:
                getattr(env.instances[owner], call.name)(**copy.deepcopy(call.arguments))
            except Exception:  # noqa: BLE001 - a failing call leaves some state too
                pass
            assert _state_leaves(env.instances) == _plain_leaves(env.instances), (task.task_id, call.name)
            compared += 1
        env.close()
    assert compared > 100

    class Colour(enum.IntEnum):
        RED = 1

    class Node:
        def __init__(self, name, parent=None):
            self.name, self.parent, self.children, self.tags = name, parent, [], {"b", "a", 3}
            self.rng, self.fn, self.kind = random.Random(0), len, Colour.RED

    root = Node("root")
    root.children = [Node("c1", root), Node("c2", root)]
    root.children[0].children = [root]  # a cycle
    deep: dict = {}
    cur = deep
    for _ in range(80):  # deeper than the 64-level cut
        cur["x"] = {}
        cur = cur["x"]
    odd = {
        "root": root,
        "collide": {1: "int", "1": "text", "k": (1, [2, {"z": None}])},
        "deep": deep,
        "frozen": frozenset({("t", 1), ("s", 2)}),
        "empty": {"d": {}, "l": [], "o": Node("e")},
        "callable": {"f": len, "obj": object()},
    }
    for value in odd.values():
        holder = type("Backend", (), {})()
        holder.state = value
        assert _state_leaves({"GorillaFileSystem": holder}) == _plain_leaves({"GorillaFileSystem": holder})


def test_person_written_reference_distances_are_computed_only_where_they_may_be_read(base_tasks):
    """The information boundary at its source: with ``person_reference_distances`` off (the composition's setting
    unless run.oracle), a person-written task's reference is never replayed and its steps carry no distances, while
    the state change is still reported; a synthesized task's own reference still gives them, and the switch on gives
    them for the person-written task too."""
    from evolvekit.types import TaskSource

    person = base_tasks["multi_turn_base_0"]
    synthetic = person.model_copy(update={"source": TaskSource.SYNTHETIC})

    def first_step(task, person_distances: bool):
        env = BfclEnv()
        env.person_reference_distances = person_distances
        env.reset(task)
        res = env.step(Action(tool_calls=list(task.reference_solution[0][:1]), text=""))
        replayed = dict(env.reference_ends)
        env.close()
        return res.grounding, replayed

    closed, replayed = first_step(person, False)
    assert person.source == TaskSource.REAL and replayed == {}
    assert closed is not None and closed.distance_before is None and closed.distance_after is None
    opened, replayed_open = first_step(person, True)
    assert opened is not None and opened.distance_before is not None and replayed_open
    assert closed.state_changed == opened.state_changed
    own, _ = first_step(synthetic, False)
    assert own == opened  # the run's own reference: the same distances


def test_a_task_synthesized_in_a_sandbox_that_named_no_class_runs_the_sandboxs_default_backends():
    """Plain BFCL's sandbox names no backend class (it runs the environment's defaults); a task synthesized there, and
    a request's round-trip candidate, carry no class of their own and get those defaults instead of a refusal."""
    from evolvekit.config import EnvConfig
    from evolvekit.env.registry import make_env
    from evolvekit.types import Task, TaskSource, ToolCall

    env = make_env(EnvConfig(name="bfcl", backends=["MathAPI"]))
    call = ToolCall(name="add", arguments={"a": 1, "b": 2})
    task = Task(env_name="bfcl", query="Add 1 and 2.", reference_solution=[[call]], source=TaskSource.SYNTHETIC,
                metadata={"category": "synthetic", "involved_classes": []})  # fmt: skip
    try:
        env.reset(task)
        assert env.meta.involved_classes == ["MathAPI"]
    finally:
        env.close()
    real = task.model_copy(update={"source": TaskSource.REAL})
    with pytest.raises(Exception, match="involved_classes"):
        make_env(EnvConfig(name="bfcl", backends=["MathAPI"])).reset(real)  # a person's task must name its classes
