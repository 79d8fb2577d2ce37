"""Task families that ask something: where a name is defined, what a function does, running a
command and reporting, git questions, a wrong path or command to recover from. Each builds its
task on a project (tasks/projects.py or tasks/real_projects.py) and returns the family dict
tasks/families.py describes; a question's check reads the final answer, and the project must be
left as it was.
"""
from __future__ import annotations

import ast
import os
import re

from tasks.oracle import OracleRollout
from tasks.projects import Project, git, snapshot
from tasks.steps import documented, explain_check, locate, mentions, n_tests, pick_func, read_args, replace_in_func


def find_definition(p: Project, rng, ph) -> dict:
    if p.classes and rng.random() < 0.25:
        name = rng.choice(sorted(p.classes))
        file, line, doc = p.classes[name]
        prompt, pattern = ph("find_class", cls=name), f"class {name}"
    else:
        f = pick_func(p, rng)
        name, file, line, doc = f.name, f.file, f.line, f.doc
        prompt, pattern = ph("find_definition", fn=name), rng.choice([f"def {name}\\(", f"def {name}\\b"])
    loc = f"{file}:{line}"
    other = rng.choice([m for m in p.modules if m != file])

    def policy(r: OracleRollout):
        if r.flaw == "wrong_file":
            r.call(f"`{name}` is probably in `{other}`; let me look.", "Read", {"file_path": other})
            r.done(f"`{name}` should be in `{other}`, near the top.")
            return
        args = {"pattern": pattern, "path": p.package} if r.rng.random() < 0.4 else {"pattern": pattern}
        r.call(r.pick(f"let me find where `{name}` is defined.", f"i'll grep for the definition of `{name}`.",
                      f"searching for `{name}`."), "Grep", args)
        if r.rng.random() < 0.4:
            r.call("let me look at it to confirm.", "Read", {"file_path": file, "offset": line - 1, "limit": 6})
            r.done(f"`{name}` is defined at `{loc}`. its docstring: \"{doc}\"")
        else:
            r.done(r.pick(f"`{name}` is defined in `{file}` at line {line} (`{loc}`).", f"`{loc}`: that's where `{name}` is defined."))
    return dict(prompt=prompt, check=lambda root, answer="": loc in answer, desc=f"answer contains {loc}",
                policy=policy, flaws=["wrong_file", "repeat", "off_style", "asks_more"])


def explain(p: Project, rng, ph) -> dict:
    f = pick_func(p, rng, documented)
    prompt = ph("explain", fn=f.name, file=f.file)
    other = rng.choice([m for m in p.modules if m != f.file])
    check = explain_check(f)  # the wrong_file answer borrows an explanation the check rejects
    others = sorted(e for e in {g.spec["explain"] for g in p.functions.values() if documented(g)}
                    if not check(p.root, f"`{f.name}` {e}"))
    wrong = rng.choice(others) if others else "returns its argument unchanged."

    def policy(r: OracleRollout):
        if r.flaw == "wrong_file":
            r.call(f"let me read `{other}`.", "Read", {"file_path": other})
            r.done(f"i think `{f.name}` {wrong}")
            return
        located = f.file not in prompt
        if located:
            locate(r, f, r.pick(f"let me find `{f.name}` first.", f"i'll locate `{f.name}`."))
        r.call(r.pick(f"let me read `{f.name}`.", "reading the function.", f"let me look at `{f.name}` in `{f.file}`."),
               "Read", read_args(f, r, located))
        r.done(f"`{f.name}` {f.spec['explain']}" + r.pick("", f" it lives in `{f.file}:{f.line}`."))
    return dict(prompt=prompt, check=check, desc=f"answer names {f.name} and one of {f.spec['keywords']}",
                policy=policy, flaws=["wrong_file", "repeat", "off_style", "asks_more"])


def run_command(p: Project, rng, ph) -> dict:
    kind = rng.choice(["tests", "tests", "lines", "ls", "count"])
    if kind == "count":
        n = sum(1 for rel in snapshot(p.root) if rel.endswith(".py"))
        prompt = ph("count_files")
        cmd = rng.choice(["git ls-files '*.py' | wc -l", "find . -name '*.py' -not -path './.git/*' | wc -l"])
        answer = [f"{n} python files.", f"there are {n} `.py` files in the repo."]
        check, desc = (lambda root, answer="": re.search(rf"\b{n}\b", answer) is not None), f"answer contains {n}"
    elif kind == "tests":
        n = n_tests(p)
        prompt, cmd = ph("run_tests"), p.test_cmd
        answer = [f"all {n} tests pass.", f"the tests pass: {n} passed, no failures."]
        check, desc = (lambda root, answer="": re.search(rf"\b{n}\b", answer) is not None and "pass" in answer), f"answer says {n} pass"
    elif kind == "lines":
        file = rng.choice(p.modules + ["README.md"])
        n = p.read(file).count("\n")
        prompt, cmd = ph("line_count", file=file), f"wc -l {file}"
        answer = [f"`{file}` has {n} lines.", f"{n} lines."]
        check, desc = (lambda root, answer="": re.search(rf"\b{n}\b", answer) is not None), f"answer contains {n}"
    else:
        names = sorted(os.path.basename(m) for m in p.modules)
        prompt, cmd = ph("list_files", pkg=p.package), rng.choice([f"ls {p.package}", f"ls -1 {p.package}"])
        answer = [f"`{p.package}` has {len(names)} modules: " + ", ".join(f"`{x}`" for x in names) + ", plus `__init__.py`."]
        check, desc = (lambda root, answer="": mentions(answer, *names)), f"answer names {names}"

    def policy(r: OracleRollout):
        r.call(r.pick("on it.", f"running {cmd}.", "let me run it."), "Bash", {"command": cmd})
        r.done(r.pick(*answer))
    return dict(prompt=prompt, check=check, desc=desc, policy=policy, flaws=["repeat", "off_style", "asks_more"])


