"""The typed core data model: the only shapes that cross module boundaries.

Every model round-trips through JSON (``model_dump_json`` / ``model_validate_json``) and carries
``schema_version`` so stored data can be migrated when the shapes change.
"""

from __future__ import annotations

import json
import re
import uuid
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SCHEMA_VERSION = 2  # 2: Step.info, reward parts and Evolving-RL roles became typed fields (old data migrates)


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


_SURROGATE = re.compile("[\ud800-\udfff]")


def storable(value: Any) -> Any:
    """``value`` with every string made encodable as UTF-8 (a lone surrogate such as ``"\\ud800"`` from an
    environment or a model becomes U+FFFD), through dicts and lists; anything else unchanged. Applied to every field
    of the data model at construction and assignment, so no text that crosses a module boundary can crash a JSON
    dump or an SQLite insert."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        if not value or isinstance(value[0], (int, float)):  # token ids, log-probs: no text
            return value
        return value if len(value) >= _WIDE and _clean(value) else [storable(v) for v in value]
    if isinstance(value, dict):
        return value if len(value) >= _WIDE and _clean(value) else {storable(k): storable(v) for k, v in value.items()}
    return value


_WIDE = 16  # containers this wide are first checked in one C pass; narrower ones are walked (cheaper than the pass)
# an object that is not JSON (a model already built: its own strings were made storable) is written as null
_ENCODER = json.JSONEncoder(ensure_ascii=False, default=lambda _: None)


def _clean(value: list | dict) -> bool:
    """True when no string anywhere in ``value`` holds a lone surrogate: one pass of the C JSON encoder instead of a
    Python walk (a request of 30,000 tool calls). False also when the encoder cannot tell (a key that is not a
    string or number, a cycle): the caller then walks."""
    try:
        _ENCODER.encode(value).encode("utf-8")
    except (UnicodeEncodeError, TypeError, ValueError, RecursionError):
        return False
    return True


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    schema_version: int = SCHEMA_VERSION

    @field_validator("*", mode="before")
    @classmethod
    def _storable(cls, v: Any) -> Any:
        return storable(v)


class TaskSource(str, Enum):
    REAL = "real"
    SYNTHETIC = "synthetic"


class Difficulty(BaseModel):
    """Task difficulty as AgentEvolver §3.2 measures it: entities, attributes and operations involved."""

    model_config = ConfigDict(extra="forbid")
    entities: int = 0
    attributes: int = 0
    operations: int = 0


class ToolCall(_Model):
    """One structured call: a tool name and keyword arguments (never free text to be eval'd)."""

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    call_id: str | None = None


class ChatMessage(BaseModel):
    """One chat message in OpenAI form (role + content)."""

    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "user", "assistant", "tool"]
    content: str
    name: str | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _storable(cls, v: Any) -> Any:
        return storable(v)


class Task(_Model):
    """A task: what the agent is asked, in which environment, from which initial state."""

    task_id: str = Field(default_factory=lambda: new_id("task"))
    env_name: str
    query: str | list[str]  # one user message, or one per turn for multi-turn tasks
    initial_config: dict[str, Any] = Field(default_factory=dict)
    reference_solution: list[list[ToolCall]] | None = None  # per turn, the calls that solve it
    source: TaskSource = TaskSource.REAL
    difficulty: Difficulty | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def turns(self) -> list[str]:
        return [self.query] if isinstance(self.query, str) else list(self.query)


class SpanKind(str, Enum):
    POLICY = "policy"  # tokens the policy generated (loss mask 1)
    PROMPT = "prompt"  # system/user/tool text (loss mask 0)
    EXPERIENCE = "experience"  # retrieved experience inserted into the context (stripped before update)


class TokenSpan(BaseModel):
    """A half-open token range [start, end) inside a merged token sequence, with what it holds."""

    model_config = ConfigDict(extra="forbid")
    start: int
    end: int
    kind: SpanKind


