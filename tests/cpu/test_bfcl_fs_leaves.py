"""Issue 52: a writing file-system call re-walks only what it changed (env/bfcl/fs_leaves.py), and the leaves and the
step grounding stay exactly those of the plain walk."""

import random

import pytest

import evolvekit.env.bfcl.fs_leaves as fs_leaves
from evolvekit.env.base import Action
from evolvekit.env.bfcl import data
from evolvekit.env.bfcl.env import BfclEnv, _state_leaves
from evolvekit.types import ToolCall

FS = "GorillaFileSystem"


def _random_call(env: BfclEnv, rng: random.Random) -> ToolCall:
    """A file-system call on names that exist in the current folder (or new ones): every writing method, with the
    odd cases (a folder moved into itself, a copy of a folder into another, writes to a copied file)."""
    cwd = env.instances[FS]._current_dir
    names = list(cwd.contents) or ["x"]
    folders = [n for n, o in cwd.contents.items() if hasattr(o, "contents")]
    files = [n for n in names if n not in folders]
    pick, new = rng.choice, f"n{rng.randrange(6)}"
    options = [
        ("cd", {"folder": pick(folders)}) if folders else ("cd", {"folder": ".."}),
        ("cd", {"folder": ".."}),
        ("mkdir", {"dir_name": new}),
        ("touch", {"file_name": new + ".txt"}),
        ("echo", {"content": f"text {rng.randrange(99)}", "file_name": pick(files) if files else new}),
        ("mv", {"source": pick(names), "destination": pick(names + [new])}),
        ("cp", {"source": pick(names), "destination": pick(names + [new])}),
        ("rm", {"file_name": pick(names)}),
        ("rmdir", {"dir_name": pick(names)}),
        ("ls", {}),
    ]
    name, args = pick(options)
    return ToolCall(name=name, arguments=args)


def _file_system_tasks():
    for category in ("multi_turn_base", "multi_turn_long_context", "multi_turn_miss_func", "multi_turn_miss_param"):
        for task in data.load_tasks(category):
            if FS in (task.initial_config or {}):
                yield task


def test_the_leaves_and_the_grounding_equal_the_plain_walk_after_every_writing_step():
    """The scope a writing call may change (fs_leaves.py's docstring) must hold: on every file-system task of the
    four multi-turn categories, the reference calls and then random calls of every writing method (several per
    step, some moving folders into themselves or copying folders that share their files), the kept leaves equal
    the plain walk after each step, and so does the step's grounding (``_grounding``, every leaf walked and
    compared)."""
    rng = random.Random(52)
    steps = changed = 0
    outside = episodes = 0
    for task in _file_system_tasks():
        env = BfclEnv()
        env.reset(task)
        calls = [c for turn in task.reference_solution or [] for c in turn]
        plan = [[c] for c in calls] + [[_random_call(env, rng)] for _ in range(3)]
        k = 0
        while k < len(plan) + 25 and not env.done:
            step = plan[k] if k < len(plan) else [_random_call(env, rng) for _ in range(rng.randint(1, 3))]
            k += 1
            turn, before = env.turn_index, _state_leaves(env.instances)
            res = env.step(Action(tool_calls=step, text=""))
            tracker = env._fs_leaves
            assert tracker is not None
            assert tracker.leaves == _state_leaves({FS: env.instances[FS]}), (task.task_id, step)
            if res.grounding is not None:
                assert res.grounding == env._grounding(before, turn), (task.task_id, step)
                changed += res.grounding.state_changed
            steps += 1
        outside += not env._fs_leaves.alive
        episodes += 1
        env.close()
    assert steps > 4000 and changed > 1200
    assert episodes == 200 and outside < episodes // 2  # most end on the record (``cp a a`` leaves it while it lasts)


def _big_file_system(folders: int = 40, files: int = 240) -> dict:
    content = {f"f{j}.txt": {"type": "file", "content": f"x{j}"} for j in range(files)}
    tree = {f"d{i}": {"type": "directory", "contents": dict(content)} for i in range(folders)}
    return {FS: {"root": {"w": {"type": "directory", "contents": tree}}}}


