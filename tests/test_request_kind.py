"""A question is not a licence to edit: the request classifier against a large sample of both
request grammars (tasks/requests.py), and the real driver (tiny engine, scripted model, real tools
in a temp git repo) refusing a question's Edit headless, asking about it in a face, and running a
change request's Edit in auto mode."""

import random

import pytest

from agent.loop.request_kind import is_question
from scripted_agent import call, make, reply
from tasks.requests import CHANGE_INTENTS, INTENTS, phrase
from tools.permissions import QUESTION_EDIT

SLOTS = dict(fn="mean_price", cls="Stack", file="pkg/core.py", test="tests/test_core.py",
             new="avg_price", param="scale", default="1", doc="return the sum", pkg="pkg",
             wrong="core.py", module="core", const="MAX_ITEMS", value="50")


@pytest.mark.parametrize("heldout", [False, True], ids=["train", "heldout"])
def test_no_change_request_reads_as_a_question(heldout):
    """The costly error never happens on 1,000 requests of every change intent; at least 85% of
    the question intents' requests are recognised."""
    def sample(intents):
        return [phrase(i, random.Random(s), heldout, **SLOTS) for i in intents for s in range(1000)]
    assert not [t for t in sample(sorted(CHANGE_INTENTS)) if is_question(t)]
    questions = sample(sorted(set(INTENTS) - CHANGE_INTENTS))
    found = sum(map(is_question, questions))
    assert found >= 0.85 * len(questions), found / len(questions)


@pytest.mark.parametrize("text,want", [
    ("where is parse_header defined?", True), ("explain moving_average", True),
    ("why does test_mean fail?", True), ("please run the tests", True),
    ("which files did i modify?", True), ("git status?", True),
    ("can you fix it?", False), ("could you add a docstring to load?", False),
    ("change MAX_RETRIES to 5", False), ("remove the unused helper", False), ("", False)])
def test_examples(text, want):
    assert is_question(text) is want


@pytest.mark.parametrize("text,want", [
    # an aside after the request: the same verdict as without it
    ("run the tests (request 1)", True), ("explain moving_average (request 2)", True),
    ("fix the failing test (request 1)", False), ("where is load [see pkg/core.py]", True),
    # an aside before it does not take the first word's place
    ("(request 1) run the tests", True), ("[request 2] where is parse_header defined", True),
    ("(request 3) add a docstring to load", False),
    # nor does an aside after a question hide its '?'
    ("the mean looks wrong? (request 1)", True), ("tests fail on 3.12? [ci log]", True),
    # a change asked for inside an aside is still asked for; a '?' inside one asks nothing
    ("run the tests (and fix what fails)", False), ("set x to 2 (why not?)", False),
    ("x is wrong (is it?)", False), ("(where is x defined?)", True)])
def test_an_aside_in_brackets_does_not_decide(text, want):
    """`(request 1)` and other bracketed asides are read for change verbs only (a new user's
    "(request N)" labels used to decide the first word or hide the question mark)."""
    assert is_question(text) is want


def test_a_questions_edit_is_refused_headless_and_the_model_answers(engine, tok, repo):
    agent, _ = make(engine, repo, [call(tok, "", "Edit", file_path="a.py", old_string="x = 1",
                                        new_string="x = [i for i in y]"),
                                   reply(tok, "x is 1, in a.py.")], mode="auto")
    res = agent.run_turn("what is x?")
    assert res.tool_calls[0]["result"].startswith("error: the request is a question")
    assert (repo / "a.py").read_text() == "x = 1\n"  # on disk: nothing written
    assert res.stop_reason == "done" and res.answer == "x is 1, in a.py."


def test_a_questions_edit_asks_in_a_face_and_runs_when_approved(engine, tok, repo):
    agent, _ = make(engine, repo, [call(tok, "", "Edit", file_path="a.py", old_string="x = 1",
                                        new_string="x = 2"), reply(tok, "done")], mode="auto")
    asked = []
    agent.run_turn("is x right?", approve=lambda n, a, d: asked.append(d.reason) or "yes")
    assert asked == [QUESTION_EDIT]
    # what the face shows says why in the user's terms, naming no module of ours
    assert asked[0].startswith("the request asks for no change") and ".py" not in asked[0]
    assert (repo / "a.py").read_text() == "x = 2\n"


def test_a_change_request_edits_in_auto_mode_and_the_guard_can_be_turned_off(engine, tok, repo):
    edit = call(tok, "", "Edit", file_path="a.py", old_string="x = 1", new_string="x = 2")
    agent, _ = make(engine, repo, [edit, reply(tok, "done")], mode="auto")
    agent.run_turn("set x to 2")
    assert (repo / "a.py").read_text() == "x = 2\n"
    (repo / "a.py").write_text("x = 1\n")
    agent, _ = make(engine, repo, [edit, reply(tok, "done")], mode="auto", question_guard=False)
    agent.run_turn("what is x?")
    assert (repo / "a.py").read_text() == "x = 2\n"
