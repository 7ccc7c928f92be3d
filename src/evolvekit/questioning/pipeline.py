"""Self-questioning end to end: exploration → synthesis → curation (dedup, feasibility) → tasks with provenance."""

from __future__ import annotations

import logging
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Sequence

from evolvekit.config import Config, EnvConfig, QuestioningConfig, forced_choice
from evolvekit.engine.base import Capabilities
from evolvekit.engine.registry import seam
from evolvekit.env.base import Environment
from evolvekit.llm.base import LLM, SamplingParams
from evolvekit.questioning.curate import (
    Deduplicator,
    ToolAgreement,
    grounding,
    numbers_exact,
    passes_without_acting,
    replay_feasible,
)
from evolvekit.questioning.explore import ExplorationTrace, Explorer
from evolvekit.questioning.requests import RequestFilters, RequestFunnel, RequestWriter, RoundTrip, pass_rate
from evolvekit.questioning.synthesize import TaskSynthesizer, chain_shots, follow_up_shots, shots_from_examples
from evolvekit.types import Task

log = logging.getLogger(__name__)


@dataclass
class Funnel:
    explored: int = 0  # exploration trajectories
    explored_calls: int = 0  # successfully executed calls in them
    synthesized: int = 0
    deduplicated: int = 0  # removed as lexical or semantic duplicates
    ungrounded: int = 0  # removed because the request does not state enough of the reference's arguments
    tool_disagreement: int = 0  # removed because the request asks for other tools than its reference calls
    infeasible: int = 0  # removed by the replay of their reference solution
    kept: int = 0
    synthesis_unparseable: int = 0
    unchained: int = 0  # multi-turn synthesis (difficulty.turns > 1): explorations with no chain of dependent calls
    unlearnable: int = 0  # removed by the pass filter: the policy's attempts all succeeded or all failed
    trivial: int = 0  # removed because the environment's check passes an episode with no call (nothing to learn)
    heldout_split_wording: int = 0  # removed: worded like a task of the held-out split (numbers masked)
    heldout_panel_wording: int = 0  # removed: worded like a task of a held-out panel (train.eval_panels)
    # back-translated requests (questioning.requests.mode: backtranslate; questioning/requests.py): per window of
    # explored calls, the candidates sampled, each filter's drops, the windows no candidate survived for that the
    # documented mode's ask filled (fallback) or left with no request (none), the candidates whose round trip never
    # succeeded, and the surviving phrasings of a window other than its kept one
    request_windows: int = 0
    request_candidates: int = 0
    request_unparseable: int = 0
    request_values: int = 0
    request_identifiers: int = 0
    request_duplicates: int = 0
    request_fallback: int = 0
    request_none: int = 0
    request_round_trip: int = 0
    request_other_phrasings: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class SynthesisSettings:
    """What self-questioning's pipeline reads of the config, gathered by the composition (``of``): the questioning
    section, the environment, the synthesizer's number constraint resolved for its model, and the synthetic held-out
    file dedup runs against."""

    questioning: QuestioningConfig
    env: EnvConfig
    numbers_constrained: bool = False
    eval_synthetic: str | None = None
    # the held-out tasks' wordings (numbers masked) no synthesized task may share: the split's, the panels'
    heldout: HeldoutWordings = field(default_factory=lambda: HeldoutWordings())

    @classmethod
    def of(cls, cfg: Config) -> SynthesisSettings:
        return cls(
            questioning=cfg.questioning,
            env=cfg.env,
            numbers_constrained=forced_choice(cfg.questioning.numbers_constrained, cfg.models.synthesizer),
            eval_synthetic=cfg.train.eval_synthetic,
            heldout=HeldoutWordings.of(cfg),
        )


_NUMBER = re.compile(r"-?\d+(?:[.,]\d+)*")


def wording(query: str | list[str]) -> str:
    """A request's wording with its numbers masked: "What is 57 plus 7?" and "What is 50 minus 8?" differ, "What is
    50 minus 8?" and "What is 3 minus 9?" do not (the same template)."""
    text = query if isinstance(query, str) else "\n".join(query)
    return " ".join(re.sub(r"[^a-z0-9#]+", " ", _NUMBER.sub("#", text.lower())).split())


