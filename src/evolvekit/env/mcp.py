"""Any MCP tool server as an environment (``env.name: mcp``; the ``mcp`` extra).

Every episode gets its own sandbox (a fresh folder, or a fresh git repository, optionally seeded from
``env.mcp.seed_dir``) and its own server process, started from ``env.mcp.command`` with the sandbox as its working
folder and ``{sandbox}`` in the command replaced by the sandbox's path; ``close()`` stops the process and removes
the sandbox. The agent sees the sandbox as ``env.mcp.alias`` (``/sandbox``): the alias is translated to the real
folder in call arguments and back in outputs, so every episode looks the same to the agent and a reference
solution replays the same way in any instance. ``tools/list`` gives the tool schemas and the profile. A tool's
error result, an unknown tool or a failed call becomes an error observation.

Evaluation replays the task's reference solution in a fresh instance and compares the *state probe* of the two:
the outputs of ``env.mcp.probe``'s read-only calls, or else a snapshot of the sandbox folder (every file's bytes
and every folder); with ``env.mcp.check_outputs`` the output of every reference call must also appear among the
agent's outputs (as BFCL's checker asks of results), so a read-only task is not solved by doing nothing. Tasks
without a reference solution get no state score (``details.unscored``); the judge scores them when
``questioning.reward`` asks for it. A server reached at ``env.mcp.url`` is shared, so it has no sandbox and needs
probe calls.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unicodedata
from collections import OrderedDict
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from evolvekit.config import EnvConfig, MCPConfig, MCPExample
from evolvekit.env.base import (
    NO_CALL_ERROR,
    Action,
    CallResult,
    EntityProfile,
    EnvInfo,
    EnvProfile,
    EvalResult,
    ResetResult,
    StepResult,
    ToolSchema,
)
from evolvekit.env.cancel import checkpoint
from evolvekit.env.examples import Played, played_examples
from evolvekit.env.registry import register_env, register_task_source
from evolvekit.errors import EnvError
from evolvekit.types import ChatMessage, Task, ToolCall, Trajectory, new_id

log = logging.getLogger(__name__)

# fixed identities and dates for git in the server: the same operations give the same commit ids in every sandbox
GIT_ENV = {
    "GIT_AUTHOR_NAME": "evolvekit",
    "GIT_AUTHOR_EMAIL": "agent@evolvekit.invalid",
    "GIT_COMMITTER_NAME": "evolvekit",
    "GIT_COMMITTER_EMAIL": "agent@evolvekit.invalid",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
    "GIT_CONFIG_NOSYSTEM": "1",
}
INHERITED = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "TMPDIR")


SANDBOX_PREFIX = "evolvekit-mcp-"  # + the owning process id + "-": a sandbox whose owner is gone is swept
_swept = False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def sweep_orphan_sandboxes(tmp: str | None = None) -> int:
    """Remove the sandboxes of processes that no longer exist (a kill -9 skips every cleanup); returns how many."""
    root = Path(tmp or tempfile.gettempdir())
    gone = 0
    for path in root.glob(SANDBOX_PREFIX + "*-*"):
        pid = path.name[len(SANDBOX_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            gone += 1
    return gone


def root_cause(err: BaseException) -> BaseException:
    """The first leaf of an exception group (anyio and the MCP SDK wrap a server's start-up failure in one or more
    groups, whose own message says only "(1 sub-exception)")."""
    while isinstance(err, BaseExceptionGroup) and err.exceptions:
        err = err.exceptions[0]
    return err


class _FloodGuard(logging.Filter):
    """Lets through the first ``limit`` records of a logger, then one notice, then nothing until ``reset``: a
    server that prints garbage made the SDK log 17,310 tracebacks (15 MB) in 18 s."""

    def __init__(self, limit: int = 5) -> None:
        super().__init__()
        self.limit, self.seen = limit, 0

    def filter(self, record: logging.LogRecord) -> bool:
        self.seen += 1
        if self.seen == self.limit + 1:
            record.msg, record.args, record.exc_info, record.exc_text = (
                "further messages of this MCP server's stream are suppressed (a server printing non-protocol output)",
                None,
                None,
                None,
            )
            return True
        return self.seen <= self.limit


_FLOOD = _FloodGuard()
logging.getLogger("mcp.client.stdio").addFilter(_FLOOD)  # a logger's filter sees only its own records


def mcp_available() -> str | None:
    """None when the MCP client is installed, else how to install it."""
    try:
        import mcp  # noqa: F401
    except ImportError:
        return "the 'mcp' extra is not installed (pip install -c constraints.txt 'evolvekit[mcp]')"
    return None


# what one MCP server may put in front of the model: a tool list (each tool's description and schema) and one tool
# result are cut or refused here, before a prompt of megabytes reaches the tokenizer (a 0.5 MB result asked the model
# for 69 GB; 10,000 tools made a 1 MB system prompt)
MAX_MCP_TOOLS = 256
MAX_TOOL_DESCRIPTION_CHARS = 2_000
MAX_TOOL_SCHEMA_CHARS = 16_000
MAX_RESULT_CHARS = 16_000


def capped(text: str, limit: int = MAX_RESULT_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit:,} more characters cut]"


def result_text(result: Any) -> str:
    """A tool result's content blocks as text (non-text blocks by their kind), at most MAX_RESULT_CHARS."""
    parts, size = [], 0
    for block in getattr(result, "content", None) or []:
        text = getattr(block, "text", None)
        part = text if isinstance(text, str) else f"[{getattr(block, 'type', 'content')}]"
        parts.append(part[: MAX_RESULT_CHARS + 1])
        size += len(parts[-1])
        if size > MAX_RESULT_CHARS:
            break
    return capped("\n".join(parts))