def git_inspect(p: Project, rng, ph) -> dict:
    kind = rng.choice(["last", "changes", "count", "last_files"])
    subject = p.commits[-1]
    if kind == "last_files":
        files = git(p.root, "show", "--name-only", "--format=", "HEAD").split()
        prompt, cmds = ph("git_last_files"), [rng.choice(["git show --stat HEAD", "git log -1 --name-only"])]
        answer = f"the last commit (\"{subject}\") touched " + ", ".join(f"`{x}`" for x in files) + "."
        check, desc = (lambda root, answer="": mentions(answer, *files)), f"answer names {files}"
    elif kind == "last":
        prompt, cmds = ph("git_last"), [rng.choice(["git log -1 --stat", "git show --stat HEAD", "git log --oneline -n 3"])]
        answer = f"the latest commit is \"{subject}\"."
        check, desc = (lambda root, answer="": subject in answer), f"answer quotes {subject!r}"
    elif kind == "count":
        k = len(p.commits)
        prompt, cmds = ph("git_count"), ["git log --oneline"]
        answer = f"{k} commits; the latest is \"{subject}\"."
        check, desc = (lambda root, answer="": re.search(rf"\b{k}\b", answer) is not None), f"answer says {k}"
    else:
        f = pick_func(p, rng, documented)
        replace_in_func(p, f, f.doc, f.doc.rstrip(".") + rng.choice([" (fast path).", " (see README)."]))
        prompt, cmds = ph("git_changes"), ["git status --short", rng.choice(["git diff", f"git diff {f.file}"])]
        answer = f"one uncommitted change: `{f.file}`, where the docstring of `{f.name}` was edited. nothing is staged."
        check, desc = (lambda root, answer="": f.file in answer), f"answer names {f.file}"

    def policy(r: OracleRollout):
        for i, c in enumerate(cmds):
            r.call(r.pick("let me check git.", f"running {c}.") if i == 0 else "now the diff itself.", "Bash", {"command": c})
        r.done(answer)
    return dict(prompt=prompt, check=check, desc=desc, policy=policy, flaws=["repeat", "off_style", "asks_more"])


def recover_error(p: Project, rng, ph) -> dict:
    """The user names a file or test path that does not exist. The agent's grammar admits only
    real paths to Read, so the oracle searches instead of trying the wrong path; a shell command
    (free text) can still fail, and the oracle then looks and retries."""
    if rng.random() < 0.5:
        f = pick_func(p, rng, documented)
        wrong = os.path.basename(f.file)
        prompt = ph("recover_path", fn=f.name, wrong=wrong)

        def policy(r: OracleRollout):
            locate(r, f, f"there's no `{wrong}` at the root; let me search for `{f.name}`.")
            r.call(f"it's in `{f.file}`. reading it.", "Read", read_args(f, r, True))
            r.done(f"`{f.name}` (in `{f.file}`, not `{wrong}`) {f.spec['explain']}")
        return dict(prompt=prompt, check=explain_check(f), desc=f"answer names {f.name} and one of {f.spec['keywords']}",
                    policy=policy, flaws=["repeat", "off_style", "asks_more"])
    mod = os.path.basename(rng.choice(p.modules))[:-3]
    test = f"tests/test_{mod}.py"
    n = p.read(test).count("\ndef test_")
    prompt = ph("recover_cmd", module=mod)

    def policy(r: OracleRollout):
        r.call(f"running the {mod} tests.", "Bash", {"command": f"python -m pytest -q tests/{mod}_test.py"})
        r.call(f"no `tests/{mod}_test.py`; let me see what the test files are called.", "Bash", {"command": "ls tests"})
        r.call(f"it's `test_{mod}.py`.", "Bash", {"command": f"python -m pytest -q {test}"})
        r.done(f"the {mod} tests pass: {n} passed (the file is `test_{mod}.py`).")
    return dict(prompt=prompt, check=lambda root, answer="": re.search(rf"\b{n}\b", answer) is not None and "pass" in answer,
                desc=f"answer says {n} pass", policy=policy, flaws=["repeat", "off_style", "asks_more"])


