"""User requests: a grammar per task intent that words one request many ways (`phrase`): a training
grammar, and a held-out grammar of other words that only eval tasks use (their tables:
tasks/request_grammars.py).

Contract: `phrase(intent, rng, heldout, **slots)` depends only on its arguments and the rng state.
Slot values (names, paths, literals) appear exactly as given, sometimes in backticks, never
re-cased or misspelt. Every held-out request contains a `heldout_fragments()` entry (the
[bracketed] words of the held-out tables) and no training request contains one, so an eval on
held-out requests measures whether the model follows an intent worded in ways it never saw.
agent/loop/request_kind.is_question reads no change request as a question; a typo never changes its verdict.

A request is a core (an "ask" question, a "do" imperative or a "say" statement) with optional
parts: an opener, politeness, a closer, a trailing remark, Sentence case and, in one request in
ten, a swapped, dropped or doubled letter in one word. Both grammars share these mechanics, not words.
Trade-off: a grammar of word lists, not a language model: thousands of distinct, well-defined
requests per grammar, but only the variety the tables hold; a new way of asking is a new entry.
"""
from __future__ import annotations

import random
import re
from agent.loop.request_kind import is_question
from tasks.request_grammars import HELDOUT, TRAINING, Grammar

# intent -> the slots its requests may use (callers pass all of them; a request uses some)
INTENTS: dict[str, tuple[str, ...]] = {
    "find_definition": ("fn",), "find_class": ("cls",), "explain": ("fn", "file"),
    "fix_bug": ("fn", "test"), "implement_stub": ("fn", "file"), "rename_symbol": ("fn", "new"),
    "add_parameter": ("fn", "param", "default"), "create_test": ("fn", "test"),
    "create_module": ("file", "fn", "doc"), "run_tests": (), "line_count": ("file",),
    "list_files": ("pkg",), "git_last": (), "git_changes": (), "git_count": (),
    "recover_path": ("wrong", "fn"), "recover_cmd": ("module",), "rejects_run": (),
    "rejects_edit": ("fn",), "find_callers": ("fn",), "find_importers": ("module",),
    "explain_file": ("file",), "count_files": (), "git_last_files": (),
    "change_constant": ("const", "value", "file"), "add_docstring": ("fn",),
    "remove_function": ("fn",),
}
# the intents whose requests ask for a change: is_question must read them as change requests
CHANGE_INTENTS = frozenset({"fix_bug", "implement_stub", "rename_symbol", "add_parameter",
                            "create_test", "create_module", "change_constant", "add_docstring",
                            "remove_function", "rejects_edit"})


SLOT, FRAGMENT, FREE = "slot", "fragment", "free"
_PARTS = re.compile(r"(\{\w+\}|\[[^\]]+\])")
_TYPO_WORD = re.compile(r"(?<![\w`])[a-z]{4,}(?![\w`])")  # a lower-case word typos may touch
TICK_SHARE, OPENER_SHARE, TRAILER_SHARE, CASE_SHARE, TYPO_SHARE = 0.35, 0.25, 0.08, 0.3, 0.1


def templates(grammar: Grammar, intent: str) -> list[tuple[str, str]]:
    """(kind, template) of every core of `intent` in `grammar`."""
    if intent not in grammar.cores:
        raise KeyError(f"unknown request intent {intent!r}: use one of {sorted(INTENTS)}")
    return [(kind, t) for kind, joined in grammar.cores[intent].items() for t in joined.split("|")]