class StepGrounding(BaseModel):
    """Execution facts about one step, from an environment that can compare its state with the task's reference
    (attributing/grounded.py turns them into GOOD/BAD). Distances count the differing leaves of the backend state
    against the state the reference solution reaches by the end of the current turn; None where the environment
    has no such state (stateless backends, no reference)."""

    model_config = ConfigDict(extra="forbid")
    state_changed: bool = False
    distance_before: int | None = None
    distance_after: int | None = None


class CallOutcome(BaseModel):
    """How one tool call of a step went (from the environment's ``CallResult``)."""

    model_config = ConfigDict(extra="forbid")
    name: str = ""
    ok: bool = True  # executed and not refused
    unknown_tool: bool = False  # the environment offers no tool of that name


# what used to live in Step.info (schema 1), now typed fields
_STEP_INFO_KEYS = (
    "turn_index",
    "new_turn",
    "finish_reason",
    "calls",
    "format_ok",
    "think_words",
    "context_events",
    "state_key",
)


class Step(_Model):
    """One agent step: what the model produced, what it meant, and what the environment answered."""

    index: int
    action_text: str
    tool_calls: list[ToolCall] = Field(default_factory=list)
    parse_error: str | None = None
    observation: str = ""
    reward: float = 0.0
    done: bool = False
    prompt_token_ids: list[int] = Field(default_factory=list)
    completion_token_ids: list[int] = Field(default_factory=list)
    completion_logprobs: list[float] = Field(default_factory=list)
    spans: list[TokenSpan] = Field(default_factory=list)  # marked ranges of prompt_token_ids (inserted experience)
    grounding: StepGrounding | None = None  # set by environments that compare state with the reference (BFCL)
    turn_index: int = 0  # the environment's turn after the step
    new_turn: bool = False  # the observation is the next user message
    finish_reason: str = "stop"
    calls: list[CallOutcome] = Field(default_factory=list)  # one per tool call, in order
    format_ok: bool | None = None  # reasoning template: the <think> structure was followed
    think_words: int | None = None  # reasoning template: words of thinking
    context_events: list[str] = Field(default_factory=list)  # context management (summaries, evictions)
    state_key: str | None = None  # the environment state before the step (GiGPO's anchor state)

    @model_validator(mode="before")
    @classmethod
    def _from_schema_1(cls, data: Any) -> Any:
        """Stored steps of schema 1 kept these fields in a free ``info`` dict: lift them out."""
        if isinstance(data, dict) and isinstance(data.get("info"), dict):
            data = dict(data)
            info = data.pop("info")
            for key in _STEP_INFO_KEYS:
                if key in info and key not in data:
                    data[key] = info[key]
        return data


class StepLabel(str, Enum):
    GOOD = "GOOD"
    BAD = "BAD"
    NEUTRAL = "NEUTRAL"  # grounded credit's generic fallback: no evidence either way (attribution reward 0)


class TrajectoryFlags(BaseModel):
    model_config = ConfigDict(extra="forbid")
    experience_guided: bool = False
    truncated: bool = False
    failed: bool = False  # the rollout itself crashed (error recorded), not a task failure
    attribution_neutralised: bool = False


