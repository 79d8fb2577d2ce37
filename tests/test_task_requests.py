"""The request grammars (tasks/requests.py): every intent in both grammars, slots verbatim,
deterministic, thousands of distinct requests, an exact held-out split, typos off slots and
fragments, and no change request that agent/loop/request_kind could read as a question."""

import random
import re

import pytest

from agent.loop.request_kind import QUESTION_STARTS, is_question
from tasks.requests import CHANGE_INTENTS, HELDOUT, INTENTS, TRAINING, heldout_fragments, phrase, strings, templates

# awkward values: underscores, upper case, paths with a package, a dotted module, literals
SLOTS = dict(fn="parse_header", cls="HeaderParser", file="email/quoprimime.py",
             test="tests/test_quoprimime.py", new="decode_header", param="max_line_len",
             default="None", doc="return the mean of values", pkg="email", wrong="quoprimime.py",
             module="email.quoprimime", const="MAX_LINE_LEN", value="80")
# the slots every request of an intent names (fix_bug may name the test, the function or neither)
REQUIRED = {"find_definition": "fn", "find_class": "cls", "explain": "fn", "implement_stub": "fn",
            "rename_symbol": "fn new", "add_parameter": "fn param default", "create_test": "fn test",
            "create_module": "file fn doc", "line_count": "file", "list_files": "pkg",
            "recover_path": "wrong fn", "recover_cmd": "module", "rejects_edit": "fn",
            "find_callers": "fn", "find_importers": "module", "explain_file": "file",
            "change_constant": "const value", "add_docstring": "fn", "remove_function": "fn"}
GRAMMARS = pytest.mark.parametrize("heldout", [False, True], ids=["train", "heldout"])


def requests(intent, heldout, n, slots=SLOTS, seed0=0):
    return [phrase(intent, random.Random(seed0 + s), heldout, **slots) for s in range(n)]


def plain(text):
    return text.lower().replace("`", "")


def test_every_intent_exists_in_both_grammars_with_its_slots():
    for grammar in (TRAINING, HELDOUT):
        assert set(grammar.cores) == set(INTENTS)
        for intent in INTENTS:
            for kind, template in templates(grammar, intent):
                assert kind in ("ask", "do", "say") and template == template.strip(), template
                assert set(re.findall(r"\{(\w+)\}", template)) <= set(INTENTS[intent]), template
    with pytest.raises(KeyError, match="unknown request intent"):
        phrase("make_coffee", random.Random(0), False)
    with pytest.raises(KeyError, match="needs the slot 'fn'"):
        phrase("find_definition", random.Random(0), False)


@GRAMMARS
def test_slots_come_out_verbatim(heldout):
    """Exact, case-sensitive substrings: never re-cased, misspelt or split, even with typos."""
    for intent in INTENTS:
        for text in requests(intent, heldout, 400):
            for slot in REQUIRED.get(intent, "").split():
                assert SLOTS[slot] in text, (intent, slot, text)


def test_same_seed_same_request():
    for intent in INTENTS:
        for heldout in (False, True):
            assert requests(intent, heldout, 20) == requests(intent, heldout, 20)


def test_thousands_of_distinct_training_requests():
    counts = {intent: len(set(requests(intent, False, 5000))) for intent in INTENTS}
    assert min(counts.values()) >= 200, counts
    assert sum(counts.values()) >= 20000, counts
    assert min(len(set(requests(intent, True, 2000))) for intent in INTENTS) >= 200


def test_the_split_between_training_and_heldout_is_exact():
    fragments = heldout_fragments()
    assert fragments and all(f == f.strip().lower() and len(f) >= 6 for f in fragments)
    parts = [plain(s) for s in strings(TRAINING)]
    assert not [(f, p) for f in fragments for p in parts if f in p]
    intents = sorted(INTENTS)
    train = [phrase(intents[s % len(intents)], random.Random(s), False, **SLOTS) for s in range(20000)]
    assert not [t for t in train if any(f in plain(t) for f in fragments)]
    for intent in INTENTS:
        for text in requests(intent, True, 300):
            assert any(f in plain(text) for f in fragments), text


def test_typos_touch_one_free_word_in_about_one_request_in_ten():
    vocabulary = set(re.findall(r"[a-z]+", " ".join(strings(TRAINING)).lower()))
    vocabulary |= set(re.findall(r"[a-z]+", " ".join(SLOTS.values()).lower()))
    texts = [t for intent in INTENTS for t in requests(intent, False, 300)]
    typod = [t for t in texts if set(re.findall(r"[a-z]+", t.lower())) - vocabulary]
    assert 0.04 * len(texts) < len(typod) < 0.15 * len(texts), len(typod)


def test_change_templates_cannot_read_as_questions_whatever_the_slots():
    """Every slot filled with a question word (or a number), behind every opener, an imperative also wrapped in
    each question-making politeness ("can you ...?"): a change template still reads as a change
    request. No opener starts with a question word."""
    for grammar in (TRAINING, HELDOUT):
        for intent in CHANGE_INTENTS:
            for kind, template in templates(grammar, intent):
                for value in ("what_is", "80"):
                    core = re.sub(r"\{\w+\}", value, template.replace("[", "").replace("]", ""))
                    wrapped = [core] + [a + core + "?" for a in grammar.asks if kind == "do"]
                    for opener in ("",) + grammar.openers:
                        assert not [w for w in wrapped if is_question(opener + w)], (opener, template)
        for opener in grammar.openers:
            assert re.findall(r"[a-z]+", opener.lower())[0] not in QUESTION_STARTS, opener


@GRAMMARS
def test_change_requests_never_read_as_questions_even_with_question_like_names(heldout):
    slots = dict(SLOTS, fn="count_rows", file="find/where.py", test="test_show_all",
                 const="IS_DONE", new="what_now", param="how", default="True")
    for intent in CHANGE_INTENTS:
        assert not [t for t in requests(intent, heldout, 500, slots) if is_question(t)]
