"""BPE tokenizer and the conversation renderer: rustbpe trains, tiktoken encodes.

Two libraries instead of one because each is fastest at its half: rustbpe learns a vocabulary
from tens of MB in seconds, tiktoken encodes at several MB/s per thread. The learned merges are
the whole state, so the file is plain JSON (pattern, base64 token bytes -> rank, special tokens)
rather than nanochat's pickle: portable, readable, and loading it runs no code.

Split patterns (SPLIT_PATTERNS, `train tokenizer --split`): "gpt4" (SPLIT_PATTERN, the default),
GPT-4's with numbers in runs of 1-2 digits (nanochat's choice: fewer vocab slots spent on numbers
at small vocab sizes); "compound" (COMPOUND_SPLIT_PATTERN), where a compound identifier
(`parse_header`, `HTTPServer`) is one pre-token with nothing attached, so a name is the same token
sequence wherever it is written and copying it from a request into a backticked thought or a
tool argument is a copy, not a translation. Each tokenizer file keeps its pattern. The 11 special tokens come after
the BPE merges, in SPECIAL_TOKENS order, and are never produced from ordinary text: a user typing
"<|bos|>" gets ~6 plain-text tokens for it (8k vocab), never the control token.

Rendering (the wire format is nanocode/protocol.py's) turns a conversation into ids plus a loss mask that is 1
only on what the assistant writes (its content, its tool call, its <|assistant_end|>). Every message
renders independently and in order, so render_for_completion(conv[:k]) is a prefix of
render_conversation(conv)'s ids: training and inference see byte-identical sequences.
"""

from __future__ import annotations

import base64
import json
import os
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import rustbpe
import tiktoken

from nanocode.common import write_atomic
from nanocode.protocol import SPECIAL_TOKENS, check_shape, encode_call, parse_call