@dataclass(frozen=True)
class HeldoutWordings:
    """The wordings of the held-out evaluation's tasks: the environment's eval split and each panel file. A
    synthesized task worded like one of them is dropped, so no training task shares a held-out template (the
    requests are read for this filter only; no reference or end state)."""

    split: frozenset[str] = frozenset()
    panels: frozenset[str] = frozenset()

    @classmethod
    def of(cls, cfg: Config) -> HeldoutWordings:
        from evolvekit.env.registry import env_tasks, has_task_source
        from evolvekit.env.task_file import load_task_file

        evaluating = cfg.train.eval_before or cfg.train.eval_after or cfg.train.eval_every
        split = env_tasks(cfg.env, cfg.env.eval_split) if evaluating and has_task_source(cfg.env) else []
        panels = [t for p in cfg.train.eval_panels for t in load_task_file(p)]
        return cls(frozenset(wording(t.query) for t in split), frozenset(wording(t.query) for t in panels))

    def drop(self, tasks: Sequence[Task], funnel: Funnel) -> list[Task]:
        kept = []
        for t in tasks:
            w = wording(t.query)
            if w in self.split or w in self.panels:
                which = "split" if w in self.split else "panel"
                if which == "split":
                    funnel.heldout_split_wording += 1
                else:
                    funnel.heldout_panel_wording += 1
                log.info("synthesized task dropped: worded like a held-out %s task: %r", which, t.query)
            else:
                kept.append(t)
        return kept


def sandbox_for(env: EnvConfig) -> dict:
    """The sandbox the explorer starts in, made by the environment, never read off a person-written task (the
    information boundary, boundary.py). A task family: its tool subset in a state drawn from the family's own
    generator (``TaskFamily.sandbox_state``: a file tree for ``fs_chain``; an empty file system leaves an explorer
    little but ``ls`` that succeeds); a family without state (arith_turns) keeps an empty one. Plain BFCL: the
    configured backends (empty = the environment's defaults) in their own default states, with the state the
    families' generators draw for the backends they cover (the file system's tree)."""
    from evolvekit.env.bfcl.families import FAMILIES, get_family

    if env.family:
        fam = get_family(env.family)
        state = fam.sandbox_state()  # the family's generator, not a person-written task
        return {"classes": list(fam.classes), "tools": list(fam.tools), "initial_config": state, "family": fam.name}
    classes = list(env.backends)
    made: dict = {}
    if env.name == "bfcl":
        for other in FAMILIES.values():
            if not classes or set(other.classes) <= set(classes):
                for cls, cls_state in other.sandbox_state().items():
                    made.setdefault(cls, cls_state)
    return {"classes": classes, "initial_config": made}


def known_tasks(
    env: EnvConfig, eval_synthetic: str | None = None, train_tasks: Sequence[Task] | None = None
) -> list[Task]:
    """The tasks a synthesis dedups against (§3.3): the environment's real training tasks (``train_tasks`` when the
    caller has them) and the synthetic held-out file, so no synthesized task copies a training or held-out one."""
    from evolvekit.env.registry import env_tasks, has_task_source
    from evolvekit.env.task_file import load_task_file

    if train_tasks is None:
        train_tasks = env_tasks(env, env.train_split) if has_task_source(env) else []
    held = load_task_file(eval_synthetic) if eval_synthetic else []
    return list(train_tasks) + list(held)


def synthetic_metadata(sandbox: dict) -> dict:
    """Task metadata every synthetic task of this sandbox carries (classes, tool subset, family)."""
    meta = {"category": "synthetic", "involved_classes": sandbox.get("classes", [])}
    if sandbox.get("tools"):
        meta["allowed_tools"] = sandbox["tools"]
    if sandbox.get("family"):
        meta["family"] = sandbox["family"]
    return meta


def scaffold_on(mode: str, llm: LLM, role: str = "explorer") -> bool:
    """questioning.scaffold: 'auto' turns the small-model scaffolds on for in-process (local) models. A served model
    cannot be constrained: it works without them, said once per role (a small served model may then make no tool
    call at all, or write no task)."""
    constrained = Capabilities.of(llm).constrained
    if mode == "auto" and not constrained and role not in _UNSCAFFOLDED:
        _UNSCAFFOLDED.add(role)
        log.warning(
            "questioning.scaffold: the %s (%s) is served, so its output cannot be constrained: it runs without the "
            "decoding scaffold; a small served model may then make no tool call or write no task (an in-process "
            "models.%s keeps it)",
            role, getattr(llm, "name", "?"), role,
        )  # fmt: skip
    return mode == "on" or (mode == "auto" and constrained)


