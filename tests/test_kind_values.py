"""agent/masks/kind_values.py alone, over a real (tiny BPE) tokenizer's Grammar: the value a
tool from outside (an MCP server's, a serve client's) may be given, by kind: string free text,
integer `-?digits`, number a JSON-style number, boolean true/false, enum one of its strings;
what the automata accept agrees with what agent/samplers/foreign_tools.py converts, each mask
admits exactly the tokens the automaton steps, and each kind's automaton is built once."""
import itertools

import numpy as np
import pytest

from agent.masks.grammar import Grammar
from agent.masks.kind_values import EnumValue, PatternBytes, kind_value
from agent.samplers.foreign_tools import INTEGER, NUMBER, _to_json


@pytest.fixture(scope="module")
def g(tok):
    return Grammar(tok, tok.vocab_size)


def accepts(v, text: str) -> bool:
    """Whether the automaton takes `text` whole (it may stop there)."""
    state = v.step(v.start(), text.encode())
    if isinstance(v, PatternBytes):
        return state in v.final
    return v.auto.holds(state)


def written(g, v, text: str, stop: int) -> bool:
    """Whether `text` can be written byte by byte under the masks and then stopped."""
    ranks = {b: t for t, b in g.pieces.items()}
    state = v.start()
    for c in text.encode():
        t = ranks[bytes([c])]
        if not v.mask(state, (stop,))[t]:
            return False
        state = v.step(state, bytes([c]))
    return bool(v.mask(state, (stop,))[stop])


def test_strings_are_the_grammars_free_text(g):
    assert kind_value(g, "string") is g.free


@pytest.mark.parametrize("text, integer, number", [
    ("0", True, True), ("42", True, True), ("-7", True, True), ("007", True, True),
    ("2.5", False, True), ("-0.25e-3", False, True), ("1E+9", False, True), ("3e7", False, True),
    ("", False, False), ("-", False, False), ("+1", False, False), ("1.", False, False),
    (".5", False, False), ("1e", False, False), ("1e+", False, False), ("1.2.3", False, False),
    ("--1", False, False), ("1-", False, False), ("0x10", False, False), ("NaN", False, False),
    ("1d", False, False), ("d", False, False), ("1.d", False, False),  # a 'd' is no digit
])
def test_integers_and_numbers(g, text, integer, number):
    assert accepts(kind_value(g, "integer"), text) is integer
    assert accepts(kind_value(g, "number"), text) is number
    stop = g.a_end
    assert written(g, kind_value(g, "integer"), text, stop) is integer
    assert written(g, kind_value(g, "number"), text, stop) is number


def test_what_is_written_is_what_foreign_tools_converts(g):
    """Every string over the automata's bytes (and 'd') up to 4 long: accepted exactly when the
    conversion to the tool's JSON takes it, and then as an int or a float."""
    for n in range(1, 5):
        for chars in itertools.product("0-.e+5d", repeat=n):
            text = "".join(chars)
            assert accepts(kind_value(g, "integer"), text) == bool(INTEGER.fullmatch(text)), text
            assert accepts(kind_value(g, "number"), text) == bool(NUMBER.fullmatch(text)), text
            if accepts(kind_value(g, "number"), text):
                assert _to_json("number", text) == float(text)


@pytest.mark.parametrize("kind", ["integer", "number"])
@pytest.mark.parametrize("prefix", ["", "-", "12", "1.", "1.5e", "1.5e-", "x", "1d"])
def test_a_pattern_mask_admits_exactly_the_tokens_the_automaton_steps(g, kind, prefix):
    v = kind_value(g, kind)
    state = v.step(v.start(), prefix.encode())
    m = v.mask(state, (g.a_end,))
    want = {t for t, b in g.pieces.items() if v.step(state, b) >= 0}
    assert set(np.flatnonzero(m).tolist()) - {g.a_end} == want
    assert m[g.a_end] == (state in v.final or not want)  # a dead state may still end the value


def test_booleans_and_enums(g):
    boolean = kind_value(g, "boolean")
    assert isinstance(boolean, EnumValue)
    words = ["true", "false", "True", "tru", "truefalse", "1", ""]
    assert [w for w in words if accepts(boolean, w)] == ["true", "false"]
    colors = kind_value(g, ("red", "green", "greenish"))
    assert [w for w in ["red", "green", "greenish", "gre", "blue", "re d"] if accepts(colors, w)] == \
        ["red", "green", "greenish"]
    for word in ["red", "green", "greenish"]:
        assert written(g, colors, word, g.a_end)
    assert not written(g, colors, "gree", g.a_end) and not written(g, colors, "redd", g.a_end)
    m = colors.mask(b"green", (g.a_end,))  # whole, and a longer one goes on
    assert m[g.a_end] and m[{b: t for t, b in g.pieces.items()}[b"i"]]


def test_each_kind_is_built_once_per_grammar(g, tok):
    assert kind_value(g, "integer") is kind_value(g, "integer")
    assert kind_value(g, "integer") is not kind_value(g, "number")
    assert kind_value(g, ("a", "b")) is kind_value(g, ("a", "b"))
    assert kind_value(g, ("a", "b")) is not kind_value(g, ("a", "c"))
    assert kind_value(g, "boolean") is kind_value(g, ("true", "false"))
    assert kind_value(Grammar(tok, tok.vocab_size), "integer") is not kind_value(g, "integer")
