"""The prose of tasks: user request phrasings (`phrase`), the off-style prose of rejected rollouts
(`off_style`, ASKS_MORE), and the tool-free code-writing conversations `train synth` mixes in
(`code_conversation`, drawn from the Python standard library).

Trade-offs: phrasings are plain template strings, several per task kind, split into a training
pool and a held-out pool (HELDOUT_PHRASES) that only the eval tasks use, so an eval measures
whether the model follows requests worded in ways it never saw. Each held-out template carries a
distinctive fixed fragment; tests check those fragments never reach training data. Casual
variants come from cheap rewrites (drop backticks, lowercase), not from a language model.
The stdlib conversations reuse real, reviewed code (with its docstring) rather than synthetic
functions; they depend on the installed Python version, so they are deterministic per machine.
"""
from __future__ import annotations

import ast
import functools
import os
import random
import re
import textwrap

PHRASES = {
    "find_definition": [
        "where is `{fn}` defined?", "find the definition of {fn}", "where's {fn}?",
        "which file has `{fn}` in it? i need the line too", "locate `{fn}` for me",
        "can you find where {fn} lives in this repo?", "find {fn}",
        "where does `{fn}` live?", "show me where {fn} is defined", "in which module is `{fn}` defined?",
        "which file and line define {fn}?", "i can't find {fn}. where is it?",
        "where can i find the code for {fn}?"],
    "find_class": [
        "where is the `{cls}` class defined?", "find class {cls}", "which file defines {cls}?",
        "where's the {cls} class?", "locate class `{cls}`", "in which file is `{cls}` declared?"],
    "explain": [
        "what does `{fn}` do?", "explain {fn} briefly", "can you explain what `{fn}` in {file} does?",
        "how does {fn} work?", "quick question: what is `{fn}` for?", "tell me what {fn} returns",
        "describe what `{fn}` does", "what's the purpose of {fn}?", "summarize {fn} for me",
        "i don't understand {fn}. what does it do?", "what is {fn} supposed to do?",
        "help me understand `{fn}`", "read {fn} and tell me what it does"],
    "fix_bug": [
        "the tests are failing, can you fix it?", "`{test}` fails, please fix the bug",
        "something is wrong with `{fn}`, the tests catch it. fix it", "fix the failing test",
        "tests broke after the last commit. fix the code, not the tests",
        "{fn} is returning the wrong thing, fix it",
        "a test is failing, please fix it", "pytest fails. find the bug and fix it",
        "`{test}` is red, find the bug and fix it", "there's a bug in {fn}, please fix it",
        "something broke and the suite fails. can you fix it?", "make the tests pass again"],
    "implement_stub": [
        "implement `{fn}` in {file}", "`{fn}` is just a stub, write it",
        "please write the body of {fn}; the docstring says what it should do",
        "{fn} raises NotImplementedError, implement it so the tests pass", "implement {fn}",
        "write the missing body of `{fn}`", "{fn} isn't implemented yet, do it",
        "finish the implementation of {fn}", "`{fn}` only raises NotImplementedError. implement it",
        "code up {fn} from its docstring", "complete `{fn}` in {file}"],
    "rename_symbol": [
        "rename `{fn}` to `{new}` everywhere", "rename {fn} -> {new}, including the tests"],
    "add_parameter": [
        "add a `{param}` parameter to `{fn}` with default {default}",
        "give {fn} an optional {param} argument (default {default})"],
    "create_test": [
        "add a test file `{test}` for `{fn}`", "write tests for {fn} in {test}",
        "create {test} with a couple of tests for `{fn}`",
        "i need tests for {fn}; put them in {test}", "add some pytest tests for `{fn}` in `{test}`",
        "cover {fn} with tests in {test}"],
    "create_module": [
        "add a module `{file}` with a function `{fn}` that does this: {doc}",
        "create {file} containing {fn}(): {doc}", "new file {file}: a function `{fn}`. {doc}",
        "make a new module {file} with `{fn}`: {doc}", "write `{fn}` in a new file `{file}`. it should {doc}"],
    "run_tests": [
        "run the tests", "do the tests pass?", "run the test suite and tell me the result",
        "can you run pytest?", "check whether the tests are green",
        "are the tests passing?", "run pytest and report back", "please run the tests",
        "what does the test suite say?", "run the unit tests", "are all the tests green?"],
    "line_count": [
        "how many lines is {file}?", "count the lines in `{file}`", "what's the line count of {file}",
        "how long is {file}?", "number of lines in {file}?", "lines in `{file}`?"],
    "list_files": [
        "what modules are in {pkg}?", "list the files in the {pkg} package", "show me what's in {pkg}/",
        "which modules does {pkg} have?", "what's inside {pkg}?", "list {pkg}'s modules",
        "what python files are in {pkg}?"],
    "git_last": [
        "what was the last commit?", "what did the latest commit do?", "show me the most recent commit",
        "what's the latest commit?", "show the last commit", "what changed in the most recent commit?"],
    "git_changes": [
        "what have i changed since the last commit?", "what's uncommitted right now?",
        "which files did i modify?", "git status?",
        "show me my uncommitted changes", "is there anything uncommitted?", "what's modified in the repo?",
        "did i change anything since the last commit?"],
    "git_count": [
        "how many commits does this repo have?", "count the commits", "how long is the git history?",
        "how many commits are there?", "how many commits in the git log?"],
    "recover_path": [
        "look at {wrong} and tell me what {fn} does", "what does {fn} in {wrong} do?",
        "read {wrong} and explain {fn}", "open {wrong}, what does {fn} do?"],
    "recover_cmd": [
        "run the tests for {module}", "run the {module} tests", "do the tests in {module} pass?",
        "run only the {module} tests", "just the tests of {module}, please"],
    "rejects_run": ["run the tests", "run the test suite", "can you run the tests?",
        "run pytest", "do the tests pass?"],
    "rejects_edit": ["implement `{fn}`", "fill in {fn}, it's a stub", "write the body of `{fn}`",
        "implement {fn}", "write {fn}, it's only a stub"],
}