_UNSCAFFOLDED: set[str] = set()  # roles already warned about


def explorer_and_synthesizer(
    settings: SynthesisSettings,
    explorer_llm: LLM,
    explorer_params: SamplingParams,
    synth_llm: LLM,
    synth_params: SamplingParams,
    make_env: Callable[[], Environment],
    sandbox: dict,
    agreement: ToolAgreement | None = None,
) -> tuple[Explorer, TaskSynthesizer]:
    q = settings.questioning
    explorer = Explorer(
        seam(explorer_llm),
        explorer_params,
        q.n_breadth,
        q.n_depth,
        settings.env.tool_rendering,
        scaffold=scaffold_on(q.scaffold, explorer_llm),
        show_start=q.explore_state,
    )
    targeted = scaffold_on(q.scaffold, synth_llm, "synthesizer")
    shots: list[tuple[str, str]] = []
    follow: list[tuple[str, str]] = []
    chained: list[tuple[str, str]] = []
    tools: list = []
    examples: list = []
    writer = written(q, synth_llm, synth_params) if targeted else None
    if targeted or q.difficulty.turns > 1 or q.difficulty.chained:
        # the environment's worked examples become (calls -> request) examples for the synthesizer: self-contained
        # requests for a task's first turn, follow-up turns (which refer to an earlier result) for its later ones,
        # and one request over several dependent calls (difficulty.chained); back-translation shows none (its
        # framings show the calls only) but the tools' descriptions
        env = make_env()
        try:
            reset = env.reset(None, sandbox)
        finally:
            env.close()
        examples, tools = reset.examples, list(reset.tools)
        shots, follow, chained = shots_from_examples(examples), follow_up_shots(examples), chain_shots(examples)
    return explorer, TaskSynthesizer(
        seam(synth_llm),
        synth_params,
        q.difficulty,
        q.style_rubrics,
        targeted=targeted,
        shots=shots,
        follow_shots=follow,
        chain_shots=chained,
        candidates=q.request_candidates,
        agreement=agreement,
        numbers_constrained=settings.numbers_constrained,
        writer=writer,
        tools=tools,
        shots_examples=examples if writer is not None else (),
    )


def written(q: QuestioningConfig, synth_llm: LLM, synth_params: SamplingParams):
    """The back-translation writer and its filters for single-turn synthesis (``questioning.requests.mode:
    backtranslate``), or None (the documented mode; multi-turn and chained synthesis keep their own asks)."""
    r = q.requests
    if r.mode != "backtranslate" or q.difficulty.turns > 1 or q.difficulty.chained:
        return None
    filters = RequestFilters(r.values, r.identifiers, 0.8 if r.dedup else 2.0, r.round_trip_samples > 0, r.shortlist)
    return RequestWriter(seam(synth_llm), synth_params, r.per_framing), filters


def round_tripped(
    tasks: Sequence[Task], trip: RoundTrip | None, make_env: Callable[[], Environment], funnel: Funnel
) -> list[Task]:
    """Filter 4 for synthesized tasks, then one task per window of explored calls. Each candidate's round trip (the
    policy, shown the request and the run's examples, ``make_env``) gives its pass rate p, recorded on the task
    (``metadata["curation"]["round_trip"]``) as its first learnability estimate; a candidate with no success is
    dropped. Of a window's survivors the one nearest the learner's frontier is kept: the largest p(1 - p) (LILO, arXiv
    2502.12272), then the larger p; the others are counted as other phrasings. Without a round trip, the window's
    first candidate."""
    rewards = trip(tasks, make_env) if trip is not None and tasks else [[] for _ in tasks]
    groups: dict[tuple, list[tuple[Task, float]]] = {}
    for task, r in zip(tasks, rewards, strict=True):
        p = pass_rate(r) if trip is not None else 1.0
        if trip is not None:
            task.metadata.setdefault("curation", {})["round_trip"] = {"rewards": list(r), "pass_rate": round(p, 3)}
            if p == 0:
                funnel.request_round_trip += 1
                log.info("synthesized task dropped: no round trip succeeded in %d attempts: %r", len(r), task.query)
                continue
        key = (task.metadata.get("exploration_id"), tuple(task.metadata.get("explored_steps") or ()))
        groups.setdefault(key, []).append((task, p))
    kept = []
    for group in groups.values():
        best = max(group, key=lambda tp: (tp[1] * (1 - tp[1]), tp[1])) if trip is not None else group[0]
        kept.append(best[0])
        funnel.request_other_phrasings += len(group) - 1
    return kept


