"""What an agent is set to, as frozen values passed whole: how its model samples
(SamplerSettings, agent/samplers/sampler.py) and how it runs a turn (TurnSettings, agent/loop/driver.py). A
copy for a rollout or a fork is a `dataclasses.replace`, so a setting added here reaches every
copy without being threaded through constructors. Imports nothing heavy: the CLI builds these
before it loads a model. A field's default here is its flag's default (agent/run_options.py, where
every command's flags for these fields are declared).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SamplerSettings:
    """How replies are sampled. Reply n of a conversation uses seed + n; a retry of a failed call
    samples at retry_temperature when temperature is 0 (greedy would repeat it). reserve: context
    slots kept free for a reply (None: min(max_tokens, max_len // 4)).
    Our engine only (a server applies its own): top_k; constrain (the grammar: only well-formed
    calls to the mode's tools), ground (paths, anchors and names that exist in the project),
    names (grounding's names option), loop_guard (no token completes a loop), copy_bias (+beta to
    tokens that continue a copy of the context, in prose)."""
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    max_tokens: int = 1024
    reserve: int | None = None
    retry_temperature: float = 0.7
    constrain: bool = True
    ground: bool = True
    names: bool = True
    loop_guard: bool = True
    copy_bias: float = 0.0

    def __post_init__(self):
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, not {self.max_tokens}")
        if self.temperature < 0 or self.retry_temperature < 0:
            raise ValueError("temperatures must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], not {self.top_p}")

    def temperature_for(self, retry: bool) -> float:
        return self.temperature or (self.retry_temperature if retry else 0.0)

    def reserve_for(self, max_len: int) -> int:
        return self.reserve if self.reserve is not None else min(self.max_tokens, max_len // 4)


@dataclass(frozen=True)
class TurnSettings:
    """How the agent runs a turn. max_steps: tool calls per user turn. retries: take-backs per
    step (agent/loop/call_rules.py). tool_timeout: seconds a Bash call may run. memory: put the
    project's memory file (NANOCODE.md / AGENTS.md) in the system prompt. snapshots: undo
    snapshots before a change (False: no undo). sandbox: run every Bash call in the OS sandbox
    (tools/sandbox.py; network: let it reach the network); where none can be had, or with
    sandbox=False, every Bash call asks, auto mode included. question_guard: in a turn whose
    request is a question, an Edit asks (module docstring)."""
    max_steps: int = 25
    retries: int = 2
    tool_timeout: float | None = 30.0
    memory: bool = True
    snapshots: bool = True
    sandbox: bool = True
    network: bool = False
    question_guard: bool = True

    def __post_init__(self):
        if self.max_steps < 1 or self.retries < 0:
            raise ValueError(f"max_steps must be >= 1 and retries >= 0 (got {self.max_steps}, {self.retries})")