# look-alike letters of other scripts, as the Latin letter they pass for (Unicode's confusables for these letters)
_LOOK_ALIKES = str.maketrans(
    "аеорсухіјѕԁһӏАВЕКМНОРСТХІЈЅοανρτικυχΟΑΒΕΖΗΙΚΜΝΡΤΥΧ",
    "aeopcyxijsdhlABEKMHOPCTXIJSoavptikuxOABEZHIKMNPTYX",
)


def _scripts(name: str) -> set[str]:
    """The scripts of a name's letters (LATIN, CYRILLIC, GREEK, ...), by their Unicode names."""
    return {unicodedata.name(c, "?").split()[0] for c in name if c.isalpha()}


def skeleton(name: str) -> str:
    """What a tool name looks like: compatibility forms folded, accents dropped, look-alike letters of other
    scripts read as the Latin ones, case folded. Two names with one skeleton are confusable."""
    decomposed = unicodedata.normalize("NFKD", name)
    bare = "".join(c for c in decomposed if not unicodedata.combining(c))
    return bare.translate(_LOOK_ALIKES).casefold()


def tool_name_problem(names: Sequence[str], server: str = "") -> str | None:
    """The first tool name a model could be misled by, as one line naming the server: a name with a control,
    bidirectional-override, zero-width or space character (``s\\u202eevas`` shows as "save"), one that mixes scripts
    (Latin and Cyrillic look-alikes), or two names that are the same, or look the same (``skeleton``)."""
    where = f"the MCP server {server[:80]!r}" if server else "the MCP server"
    seen: dict[str, str] = {}
    for name in names:
        if not name or not name.isprintable() or any(c.isspace() for c in name):
            return f"{where} lists a tool named {name[:80]!r}: a name with control, invisible or space characters"
        scripts = _scripts(name)
        if len(scripts) > 1:
            return f"{where} lists a tool named {name[:80]!r}, which mixes scripts ({', '.join(sorted(scripts))})"
        key = skeleton(name)
        if key in seen:
            same = "twice" if seen[key] == name else f"and {seen[key][:80]!r}, which look the same"
            return f"{where} lists the tool {name[:80]!r} {same}; each tool needs a name of its own"
        seen[key] = name
    return None


