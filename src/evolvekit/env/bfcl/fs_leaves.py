"""GorillaFileSystem's state leaves kept up to date per writing call, walking only what the call changed (issue 52).

Step grounding compares a backend's state, as flat ``path -> value`` leaves (env/bfcl/env.py: ``_state_leaves``),
before and after each step. A writing call used to walk its whole backend again: on a file system at the state cap
(77,000 leaves) that is 76 ms a step. Here the file system's leaves are built once per episode, with a record of
where each object sits; a writing call then re-walks only the entries it changed.

What a writing call can change was read from bfcl-eval's source (func_source_code/gorilla_file_system.py) and is
checked on data by tests/cpu/test_bfcl_fs_leaves.py: the file system's own attributes (``cd`` moves
``_current_dir``), the current directory's attributes and entries (``touch``, ``mkdir``, ``rm``, ``rmdir``,
``mv``, ``cp``), the attributes of an object directly in it (``echo`` rewrites a file) and the entries of a folder
directly in it (``mv``/``cp`` into a folder). ``before_call`` keeps a shallow copy of exactly that scope (object
references, so ids stay unique) and ``settle`` compares it with the state after the calls; each change is re-walked
at every path its object has (``cp`` of a folder shares the files inside it, and ``_current_dir`` is a second path
to a folder in the tree).

The leaves equal ``_state_leaves`` exactly. Anything outside the shapes this walker knows (a cycle, a list, a
non-text key, nesting deeper than the plain walk's cut, an entry that is not an object) makes ``settle`` walk the
whole file system again, as before this module: with the record when the state is back in the known shapes, else
plainly (``cp a a`` makes a folder hold itself; the plain walk cuts that cycle).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, NamedTuple

from evolvekit.env.cancel import checkpoint

Leaves = dict[str, Any]
Delta = dict[str, tuple[Any, Any]]  # leaf -> (value before, value after); GONE where absent

GONE = object()  # a leaf absent before or after
_SCALARS = (bool, int, float, str)
_EXACT = {bool, int, float, str, type(None)}
_MAX_DEPTH = 60  # under the plain walk's 64-level cut: deeper states take the plain walk


class _Scope(NamedTuple):
    """What one writing call may change, kept before it runs (shallow copies; the objects held, so ids stay theirs)."""

    top: dict[str, Any]  # the file system's attributes
    cwd: Any  # the current folder (None: not a folder; the whole walk decides)
    cwd_vars: dict[str, Any]
    entries: dict[str, Any]  # the current folder's entries
    inner: dict[str, tuple[Any, dict[str, Any], Any, dict[str, Any] | None]]  # entry -> (it, its attributes,
    # its entries dict, a copy of that dict's items) for each object directly in the current folder


class _Fallback(Exception):
    """The state left the shapes this walker knows: the plain walk decides this step."""


def _is_object(value: Any) -> bool:
    """An object the plain walk enters as one (its attribute dict)."""
    return (
        value is not None
        and hasattr(value, "__dict__")
        and not isinstance(value, (random.Random, dict, list, tuple, set, frozenset, *_SCALARS))
    )


def _same(a: Any, b: Any) -> bool:
    if a is GONE or b is GONE:
        return a is b
    return bool(a is b or a == b)


def _differs(leaf: str, value: Any, end: Leaves) -> bool:
    """``_distance``'s test for one leaf: present on one side only, or another value."""
    if value is GONE:
        return leaf in end
    return leaf not in end or bool(value != end[leaf])


def distance_change(delta: Delta, end: Leaves) -> int:
    """How ``_distance(state, end)`` moves when ``delta`` is applied to the state."""
    return sum(_differs(k, new, end) - _differs(k, old, end) for k, (old, new) in delta.items())


