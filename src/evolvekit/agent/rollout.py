"""Rollout worker and manager: episodes of one task in one environment, run many at once.

Episodes are the engine's sessions (``engine/``): as soon as an episode's action is complete it is stepped in its
environment and its next prompt joins the sessions, and a new episode starts whenever one ends, so up to
``concurrency`` episodes decode together all the time. The native engine decodes them in one continuous batch
(``llm.batcher.DecodeBatch``); other engines in lock-step rounds, each gathering every waiting prompt into *one*
call (the OpenAI-compatible backend sends them concurrently). There is one path for every engine. A failing
episode is recorded with its error and the rest go on.
"""

from __future__ import annotations

import hashlib
import logging
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Generator, Sequence, cast

from evolvekit.agent.context import SnapshotRecorder
from evolvekit.agent.templates import BasicContext, TemplateSettings, make_context
from evolvekit.config import RolloutConfig
from evolvekit.engine.base import Engine
from evolvekit.env.action_text import CLOSE, OPEN, parse_action
from evolvekit.env.base import Environment, SearchesExperience, StateKeyed
from evolvekit.env.prompts import system_prompt
from evolvekit.errors import EnvError
from evolvekit.llm.base import LLM, Completion, SamplingParams
from evolvekit.progress import StageProgress
from evolvekit.types import CallOutcome, ChatMessage, ContextDecision, RewardParts, Step, Task, Trajectory, new_id

log = logging.getLogger(__name__)

STOP = (CLOSE,)  # decoding economy: a step ends as soon as its call is complete


def anchor_key(backend_state: str | None, earlier: Sequence[Step]) -> str:
    """GiGPO's anchor state of the next step: the environment state the agent acts from, as verl-agent identifies
    it by its observation. Here that is the backend state (``state_key()``, where the environment has one) together
    with every observation the episode has shown so far, so two rollouts of a task share an anchor exactly when the
    environment told them the same things in the same order and left the backend in the same state: all rollouts at
    their first step, the rollouts whose calls returned the same results after that. On a stateless backend
    (BFCL's MathAPI) the backend state alone never changes, and every turn became one step group."""
    h = hashlib.sha1((backend_state or "").encode("utf-8", "replace"))
    for step in earlier:
        h.update(b"\x00" + step.observation.encode())  # a Step's text is valid Unicode (types.py replaces surrogates)
    return h.hexdigest()


@dataclass
class RolloutJob:
    task: Task
    group_id: str = field(default_factory=lambda: new_id("group"))
    experience: str | None = None  # inserted into the system prompt as a recorded span (§4.2)
    experience_ids: tuple[str, ...] = ()


@dataclass
class _Episode:
    job: RolloutJob
    env: Environment
    context: BasicContext
    recorder: SnapshotRecorder
    trajectory: Trajectory
    done: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_spans: list = field(default_factory=list)
    prompt_ids: list[int] = field(default_factory=list)
    # the environment's backend-state key (GiGPO's anchor), found once when the episode starts; None: it has none
    state_key: Callable[[], str] | None = None


def _prepare(ep: _Episode, llm: LLM) -> None:
    """Let the context template manage the context before the next step; the policy's own management decisions
    (self-managing template) become trained steps of the trajectory (§6.2.1)."""
    ep.context.prepare(llm)
    for comp in ep.context.decisions:
        ep.trajectory.context_decisions.append(
            ContextDecision(
                before_step=len(ep.trajectory.steps),
                prompt_token_ids=list(comp.prompt_token_ids),
                completion_token_ids=list(comp.token_ids),
                completion_logprobs=list(comp.logprobs),
            )
        )
        ep.prompt_tokens += len(comp.prompt_token_ids)
        ep.completion_tokens += len(comp.token_ids)
    ep.context.decisions.clear()


def initial_context(reset, rendering: str, template: TemplateSettings) -> BasicContext:
    """The context a rollout starts from (system prompt with tools, worked examples, the task); the cold start's
    supervised prompts are built by the same function, so they equal what rollouts show the policy."""
    system = reset.system if reset.system else system_prompt(reset.tools, rendering)
    return make_context(template, system, reset.observation, reset.examples)


def _start(
    job: RolloutJob, make_env: Callable[[], Environment], rendering: str, template: TemplateSettings
) -> _Episode:
    env = make_env()
    try:
        ctx = initial_context(env.reset(job.task), rendering, template)
    except BaseException:  # a start that fails after the environment exists still frees it (a server, a JVM)
        _close_quietly(env)
        raise
    traj = Trajectory(task_id=job.task.task_id, group_id=job.group_id)
    if job.experience:
        ctx.insert_experience(job.experience)
        traj.flags.experience_guided = True
        traj.experience_used = list(job.experience_ids)
    return _Episode(
        job=job,
        env=env,
        context=ctx,
        recorder=SnapshotRecorder(),
        trajectory=traj,
        state_key=env.state_key if isinstance(env, StateKeyed) else None,  # the environment is built per episode
    )


