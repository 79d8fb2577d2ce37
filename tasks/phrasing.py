"""The prose of tasks besides user requests (tasks/requests.py): the off-style prose of rejected
rollouts (`off_style`, ASKS_MORE), and the tool-free code-writing conversations `train synth` mixes
in (`code_conversation`, drawn from the Python standard library: a function asked for by its
docstring's summary, or by its signature and docstring to complete).

Trade-offs: the stdlib conversations reuse real, reviewed code (with its docstring) rather than
synthetic functions; they depend on the installed Python version, so they are deterministic per
machine.
"""
from __future__ import annotations

import ast
import functools
import os
import random
import textwrap

from tasks.real_projects import EVAL_PACKAGES

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
# the other form: the function's signature and docstring shown in a block, to be completed
STUB_PHRASES = ["complete this function:", "fill in the body of `{name}`:", "implement `{name}`:",
                "write the body of this function:", "finish `{name}` for me:",
                "complete this python function. reply with the whole function:"]
STUB_SHARE = 0.5  # of code conversations, those in the stub form (when the function has a body)
# an intro backticks the name only where the user's message showed it (the prose mask refuses
# a span the context never showed)
CODE_INTROS = ["here's `{name}`:", "this does it:", "here is one way to write `{name}`:",
               "`{name}` below, as the standard library writes it:", "here it is:", "one way to write it:"]
@functools.lru_cache(maxsize=1)
def _stdlib_files() -> tuple[str, ...]:
    """The standard library's public top-level modules, less those only evals draw from
    (real_projects.EVAL_PACKAGES: a function written out here would be the answer to a held-out
    task of the real-code split)."""
    d = os.path.dirname(os.__file__)
    return tuple(sorted(os.path.join(d, f) for f in os.listdir(d)
                        if f.endswith(".py") and not f.startswith("_") and f[:-3] not in EVAL_PACKAGES))


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


def _stub(code: str) -> str:
    """A function's source up to the end of its docstring: its signature and docstring."""
    node = ast.parse(code).body[0]
    return "\n".join(code.splitlines()[:node.body[0].end_lineno])


def code_conversation(rng: random.Random, system: str, banned: list[str]) -> dict:
    """A tool-free conversation: write a stdlib function from its docstring's first line, or
    complete it from its signature and docstring (the form of a code-completion request)."""
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
    stub = _stub(code)
    if stub != code and rng.random() < STUB_SHARE:
        user = rng.choice(STUB_PHRASES).format(name=name) + f"\n\n```python\n{stub}\n```"
    else:
        user = rng.choice(CODE_PHRASES).format(doc=doc, name=name)
    intro = rng.choice([i for i in CODE_INTROS if "{name}" not in i or name in user]).format(name=name)
    answer = f"{intro}\n\n```python\n{code.rstrip()}\n```"
    return {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user},
                         {"role": "assistant", "content": answer}], "source": f"{module}.{name}"}