def add_requests(funnel: Funnel, found: RequestFunnel) -> None:
    """A synthesis round's text-filter counts (``SynthesisReport.requests``) into the pipeline's funnel."""
    funnel.request_windows += found.calls
    funnel.request_candidates += found.candidates
    funnel.request_unparseable += found.unparseable
    funnel.request_values += found.values
    funnel.request_identifiers += found.identifiers
    funnel.request_duplicates += found.duplicates
    funnel.request_fallback += found.fallback


# seed offset per exploration already made: a round's seeds never repeat an earlier round's (the explorer adds its step)
_ROUND_STRIDE = 1_000


def _reseed(explorer: Explorer, synth: TaskSynthesizer, done: int) -> None:
    """Seeded sampling (``run.seed``): a round of exploration and synthesis after ``done`` explorations draws its own
    samples, offset from each role's seed; unseeded roles stay unseeded."""
    explorer.start_round(_ROUND_STRIDE * done)
    synth.start_round(_ROUND_STRIDE * done)


def synthesize_tasks(
    settings: SynthesisSettings,
    n: int,
    explorer_llm: LLM,
    explorer_params: SamplingParams,
    synth_llm: LLM,
    synth_params: SamplingParams,
    make_env: Callable[[], Environment],
    embed=None,
    existing: Sequence[Task] = (),
    max_rounds: int = 5,
    on_round: Callable[[Funnel, list[ExplorationTrace], list[Task]], None] | None = None,
    resume: Sequence[Task] = (),
    funnel: Funnel | None = None,
    probe: PassProbe | None = None,
    trip: RoundTrip | None = None,
) -> tuple[list[Task], Funnel, list[ExplorationTrace]]:
    """Rounds of exploration → synthesis → curation until ``n`` tasks are kept or ``max_rounds`` ran.

    ``on_round(funnel, new_traces, new_kept)`` is called after every round, so a caller can persist each round's
    explorations and kept tasks as they come (a killed run keeps the rounds it finished). At most ``n`` tasks are
    kept in all: a round's surplus is dropped before ``on_round`` sees it.

    ``resume`` continues an interrupted synthesis: the tasks it had kept count towards ``n`` (and take part in
    dedup), and ``funnel`` carries its counts on. ``max_rounds`` counts the rounds of this call only.

    ``probe`` (with ``questioning.pass_filter_samples`` > 0) scores the policy's attempts at each curated task; only
    tasks with mixed outcomes are kept (``learnable``).

    ``trip``: the requests' round trip under ``questioning.requests.mode: backtranslate`` (``round_tripped``); None
    switches that filter off.
    """
    q = settings.questioning
    sandbox = sandbox_for(settings.env)
    checks = curation_checks(q, make_env, sandbox, embed)
    explorer, synth = explorer_and_synthesizer(
        settings, explorer_llm, explorer_params, synth_llm, synth_params, make_env, sandbox, checks.agreement
    )
    dedup = Deduplicator(embed, q.lexical_dedup_threshold, q.semantic_dedup_threshold)
    dedup.seed(list(existing) + list(resume))
    funnel = funnel if funnel is not None else Funnel()
    kept, traces = list(resume)[:n], []
    meta = synthetic_metadata(sandbox)
    for _ in range(max_rounds):
        if len(kept) >= n:
            break
        _reseed(explorer, synth, funnel.explored)  # a resumed synthesis goes on
        new = explorer.explore(make_env, sandbox, q.explore_runs, q.explore_steps)
        traces += new
        funnel.explored += len(new)
        funnel.explored_calls += sum(len(t.successful_calls()) for t in new)
        rep = synth.synthesize(new, settings.env.name, meta)
        funnel.synthesized += len(rep.tasks)
        funnel.synthesis_unparseable += rep.unparseable
        funnel.unchained += rep.unchained
        add_requests(funnel, rep.requests)
        if synth.writer is not None:
            funnel.request_none += rep.unparseable
        for t in rep.tasks:
            t.metadata["bfcl_id"] = t.task_id
        new_kept = curate_new(settings.heldout.drop(rep.tasks, funnel), dedup, make_env, funnel, checks)
        if synth.writer is not None:
            new_kept = round_tripped(new_kept, trip, make_env, funnel)
        if probe is not None and q.pass_filter_samples:
            new_kept = learnable(new_kept, probe, funnel)
        new_kept = new_kept[: n - len(kept)]
        kept += new_kept
        funnel.kept = len(kept)  # the tasks returned (a round may pass more than were asked for)
        if on_round:
            on_round(funnel, new, new_kept)
    return kept, funnel, traces


