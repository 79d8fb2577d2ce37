"""The model side of a conversation, as the turn driver (agent/loop/driver.py) sees it: the `Sampler`
protocol, the settings a sampler samples with, and what one reply is.

Two samplers keep the protocol: agent/samplers/engine.EngineSampler (our engine: KV-cached,
grammar-masked, grounded in the project) and agent/samplers/remote.RemoteSampler (any OpenAI-compatible
server). The driver uses nothing else, so a third (tests script one: tests/race_helpers.py) only
has to keep this. Which one an agent gets is chosen where agents are built (agent/model.py for
the CLI, tasks/harness.py for evals and rollouts), never inside the Agent.

Settings are one frozen value (agent/settings.SamplerSettings), passed whole: a rollout's sampler
is `fork(root, replace(settings, temperature=t, seed=s))`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from agent.settings import SamplerSettings

ReplyStop = Literal["stop", "length", "cancelled", "loop"]


class SamplerError(Exception):
    """The model could not be asked (a server that fails or cannot be reached); the message is
    one line for the user. The turn ends with stop_reason "model_error"."""


@dataclass(frozen=True)
class Reply:
    """One model reply: the message appended to the conversation, its tool call (or None), an
    `error: ...` result when the call was malformed, and why sampling stopped ("length": cut at
    max_tokens; "loop": it was repeating itself and was cut)."""
    message: dict
    call: dict | None
    error: str | None
    stop: ReplyStop


@runtime_checkable
class Sampler(Protocol):
    """What the turn driver asks of a model. `conv` is an agent/loop/conversation.Conversation (the
    sampler may drop old outputs and turns from it in place when the context is full: it says so
    in a Status event); `emit` takes protocol events; `usage` is TurnResult.usage, added to."""
    settings: SamplerSettings
    max_len: int  # the context, in tokens
    reserve: int  # context slots kept free for a reply
    n_replies: int  # replies sampled in this conversation (the seed offset)

    def reply(self, conv, tools: tuple, emit, cancel, usage, retry: bool = False) -> Reply:
        """Sample one assistant message (prose streamed as Text events) and append it to
        conv.messages; it may call one of `tools` (protocol.Tools: the mode's, then MCP tools). Raises agent/loop/context.ContextFull when no reply fits, SamplerError when
        the model cannot be asked."""

    def sync(self, conv, emit, usage) -> None:
        """Bring the model up to a closed conversation (ContextFull when it does not fit)."""

    def invalidate(self) -> None:
        """The messages changed other than by appending: rebuild before the next use."""

    def reset(self) -> None:
        """A new conversation (n_replies back to 0)."""

    def tree_changed(self) -> None:
        """The project changed on disk (grounding lists it again)."""

    def fork(self, root, settings: SamplerSettings) -> "Sampler":
        """A sampler on the same model for a new conversation in `root` with `settings`."""

    def count(self, text: str) -> int:
        """Tokens `text` takes (an estimate where the tokenizer is not ours)."""

    def context_used(self, messages: list[dict]) -> int:
        """Tokens the conversation takes now."""

    def describe(self) -> str:
        """One line on the model for /model and the status bar."""