def _advance(ep: _Episode, prompt_ids: list[int], comp: Completion, max_steps: int, rendering: str) -> None:
    text = comp.text
    if comp.finish_reason == "stop" and OPEN in text and CLOSE not in text:
        text += CLOSE  # generation stopped on the closing tag, which the text omits
    action_text, template_info = ep.context.parse_text(text)
    action = parse_action(action_text)
    index = len(ep.trajectory.steps)
    spans = list(ep.prompt_spans)
    ep.recorder.record(index, prompt_ids, comp.token_ids, comp.logprobs, spans=spans)
    events = [f"{e.kind}: {e.detail}" for e in ep.context.events]
    ep.context.events.clear()
    n_prompt, n_gen = len(prompt_ids) or comp.usage_prompt_tokens, comp.num_completion_tokens
    ep.prompt_tokens += n_prompt
    ep.completion_tokens += n_gen
    anchor = anchor_key(ep.state_key() if ep.state_key is not None else None, ep.trajectory.steps)
    t0 = time.perf_counter()
    result = ep.env.step(action)
    log.debug(
        "%s step %d: %d prompt tokens, %d generated (%s), environment %.2fs",
        ep.job.task.task_id, index, n_prompt, n_gen, comp.finish_reason, time.perf_counter() - t0,
    )  # fmt: skip
    ep.trajectory.steps.append(
        Step(
            index=index,
            action_text=text,
            tool_calls=action.tool_calls,
            parse_error=action.parse_error,
            observation=result.observation,
            reward=result.reward,
            done=result.done,
            prompt_token_ids=prompt_ids,
            completion_token_ids=comp.token_ids,
            completion_logprobs=comp.logprobs,
            spans=spans,
            grounding=result.grounding,
            turn_index=result.turn_index,
            new_turn=result.new_turn,
            finish_reason=comp.finish_reason,
            calls=[CallOutcome(name=r.name, ok=r.ok, unknown_tool=r.unknown_tool) for r in result.call_results],
            format_ok=template_info.format_ok,
            think_words=template_info.think_words,
            context_events=events,
            state_key=anchor,
        )
    )
    ep.context.add_assistant(text)
    if result.done:
        ep.done = True
        return
    if result.new_turn:
        if result.tools is not None:  # e.g. miss_func revealed functions: refresh the tool list
            ep.context.set_system(system_prompt(result.tools, rendering))
        ep.context.add_user(result.observation)
    else:
        ep.context.add_observation(result.observation)
    if len(ep.trajectory.steps) >= max_steps:
        ep.trajectory.flags.truncated = True
        ep.done = True


def _finish(ep: _Episode) -> Trajectory:
    traj = ep.trajectory
    try:
        if not traj.flags.failed:
            res = ep.env.evaluate(traj)
            traj.rewards = RewardParts(env=res.score)  # the record's first part; train/rewards.py adds the rest
            traj.outcome_reward = res.score
            traj.outcome_details = res.details
    except Exception as err:  # scoring must never take the batch down
        traj.flags.failed, traj.error = True, f"evaluate: {type(err).__name__}: {err}"
    finally:
        ep.env.close()
    if isinstance(ep.env, SearchesExperience) and ep.env.experience_ids_used:  # searched through a tool (EvolveR)
        traj.experience_used = list(dict.fromkeys([*traj.experience_used, *ep.env.experience_ids_used]))
    traj.prompt_tokens, traj.completion_tokens = ep.prompt_tokens, ep.completion_tokens
    traj.merged_sequences = len(ep.recorder.merge())
    return traj


def _advance_safely(ep: _Episode, prompt_ids: list[int], comp: Completion, max_steps: int, rendering: str) -> None:
    try:
        _advance(ep, prompt_ids, comp, max_steps, rendering)
    except Exception as err:
        log.warning("rollout of %s failed: %s", ep.job.task.task_id, err)
        ep.trajectory.flags.failed = True
        ep.trajectory.error = f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=3)}"
        ep.done = True


def require_a_valid_episode(trajs: Sequence[Trajectory], what: str) -> None:
    """Refuse a batch in which no episode ran (issue 54): every one failed to start, crashed or could not be scored.
    Training or scoring on it would report a score of 0 and exit 0; this is one EnvError line naming the first cause."""
    if not trajs or not all(t.flags.failed for t in trajs):
        return
    first = next((t.error for t in trajs if t.error), "no error recorded")
    raise EnvError(f"{what}: none of the {len(trajs)} episodes ran; the first error: {first.splitlines()[0][:300]}")


def _failed_start(job: RolloutJob, err: Exception) -> Trajectory:
    traj = Trajectory(task_id=job.task.task_id, group_id=job.group_id, error=f"reset: {type(err).__name__}: {err}")
    traj.flags.failed = True
    return traj


def _prompt(engine: Engine, ep: _Episode) -> list[int] | list[ChatMessage]:
    """The episode's next prompt in the engine's currency: token ids (with the spans of its recorded segments), or,
    for a chat-only engine, the messages (the completion then reports the prompt ids, if any)."""
    _prepare(ep, engine.llm)
    if engine.caps.token_ids:
        ep.prompt_ids, ep.prompt_spans = ep.context.tokenize(engine.llm)
        return ep.prompt_ids
    ep.prompt_ids, ep.prompt_spans = [], []
    return list(ep.context.messages)