# the rewards of the policy's attempts at each task, one list per task (questioning.pass_filter_samples attempts)
PassProbe = Callable[[Sequence[Task]], list[list[float]]]


def mixed(rewards: Sequence[float]) -> bool:
    """A group whose rewards are not all equal: the only kind whose group-normalised advantages (Eq. 16) are not
    all zero, i.e. the only kind GRPO learns from."""
    return len(set(rewards)) > 1


def learnable(tasks: Sequence[Task], probe: PassProbe, funnel: Funnel) -> list[Task]:
    """evolvekit's pass filter (not in the papers): keep the tasks on which the policy's attempts have mixed
    outcomes; each kept task records its attempts' rewards in ``metadata["curation"]["policy_rewards"]``."""
    if not tasks:
        return []
    kept = []
    for task, rewards in zip(tasks, probe(tasks), strict=True):
        if mixed(rewards):
            task.metadata.setdefault("curation", {})["policy_rewards"] = [round(r, 3) for r in rewards]
            kept.append(task)
        else:
            log.info("synthesized task dropped by the pass filter (rewards %s, not mixed): %r", rewards, task.query)
    funnel.unlearnable += len(tasks) - len(kept)
    return kept


@dataclass
class CurationChecks:
    """evolvekit's own request checks, applied before dedup (all off by default): the grounding share
    (``questioning.grounding_threshold``), exact numbers (``grounding_exact``) and tool agreement
    (``tool_agreement``)."""

    min_grounding: float = 0.0
    exact_numbers: bool = False
    agreement: ToolAgreement | None = None
    # CoEvolve §3.3 (``coevolve.keep_positive_reward``, its re-explored tasks only): a reference whose replay fails but
    # earns a positive reward is kept
    keep_positive: bool = False


def curation_checks(
    q: QuestioningConfig, make_env: Callable[[], Environment], sandbox: dict, embed=None
) -> CurationChecks:
    """The checks the questioning section asks for; tool agreement reads the sandbox's tools from one reset."""
    agreement = None
    if q.tool_agreement:
        if embed is None:
            raise ValueError("questioning.tool_agreement needs an embedding model (embedding.model)")
        env = make_env()
        try:
            tools = env.reset(None, sandbox).tools
        finally:
            env.close()
        agreement = ToolAgreement(embed, tools)
    return CurationChecks(q.grounding_threshold, q.grounding_exact, agreement)