class RewardParts(BaseModel):
    """The parts a training reward is made of (None: not part of this trajectory's reward), an immutable record.

    The rollout records ``env``; the judge stage ``state_score`` and ``judge_score`` (synthesized tasks); Evolving-RL
    ``skill_utility`` (extractors). ``train/rewards.py: shape_rewards`` then computes ``outcome``, the shaping parts
    and the trajectory's ``outcome_reward`` from them, once; nothing else writes ``outcome_reward``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    env: float | None = None  # the environment's own check of the episode, as the rollout recorded it
    outcome: float | None = None  # before shaping: env, a synthesized task's judge mix, or an extractor's utility
    format: float | None = None  # R_format (EvolveR) of reward shaping
    reasoning: float | None = None  # the reasoning template's reward
    state_score: float | None = None  # synthetic tasks: the environment's state check
    judge_score: float | None = None  # synthetic tasks: the LLM judge (None: not judged, or its fallback)
    skill_utility: float | None = None  # Evolving-RL extractor: its skill's mean downstream reward (Eq. 2)


class EvolvingRole(BaseModel):
    """Evolving-RL: which role a trajectory played in the joint extractor/solver update."""

    model_config = ConfigDict(extra="forbid")
    role: Literal["source", "extractor", "solver"]
    source: int  # index of the source task in the iteration
    skill: int | None = None  # which candidate skill (extractor, and the solvers that used it)
    task_index: int | None = None  # solvers: which of the K related tasks
    abnormal: bool = False  # extractor: the skill text was judged abnormal (reward 0)
    related: list[str] = Field(default_factory=list)  # extractor: the K related task ids


_REWARD_KEYS = ("outcome", "format", "reasoning", "state_score", "judge_score")


class ContextDecision(BaseModel):
    """The policy's own context-management decision (the self-managing template, AgentEvolver §6.2.1: keep /
    remove / compress per message), with the tokens it generated, so it is trained as a step of its own."""

    model_config = ConfigDict(extra="forbid")
    before_step: int  # the index of the agent step it preceded
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    completion_logprobs: list[float] = Field(default_factory=list)


class Trajectory(_Model):
    """A whole episode of one task, as produced by a rollout worker."""

    trajectory_id: str = Field(default_factory=lambda: new_id("traj"))
    task_id: str
    group_id: str | None = None
    steps: list[Step] = Field(default_factory=list)
    outcome_reward: float | None = None
    outcome_details: dict[str, Any] = Field(default_factory=dict)
    step_attributions: list[StepLabel] | None = None
    attribution_source: str | None = None  # who wrote step_attributions: a step-credit source's registered name
    experience_used: list[str] = Field(default_factory=list)  # experience ids
    flags: TrajectoryFlags = Field(default_factory=TrajectoryFlags)
    error: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)  # free-form, for users' own annotations
    rewards: RewardParts = Field(default_factory=RewardParts)
    evolving: EvolvingRole | None = None
    prompt_tokens: int = 0  # tokens the policy read over the episode (per call: the whole prompt)
    completion_tokens: int = 0
    merged_sequences: int = 0  # training sequences the episode's timeline merges into
    context_decisions: list[ContextDecision] = Field(default_factory=list)  # self-managing template only

    @model_validator(mode="before")
    @classmethod
    def _from_schema_1(cls, data: Any) -> Any:
        """Schema 1 kept reward parts in ``outcome_details`` and Evolving-RL roles and token counts in ``metadata``."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        details = dict(data.get("outcome_details") or {})
        meta = dict(data.get("metadata") or {})
        if "rewards" not in data and any(k in details for k in _REWARD_KEYS):
            data["rewards"] = {k: details.pop(k) for k in _REWARD_KEYS if k in details}
            data["outcome_details"] = details
        if "evolving" not in data and meta.get("role") in ("source", "extractor", "solver"):
            data["evolving"] = {
                k: meta.pop(k) for k in ("role", "source", "skill", "task_index", "abnormal", "related") if k in meta
            }
        for key in ("prompt_tokens", "completion_tokens", "merged_sequences"):
            if key not in data and key in meta:
                data[key] = meta.pop(key)
        data["metadata"] = meta
        return data

    @property
    def unshaped_outcome(self) -> float:
        """The outcome before reward shaping (format, reasoning, partial credit); a judge's mix on a synthesized
        task included."""
        value = self.rewards.outcome if self.rewards.outcome is not None else self.outcome_reward
        return float(value or 0.0)

    def succeeded(self, threshold: float) -> bool:
        """The run's one definition of success (reward.success_threshold): the outcome before shaping at or above
        ``threshold``; rollout/success_rate, experience use counts and the extraction split all ask this."""
        return self.unshaped_outcome >= threshold

    @property
    def checked_outcome(self) -> float:
        """The environment's own check of the episode, before judge mixing and reward shaping."""
        for value in (self.rewards.state_score, self.rewards.env, self.rewards.outcome):
            if value is not None:
                return float(value)
        return float(self.outcome_reward or 0.0)