def phrase(intent: str, rng: random.Random, heldout: bool, **slots) -> str:
    """A user request for `intent` from the held-out grammar when `heldout`, else the training one."""
    grammar = HELDOUT if heldout else TRAINING
    kind, template = rng.choice(templates(grammar, intent))
    pieces = _fill(intent, template, slots, rng)
    end = ""
    if kind == "ask":
        end = "?" if rng.random() < 0.88 else ""
    elif kind == "do":
        r = rng.random()
        if r < 0.2:
            pieces.insert(0, (rng.choice(grammar.asks), FREE))
            end = "?" if rng.random() < 0.85 else ""
        else:
            end = rng.choice(grammar.closers)
            if r < 0.35:
                pieces.insert(0, (rng.choice(grammar.please), FREE))
                end = "" if end.strip() == pieces[0][0].strip() else end  # not "please ... please"
    elif template[-1].isalnum() or template[-1] == "}":
        end = rng.choice(grammar.closers)
    pieces.append((end, FREE))
    if rng.random() < OPENER_SHARE:
        pieces.insert(0, (rng.choice(grammar.openers), FREE))
    if "".join(p for p, _ in pieces).endswith(("?", ".", "!")) and rng.random() < TRAILER_SHARE:
        pieces.append((" " + rng.choice(grammar.trailers), FREE))
    if pieces[0][1] != SLOT and rng.random() < CASE_SHARE:
        first, tag = pieces[0]
        pieces[0] = (first[:1].upper() + first[1:], tag)
    text = "".join(p for p, _ in pieces)
    return _typo(pieces, rng, heldout) if rng.random() < TYPO_SHARE else text


def heldout_fragments() -> list[str]:
    """The fixed word sequences of the held-out grammar: every held-out request contains one, no
    training request does (compare lower-case, backticks removed)."""
    return sorted({m[1:-1] for text in strings(HELDOUT) for m in re.findall(r"\[[^\]]+\]", text)})


def strings(grammar: Grammar) -> list[str]:
    """Every template and part of `grammar`'s tables."""
    cores = [t for kinds in grammar.cores.values() for joined in kinds.values() for t in joined.split("|")]
    return cores + [*grammar.openers, *grammar.asks, *grammar.please, *grammar.closers, *grammar.trailers]


def _fill(intent: str, template: str, slots: dict, rng: random.Random) -> list[tuple[str, str]]:
    """The template as (text, tag) pieces: slots filled (sometimes in backticks), fragments unbracketed."""
    pieces = []
    for part in _PARTS.split(template):
        if part.startswith("{"):
            name = part[1:-1]
            if name not in slots:
                raise KeyError(f"phrase({intent!r}) needs the slot {name!r}; pass every slot of "
                               f"INTENTS[{intent!r}] = {INTENTS[intent]}")
            value = str(slots[name])
            pieces.append((f"`{value}`" if name != "doc" and rng.random() < TICK_SHARE else value, SLOT))
        elif part.startswith("["):
            pieces.append((part[1:-1], FRAGMENT))
        elif part:
            pieces.append((part, FREE))
    return pieces


def _typo(pieces: list[tuple[str, str]], rng: random.Random, heldout: bool) -> str:
    """The request with a swapped, dropped or doubled letter in one word outside slots and
    fragments; unchanged when the typo would change how is_question reads it or (training) would
    spell a held-out fragment."""
    text = "".join(p for p, _ in pieces)
    spots = [(i, m) for i, (p, tag) in enumerate(pieces) if tag == FREE for m in _TYPO_WORD.finditer(p)]
    if not spots:
        return text
    i, m = rng.choice(spots)
    word, k, how = m.group(), rng.randrange(1, len(m.group()) - 1), rng.randrange(3)
    wrong = (word[:k] + word[k + 1] + word[k] + word[k + 2:], word[:k] + word[k + 1:],
             word[:k] + word[k] + word[k:])[how]
    piece = pieces[i][0]
    misspelt = "".join(p for p, _ in pieces[:i]) + piece[:m.start()] + wrong + piece[m.end():] + \
        "".join(p for p, _ in pieces[i + 1:])
    low = misspelt.lower().replace("`", "")
    if is_question(misspelt) != is_question(text) or (not heldout and any(f in low for f in _FRAGMENTS)):
        return text
    return misspelt


_FRAGMENTS = heldout_fragments()