def test_a_writing_call_walks_only_what_it_changed(monkeypatch):
    """Issue 52 (6): a writing call walked its whole backend (76 ms on a file system at the state cap). Counted in
    objects walked (one checkpoint each): a `touch` in a folder of 40 x 240 files walks the one new file, at its two
    paths (the folder is the tree's top and ``_current_dir``); `cd` into a folder walks that folder once more (at
    ``_current_dir``), not the tree; `echo` into a file re-writes that file's leaves and walks no object."""
    env = BfclEnv()
    env.reset(None, {"classes": [FS], "initial_config": _big_file_system()})
    env.step(Action(tool_calls=[ToolCall(name="pwd", arguments={})], text=""))  # the episode's one whole walk
    walked = []
    monkeypatch.setattr(fs_leaves, "checkpoint", lambda: walked.append(1))
    plain = []
    import evolvekit.env.bfcl.env as bfcl_env

    monkeypatch.setattr(bfcl_env, "_state_leaves", lambda inst: plain.append(1) or _state_leaves(inst))
    res = env.step(Action(tool_calls=[ToolCall(name="touch", arguments={"file_name": "new.txt"})], text=""))
    assert res.grounding.state_changed and len(walked) == 2 and plain == []
    walked.clear()
    env.step(Action(tool_calls=[ToolCall(name="cd", arguments={"folder": "d3"})], text=""))
    assert len(walked) == 241 and plain == []  # the folder and its 240 files, at their new second path
    walked.clear()
    res = env.step(Action(tool_calls=[ToolCall(name="echo", arguments={"content": "y", "file_name": "f7.txt"})]))
    assert res.grounding.state_changed and walked == [] and plain == []  # a file's text: its leaves, no object
    assert env._fs_leaves.leaves == _state_leaves({FS: env.instances[FS]})
    env.close()


@pytest.mark.parametrize("mutate", ["skip_before_call", "skip_entries"])
def test_the_exactness_check_fails_when_the_tracker_misses_a_change(monkeypatch, mutate):
    """The test above is not inert: a tracker that keeps no scope, or compares no entries, leaves stale leaves."""
    if mutate == "skip_before_call":
        monkeypatch.setattr(fs_leaves.FsLeaves, "before_call", lambda self: None)
    else:
        monkeypatch.setattr(fs_leaves.FsLeaves, "_refresh_entry", lambda self, path, name: None)
    env = BfclEnv()
    env.reset(None, {"classes": [FS], "initial_config": _big_file_system(2, 3)})
    env.step(Action(tool_calls=[ToolCall(name="touch", arguments={"file_name": "new.txt"})], text=""))
    assert env._fs_leaves.leaves != _state_leaves({FS: env.instances[FS]})
    env.close()


@pytest.mark.parametrize("case", ["cycle", "deep"])
def test_states_outside_the_known_shapes_take_the_whole_walk(case, monkeypatch):
    """A folder copied into itself (``cp d0 d0``: its entries then hold it, and the plain walk cuts the cycle), or a
    tree nested deeper than the record follows (mkdir and cd, 35 levels), is walked whole at each writing step, with
    the same leaves and grounding as the plain walk; once that folder leaves the tree (``rm d0``), the record is
    back."""
    env = BfclEnv()
    env.reset(None, {"classes": [FS], "initial_config": _big_file_system(2, 2)})
    down = [ToolCall(name="mkdir", arguments={"dir_name": "deep"}), ToolCall(name="cd", arguments={"folder": "deep"})]
    steps = [[ToolCall(name="cp", arguments={"source": "d0", "destination": "d0"})]] if case == "cycle" else [down] * 35
    walked = []
    monkeypatch.setattr(fs_leaves, "checkpoint", lambda: walked.append(1))
    for level, step in enumerate(steps, 1):
        before = _state_leaves(env.instances)
        res = env.step(Action(tool_calls=step, text=""))
        assert env._fs_leaves.leaves == _state_leaves({FS: env.instances[FS]})
        assert res.grounding == env._grounding(before, 0)
        if case == "deep":  # the 29th folder down sits at depth 59, its entries at 60: the record's last level
            assert env._fs_leaves.alive == (level <= 29), level
            assert level == 1 or level >= 30 or len(walked) <= 3, (level, len(walked))  # no whole walk (1: the first)
        walked.clear()
    assert not env._fs_leaves.alive
    if case == "cycle":
        env.step(Action(tool_calls=[ToolCall(name="rm", arguments={"file_name": "d0"})], text=""))
        assert env._fs_leaves.alive and env._fs_leaves.leaves == _state_leaves({FS: env.instances[FS]})
    env.close()