# GPT-4's split with numbers in runs of 1-2 digits: a word takes the character before it
# (` parse`, `` `parse``), so a name's tokens depend on what precedes it.
SPLIT_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|"""
    r"""\s*[\r\n]|\s+(?!\S)|\s+"""
)
# a contraction only before a non-word character (`'stats'` is not `'s` + `tats`)
CONTRACTION = r"'(?i:[sdmt]|ll|ve|re)(?![\p{L}\p{N}_])"
# an identifier with an inner `_` or a case hump (moving_average, AbaloneTracker, HTTPServer)
COMPOUND = r"[\p{L}_][\p{L}\p{N}_]*(?:_|\p{Ll}\p{Lu}|\p{Lu}\p{Lu}\p{Ll})"
# A compound identifier is one pre-token with nothing before it, so `moving_average` is the same
# tokens after a space, a backtick, a quote, a slash or a dot; other words take one space before
# them and never punctuation.
COMPOUND_SPLIT_PATTERN = (CONTRACTION + r"|(?=" + COMPOUND + r")[\p{L}_][\p{L}\p{N}_]*| ?(?!" + COMPOUND
                          + r")\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+")
# `train tokenizer --split`: name -> pattern
SPLIT_PATTERNS = {"gpt4": SPLIT_PATTERN, "compound": COMPOUND_SPLIT_PATTERN}

MIN_VOCAB_SIZE = 256 + len(SPECIAL_TOKENS)  # 256 byte tokens + 11 specials = 267
TOKENIZER_FILE = "tokenizer.json"
FORMAT = "nanocode-tokenizer/1"
ROLES = ("system", "user", "assistant", "tool_result")


def train_tokenizer(text_iterator: Iterable[str], vocab_size: int, pattern: str = SPLIT_PATTERN) -> Tokenizer:
    """Learn vocab_size - 11 BPE tokens (256 bytes + merges) from text, then add the 11 specials.

    Cost is dominated by splitting and counting the text: ~5 s for 30 MB at 8k vocab on 2 cores.
    rustbpe stops early when no pair is left to merge (a tiny corpus), so the result can be smaller
    than asked; that is warned about, not hidden.
    """
    if not isinstance(vocab_size, int) or vocab_size < MIN_VOCAB_SIZE:
        raise ValueError(
            f"vocab_size must be at least {MIN_VOCAB_SIZE} (256 byte tokens + {len(SPECIAL_TOKENS)} "
            f"special tokens), got {vocab_size!r}"
        )
    bpe = rustbpe.Tokenizer()  # rustbpe panics (PanicException, not ValueError) below 256: checked above
    bpe.train_from_iterator(iter(text_iterator), vocab_size - len(SPECIAL_TOKENS), pattern=pattern)
    ranks = {bytes(token): rank for token, rank in bpe.get_mergeable_ranks()}
    tok = Tokenizer(ranks, bpe.get_pattern())
    if tok.vocab_size < vocab_size:
        warnings.warn(
            f"tokenizer training ran out of pairs to merge: vocab is {tok.vocab_size}, asked for "
            f"{vocab_size}; train on more text for the full vocabulary",
            stacklevel=2,
        )
    return tok


class Tokenizer:
    """Byte-level BPE over tiktoken: ids 0..n-1 are the learned tokens (rank = id), then the specials."""

    def __init__(self, mergeable_ranks: dict[bytes, int], pattern: str = SPLIT_PATTERN):
        n = len(mergeable_ranks)
        if sorted(mergeable_ranks.values()) != list(range(n)):
            raise ValueError("mergeable ranks must be exactly the ids 0..n-1")
        missing = [b for b in range(256) if bytes([b]) not in mergeable_ranks]
        if missing:
            raise ValueError(f"mergeable ranks lack {len(missing)} of the 256 single-byte tokens")
        self.pattern = pattern
        self.mergeable_ranks = dict(mergeable_ranks)
        self.special_ids = {name: n + i for i, name in enumerate(SPECIAL_TOKENS)}
        self.enc = tiktoken.Encoding(
            name="nanocode", pat_str=pattern, mergeable_ranks=self.mergeable_ranks, special_tokens=self.special_ids
        )
        s = self.special_ids
        self.bos_id = s["<|bos|>"]
        self._user = (s["<|user_start|>"], s["<|user_end|>"])
        self._assistant = (s["<|assistant_start|>"], s["<|assistant_end|>"])
        self._call = (s["<|tool_call_start|>"], s["<|tool_call_end|>"])
        self._arg, self._val = s["<|tool_arg|>"], s["<|tool_val|>"]
        self._result = (s["<|tool_result_start|>"], s["<|tool_result_end|>"])

    # --- encoding -------------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        """Learned tokens + 11 specials (the model pads this up to a multiple of 64 itself)."""
        return self.enc.n_vocab

    def encode(self, text: str) -> list[int]:
        """Ordinary text to ids; special-token strings in it stay plain text."""
        return self.enc.encode_ordinary(text)

    def encode_batch(self, texts: Sequence[str], num_threads: int = 8) -> list[list[int]]:
        """encode() over many texts on a thread pool (tiktoken releases the GIL). Threads pay only
        with idle cores: when every core is busy it is no faster than a loop."""
        return self.enc.encode_ordinary_batch(list(texts), num_threads=num_threads)

    def decode(self, ids: Iterable[int]) -> str:
        """Ids to text; specials decode to their names; a cut inside a UTF-8 character gives U+FFFD."""
        return self.enc.decode([int(i) for i in ids])

    def encode_special(self, name: str) -> int:
        """The id of a special token by name, e.g. encode_special("<|bos|>")."""
        try:
            return self.special_ids[name]
        except KeyError:
            raise ValueError(f"unknown special token {name!r}; known: {' '.join(SPECIAL_TOKENS)}") from None

    def is_special(self, token_id: int) -> bool:
        return self.bos_id <= token_id < self.vocab_size

    def id_to_bytes(self, token_id: int) -> bytes:
        """The raw bytes of one token (a special token gives its name in UTF-8)."""
        return self.enc.decode_single_token_bytes(int(token_id))

    def id_to_token(self, token_id: int) -> str:
        """One token as text (for display; a partial UTF-8 character shows as U+FFFD)."""
        return self.id_to_bytes(token_id).decode("utf-8", errors="replace")

    def token_bytes(self) -> np.ndarray:
        """int32[vocab_size]: UTF-8 bytes each token stands for, 0 for specials (for bits per byte)."""
        out = np.zeros(self.vocab_size, dtype=np.int32)
        for token, rank in self.mergeable_ranks.items():
            out[rank] = len(token)
        return out

    # --- serialization --------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        ranks = sorted(self.mergeable_ranks.items(), key=lambda kv: kv[1])
        return {
            "format": FORMAT,
            "pattern": self.pattern,
            "mergeable_ranks": {base64.b64encode(token).decode("ascii"): rank for token, rank in ranks},
            "special_tokens": dict(self.special_ids),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Tokenizer:
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} dict (format field is {d.get('format') if isinstance(d, dict) else d!r})")
        ranks = {base64.b64decode(token, validate=True): int(rank) for token, rank in d["mergeable_ranks"].items()}
        tok = cls(ranks, d["pattern"])
        if d["special_tokens"] != tok.special_ids:
            raise ValueError(f"special tokens {d['special_tokens']} differ from the expected {tok.special_ids}")
        return tok

    def save(self, directory: str | os.PathLike) -> str:
        """Write <directory>/tokenizer.json atomically (temp file + os.replace); returns the path."""
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, TOKENIZER_FILE)
        write_atomic(path, json.dumps(self.to_dict()).encode())
        return path

    @classmethod
    def load(cls, directory: str | os.PathLike) -> Tokenizer:
        """Read <directory>/tokenizer.json (or the file itself when given one)."""
        path = directory if os.path.isfile(directory) else os.path.join(directory, TOKENIZER_FILE)
        if not os.path.exists(path):
            raise FileNotFoundError(f"no tokenizer at {path}: make one with `train tokenizer`")
        try:
            with open(path, encoding="utf-8") as f:
                return cls.from_dict(json.load(f))
        except (ValueError, KeyError, TypeError, AttributeError) as e:  # JSONDecodeError is a ValueError
            raise ValueError(
                f"corrupt tokenizer file {path} ({type(e).__name__}: {e}); "
                f"delete it and make a new one with `train tokenizer`"
            ) from e

    # --- conversations --------------------------------------------------------------------------

    def render_conversation(self, conv: dict, max_tokens: int | None = None) -> tuple[list[int], list[int]]:
        """Conversation -> (ids, mask), mask 1 on assistant content, tool call and <|assistant_end|>.

        The mask is the SFT loss mask: the model learns to write assistant turns, never to predict
        users or tool output. max_tokens truncates ids and mask together (no marker is added).
        """
        ids: list[int] = [self.bos_id]
        mask: list[int] = [0]
        for msg in _validated_messages(conv):
            i, m = self.render_message(msg)
            ids += i
            mask += m
        if max_tokens is not None:
            if max_tokens < 0:
                raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
            ids, mask = ids[:max_tokens], mask[:max_tokens]
        return ids, mask

    def render_message(self, msg: dict) -> tuple[list[int], list[int]]:
        """(ids, mask) of one user / assistant / tool_result message as it sits in a conversation
        (a system message is merged into the next user message by render_conversation). The agent
        appends messages with this, so its history is the render, piece by piece."""
        role, content = msg["role"], msg["content"]
        if role == "user":
            ids = [self._user[0], *self.encode(content), self._user[1]]
            return ids, [0] * len(ids)
        if role == "tool_result":
            ids = [self._result[0], *self.encode(content), self._result[1]]
            return ids, [0] * len(ids)
        if role != "assistant":
            raise ValueError(f"render_message: cannot render a {role!r} message on its own")
        body = self.encode(content)
        if msg.get("tool_call") is not None:
            body += self.encode_tool_call(msg["tool_call"])
        body.append(self._assistant[1])
        return [self._assistant[0], *body], [0] + [1] * len(body)

    def render_for_completion(self, conv: dict) -> list[int]:
        """The prompt the engine continues: the conversation (ending in a user or tool_result
        message) followed by <|assistant_start|>. A prefix of the full render of any conversation
        that continues this one with an assistant message. Across turns the engine should keep the
        ids the model actually sampled rather than re-render its replies: a model may emit a
        non-canonical split of its text, which encode() would not reproduce."""
        messages = _validated_messages(conv)
        if messages[-1]["role"] not in ("user", "tool_result"):
            raise ValueError(
                f"message {len(conv['messages']) - 1}: a completion prompt must end with a user or "
                f"tool_result message, not {messages[-1]['role']}"
            )
        ids, _ = self.render_conversation(conv)
        return ids + [self._assistant[0]]

    def encode_tool_call(self, tool_call: dict) -> list[int]:
        """The ids of one call in the wire format (nanocode/protocol.py)."""
        return encode_call(self, tool_call)

    def parse_tool_call(self, ids: Sequence[int]) -> dict | None:
        """The first call in generated ids, None if there is none; ValueError when malformed
        (nanocode/protocol.py: parse_call)."""
        return parse_call(self, ids)


# --- helpers ------------------------------------------------------------------------------------


def _validated_messages(conv: dict) -> list[dict]:
    """Check the schema and merge a leading system message into the user message after it.

    Errors name the message index in the original list. Messages are not mutated.
    """
    messages = conv.get("messages") if isinstance(conv, dict) else None
    if not isinstance(messages, list) or not messages:
        raise ValueError('a conversation is {"messages": [...]} with at least one message')
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise ValueError(f"message {i}: must be a dict, got {type(msg).__name__}")
        if msg.get("role") not in ROLES:
            raise ValueError(f"message {i}: unknown role {msg.get('role')!r} (expected one of {', '.join(ROLES)})")
        if not isinstance(msg.get("content"), str):
            problem = "has no content" if msg.get("content") is None else "content must be a string"
            raise ValueError(f"message {i} ({msg['role']}): {problem}")
        if msg.get("tool_call") is not None:
            if msg["role"] != "assistant":
                raise ValueError(f"message {i} ({msg['role']}): only assistant messages may have a tool_call")
            check_shape(msg["tool_call"], f"message {i}")
        if msg["role"] == "system" and i != 0:
            raise ValueError(f"message {i}: a system message is only allowed first")
    if messages[0]["role"] != "system":
        return messages
    if len(messages) < 2 or messages[1]["role"] != "user":
        raise ValueError("message 0: a system message must be followed by a user message (it is merged into it)")
    merged = {"role": "user", "content": messages[0]["content"] + "\n\n" + messages[1]["content"]}
    return [merged, *messages[2:]]