def _calls_of(p: Project, name: str) -> list[tuple[str, str, int]]:
    """(file, calling top-level function, line) of every call of `name` in the project's .py files
    (tests included), in file order."""
    out = []
    for rel, text in sorted(snapshot(p.root).items()):
        if not rel.endswith(".py"):
            continue
        for node in ast.parse(text).body:
            if isinstance(node, ast.FunctionDef) and node.name != name:
                lines = sorted({c.lineno for c in ast.walk(node) if isinstance(c, ast.Call)
                                and isinstance(c.func, ast.Name) and c.func.id == name})
                out += [(rel, node.name, ln) for ln in lines[:1]]
    return out


def find_callers(p: Project, rng, ph) -> dict:
    """Who calls a function: the functions that do (file:line), or, when only its tests do, the
    test file. A real project's helpers have callers; a generated one's functions only tests."""
    calls = {n: _calls_of(p, n) for n in sorted(p.functions)}
    inner = [n for n, c in calls.items() if any(not rel.startswith("tests/") for rel, _, _ in c)]
    f = p.functions[rng.choice(inner)] if inner and rng.random() < 0.7 else pick_func(p, rng)
    callers = [c for c in calls[f.name] if not c[0].startswith("tests/")]
    tests = sorted({rel for rel, _, _ in calls[f.name] if rel.startswith("tests/")})
    prompt = ph("find_callers", fn=f.name)
    if callers:
        answer = (f"`{f.name}` is called by " + ", ".join(f"`{fn}` (`{rel}:{ln}`)" for rel, fn, ln in callers)
                  + (", and by its tests in " + ", ".join(f"`{t}`" for t in tests) if tests else "") + ".")
        names = [fn for _, fn, _ in callers]
        check, desc = (lambda root, answer="": mentions(answer, *names)), f"answer names the callers {names}"
    else:
        answer = f"only the tests call `{f.name}`: " + ", ".join(f"`{t}`" for t in tests) + "."
        check, desc = (lambda root, answer="": mentions(answer, *tests)), f"answer names {tests}"

    def policy(r: OracleRollout):
        r.call(r.pick(f"let me grep for calls of `{f.name}`.", f"searching for `{f.name}(`."), "Grep",
               {"pattern": f"\\b{f.name}\\("})
        r.done(answer)
    return dict(prompt=prompt, check=check, desc=desc, policy=policy, flaws=["repeat", "off_style", "asks_more"])


def find_importers(p: Project, rng, ph) -> dict:
    """Which files import a module (its tests, in these projects)."""
    mod = rng.choice(p.modules)
    dotted, stem = mod[:-3].replace("/", "."), os.path.basename(mod)[:-3]
    files = sorted(rel for rel, text in snapshot(p.root).items() if rel.endswith(".py") and rel != mod
                   and re.search(rf"^(from {re.escape(dotted)} import|import {re.escape(dotted)}\b)", text, re.M))
    named = rng.choice([dotted, stem])
    prompt = ph("find_importers", module=named)
    pattern = f"(from|import) {re.escape(dotted)}\\b" if named == dotted else f"(from|import) .*\\b{stem}\\b"
    answer = ("`" + dotted + "` is imported by " + ", ".join(f"`{x}`" for x in files) + "." if files
              else f"nothing imports `{dotted}`.")

    def policy(r: OracleRollout):
        r.call(r.pick(f"let me grep for imports of `{dotted}`.", "searching the imports."), "Grep",
               {"pattern": pattern})
        r.done(answer)
    return dict(prompt=prompt, check=lambda root, answer="": mentions(answer, *files), desc=f"answer names {files}",
                policy=policy, flaws=["repeat", "off_style", "asks_more"])


def explain_file(p: Project, rng, ph) -> dict:
    """What a module is for: the answer names its functions (two of them at least)."""
    mod = rng.choice(p.modules)
    funcs = [f for f in p.functions.values() if f.file == mod]
    prompt = ph("explain_file", file=mod)
    parts = [f"`{f.name}` {f.spec['explain'].rstrip('.')}" if documented(f) else f"`{f.name}`" for f in funcs]
    answer = f"`{mod}` holds {len(funcs)} function{'s' if len(funcs) != 1 else ''}: " + "; ".join(parts) + "."
    need = [f.name for f in funcs]

    def check(root, answer=""):
        return sum(name in answer for name in need) >= min(2, len(need))

    def policy(r: OracleRollout):
        r.call(r.pick(f"let me read `{mod}`.", "reading the module."), "Read", {"file_path": mod})
        r.done(answer)
    return dict(prompt=prompt, check=check, desc=f"answer names {min(2, len(need))} of {need}",
                policy=policy, flaws=["repeat", "off_style", "asks_more"])
