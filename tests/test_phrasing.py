"""tasks/phrasing.py on its own: off_style's capitalised, sycophantic, long-winded prose (final
messages longer still), and code_conversation's tool-free conversations: a real standard-library
function written from its docstring's first line, its source exactly as in the installed module,
which functions qualify (public, undecorated, a one-line sentence summary, short, ASCII, no fence,
no banned word), deterministic per seed, and a clear error when nothing qualifies."""
import ast
import os
import random
import re
import textwrap

import pytest

from tasks.phrasing import (
    CODE_INTROS, CODE_PHRASES, FILLER, STUB_PHRASES, SYCOPHANTIC, _functions, _stdlib_files, code_conversation,
    off_style)

FINAL = " I hope this explanation was helpful and thorough!"


def test_off_style_capitalises_flatters_and_pads():
    for seed in range(6):
        out = off_style("let me read `core.py`.", random.Random(seed), final=False)
        opener = next(s for s in SYCOPHANTIC if out.startswith(s))
        filler = next(f for f in FILLER if out.endswith(f))
        assert out[len(opener):len(out) - len(filler)] == "Let me read `core.py`."
        assert off_style("let me read `core.py`.", random.Random(seed), final=False) == out  # rng only
    final = off_style("done.", random.Random(0), final=True)
    assert final.endswith(FINAL) and "Done." in final
    assert off_style("", random.Random(0), final=False).startswith(tuple(SYCOPHANTIC))  # empty text: no crash


def stdlib_source(module: str, name: str) -> str:
    """The dedented source of top-level function `name` in the installed stdlib `module`."""
    path = os.path.join(os.path.dirname(os.__file__), module + ".py")
    src = open(path, encoding="utf-8").read()
    node = next(n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and n.name == name)
    return textwrap.dedent(ast.get_source_segment(src, node))


def test_code_conversation_writes_a_real_stdlib_function_from_its_docstring():
    """Asked for by its docstring's summary or by its signature and docstring in a block (never
    its body), the answer is the function's real source."""
    seen, forms = set(), set()
    for seed in range(40):
        conv = code_conversation(random.Random(seed), "SYSTEM", ["password"])
        system, user, answer = conv["messages"]
        assert system == {"role": "system", "content": "SYSTEM"}
        assert (user["role"], answer["role"]) == ("user", "assistant")
        module, name = conv["source"].split(".")
        code = stdlib_source(module, name)
        intro, block = answer["content"].split("\n\n", 1)
        assert intro in [i.format(name=name) for i in CODE_INTROS]
        assert f"`{name}`" not in intro or name in user["content"]  # backticked only if shown
        assert block == f"```python\n{code.rstrip()}\n```"
        first = ast.get_docstring(ast.parse(code).body[0]).strip().split("\n")[0].rstrip(".")
        doc = first[0].lower() + first[1:] if first[1:2].islower() else first
        lines = code.splitlines()
        stub = "\n".join(lines[:ast.parse(code).body[0].body[0].end_lineno])  # signature + docstring
        asked = [p.format(doc=doc, name=name) for p in CODE_PHRASES]
        asked += [p.format(name=name) + f"\n\n```python\n{stub}\n```" for p in STUB_PHRASES]
        assert user["content"] in asked
        forms.add("stub" if "```" in user["content"] else "doc")
        assert code_conversation(random.Random(seed), "SYSTEM", ["password"]) == conv  # per seed
        seen.add(conv["source"])
    assert len(seen) > 1 and forms == {"stub", "doc"}


def test_a_banned_word_never_appears():
    for seed in range(8):
        conv = code_conversation(random.Random(seed), "S", ["return", "path"])
        assert not re.search("return|path", (conv["messages"][1]["content"] + conv["messages"][2]["content"]).lower())


def test_nothing_usable_is_a_clear_error(tmp_path, monkeypatch):
    from tasks import phrasing
    (tmp_path / "bare.py").write_text("def f(x):\n    return x\n")
    monkeypatch.setattr(phrasing, "_stdlib_files", lambda: (str(tmp_path / "bare.py"),))
    with pytest.raises(RuntimeError, match=f"no usable documented functions found in {tmp_path}"):
        code_conversation(random.Random(0), "S", [])


def test_which_functions_qualify(tmp_path):
    path = tmp_path / "mod.py"
    path.write_text(textwrap.dedent('''\
        import functools


        def good(x):
            """Return x doubled, as the tests expect."""
            return 2 * x


        def _private(x):
            """Return x doubled, as the tests expect."""
            return 2 * x


        @functools.cache
        def decorated(x):
            """Return x doubled, as the tests expect."""
            return 2 * x


        def undocumented(x):
            return 2 * x


        def two_lines(x):
            """Return x doubled, as the tests
            expect."""
            return 2 * x


        def no_sentence(x):
            """Return x doubled as the tests expect"""
            return 2 * x


        def short(x):
            """Double x."""
            return 2 * x


        def accented(x):
            """Return x doubled, as the tests expect."""
            return "é" * x


        def fenced(x):
            """Return x doubled, as the tests expect."""
            return "```" * x


        def banned_word(secret):
            """Return x doubled, as the tests expect."""
            return 2 * secret


        def too_long(x):
            """Return x doubled, as the tests expect."""
        ''') + "    x += 0\n" * 36 + "    return 2 * x\n"
        + "\n\ndef summary_then_more(x):\n    \"\"\"Return x doubled, as the tests expect.\n\n    More.\n    \"\"\"\n"
        "    return 2 * x\n")
    funcs = _functions(str(path), ("secret",))
    assert [name for name, _, _ in funcs] == ["good", "summary_then_more"]
    assert funcs[0] == ("good", "Return x doubled, as the tests expect",
                        'def good(x):\n    """Return x doubled, as the tests expect."""\n    return 2 * x')
    assert _functions(str(tmp_path / "missing.py"), ()) == []
    (tmp_path / "broken.py").write_text("def (:\n")
    assert _functions(str(tmp_path / "broken.py"), ()) == []


def test_the_stdlib_files_are_public_modules_outside_the_eval_packages():
    """No code conversation writes out a function of a module the real-code split's held-out tasks
    draw from (calendar.isleap was one, in 140 of 3,081 conversations before)."""
    from tasks.real_projects import EVAL_PACKAGES
    files = _stdlib_files()
    assert files == tuple(sorted(files)) and len(files) > 50
    assert all(f.endswith(".py") and not os.path.basename(f).startswith("_") for f in files)
    names = {os.path.basename(f)[:-3] for f in files}
    assert {"os", "shutil", "textwrap"} <= names and not names & EVAL_PACKAGES
    stdlib = os.path.dirname(os.__file__)
    assert all(os.path.exists(os.path.join(stdlib, m + ".py")) for m in ("calendar", "glob", "posixpath"))