def tool_schemas(tools: Sequence[Any], allowed: set[str], server: str = "") -> dict[str, ToolSchema]:
    """The server's tools (those of ``allowed`` when given) as schemas; a list longer than MAX_MCP_TOOLS, a schema
    over MAX_TOOL_SCHEMA_CHARS or a misleading name among all it lists (``tool_name_problem``) is refused with one
    line, a description over MAX_TOOL_DESCRIPTION_CHARS is cut."""
    problem = tool_name_problem([str(t.name) for t in tools], server)
    if problem is not None:
        raise EnvError(problem)
    shown = [t for t in tools if not allowed or t.name in allowed]
    if len(shown) > MAX_MCP_TOOLS:
        raise EnvError(
            f"the MCP server lists {len(shown):,} tools, more than a prompt can show ({MAX_MCP_TOOLS}); "
            "name the ones to use in env.mcp.tools"
        )
    out = {}
    for t in shown:
        schema = dict(t.input_schema or {})
        size = len(json.dumps(schema, default=str))
        if size > MAX_TOOL_SCHEMA_CHARS:
            raise EnvError(
                f"the MCP tool {str(t.name)[:80]!r} has a parameter schema of {size:,} characters, more than "
                f"{MAX_TOOL_SCHEMA_CHARS:,}; leave it out with env.mcp.tools"
            )
        description = capped(t.description or "", MAX_TOOL_DESCRIPTION_CHARS)
        out[t.name] = ToolSchema(name=t.name, description=description, parameters=schema)
    return out


# argument keys whose strings are text to keep as written, not paths to translate (matched case-insensitively)
_TEXT_KEY = re.compile(r"(?i)content|text|body|message|data")


_SHUTDOWN_S = 10.0  # the SDK's own stdio shutdown waits 2 s for the process, then terminates it


async def _session_lifetime(client_cls: Any, server: Any, startup_s: float, *, task_status: Any) -> None:
    """One server's connection from start to close, as one task in the session's event loop. Start-up as a whole
    (spawn, handshake, tool list) runs under one deadline of ``startup_s``; per-message timeouts alone let a server
    that answers each message just in time take several times that. Sends (client, tools, stop event) once started,
    then holds the connection open until the event is set."""
    import math

    import anyio

    stop = anyio.Event()
    with anyio.move_on_after(startup_s) as scope:
        async with client_cls(server, read_timeout_seconds=startup_s) as client:
            tools = list((await client.list_tools()).tools)
            scope.deadline = math.inf  # started: the deadline was for start-up only
            task_status.started((client, tools, stop))
            await stop.wait()
    if scope.cancelled_caught:
        raise TimeoutError(f"start-up took longer than env.mcp.startup_timeout_s = {startup_s:g}s")


class MCPSession:
    """A synchronous client of one MCP server: the SDK's ``Client`` driven from an event loop in its own thread."""

    def __init__(self, server: Any, timeout_s: float, startup_timeout_s: float) -> None:
        reason = mcp_available()
        if reason:
            raise EnvError(f"MCP unavailable: {reason}")
        from anyio.from_thread import start_blocking_portal
        from mcp import Client

        self.timeout_s = timeout_s
        _FLOOD.seen = 0  # each server may say its first few things
        self._stack: ExitStack | None = ExitStack()
        try:
            self._portal = self._stack.enter_context(start_blocking_portal())
            self._lifetime, (self.client, self.tools, self._stop) = self._portal.start_task(
                _session_lifetime, Client, server, startup_timeout_s
            )
            self._stack.callback(self._end_lifetime)  # runs before the portal closes (last in, first out)
            self.server_name = str(getattr(getattr(self.client, "server_info", None), "name", "") or "")
        except BaseException as err:
            self.close()
            cause = root_cause(err)
            raise EnvError(
                f"cannot start the MCP server (env.mcp): {type(cause).__name__}: {str(cause)[:300]}"
            ) from None

    def call(self, name: str, arguments: dict[str, Any]) -> tuple[bool, str, bool]:
        """(ok, output, unknown_tool) of one tool call; a protocol error is a failed call, not an exception."""
        try:
            result = self._portal.call(
                lambda: self.client.call_tool(name, arguments, read_timeout_seconds=self.timeout_s)
            )
        except Exception as err:  # noqa: BLE001 - MCPError (unknown tool, bad params), a timeout, a dead server
            text = str(err) or type(err).__name__
            return False, f"Error: {text}", "unknown tool" in text.lower()
        return not bool(getattr(result, "is_error", False)), result_text(result), False

    def _end_lifetime(self) -> None:
        self._portal.call(self._stop.set)
        self._lifetime.result(timeout=_SHUTDOWN_S)

    def close(self) -> None:
        stack, self._stack = getattr(self, "_stack", None), None
        if stack is not None:
            try:
                stack.close()
            except BaseException as err:  # noqa: BLE001 - a server that died first; the process is gone either way
                log.debug("closing an MCP session: %s", err)