def run_episode(
    engine: Engine,
    job: RolloutJob,
    make_env: Callable[[], Environment],
    rendering: str,
    template: TemplateSettings,
    max_steps: int,
) -> Generator[list[int] | list[ChatMessage], Completion, Trajectory]:
    """One episode, from its environment's start to its score, as a coroutine: it yields each prompt (in the
    engine's currency), receives the completion, steps the environment, and returns the trajectory. Nothing in it
    knows how many other episodes run beside it: ``run_rollouts`` runs many at once and the engine batches them.
    A failure (start, context, step or scoring) ends the episode with its error recorded."""
    try:
        ep = _start(job, make_env, rendering, template)
    except Exception as err:
        return _failed_start(job, err)
    while True:
        try:
            prompt = _prompt(engine, ep)
        except Exception as err:
            ep.trajectory.flags.failed = True
            ep.trajectory.error = f"context: {type(err).__name__}: {err}"
            return _finish(ep)
        try:
            comp = yield prompt
        except GeneratorExit:  # the driver dropped the episode (its batch failed): the environment is freed anyway
            _close_quietly(ep.env)
            raise
        _advance_safely(ep, ep.prompt_ids or comp.prompt_token_ids, comp, max_steps, rendering)
        if ep.done:
            return _finish(ep)


def _close_quietly(env: Environment) -> None:
    try:
        env.close()
    except Exception as err:  # noqa: BLE001 - whatever a plugin's close raises, the episode is over
        log.warning("closing an environment raised %s: %s", type(err).__name__, err)


def _drive(
    jobs: Sequence[RolloutJob],
    make_env: Callable[[], Environment],
    engine: Engine,
    cfg: RolloutConfig,
    params: SamplingParams,
    rendering: str,
    template: TemplateSettings,
    record: Callable[[int, Trajectory], None],
) -> None:
    """Up to ``cfg.concurrency`` episodes (``run_episode``) run at once as the engine's sessions: as soon as an
    episode's action is complete it is stepped in its environment and its next prompt joins the sessions, and a new
    episode starts whenever one ends. The native engine decodes them in one continuous batch (each episode's next
    turn reuses its own KV); other engines in lock-step rounds (``engine/sessions.py``)."""
    queue = deque(enumerate(jobs))
    live: dict[int, Generator[list[int] | list[ChatMessage], Completion, Trajectory]] = {}
    sessions = engine.sessions(params)

    def resume(i: int, comp: Completion | None) -> list[tuple[int, list[int] | list[ChatMessage]]]:
        """Run episode ``i`` to its next prompt; record it when it ends instead."""
        try:
            prompt = next(live[i]) if comp is None else live[i].send(comp)
        except StopIteration as end:
            del live[i]
            sessions.forget(i)
            record(i, end.value)
            return []
        return [(i, prompt)]

    def refill(items: list[tuple[int, list[int] | list[ChatMessage]]]) -> None:
        while queue and len(live) < cfg.concurrency:
            i, job = queue.popleft()
            live[i] = run_episode(engine, job, make_env, rendering, template, cfg.max_steps)
            items += resume(i, None)
        sessions.add(items)

    refill([])
    while len(sessions) or queue:
        items: list[tuple[int, list[int] | list[ChatMessage]]] = []
        for key, comp in sessions.step():
            items += resume(cast(int, key), comp)  # the key is the job's index
        refill(items)


def run_rollouts(
    jobs: Sequence[RolloutJob],
    make_env: Callable[[], Environment],
    engine: Engine,
    cfg: RolloutConfig,
    params: SamplingParams,
    rendering: str = "compact",
    show_progress: bool = True,
    template: TemplateSettings | None = None,
    on_done: Callable[[int, Trajectory], None] | None = None,
) -> list[Trajectory]:
    """Run every job to completion (``cfg.concurrency`` at a time); results are in job order. ``on_done(i, traj)``
    is called as job ``i`` finishes (evaluation writes each episode then)."""
    template = template or TemplateSettings(template=cfg.template, token_limit=cfg.context_token_limit)
    params = SamplingParams(  # one completion a prompt (n's default)
        temperature=params.temperature,
        top_p=params.top_p,
        max_new_tokens=params.max_new_tokens,
        stop=tuple(params.stop) + STOP,
        seed=params.seed,
        stop_on_balanced_json=True,
    )
    results: list[Trajectory | None] = [None] * len(jobs)
    with StageProgress("rollouts", len(jobs), show_bar=show_progress, logger=log) as progress:

        def record(i: int, traj: Trajectory) -> None:
            results[i] = traj
            if on_done is not None:
                on_done(i, traj)
            progress.advance()

        _drive(jobs, make_env, engine, cfg, params, rendering, template, record)
    return [r for r in results if r is not None]