def test_distance_change_is_the_plain_distance_difference():
    """``distance_change`` against ``_distance`` before and after, leaf by leaf (present, absent, equal, other)."""
    from evolvekit.env.bfcl.env import _distance

    end = {"a": 1, "b": 2, "c": 3}
    before = {"a": 1, "b": 5, "d": 4}
    after = {"a": 2, "b": 2, "e": 0, "c": 3}
    delta = {k: (before.get(k, fs_leaves.GONE), after.get(k, fs_leaves.GONE)) for k in before.keys() | after.keys()}
    assert _distance(before, end) == 3 and _distance(after, end) == 2
    assert fs_leaves.distance_change(delta, end) == -1


class _Folder:
    def __init__(self, name, parent=None):
        self.name, self.parent, self.contents = name, parent, {}


class _Note:
    def __init__(self, name, content=""):
        self.name, self.content = name, content


class _Tree:
    """A stand-in file system of the same shape as bfcl-eval's (folders with ``contents``, files with ``content``)."""

    def __init__(self):
        self.root = _Folder("/")
        self.root.contents = {"a": _Folder("a", self.root), "n.txt": _Note("n.txt", "hi")}
        self.root.contents["a"].contents = {"m.txt": _Note("m.txt", "x")}
        self._current_dir, self.flag = self.root, True


def _odd_changes():
    """(what a call does to the stand-in tree, whether the record can follow it)."""
    import datetime
    import enum

    class Colour(enum.IntEnum):
        RED = 1

    def at(path):
        def change(tree):
            obj = tree._current_dir
            for part in path[:-1]:
                obj = obj.contents[part]
            return obj, path[-1]

        return change

    def set_attr(name, value_of):
        def go(tree):
            obj, attr = at(name)(tree)
            setattr(obj, attr, value_of(tree))

        return go

    return {
        "new file": (lambda t: t._current_dir.contents.__setitem__("b.txt", _Note("b.txt")), True),
        "removed folder": (lambda t: t._current_dir.contents.pop("a"), True),
        "text rewritten": (set_attr(["n.txt", "content"], lambda t: "new"), True),
        "same text again": (set_attr(["n.txt", "content"], lambda t: "h" + "i"), True),
        "attribute removed": (lambda t: delattr(t._current_dir.contents["n.txt"], "content"), True),
        "int subclass": (set_attr(["n.txt", "kind"], lambda t: Colour.RED), True),
        "a generator": (set_attr(["n.txt", "rng"], lambda t: random.Random(0)), True),
        "a callable": (set_attr(["n.txt", "fn"], lambda t: len), True),
        "an opaque value": (set_attr(["n.txt", "when"], lambda t: datetime.datetime(2026, 1, 1)), True),
        "an object attribute": (set_attr(["n.txt", "meta"], lambda t: _Note("meta", "m")), True),
        "entry in a folder in it": (lambda t: t._current_dir.contents["a"].contents.pop("m.txt"), True),
        "folder's entries replaced": (set_attr(["a", "contents"], lambda t: {"z": _Note("z")}), True),
        "current folder's entries replaced": (lambda t: setattr(t._current_dir, "contents", {}), True),
        "top attribute": (lambda t: setattr(t, "flag", False), True),
        "moved down": (lambda t: setattr(t, "_current_dir", t.root.contents["a"]), True),
        "a new top attribute": (lambda t: setattr(t, "extra", 1), True),
        "a new top attribute set to None": (lambda t: setattr(t, "extra", None), True),
        "a new attribute of the current folder set to None": (lambda t: setattr(t._current_dir, "tag", None), True),
        "a new attribute of a file in it set to None": (set_attr(["n.txt", "tag"], lambda t: None), True),
        "an entry of a folder in it that is None": (lambda t: t._current_dir.contents["a"].contents.update(z=None), 0),
        "an entry that is None": (lambda t: t._current_dir.contents.__setitem__("z", None), False),
        "a file that holds itself": (set_attr(["n.txt", "meta"], lambda t: t._current_dir.contents["n.txt"]), False),
        "a list": (set_attr(["n.txt", "lines"], lambda t: ["x", "y"]), False),
        "a text key that is not text": (lambda t: t._current_dir.contents.__setitem__(3, _Note("3")), False),
        "an entry that is not an object": (lambda t: t._current_dir.contents.__setitem__("v", 5), False),
        "a second dict": (set_attr(["n.txt", "index"], lambda t: {"k": _Note("k")}), False),
        "a folder holding itself": (lambda t: t._current_dir.contents["a"].contents.__setitem__("a", t.root), False),
        "no current folder": (lambda t: setattr(t, "_current_dir", None), True),  # the next call's scope: whole walk
    }