@dataclass
class ReferenceOutcome:
    probe: Any
    outputs: list[str]


_REFERENCE_CACHE: OrderedDict[str, ReferenceOutcome] = OrderedDict()
_CACHE_SIZE = 512


class MCPEnv:
    """One MCP server per episode, in its own sandbox."""

    name = "mcp"

    def __init__(self, cfg: EnvConfig) -> None:
        self.cfg, self.m = cfg, cfg.mcp
        self.session: MCPSession | None = None
        self.sandbox: Path | None = None
        self.task: Task | None = None
        self.instance_id = new_id("mcp")
        self.visible: dict[str, ToolSchema] = {}
        self.turns: list[str] = [""]
        self.turn_index, self.steps, self.done, self.free = 0, 0, False, False
        self.executed: list[tuple[str, str, bool]] = []  # (tool, output as the agent saw it, ok)

    # --- the sandbox and the server --------------------------------------------------------------------------------
    def _make_sandbox(self) -> Path | None:
        if self.m.sandbox == "none":
            return None
        global _swept
        if not _swept:  # once per process: the sandboxes of processes killed before they could clean up
            _swept = True
            if (n := sweep_orphan_sandboxes()) > 0:
                log.info("removed %d MCP sandboxes left by processes that no longer exist", n)
        root = Path(tempfile.mkdtemp(prefix=f"{SANDBOX_PREFIX}{os.getpid()}-"))
        if self.m.seed_dir:
            seed = Path(self.m.seed_dir).expanduser()
            if not seed.is_dir():
                shutil.rmtree(root, ignore_errors=True)
                raise EnvError(f"env.mcp.seed_dir: {seed} is not a folder")
            shutil.copytree(seed, root, dirs_exist_ok=True, symlinks=True)
        if self.m.sandbox == "git":
            env = {**os.environ, **GIT_ENV}
            for args in (
                ["init", "-q", "-b", "main"],
                ["add", "-A"],
                ["commit", "-q", "--allow-empty", "-m", "initial state"],
            ):
                done = subprocess.run(["git", *args], cwd=root, env=env, capture_output=True, text=True)
                if done.returncode:
                    shutil.rmtree(root, ignore_errors=True)
                    raise EnvError(f"env.mcp.sandbox git: `git {' '.join(args)}` failed: {done.stderr.strip()[:200]}")
        return root

    def _server(self) -> Any:
        if self.m.url:
            return self.m.url
        from mcp.client.stdio import StdioServerParameters

        real = str(self.sandbox) if self.sandbox is not None else ""
        command, *args = [part.replace("{sandbox}", real) for part in self.m.command]
        if "/" in command and not os.path.isabs(command):  # relative to where evolvekit runs, not to the sandbox
            command = os.path.abspath(command)
        elif "/" not in command:  # on PATH, or a console script of this Python's environment (the `mcp` extra)
            command = shutil.which(command) or shutil.which(command, path=os.path.dirname(sys.executable)) or command
        env = {k: os.environ[k] for k in INHERITED if k in os.environ}
        env.update(GIT_ENV)
        env.update(self.m.server_env)
        return StdioServerParameters(command=command, args=args, env=env, cwd=real or None)

    def _start(self) -> None:
        self.close()
        self.sandbox = self._make_sandbox()
        try:
            self.session = MCPSession(self._server(), self.cfg.step_timeout_s, self.m.startup_timeout_s)
        except BaseException:
            self.close()
            raise
        for c in self.m.reset_calls:
            ok, output, _ = self.session.call(c.name, self._to_real(c.arguments))
            if not ok:
                self.close()
                raise EnvError(f"env.mcp.reset_calls: {c.name} failed: {output[:200]}")
        try:
            self.visible = tool_schemas(self.session.tools, set(self.m.tools), self.session.server_name)
        except EnvError:
            self.close()
            raise

    # --- path aliasing ---------------------------------------------------------------------------------------------
    def _to_real(self, value: Any, key: str = "") -> Any:
        """The arguments with the alias translated to the real sandbox: only a string that is a path under the alias
        as a whole (``/sandbox`` or ``/sandbox/...``), and never under a key that holds text (content, text, body,
        message, data), so a file written with "see /sandbox/notes" in it keeps those words and scores as the
        reference does."""
        if self.sandbox is None:
            return value
        if isinstance(value, str):
            if _TEXT_KEY.search(key):
                return value
            alias = self.m.alias.rstrip("/")
            if value == alias or value.startswith(alias + "/"):
                return str(self.sandbox) + value[len(alias) :]
            return value
        if isinstance(value, dict):
            return {k: self._to_real(v, str(k)) for k, v in value.items()}
        if isinstance(value, list):
            return [self._to_real(v, key) for v in value]
        return value

    def _to_alias(self, text: str) -> str:
        if self.sandbox is None:
            return text
        alias = self.m.alias.rstrip("/")
        for real in {str(self.sandbox), os.path.realpath(self.sandbox)}:
            text = text.replace(real, alias)
        return text

    # --- the environment protocol ----------------------------------------------------------------------------------
    def profile(self) -> list[EnvProfile]:
        if self.session is None:
            self._start()
            try:
                return self._profile()
            finally:
                self.close()
        return self._profile()

    def _profile(self) -> list[EnvProfile]:
        assert self.session is not None
        entities = [
            EntityProfile(
                name=t.name,
                description=t.description.splitlines()[0][:200] if t.description else "",
                attributes=sorted((t.parameters.get("properties") or {}).keys()),
                operations=[t.name],
            )
            for t in self.visible.values()
        ]
        where = f"; its files live under {self.m.alias}" if self.m.sandbox != "none" else ""
        return [
            EnvProfile(
                env_name=self.name,
                name=self.session.server_name or "MCP server",
                description=f"An MCP tool server with {len(entities)} tools{where}.",
                entities=entities,
            )
        ]

    def reset(self, task: Task | None = None, sandbox_config: dict[str, Any] | None = None) -> ResetResult:
        if task is not None and (not task.turns or not all(isinstance(t, str) and t.strip() for t in task.turns)):
            raise EnvError("task.query: must be a non-empty message (or a list of them)")
        self._start()
        self.task, self.free = task, task is None
        self.turn_index, self.steps, self.done, self.executed = 0, 0, False, []
        allowed = (task.metadata.get("allowed_tools") if task else None) or (sandbox_config or {}).get("tools")
        if allowed:
            self.visible = {k: v for k, v in self.visible.items() if k in set(allowed)}
        if task is None:
            self.turns = [""]
            where = f" Your files are under {self.m.alias}." if self.m.sandbox != "none" else ""
            observation = f"Sandbox of an MCP server: explore freely with the tools.{where}"
        else:
            self.turns = list(task.turns)
            observation = self.turns[0]
        return ResetResult(
            observation=observation,
            tools=list(self.visible.values()),
            turn_index=0,
            num_turns=len(self.turns),
            examples=worked_examples(self.cfg),
        )

    def step(self, action: Action) -> StepResult:
        if self.session is None:
            raise EnvError("step() before reset()")
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
        if not action.tool_calls:
            return self._end_turn()
        results = [self._execute(call) for call in action.tool_calls]
        obs = "\n".join(f"[{r.name}] {r.output}" for r in results)
        return StepResult(observation=obs, turn_index=self.turn_index, call_results=results)

    def _end_turn(self) -> StepResult:
        if self.free or self.turn_index + 1 >= len(self.turns):
            self.done = True
            return StepResult(observation="", done=True, turn_index=self.turn_index)
        self.turn_index += 1
        return StepResult(observation=self.turns[self.turn_index], turn_index=self.turn_index, new_turn=True)

    def _execute(self, call: ToolCall) -> CallResult:
        checkpoint()  # between calls: a step past its request's deadline stops here (env/cancel.py)
        assert self.session is not None
        if call.name not in self.visible:
            return CallResult(
                name=call.name,
                ok=False,
                unknown_tool=True,
                output=f"Error: unknown tool '{call.name}'. Available tools: {', '.join(self.visible)}",
            )
        ok, output, unknown = self.session.call(call.name, self._to_real(call.arguments))
        output = self._to_alias(output)
        self.executed.append((call.name, output, ok))
        return CallResult(name=call.name, ok=ok, output=output, unknown_tool=unknown)

    def probe(self) -> Any:
        """The state compared by evaluation: the probe calls' outputs, or a snapshot of the sandbox folder."""
        if self.m.probe:
            assert self.session is not None
            return [
                [p.name, self._to_alias(self.session.call(p.name, self._to_real(p.arguments))[1])] for p in self.m.probe
            ]
        return snapshot(self.sandbox, self.m.snapshot_exclude) if self.sandbox is not None else {}

    def state_key(self) -> str:
        """GiGPO's anchor state: the turn index and the state probe."""
        blob = json.dumps([self.turn_index, self.probe()], sort_keys=True)
        return hashlib.sha1(blob.encode()).hexdigest()

    def evaluate(self, trajectory: Trajectory | None = None) -> EvalResult:
        if self.task is None or self.session is None:
            raise EnvError("evaluate() needs an episode started with a task (sandbox episodes have no score)")
        if not self.task.reference_solution:
            return EvalResult(score=0.0, passed=False, details={"unscored": "the task has no reference solution"})
        mine = self.probe()  # before the reference replays: a shared (env.mcp.url) server has one state
        ref = reference_outcome(self.cfg, self.task)
        state_ok = mine == ref.probe
        outputs = [out for _, out, ok in self.executed if ok]
        missing = [out for out in ref.outputs if out not in outputs] if self.m.check_outputs else []
        passed = state_ok and not missing
        details: dict[str, Any] = {"state_matches": state_ok, "missing_outputs": len(missing)}
        if missing:
            details["first_missing_output"] = missing[0][:200]
        return EvalResult(score=float(passed), passed=passed, details=details)

    def info(self) -> EnvInfo:
        return EnvInfo(
            env_name=self.name,
            instance_id=self.instance_id,
            task_id=self.task.task_id if self.task else None,
            sandbox=self.free,
            turn_index=self.turn_index,
            num_turns=len(self.turns),
            steps=self.steps,
            done=self.done,
        )

    def close(self) -> None:
        """Stop the server and remove the sandbox (safe to call twice)."""
        session, self.session = self.session, None
        if session is not None:
            session.close()
        sandbox, self.sandbox = self.sandbox, None
        if sandbox is not None:
            shutil.rmtree(sandbox, ignore_errors=True)