# only eval tasks use these; each has a fragment no training phrasing contains
HELDOUT_PHRASES = {
    "find_definition": ["point me to the spot where {fn} gets defined",
                        "i'm hunting for `{fn}`, got a file and line number?"],
    "find_class": ["point me to the spot where class {cls} gets defined"],
    "explain": ["walk me through what {fn} is doing", "give me the gist of `{fn}` in plain words"],
    "fix_bug": ["track down whatever broke the test suite and squash it",
                "pytest went red on me; sort out `{fn}` please"],
    "implement_stub": ["fill in the missing logic of `{fn}` so pytest is happy",
                       "{fn} is a placeholder right now, flesh it out"],
    "rename_symbol": ["i'd prefer the name `{new}` over `{fn}`, swap it across the codebase",
                      "swap every usage of {fn} for the new name {new}"],
    "add_parameter": ["let callers of `{fn}` pass an extra {param} (defaulting to {default})",
                      "extend the signature of {fn} with {param}={default}"],
    "create_test": ["set up a fresh test module {test} that exercises `{fn}`"],
    "create_module": ["i'd like a brand new file {file} holding `{fn}`; behaviour: {doc}"],
    "run_tests": ["kick off the test suite and give me the verdict",
                  "is the suite passing at the moment? go run it"],
    "line_count": ["tell me the length of {file} in lines, please"],
    "list_files": ["give me an inventory of the modules under {pkg}"],
    "git_last": ["summarize the newest entry in the git log for me"],
    "git_changes": ["anything sitting in my working tree that isn't committed yet?"],
    "git_count": ["tell me the number of commits in the history so far"],
    "recover_path": ["peek into {wrong} and describe {fn} to me"],
    "recover_cmd": ["kick off just the {module} tests and give me the verdict"],
    "rejects_run": ["kick off the test suite and give me the verdict"],
    "rejects_edit": ["fill in the missing logic of `{fn}` so pytest is happy"],
}


def phrase(key: str, rng: random.Random, heldout: bool, **slots) -> str:
    """A user request for `key`, from the held-out pool when `heldout`, with casual rewrites."""
    text = rng.choice((HELDOUT_PHRASES if heldout else PHRASES)[key]).format(**slots)
    r = rng.random()
    if r < 0.25:
        text = text.replace("`", "")
    elif r < 0.35 and text[0].islower() and not text.startswith(tuple(str(v) for v in slots.values())):
        text = text[0].upper() + text[1:]  # never a name: the model copies names as written
    elif r < 0.45 and not text.endswith(("?", ".")):
        text += rng.choice([".", " please", " thanks"])
    return text


