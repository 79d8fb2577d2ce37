"""User requests: a grammar per task intent that words one request many ways (`phrase`): a training
grammar, and a held-out grammar of other words that only eval tasks use.

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
from dataclasses import dataclass

from agent.loop.request_kind import is_question

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


@dataclass(frozen=True)
class Grammar:
    """The content of one grammar. cores: intent -> kind -> '|'-separated templates, where kind
    is "ask" (a question, written without its '?'), "do" (an imperative that politeness may wrap)
    or "say" (a whole statement, used as written); {slot} is a slot, [words] a held-out fragment."""
    cores: dict[str, dict[str, str]]
    openers: tuple[str, ...]      # context before the core: "hey, ", "i'm new to this repo. "
    asks: tuple[str, ...]         # turn an imperative into a question: "can you "
    please: tuple[str, ...]       # before an imperative
    closers: tuple[str, ...]      # after an imperative or a statement: "", ".", " thanks"
    trailers: tuple[str, ...]     # a remark after a finished sentence: "no rush."


TRAINING = Grammar(cores={
    "find_definition": dict(
        ask="where is {fn} defined|where's {fn}|where does {fn} live|in which module is {fn} defined|"
            "which file and line define {fn}|where can i find the code for {fn}|what file is {fn} in|"
            "where's the def of {fn}|which module defines {fn}|where is {fn} declared",
        do="find the definition of {fn}|locate {fn} for me|find {fn}|show me where {fn} is defined|find "
           "where {fn} lives in this repo|look up {fn}|show me the definition of {fn}|find the file that "
           "defines {fn}",
        say="which file has {fn} in it? i need the line too|i can't find {fn}. where is it?|{fn}?|{fn} - "
            "where does it live?|def of {fn}?|looking for {fn}. which file?"),
    "find_class": dict(
        ask="where is the {cls} class defined|which file defines {cls}|where's the {cls} class|in which "
            "file is {cls} declared|where does class {cls} live|what file is class {cls} in",
        do="find class {cls}|locate class {cls}|find the {cls} class|show me where class {cls} is defined|"
           "look up class {cls}",
        say="class {cls}?|i need the {cls} class. which file is it in?|{cls} - which file defines it?"),
    "explain": dict(
        ask="what does {fn} do|what does {fn} in {file} do|how does {fn} work|what is {fn} for|what's the "
            "purpose of {fn}|what is {fn} supposed to do|what's {fn} in {file} for|what does {fn} return|"
            "how does {fn} in {file} work",
        do="explain {fn} briefly|explain {fn}|explain what {fn} in {file} does|tell me what {fn} returns|"
           "describe what {fn} does|summarize {fn} for me|help me understand {fn}|read {fn} and tell me "
           "what it does|explain {fn} from {file}",
        say="quick question: what is {fn} for?|i don't understand {fn}. what does it do?|{fn} in {file} "
            "confuses me. what does it do?|what's {fn} about?"),
    "fix_bug": dict(
        do="fix the failing test|make the tests pass again|fix {fn}|fix the bug in {fn}|fix the bug "
           "{test} catches|find the bug and fix it|fix the code so the tests pass",
        say="the tests are failing, can you fix it?|{test} fails, please fix the bug|something is wrong "
            "with {fn}, the tests catch it. fix it|tests broke after the last commit. fix the code, not "
            "the tests|{fn} is returning the wrong thing, fix it|a test is failing, please fix it|pytest "
            "fails. find the bug and fix it|{test} is red, find the bug and fix it|there's a bug in {fn}, "
            "please fix it|something broke and the suite fails. can you fix it?|the tests are failing, "
            "fix it|{test} fails. fix {fn}|{fn} has a bug and {test} shows it. fix it"),
    "implement_stub": dict(
        do="implement {fn} in {file}|write the body of {fn}; the docstring says what it should do|"
           "implement {fn}|write the missing body of {fn}|finish the implementation of {fn}|complete {fn} "
           "in {file}|implement the stub {fn}|write {fn} in {file} from its docstring",
        say="{fn} is just a stub, write it|{fn} raises NotImplementedError, implement it so the tests "
            "pass|{fn} isn't implemented yet, do it|{fn} only raises NotImplementedError. implement it|"
            "code up {fn} from its docstring|{fn} in {file} is a stub. implement it"),
    "rename_symbol": dict(
        do="rename {fn} to {new} everywhere|rename {fn} -> {new}, including the tests|rename {fn} to "
           "{new}|rename {fn} to {new} and update the callers|change the name of {fn} to {new}",
        say="{fn} should be called {new}. rename it everywhere|i'd rather call {fn} {new}; rename it, "
            "tests included|the name {fn} is unclear, rename it to {new}"),
    "add_parameter": dict(
        do="add a {param} parameter to {fn} with default {default}|add an optional {param} argument to "
           "{fn}, defaulting to {default}|add {param}={default} to the signature of {fn}|add a keyword "
           "argument {param} to {fn} (default {default})",
        say="give {fn} an optional {param} argument (default {default})|{fn} needs a {param} parameter; "
            "add it with default {default}|i want to pass {param} to {fn}. add it, default {default}"),
    "create_test": dict(
        do="add a test file {test} for {fn}|write tests for {fn} in {test}|create {test} with a couple of "
           "tests for {fn}|add some pytest tests for {fn} in {test}|cover {fn} with tests in {test}|write "
           "a test module {test} for {fn}",
        say="i need tests for {fn}; put them in {test}|{fn} is missing tests. add some in {test}|{fn} is "
            "untested; write tests for it in {test}"),
    "create_module": dict(
        do="add a module {file} with a function {fn} that does this: {doc}|create {file} containing "
           "{fn}(): {doc}|make a new module {file} with {fn}: {doc}|write {fn} in a new file {file}. it "
           "should {doc}|create a module {file} with one function, {fn}, to {doc}",
        say="new file {file}: a function {fn}. {doc}|i need a new module {file} with a function {fn} that "
            "should {doc}. please create it"),
    "run_tests": dict(
        ask="do the tests pass|are the tests passing|what does the test suite say|are all the tests green|"
            "is the suite green|does pytest pass",
        do="run the tests|run the test suite and tell me the result|run pytest|check whether the tests "
           "are green|run pytest and report back|run the unit tests|run the whole test suite|check if the "
           "tests pass",
        say="tests?|are we green? run the tests"),
    "line_count": dict(
        ask="how many lines is {file}|what's the line count of {file}|how long is {file}|number of lines "
            "in {file}|lines in {file}|how many lines does {file} have",
        do="count the lines in {file}|tell me how many lines {file} has|give me the line count of {file}|"
           "check how long {file} is",
        say="{file}: how many lines?|line count of {file}?"),
    "list_files": dict(
        ask="what modules are in {pkg}|which modules does {pkg} have|what's inside {pkg}|what python "
            "files are in {pkg}|what files does {pkg} contain",
        do="list the files in the {pkg} package|show me what's in {pkg}/|list {pkg}'s modules|list the "
           "modules of {pkg}|show the contents of the {pkg} package",
        say="{pkg} - what's in it?|ls {pkg}?"),
    "git_last": dict(
        ask="what was the last commit|what did the latest commit do|what's the latest commit|what changed "
            "in the most recent commit|which commit is the latest",
        do="show me the most recent commit|show the last commit|describe the last commit|tell me about "
           "the last commit|summarize the latest commit",
        say="last commit?|latest commit - what is it?"),
    "git_changes": dict(
        ask="what have i changed since the last commit|what's uncommitted right now|which files did i "
            "modify|is there anything uncommitted|what's modified in the repo|did i change anything since "
            "the last commit|which files have uncommitted changes",
        do="show me my uncommitted changes|list my uncommitted changes|show the working tree changes|tell "
           "me what i've changed",
        say="git status?|anything uncommitted?"),
    "git_count": dict(
        ask="how many commits does this repo have|how long is the git history|how many commits are there|"
            "how many commits in the git log",
        do="count the commits|count the commits in this repo|tell me how many commits there are",
        say="number of commits?|commit count?"),
    "recover_path": dict(
        ask="what does {fn} in {wrong} do",
        do="look at {wrong} and tell me what {fn} does|read {wrong} and explain {fn}|explain {fn} from "
           "{wrong}|check {wrong} and tell me what {fn} is for",
        say="open {wrong}, what does {fn} do?|{fn} is in {wrong}, i think. what does it do?"),
    "recover_cmd": dict(
        ask="do the tests in {module} pass|are the {module} tests passing",
        do="run the tests for {module}|run the {module} tests|run only the {module} tests|run just the "
           "{module} tests",
        say="just the tests of {module}, please|{module} tests - do they pass?"),
    "rejects_run": dict(
        ask="do the tests pass",
        do="run the tests|run the test suite|run pytest|run the tests now"),
    "rejects_edit": dict(
        do="implement {fn}|write the body of {fn}|implement the stub {fn}",
        say="fill in {fn}, it's a stub|write {fn}, it's only a stub"),
    "find_callers": dict(
        ask="who calls {fn}|where is {fn} used|which functions call {fn}|where is {fn} called from|what "
            "calls {fn}|is {fn} used anywhere",
        do="find the callers of {fn}|list every call site of {fn}|show me where {fn} is called|find all "
           "uses of {fn}",
        say="callers of {fn}?|{fn} - who uses it?"),
    "find_importers": dict(
        ask="which files import {module}|who imports {module}|what imports {module}|where is {module} "
            "imported",
        do="list the files that import {module}|find every import of {module}|show me which modules "
           "import {module}",
        say="importers of {module}?|{module} - who imports it?"),
    "explain_file": dict(
        ask="what is {file} for|what does {file} do|what's in {file}|what's the purpose of {file}",
        do="explain {file}|describe what {file} does|summarize {file}|tell me what {file} is for|give me "
           "an overview of {file}",
        say="{file} - what is it for?|i'm new here. what does {file} do?"),
    "count_files": dict(
        ask="how many python files are in this repo|how many .py files are there|how many .py files "
            "does this project have|how many python files does the repo have",
        do="count the python files in this repo|count the .py files|tell me how many python files there "
           "are",
        say="number of python files?|python file count?"),
    "git_last_files": dict(
        ask="which files did the last commit touch|what files were changed in the last commit|which files "
            "were added in the last commit|what did the last commit touch|which files changed in the "
            "latest commit",
        do="list the files the last commit touched|show the files in the last commit|show me what files "
           "the latest commit touched",
        say="files in the last commit?|last commit - which files?"),
    "change_constant": dict(
        do="set {const} to {value}|set {const} in {file} to {value}|change {const} to {value}|change "
           "{const} in {file} to {value}|update {const} to {value}|make {const} {value}",
        say="{const} should be {value}, update it|{const} in {file} should be {value}. change it|we need "
            "{const} = {value}; set it in {file}"),
    "add_docstring": dict(
        do="document {fn}|add a docstring to {fn}|write a docstring for {fn}|document {fn} with a "
           "docstring",
        say="{fn} needs a docstring. add one|{fn} is missing a docstring. add one|{fn} is undocumented, "
            "please document it"),
    "remove_function": dict(
        do="delete {fn}, nobody uses it|remove {fn}|delete {fn}|remove the unused function {fn}|delete "
           "the dead function {fn}",
        say="{fn} is dead code, remove it|nobody calls {fn} anymore. delete it"),
}, openers=("hey, ", "ok so ", "one thing: ", "before i push, ", "i'm reading the code. ",
            "i'm new to this repo. ", "hi! ", "so, "),
   asks=("can you ", "could you "), please=("please ",),
   closers=("", "", "", ".", "!", " please", " thanks", ", thanks", " ty"),
   trailers=("no rush.", "it's for a review.", "thanks!", "i'm trying to understand the code."))

HELDOUT = Grammar(cores={
    "find_definition": dict(
        ask="[where on earth] is {fn} hiding|[which corner of the repo] holds {fn}|[in what file does] "
            "{fn} reside|[whereabouts is] {fn}",
        do="[point me to the spot where] {fn} gets defined|[track down the definition] of {fn}|"
           "[dig up the source] of {fn}",
        say="[i'm hunting for] {fn}, [got a file and line number]?|{fn} - [no clue where it lives]"),
    "find_class": dict(
        ask="[where on earth] is the {cls} class hiding|[which corner of the repo] holds class {cls}|"
            "[in what file does] class {cls} reside",
        do="[point me to the spot where] class {cls} gets defined|[track down the definition] of class "
           "{cls}|[dig up the source] of the {cls} class",
        say="[i'm hunting for] the {cls} class, [got a file and line number]?"),
    "explain": dict(
        ask="[what's the deal with] {fn}|[what's the story behind] {fn} in {file}|[what's the gist of] "
            "{fn}|what is {fn} [actually up to]",
        do="[walk me through what] {fn} is doing|[give me the gist of] {fn} in plain words|"
           "[give me the gist of] {fn} from {file}|[walk me through what] {fn} in {file} is doing",
        say="{fn} [is a mystery to me]; [what's its job]?"),
    "fix_bug": dict(
        do="[track down whatever broke the test suite] and squash it|squash the bug in {fn} "
           "[that trips up] {test}|repair {fn} [so the suite goes back to green]",
        say="[pytest went red on me]; sort out {fn} please|{test} [keeps blowing up]; squash the bug in "
            "{fn}|[the suite is unhappy]; hunt the bug down and squash it"),
    "implement_stub": dict(
        do="[fill in the missing logic of] {fn} [so pytest is happy]|flesh out {fn} "
           "[in line with its docstring]|flesh out the body of {fn} in {file} "
           "[in line with its docstring]",
        say="{fn} [is a placeholder right now], flesh it out|{fn} in {file} [is an empty shell]; flesh it "
            "out"),
    "rename_symbol": dict(
        do="[swap every usage of] {fn} for the new name {new}|swap the name {fn} for {new}, "
           "[across every file, tests and all]",
        say="[i'd prefer the name] {new} over {fn}, [swap it across the codebase]"),
    "add_parameter": dict(
        do="[extend the signature of] {fn} with {param}={default}|extend {fn} [so it also accepts] "
           "{param}, [with a fallback of] {default}",
        say="[let callers of] {fn} pass an extra {param} (defaulting to {default})"),
    "create_test": dict(
        do="[set up a fresh test module] {test} that exercises {fn}|introduce {test} that puts {fn} "
           "[through its paces]",
        say="{fn} [has zero coverage]; introduce a test module {test} [to put it through its paces]"),
    "create_module": dict(
        do="introduce {file} [with a single routine] {fn}; its job is to {doc}",
        say="[i'd like a brand new file] {file} holding {fn}; behaviour: {doc}"),
    "run_tests": dict(
        ask="[is the suite passing at the moment]|[how is the suite holding up]",
        do="[kick off the test suite and give me the verdict]|[give the suite a spin]|[fire up pytest] "
           "[and give me the verdict]",
        say="[is the suite passing at the moment]? go run it"),
    "line_count": dict(
        ask="how tall is {file}, [measured in lines]",
        do="[tell me the length of] {file}, [measured in lines]|[tell me the length of] {file}",
        say="{file} - [how many lines long]?|[tell me the length of] {file} in lines, please"),
    "list_files": dict(
        ask="[what lives under] {pkg}|[what sits inside the] {pkg} package|[what's tucked away in] {pkg}",
        do="[give me an inventory of the modules under] {pkg}|[walk me through the contents of] {pkg}"),
    "git_last": dict(
        ask="[what landed most recently] in the git log|[what's the newest entry in the history]",
        do="[summarize the newest entry in the git log for me]|"
           "[bring me up to speed on the newest commit]"),
    "git_changes": dict(
        ask="[what's lying around uncommitted]|[have i left anything dangling] in the working tree",
        do="[give me a rundown of my pending edits]",
        say="[anything sitting in my working tree that isn't committed yet]?"),
    "git_count": dict(
        ask="[how deep is the git history]|[how many entries does the git log hold]",
        do="[tell me the number of commits in the history so far]"),
    "recover_path": dict(
        ask="[what's the deal with] {fn} over in {wrong}",
        do="[peek into] {wrong} and describe {fn} to me|crack open {wrong} and [give me the gist of] "
           "{fn}"),
    "recover_cmd": dict(
        ask="[how healthy are the] {module} tests",
        do="[kick off just the] {module} tests [and give me the verdict]|[fire up pytest] on just the "
           "{module} tests"),
    "rejects_run": dict(
        ask="[is the suite passing at the moment]",
        do="[kick off the test suite and give me the verdict]|[fire up pytest] [and give me the verdict]"),
    "rejects_edit": dict(
        do="[fill in the missing logic of] {fn} [so pytest is happy]|flesh out {fn} "
           "[in line with its docstring]"),
    "find_callers": dict(
        ask="[who leans on] {fn}|[which spots in the code reach for] {fn}",
        do="[hunt down every caller of] {fn}|[track down every call site of] {fn}"),
    "find_importers": dict(
        ask="[who pulls in] {module}|[which files drag in] {module}",
        do="[hunt down every file that pulls in] {module}"),
    "explain_file": dict(
        ask="[what's the role of] {file} in this project|what job does {file} [do around here]|"
            "[what's the gist of] {file}",
        do="[give me the gist of] {file}|[walk me through what] {file} is doing"),
    "count_files": dict(
        ask="[how big is this codebase in python files]|[what's the tally of python files] in here",
        do="[tally up the python files] in here|[tally up the python files]"),
    "git_last_files": dict(
        ask="[what did the newest commit bring in]|[which paths did the newest commit touch]",
        do="[rattle off the files in the newest commit]"),
    "change_constant": dict(
        do="tweak {const}; [the value it should hold is] {value}|adjust {const} in {file} "
           "[so that it comes out as] {value}",
        say="{const} [is meant to read] {value}; tweak {file} accordingly"),
    "add_docstring": dict(
        do="annotate {fn} [with a proper docstring]|[jot down a docstring for] {fn} and insert it",
        say="{fn} [lacks any explanation]; annotate it [with a proper docstring]"),
    "remove_function": dict(
        do="ditch {fn}, [it's dead weight]|rip out {fn}, [nothing depends on it]",
        say="{fn} [is dead weight]; rip it out"),
}, openers=("heads up, ", "yo, ", "right, ", "while you're in there, ", "fresh clone here. ",
            "got a sec? ", "morning! "),
   asks=("would you ",), please=("kindly ", "pls "),
   closers=("", "", "", ".", "!", " cheers", ", cheers", " if you can"),
   trailers=("cheers in advance.", "no hurry at all.", "much obliged."))

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