def snapshot(root: Path, exclude: list[str]) -> dict[str, str]:
    """Every folder and every file's content hash under ``root``, by relative path (top-level ``exclude`` left
    out)."""
    out: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if rel.parts[0] in exclude:
            continue
        if path.is_symlink():
            out[str(rel)] = "link:" + os.readlink(path)
        elif path.is_dir():
            out[str(rel)] = "dir"
        elif path.is_file():
            out[str(rel)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def reference_outcome(cfg: EnvConfig, task: Task) -> ReferenceOutcome:
    """The state probe and call outputs of the task's reference solution, replayed in a fresh instance (cached:
    an instance starts in the same state every time)."""
    key = json.dumps(
        [cfg.mcp.model_dump(), task.model_dump(include={"task_id", "turns", "reference_solution"})],
        sort_keys=True,
        default=str,
    )
    key = hashlib.sha256(key.encode()).hexdigest()
    if key in _REFERENCE_CACHE:
        _REFERENCE_CACHE.move_to_end(key)
        return _REFERENCE_CACHE[key]
    env = MCPEnv(cfg)
    try:
        env.reset(task)
        for turn in task.reference_solution or []:
            for call in turn:
                env.step(Action(tool_calls=[call]))
            env.step(Action(text="Done."))
        outcome = ReferenceOutcome(probe=env.probe(), outputs=[out for _, out, ok in env.executed if ok])
    finally:
        env.close()
    _REFERENCE_CACHE[key] = outcome
    while len(_REFERENCE_CACHE) > _CACHE_SIZE:
        _REFERENCE_CACHE.popitem(last=False)
    return outcome


def worked_examples(cfg: EnvConfig) -> list[ChatMessage]:
    """``env.mcp.examples`` as chat turns with their real outputs, each run on a fresh instance (so each example
    starts from the initial state), once per configuration."""
    plain = cfg.model_copy(update={"mcp": cfg.mcp.model_copy(update={"examples": []})})

    def play(_: int, example: MCPExample) -> Played:
        env = MCPEnv(plain)
        try:
            env.reset(None)
            steps = []
            for c in example.calls:
                call = ToolCall(name=c.name, arguments=dict(c.arguments))
                result = env._execute(call)
                if not result.ok:
                    raise EnvError(f"env.mcp.examples: {c.name} failed on a fresh sandbox: {result.output[:200]}")
                steps.append((call, result.output))
        finally:
            env.close()
        return example.request, steps, example.final

    return played_examples(cfg.mcp, cfg.mcp.examples, play)


def check_config(cfg: EnvConfig) -> None:
    from evolvekit.config import mcp_problem

    problem = mcp_problem(cfg)
    if problem:
        raise EnvError(problem)


@register_env("mcp", "any MCP tool server (stdio command or streamable-HTTP URL; extra 'mcp'), one per episode")
def _make(cfg: EnvConfig) -> MCPEnv:
    check_config(cfg)
    return MCPEnv(cfg)


def in_test_split(task: Task, share: float) -> bool:
    """A task's split is a pure function of its request, so re-synthesized copies land on the same side."""
    digest = hashlib.sha256("\n".join(task.turns).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share


@register_task_source("mcp", available=lambda cfg: bool(cfg.mcp.tasks_file))
def mcp_tasks(cfg: EnvConfig, split: str) -> list[Task]:
    """The tasks of ``env.mcp.tasks_file``, split into train and test by a hash of the request (``all``: every task,
    as `eval --subset all` scores a whole held-out panel)."""
    from evolvekit.env.task_file import load_task_file

    m: MCPConfig = cfg.mcp
    if not m.tasks_file:
        raise EnvError(
            "env.mcp.tasks_file is not set: an MCP server has no tasks of its own; make some with "
            "`evolvekit tasks synthesize --env mcp` (or turn questioning.enabled on)"
        )
    if split not in ("train", "test", "all"):
        raise EnvError(f"env.mcp.tasks_file has splits train and test (or all), not '{split}'")
    tasks = load_task_file(m.tasks_file)  # person-written, whatever the file says of itself
    if split == "all":
        return tasks[: cfg.family_tasks]
    return [t for t in tasks if in_test_split(t, m.test_share) == (split == "test")][: cfg.family_tasks]