def curate_new(
    tasks: Sequence[Task],
    dedup: Deduplicator,
    make_env: Callable[[], Environment],
    funnel: Funnel,
    checks: CurationChecks | None = None,
) -> list[Task]:
    """The request checks (``checks``: grounding share, exact numbers, tool agreement), dedup against everything
    seen, then the feasibility replay; returns the kept tasks. The checks come first, so a dropped request does not
    block a later, better one as its duplicate."""
    checks = checks or CurationChecks()
    scores = {id(t): grounding(t) for t in tasks} if checks.min_grounding > 0 else {}
    grounded = [
        t
        for t in tasks
        if scores.get(id(t), 1.0) >= checks.min_grounding and (not checks.exact_numbers or numbers_exact(t))
    ]
    _dropped(tasks, grounded, "its request does not state its reference's values (grounding)")
    funnel.ungrounded += len(tasks) - len(grounded)
    if checks.agreement is not None:
        agreed = [t for t in grounded if checks.agreement.agrees(t)]
        _dropped(grounded, agreed, "its request asks for other tools than its reference calls")
        funnel.tool_disagreement += len(grounded) - len(agreed)
        grounded = agreed
    kept = []
    d = dedup.filter(grounded)
    _dropped(grounded, d.kept, "a duplicate of a known or earlier task")
    funnel.deduplicated += d.lexical_duplicates + d.semantic_duplicates
    for t in d.kept:
        ok, reason = replay_feasible(t, make_env, keep_positive=checks.keep_positive)
        if ok and passes_without_acting(t, make_env):
            funnel.trivial += 1
            log.info("synthesized task dropped: the check passes it with no call (nothing to learn): %r", t.query)
            continue
        if ok:
            t.metadata["curation"] = {"dedup": "passed", "feasibility": reason or "replayed"}
            if checks.min_grounding > 0:
                t.metadata["curation"]["grounding"] = round(scores[id(t)], 3)
            if checks.exact_numbers:
                t.metadata["curation"]["numbers"] = "exact"
            if checks.agreement is not None:
                t.metadata["curation"]["tools"] = "agree"
            kept.append(t)
        else:
            funnel.infeasible += 1
            log.info(
                "synthesized task dropped: its reference does not pass on a fresh sandbox (%s): %r", reason, t.query
            )
    funnel.kept += len(kept)
    return kept


def _dropped(before: Sequence[Task], after: Sequence[Task], why: str) -> None:
    """One INFO line per synthesized task a curation step dropped, with the reason."""
    left = {id(t) for t in after}
    for t in before:
        if id(t) not in left:
            log.info("synthesized task dropped: %s: %r", why, t.query)


def goal_explorer(
    settings: SynthesisSettings,
    rounds: int,
    steps: int,
    explorer_llm: LLM,
    explorer_params: SamplingParams,
    synth_llm: LLM,
    synth_params: SamplingParams,
    make_env: Callable[[], Environment],
    dedup: Deduplicator,
    funnel: Funnel,
    keep_positive: bool = False,
) -> Callable[[str, str], list[Task]]:
    """CoEvolve §3.2: re-explore from a signal context (``rounds`` runs × ``steps`` steps: ``coevolve.reexplore_rounds``
    and ``reexplore_steps``), then synthesize and curate like any exploration; ``keep_positive``
    (``coevolve.keep_positive_reward``, §3.3) also keeps a task whose reference fails but earns a positive reward."""
    sandbox = sandbox_for(settings.env)
    checks = curation_checks(settings.questioning, make_env, sandbox, dedup.embed)
    checks = replace(checks, keep_positive=keep_positive)
    explorer, synth = explorer_and_synthesizer(
        settings, explorer_llm, explorer_params, synth_llm, synth_params, make_env, sandbox, checks.agreement
    )
    meta = synthetic_metadata(sandbox)

    def explore(goal: str) -> list[ExplorationTrace]:
        _reseed(explorer, synth, funnel.explored)  # each re-exploration draws anew
        return explorer.explore(make_env, sandbox, rounds, steps, goal=goal)

    def curate(tasks: list[Task]) -> list[Task]:
        kept = curate_new(settings.heldout.drop(tasks, funnel), dedup, make_env, funnel, checks)
        return kept if synth.writer is None else round_tripped(kept, None, make_env, funnel)  # one per window

    return _Reexplore(
        explore,
        curate,
        synth,
        settings.env.name,
        meta,
        funnel,
    )


class _Reexplore:
    """The CoEvolve re-exploration callable (``kind, goal -> tasks``); keeps its traces for the run store."""

    def __init__(self, explore, curate, synth, env_name: str, meta: dict, funnel: Funnel) -> None:
        self.explore, self.curate, self.synth = explore, curate, synth
        self.env_name, self.meta, self.funnel = env_name, meta, funnel
        self.traces: list = []

    def __call__(self, kind: str, goal: str) -> list[Task]:
        traces = self.explore(goal)
        self.traces += traces
        self.funnel.explored += len(traces)
        rep = self.synth.synthesize(traces, self.env_name, self.meta)
        self.funnel.synthesized += len(rep.tasks)
        self.funnel.unchained += rep.unchained
        for t in rep.tasks:
            t.metadata["bfcl_id"] = t.task_id
        return self.curate(rep.tasks)