def fragments() -> list[str]:
    """The longest fixed fragment of every held-out phrasing (backticks removed)."""
    out = []
    for templates in HELDOUT_PHRASES.values():
        for t in templates:
            parts = re.split(r"\{\w+\}", t.replace("`", ""))
            out.append(max(parts, key=len).strip())
    return out


# --- rejected-rollout prose ----------------------------------------------------------------------

SYCOPHANTIC = ["Great question! ", "Absolutely! I'd be happy to help with that. ",
               "What a great idea! ", "Certainly! "]
FILLER = [" I'll make sure to be very thorough and careful here so that everything is handled properly.",
          " This is an important step, so I want to take a moment to carefully consider it.",
          " As always, it's good practice to double-check everything along the way."]
ASKS_MORE = [" anything else?", " is there anything else you'd like me to do?",
             " let me know if there's anything else i can help with!"]


def off_style(text: str, rng: random.Random, final: bool) -> str:
    """Capitalised, sycophantic, long-winded version of a thought or final message."""
    body = text[0].upper() + text[1:] if text else text
    body = rng.choice(SYCOPHANTIC) + body + rng.choice(FILLER)
    if final:
        body += " I hope this explanation was helpful and thorough!"
    return body


# --- code-writing conversations from the standard library ---------------------------------------

CODE_PHRASES = ["write a function that {doc}", "write a python function that {doc}",
                "i need a function `{name}` that {doc}", "can you write {name}? it should {doc}",
                "python: a function that {doc}"]
CODE_INTROS = ["here's `{name}`:", "this does it:", "here is one way to write `{name}`:",
               "`{name}` below; it follows the standard library's version in `{module}`:"]
@functools.lru_cache(maxsize=1)
def _stdlib_files() -> tuple[str, ...]:
    d = os.path.dirname(os.__file__)
    return tuple(sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".py") and not f.startswith("_")))


@functools.lru_cache(maxsize=None)
def _functions(path: str, banned: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """(name, first docstring line, source) of the usable top-level functions of a file."""
    out = []
    try:
        with open(path, encoding="utf-8") as f:
            src = f.read()
        tree = ast.parse(src)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        tree, src = None, ""
    for node in (tree.body if tree else []):
        if not isinstance(node, ast.FunctionDef) or node.name.startswith("_") or node.decorator_list:
            continue
        doc = ast.get_docstring(node)
        code = ast.get_source_segment(src, node)
        if not doc or not code:
            continue
        lines = doc.strip().split("\n")
        if len(lines) > 1 and lines[1].strip() or not lines[0].rstrip().endswith("."):
            continue  # the summary runs over several lines or is not a sentence
        first = lines[0].strip().rstrip(".")
        code = textwrap.dedent(code)
        lower = (code + first).lower()
        if not (15 <= len(first) <= 110) or code.count("\n") > 35 or not code.isascii():
            continue
        if any(w in lower for w in banned) or "```" in code:
            continue
        out.append((node.name, first, code))
    return out


def code_conversation(rng: random.Random, system: str, banned: list[str]) -> dict:
    """A tool-free conversation: write a stdlib function from its docstring's first line."""
    files, banned = _stdlib_files(), tuple(banned)
    for _ in range(50):
        path = rng.choice(files)
        funcs = _functions(path, banned)
        if funcs:
            break
    else:
        raise RuntimeError(f"no usable documented functions found in {os.path.dirname(path)}")
    name, first, code = rng.choice(funcs)
    module = os.path.basename(path)[:-3]
    doc = first[0].lower() + first[1:] if first[1:2].islower() else first
    user = rng.choice(CODE_PHRASES).format(doc=doc, name=name)
    intro = rng.choice(CODE_INTROS).format(name=name, module=module)
    answer = f"{intro}\n\n```python\n{code.rstrip()}\n```"
    return {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user},
                         {"role": "assistant", "content": answer}], "source": f"{module}.{name}"}