@pytest.mark.parametrize("case", sorted(_odd_changes()))
def test_each_kind_of_change_gives_the_plain_walks_leaves_and_delta(case, monkeypatch):
    """Unit level, on a stand-in tree: each kind of change a call can make, and each value the plain walk writes
    its own way, gives the plain walk's leaves and exactly the leaves that changed; a shape the record does not
    follow is walked whole (and the record is back once the state is)."""
    change, followed = _odd_changes()[case]
    tree = _Tree()
    tracker = fs_leaves.FsLeaves(FS, tree, _state_leaves)
    assert tracker.alive and tracker.leaves == _state_leaves({FS: tree})
    before = _state_leaves({FS: tree})
    tracker.before_call()
    change(tree)
    walked = []
    monkeypatch.setattr(fs_leaves, "checkpoint", lambda: walked.append(1))
    delta = tracker.settle()
    assert len(walked) <= 2 * 7  # a cycle is cut where it closes (the record's walk, then its second try), not 60 deep
    if followed:  # a change the record follows walks less than the whole tree does
        whole = []
        monkeypatch.setattr(fs_leaves, "checkpoint", lambda: whole.append(1))
        fs_leaves.FsLeaves(FS, tree, _state_leaves)
        assert len(walked) < len(whole), (len(walked), len(whole))
    after = _state_leaves({FS: tree})
    assert tracker.leaves == after and tracker.alive == bool(followed)
    gone = fs_leaves.GONE
    expected = {
        k: (before.get(k, gone), after.get(k, gone))
        for k in before.keys() | after.keys()
        if before.get(k, gone) != after.get(k, gone) or (k in before) != (k in after)
    }
    assert delta == expected
    assert bool(delta) == (before != after)
    tracker.before_call()  # nothing changes: an empty delta, the same leaves
    assert tracker.settle() == {} and tracker.leaves == after


def test_a_current_folder_left_behind_is_compared_and_walked_nowhere():
    """One call changes a folder reachable only as ``_current_dir`` (its name, its entries, a file and a folder in
    it) and then leaves it: the changes have no path left to re-walk, and the leaves are the plain walk's."""
    tree = _Tree()
    away = _Folder("away")
    away.contents = {"f.txt": _Note("f.txt", "1"), "sub": _Folder("sub", away)}
    tree._current_dir = away
    tracker = fs_leaves.FsLeaves(FS, tree, _state_leaves)
    tracker.before_call()
    away.name, away.contents["new"] = "gone", _Note("new")
    away.contents["f.txt"].content, away.contents["sub"].contents["x"] = "2", _Note("x")
    tree._current_dir = tree.root
    tracker.settle()
    assert tracker.alive and tracker.leaves == _state_leaves({FS: tree})


