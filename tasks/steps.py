"""The oracle's building blocks that task families share: picking a function, locating it, the
Read arguments a model could copy, unique old_strings, and the setups that change a project
before a task (a committed bug, a stubbed-out body).

Contract: everything here draws randomness only from the rng it is given (the task's while a
task is built, `r.rng` inside a policy), so tasks stay pure functions of their seed.
"""
from __future__ import annotations

from tasks.oracle import OracleRollout
from tasks.projects import Func, Project, commit_all, run_tests


def pick_func(p: Project, rng, pred=lambda f: True) -> Func:
    return p.functions[rng.choice(sorted(n for n, f in p.functions.items() if pred(f)))]


def locate(r: OracleRollout, f: Func, thought: str) -> None:
    """Grep for f's definition: the model then has its path and line number to copy."""
    r.call(thought, "Grep", {"pattern": f"def {f.name}\\("})


def read_args(f: Func, r: OracleRollout, located: bool) -> dict:
    """Read f's file, half the time at f's lines; an offset only when a Grep has shown f's line
    number (`located`), so every offset the model learns is one it could copy."""
    if not located or r.rng.random() < 0.5:
        return {"file_path": f.file}
    return {"file_path": f.file, "offset": f.line - 1, "limit": len(f.source().splitlines()) + 1}


def unique_line(text: str, line: str) -> str:
    """`line` widened with the lines before it until it occurs once in `text`."""
    lines = text.split("\n")
    i = lines.index(line)
    j = i
    while text.count("\n".join(lines[j:i + 1])) > 1 and j > 0:
        j -= 1
    return "\n".join(lines[j:i + 1])


def replace_in_func(p: Project, f: Func, old: str, new: str) -> None:
    text, src = p.read(f.file), f.source()
    assert old in src, (f.name, old)
    p.write(f.file, text.replace(src, src.replace(old, new, 1), 1))


def n_tests(p: Project) -> int:
    return sum(p.read(t).count("\ndef test_") for t in sorted(set(p.tests.values())))


def mentions(answer: str, *words: str) -> bool:
    low = answer.lower()
    return all(w.lower() in low for w in words)


def explain_check(f: Func):
    """The answer names f and says one of its keywords beyond f's name (mean_x, count_x: naming
    the function is no explanation)."""
    def check(root, answer=""):
        said = answer.lower().replace(f.name.lower(), "")
        return f.name in answer and any(k in said for k in f.spec["keywords"])
    return check


def first_caught(p: Project, path: str, variants, what: str) -> tuple:
    """Write each (text, *info) of `variants` to `path` in turn and return the info of the first
    one the test suite catches, left in place; when none fails a test the original text is put
    back and ValueError (naming `what`) raised."""
    good_text = p.read(path)
    for text, *info in variants:
        p.write(path, text)
        if not run_tests(p.root):
            return tuple(info)
    p.write(path, good_text)
    raise ValueError(f"no bug in {what} fails a test")


def inject_bug(p: Project, f: Func, rng) -> tuple[str, str, str]:
    """Commit a bug in f that the test suite catches; returns (bad line as unique old_string, good
    line(s), what it did). A bug no test trips (~1 project in 20) is undone and the next one
    tried; ValueError when none trips a test (the caller moves on to another project)."""
    good_text, src = p.read(f.file), f.source()
    bugs = rng.sample(f.spec["bugs"], len(f.spec["bugs"]))
    old, new, desc = first_caught(p, f.file, ((good_text.replace(src, src.replace(old, new, 1), 1), old, new, desc)
                                              for old, new, desc in bugs), f.name)
    text = p.read(f.file)
    bad_line = next(ln for ln in f.source().replace(old, new, 1).split("\n") if new in ln)
    bad = unique_line(text, bad_line)
    good = bad.replace(new, old)
    assert good in good_text
    commit_all(p, rng.choice([f"tweak {f.name}", f"refactor {f.module.split('/')[-1]}", "small cleanup"]), 25)
    return bad, good, desc


def stub_out(p: Project, f: Func, rng) -> tuple[str, str]:
    """Replace f's body (after its docstring) with `raise NotImplementedError`; returns
    (old_string, new_string) to undo."""
    stub = f"{f.doc_block}\n    raise NotImplementedError"
    p.write(f.file, p.read(f.file).replace(f.source().rstrip("\n"), f"{f.head}\n{stub}", 1))
    commit_all(p, rng.choice([f"stub {f.name}", f"todo: {f.name}", "sketch new helpers"]), 26)
    return stub, f.doc_block + "\n" + "\n".join(f.body)


def documented(f: Func) -> bool:
    """Whether f has a docstring (what explaining or implementing it from its docstring needs)."""
    return bool(f.doc)