class FsLeaves:
    """One file system's leaves (``leaves``, updated in place) and where each of its objects sits."""

    def __init__(self, name: str, fs: Any, plain_walk: Callable[[dict[str, Any]], Leaves]) -> None:
        self.name, self.fs, self._plain_walk = name, fs, plain_walk
        self.leaves: Leaves = {}
        self._pending: list[_Scope] = []
        self._build()

    # -- the record ------------------------------------------------------------------------------------------
    def _build(self) -> None:
        """Walk the whole file system, recording where each object sits (outside the known shapes: the plain walk)."""
        self._obj: dict[str, Any] = {}  # object path -> the object (held, so its id stays its own)
        self._up: dict[str, str | None] = {}  # object path -> its parent object's path
        self._anc: dict[str, frozenset[int]] = {}  # object path -> ids of the objects above it (a cycle: whole walk)
        self._depth: dict[str, int] = {}  # object path -> the plain walk's depth there
        self._own: dict[str, dict[str, None]] = {}  # object path -> leaves written while it was innermost
        self._kids: dict[str, set[str]] = {}  # object path -> its child objects' paths
        self._paths: dict[int, set[str]] = {}  # id of an object -> its paths
        # a folder's entries dict -> the paths of the objects holding it: ``mv`` gives the moved folder's dict to a
        # new folder while the old one stays reachable as ``parent`` of its entries (``cd ..`` back into it)
        self._entries_of: dict[str, dict] = {}
        self._holders: dict[int, set[str]] = {}
        self._log: dict[str, Any] = {}
        self.leaves.clear()
        self.alive = True  # False while the state is outside the known shapes: each settle then walks it whole
        try:
            self._walk(self.name, self.fs, None, 0, frozenset())
        except _Fallback:
            self.alive = False
            self.leaves.clear()
            self.leaves.update(self._plain_walk({self.name: self.fs}))

    def _set(self, owner: str, leaf: str, value: Any) -> None:
        self._log.setdefault(leaf, self.leaves.get(leaf, GONE))
        self.leaves[leaf] = value
        self._own[owner][leaf] = None

    def _unset(self, owner: str, leaf: str) -> None:
        if leaf in self._own[owner]:
            del self._own[owner][leaf]
            self._log.setdefault(leaf, self.leaves[leaf])
            del self.leaves[leaf]

    def _walk(self, path: str, obj: Any, up: str | None, depth: int, anc: frozenset[int]) -> None:
        """The plain walk of one object at ``path``, its leaves written and its place recorded."""
        if depth > _MAX_DEPTH or id(obj) in anc:
            raise _Fallback  # the plain walk cuts here (a cycle, or too deep)
        checkpoint()  # once per object, as the plain walk: a huge state's walk stops at its request's deadline
        self._obj[path], self._up[path], self._anc[path], self._depth[path] = obj, up, anc, depth
        self._own[path], self._kids[path] = {}, set()
        self._paths.setdefault(id(obj), set()).add(path)
        if up is not None:
            self._kids[up].add(path)
        self._set(path, f"{path}/__class__", type(obj).__name__)
        for attr, value in vars(obj).items():
            self._attribute(path, attr, value)

    def _attribute(self, path: str, attr: str, value: Any) -> None:
        """One attribute of the object at ``path``, as the plain walk writes it."""
        leaf, depth = f"{path}/{attr}", self._depth[path] + 1
        if attr == "parent":
            return
        if type(value) in _EXACT or (not callable(value) and isinstance(value, _SCALARS)):
            self._set(path, leaf, value)
        elif callable(value):
            return
        elif isinstance(value, random.Random):
            self._set(path, leaf, None)
        elif isinstance(value, dict):  # a folder's entries: each an object under a text name
            if attr != "contents" or depth > _MAX_DEPTH:
                raise _Fallback
            self._entries_of[path] = value
            self._holders.setdefault(id(value), set()).add(path)
            for name, entry in value.items():
                if type(name) is not str or not _is_object(entry):
                    raise _Fallback
                self._walk(f"{leaf}/{name}", entry, path, depth + 1, self._anc[path] | {id(self._obj[path])})
        elif _is_object(value):
            self._walk(leaf, value, path, depth, self._anc[path] | {id(self._obj[path])})
        elif isinstance(value, (list, tuple, set, frozenset)):
            raise _Fallback
        else:  # an opaque value (a datetime): the plain walk writes its type's name
            self._set(path, leaf, type(value).__name__)

    def _drop(self, path: str) -> None:
        """Forget the object at ``path`` and everything under it."""
        up = self._up.get(path)
        if up is not None:
            self._kids[up].discard(path)
        stack = [path]
        while stack:
            p = stack.pop()
            for leaf in self._own.pop(p):
                self._log.setdefault(leaf, self.leaves[leaf])
                del self.leaves[leaf]
            stack.extend(self._kids.pop(p))
            self._forget_entries(p)
            obj = self._obj.pop(p)
            paths = self._paths[id(obj)]
            paths.discard(p)
            if not paths:
                del self._paths[id(obj)]
            del self._up[p], self._anc[p], self._depth[p]

    def _forget_entries(self, path: str) -> None:
        entries = self._entries_of.pop(path, None)
        if entries is not None:
            holders = self._holders[id(entries)]
            holders.discard(path)
            if not holders:
                del self._holders[id(entries)]

    def _refresh_attribute(self, path: str, attr: str) -> None:
        """Walk one attribute of the object at ``path`` again (the old leaves and objects under it dropped)."""
        leaf = f"{path}/{attr}"
        self._unset(path, leaf)
        if attr == "contents":
            self._forget_entries(path)
        for kid in [k for k in self._kids[path] if k == leaf or k.startswith(leaf + "/")]:
            self._drop(kid)  # an object there, or a folder's entries (an attribute writes no other leaves below it)
        obj = self._obj[path]
        if attr in vars(obj):
            self._attribute(path, attr, vars(obj)[attr])

    def _refresh_entry(self, path: str, name: str) -> None:
        """Walk one entry of the folder at ``path`` again."""
        leaf = f"{path}/contents/{name}"
        if leaf in self._obj:
            self._drop(leaf)
        contents = vars(self._obj[path]).get("contents")
        if not isinstance(contents, dict) or type(name) is not str:
            raise _Fallback  # a name that is not text: the plain walk's own ordering decides collisions
        if name in contents:
            entry = contents[name]
            if not _is_object(entry):
                raise _Fallback
            self._walk(leaf, entry, path, self._depth[path] + 2, self._anc[path] | {id(self._obj[path])})

    # -- per step --------------------------------------------------------------------------------------------
    def before_call(self) -> None:
        """Keep what the next writing call may change (see the module's docstring): call before each one."""
        cwd = getattr(self.fs, "_current_dir", None)
        entries = vars(cwd).get("contents") if _is_object(cwd) else None
        if not isinstance(entries, dict):
            self._pending.append(_Scope(dict(vars(self.fs)), None, {}, {}, {}))
            return
        inner: dict[str, tuple[Any, dict[str, Any], Any, dict[str, Any] | None]] = {}
        for name, obj in entries.items():
            if _is_object(obj):
                kept = vars(obj).get("contents")
                inner[name] = (obj, dict(vars(obj)), kept, dict(kept) if isinstance(kept, dict) else None)
        self._pending.append(_Scope(dict(vars(self.fs)), cwd, dict(vars(cwd)), dict(entries), inner))

    def settle(self) -> Delta:
        """Bring ``leaves`` up to date after the calls since the last settle; the leaves that changed."""
        pending, self._pending, self._log = self._pending, [], {}
        if not self.alive:
            return self._rebuild()
        try:
            for scope in pending:
                self._settle_one(scope)
        except _Fallback:
            for leaf, old in self._log.items():  # back to the state before the calls, then the plain walk
                if old is GONE:
                    self.leaves.pop(leaf, None)
                else:
                    self.leaves[leaf] = old
            return self._rebuild()
        delta = {k: (old, self.leaves.get(k, GONE)) for k, old in self._log.items()}
        self._log = {}
        return {k: v for k, v in delta.items() if not _same(*v)}

    def _rebuild(self) -> Delta:
        """The whole walk again (the record too, if the state is back in the known shapes); what changed."""
        before = dict(self.leaves)
        self._build()
        return {
            k: (before.get(k, GONE), self.leaves.get(k, GONE))
            for k in before.keys() | self.leaves.keys()
            if not _same(before.get(k, GONE), self.leaves.get(k, GONE))
        }

    def _settle_one(self, scope: _Scope) -> None:
        top, cwd, cwd_vars, entries, inner = scope
        for attr in _replaced(top, vars(self.fs)):
            self._refresh_attribute(self.name, attr)
        if cwd is None:
            raise _Fallback
        self._refresh_attributes(cwd, cwd_vars)
        current = vars(cwd).get("contents")
        if current is not cwd_vars.get("contents") or not isinstance(current, dict):
            return  # a new entries dict: walked whole above
        self._refresh_entries(current, entries)
        for name, (obj, kept_vars, kept, kept_entries) in inner.items():
            if current.get(name) is not obj:
                continue  # replaced or removed: walked above
            self._refresh_attributes(obj, kept_vars)
            if kept_entries is not None and vars(obj).get("contents") is kept and isinstance(kept, dict):
                self._refresh_entries(kept, kept_entries)

    def _refresh_attributes(self, obj: Any, kept: dict[str, Any]) -> None:
        """Each attribute of ``obj`` that is not the one kept, re-walked at every path of ``obj``."""
        for attr in _replaced(kept, vars(obj)):
            for path in list(self._paths.get(id(obj), ())):
                self._refresh_attribute(path, attr)

    def _refresh_entries(self, entries: dict[str, Any], kept: dict[str, Any]) -> None:
        """Each entry of a folder's ``entries`` dict that is not the one kept, re-walked at every folder holding it."""
        for name in _replaced(kept, entries):
            for path in list(self._holders.get(id(entries), ())):
                self._refresh_entry(path, name)


def _replaced(kept: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """The keys whose value is not the same object as the one kept (added, removed or replaced)."""
    return [k for k in kept.keys() | now.keys() if kept.get(k, GONE) is not now.get(k, GONE)]