def test_a_file_system_without_a_current_folder_is_walked_whole():
    tree = _Tree()
    del tree._current_dir
    tracker = fs_leaves.FsLeaves(FS, tree, _state_leaves)
    tracker.before_call()
    tree.root.contents["b.txt"] = _Note("b.txt")
    assert tracker.settle() and tracker.leaves == _state_leaves({FS: tree})


@pytest.mark.parametrize("owner", ["file system", "current folder", "file in it"])
def test_an_attribute_that_was_none_and_is_removed_leaves_no_leaf(owner):
    tree = _Tree()
    obj = {"file system": tree, "current folder": tree.root, "file in it": tree.root.contents["n.txt"]}[owner]
    obj.extra = None
    tracker = fs_leaves.FsLeaves(FS, tree, _state_leaves)
    tracker.before_call()
    del obj.extra
    assert tracker.settle() and tracker.leaves == _state_leaves({FS: tree})


@pytest.mark.parametrize("levels, followed", [(29, True), (30, False)])
def test_the_record_follows_a_built_tree_to_its_depth_bound(levels, followed):
    """The whole walk's depths: folder L levels down sits at depth 2L+1 and its entries dict at 2L+2; past 60 the
    plain walk decides (its own cut is at 64)."""
    tree = _Tree()
    folder = tree.root
    for _ in range(levels):
        child = _Folder("d", folder)
        folder.contents = {"d": child}
        folder = child
    tracker = fs_leaves.FsLeaves(FS, tree, _state_leaves)
    assert tracker.alive == followed and tracker.leaves == _state_leaves({FS: tree})


@pytest.mark.parametrize("levels, followed", [(60, True), (61, False)])
def test_the_record_follows_objects_held_in_attributes_to_its_depth_bound(levels, followed):
    tree = _Tree()
    holder = tree
    for _ in range(levels):  # the k-th object down the chain sits at depth k
        holder.next = _Note("n")
        holder = holder.next
    tracker = fs_leaves.FsLeaves(FS, tree, _state_leaves)
    assert tracker.alive == followed and tracker.leaves == _state_leaves({FS: tree})


def test_a_renamed_folder_keeps_following_its_entries():
    """A folder's attribute re-walked (its name) leaves its entries followed: a later entry is seen at its path."""
    tree = _Tree()
    tracker = fs_leaves.FsLeaves(FS, tree, _state_leaves)
    for change in (
        lambda: setattr(tree.root.contents["a"], "name", "b"),
        lambda: tree.root.contents["a"].contents.update(q=_Note("q")),
    ):
        tracker.before_call()
        change()
        assert tracker.settle() and tracker.alive and tracker.leaves == _state_leaves({FS: tree})


def test_a_step_of_three_calls_that_ends_outside_the_shapes_gives_the_plain_walk():
    """Three calls in one step: a file made, that file removed, then a folder made to hold the tree's top. Each
    call's scope is compared with the state after all three, so the file is never walked; the cycle sends the step
    to the whole walk, after the leaves already re-walked are put back; the delta is the plain walks' difference."""
    tree = _Tree()
    tracker = fs_leaves.FsLeaves(FS, tree, _state_leaves)
    before = dict(tracker.leaves)
    for change in (
        lambda: tree.root.contents.update(t=_Note("t")),
        lambda: tree.root.contents.pop("t"),
        lambda: tree.root.contents["a"].contents.update(a=tree.root),
    ):
        tracker.before_call()
        change()
    delta = tracker.settle()
    after = _state_leaves({FS: tree})
    assert tracker.leaves == after and not tracker.alive
    assert set(delta) == {
        k for k in before.keys() | after.keys() if before.get(k) != after.get(k) or (k in before) != (k in after)
    }