class ExperienceProvenance(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["success", "failure", "comparison", "merged", "imported", "skill"] = "success"
    trajectory_ids: list[str] = Field(default_factory=list)
    task_ids: list[str] = Field(default_factory=list)
    iteration: int | None = None


MAX_EXPERIENCE_USES = 10**9
MAX_EXPERIENCE_CHARS = 4_000  # a field of one experience (extraction writes at most 1,200; prompts hold top-k of them)


class Experience(_Model):
    """A reusable piece of experience (AgentEvolver §4.1): when to use it, and what it says."""

    experience_id: str = Field(default_factory=lambda: new_id("exp"), max_length=128)
    when_to_use: str = Field(max_length=MAX_EXPERIENCE_CHARS)
    content: str = Field(max_length=MAX_EXPERIENCE_CHARS)
    provenance: ExperienceProvenance = Field(default_factory=ExperienceProvenance)
    # counters from outside (an imported pool) are checked: a negative one would divide by zero in the score or never
    # be pruned
    use_count: int = Field(default=0, ge=0, le=MAX_EXPERIENCE_USES)
    success_count: int = Field(default=0, ge=0, le=MAX_EXPERIENCE_USES)
    # Evolving-RL: mean downstream reward on K related tasks
    utility: float | None = Field(default=None, allow_inf_nan=False)

    @model_validator(mode="after")
    def _successes_within_uses(self) -> "Experience":
        if self.success_count > self.use_count:
            raise ValueError(f"success_count ({self.success_count}) is more than use_count ({self.use_count})")
        return self

    @property
    def score(self) -> float:
        """EvolveR's score s = (c_succ + 1) / (c_use + 2)."""
        return (self.success_count + 1) / (self.use_count + 2)


class TrainingSample(_Model):
    """One sequence ready for the policy update. All lists have the same length."""

    sample_id: str = Field(default_factory=lambda: new_id("sample"))
    trajectory_id: str
    group_id: str
    token_ids: list[int]
    loss_mask: list[int]
    token_advantages: list[float]
    experience_mask: list[int]  # 1 on tokens of inserted experience (stripped before the update)
    experience_guided: bool = False
    loss_weight: float = 1.0  # e.g. λ_e / λ_s of Evolving-RL's joint objective (Eq. 6)
    # Samples that share a non-empty loss group are token-averaged among themselves, then the groups are summed with
    # their loss_weight (Evolving-RL Eq. 6: λ_e·L_e + λ_s·L_s, each L its own mean); "" = the batch's one mean.
    loss_group: str = ""
    entropy_coef: float = 0.0  # per-sample entropy coefficient (Evolving-RL Eq. 3 uses a negative one)
    # An experience-stripped sample (§4.3): the sequence as it was generated (with the experience), and for each
    # token of ``token_ids`` its position there. The trainer's old log-probs (Eq. 17) come from this sequence.
    behaviour_token_ids: list[int] | None = None
    behaviour_positions: list[int] | None = None
    rollout_logprobs: list[float] | None = None  # what the sampler recorded (aligned with token_ids; 0 off-policy)

    def model_post_init(self, __context: Any) -> None:
        n = len(self.token_ids)
        for name in ("loss_mask", "token_advantages", "experience_mask"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"TrainingSample.{name} has length {len(getattr(self, name))}, expected {n}")
        for name in ("behaviour_positions", "rollout_logprobs"):
            if getattr(self, name) is not None and len(getattr(self, name)) != n:
                raise ValueError(f"TrainingSample.{name} must match token_ids in length")
        if (self.behaviour_token_ids is None) != (self.behaviour_positions is None):
            raise ValueError("TrainingSample.behaviour_token_ids and behaviour_positions go together")
        if (
            self.behaviour_positions
            and self.behaviour_token_ids is not None
            and max(self.behaviour_positions) >= len(self.behaviour_token_ids)
        ):
            raise ValueError("TrainingSample.behaviour_positions point past behaviour_token_ids")
