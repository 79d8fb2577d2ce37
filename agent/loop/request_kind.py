"""Is a request a question? The driver lets a question end in an answer, not an edit: in a turn
whose request is a question, an Edit that only the mode would allow (accept-edits, auto) asks
first, and headless, where nobody can answer, it is refused with an error the model reads, so it
answers instead (tools/permissions.Policy.check, agent/loop/driver.py). What Claude Code users expect:
a question gets an answer; a change is made when asked.

Contract: `is_question(text)` is True when the request reads as a question or a look-up (it ends
in '?', or its first word asks, looks, explains or runs) and names no change (no CHANGE_VERBS
word anywhere, asides included). An aside in brackets, `(request 1)`, `[see a.py]`, is read for
change verbs only: it neither supplies the first word nor hides a final '?', wherever it stands
("(request 1) run the tests", "f looks wrong? (request 1)"). The two errors cost differently: a change request read as a question would make
auto mode ask before its edit (and refuse it headless), while a question read as a change request
only loses the guard, so anything in doubt is a change request. Rules are plain word lists, not a
model; tests check samples of both request grammars (tasks/requests.py) against each intent's kind.
"""
from __future__ import annotations

import re

# the first word of a question or a look-up ("where is ...", "explain ...", "run the tests")
QUESTION_STARTS = frozenset("""
    what whats where wheres which who whose why how when is are was were does do did can could would
    will should has have explain describe tell show list summarize summarise count find locate look
    read check run open peek point walk help quick kick track dig hunt fire tally rattle crack bring
    launch execute trigger search report measure enumerate figure pin jump outline
    """.split())
# a word that asks for a change anywhere in the request makes it a change request
CHANGE_VERBS = frozenset("""
    fix fixing change rename add adding remove delete implement implementing write
    writing create creating update edit modify refactor replace make move fill flesh complete finish
    swap extend squash set cover put insert patch correct resolve convert document rewrite drop clean
    bump increase decrease apply revert undo install generate append prepend migrate port
    introduce uncomment enable disable rework repair tweak adjust improve optimize optimise simplify
    implemented ditch rip annotate
    """.split())
# words that open a request without saying what it is ("please run the tests")
FILLERS = frozenset("please pls kindly hey hi hello yo morning ok okay so right now also and then next go "
                    "ahead question".split())
# a change verb right after these reports a past change ("which files did i modify?")
PAST = frozenset("did have has had".split())
_WORD = re.compile(r"[a-z]+")
_ASIDE = re.compile(r"\([^()]*\)|\[[^\[\]]*\]")  # an innermost (...) or [...]


def without_asides(text: str) -> str:
    """`text` with every bracketed aside, nested ones too, cut out (unbalanced brackets stay)."""
    while (cut := _ASIDE.sub(" ", text)) != text:
        text = cut
    return text.strip()


def is_question(text: str) -> bool:
    """True when `text` asks something and asks for no change (module docstring)."""
    low = text.strip().lower().replace("'", "").replace("\u2019", "")
    words = _WORD.findall(low)
    if any(w in CHANGE_VERBS and not PAST & set(words[max(0, i - 3):i]) for i, w in enumerate(words)):
        return False
    core = without_asides(low)
    if not _WORD.search(core):  # nothing but asides: they are the request
        core = low
    first = next((w for w in _WORD.findall(core) if w not in FILLERS), "")
    return bool(words) and (core.endswith("?") or first in QUESTION_STARTS)
