"""The task families: each builds a task on a generated project (setting up a bug, a stub, an
uncommitted change, ...) and a scripted ORACLE policy that solves it with the real tools.

Trade-offs: the oracle is a script that already knows the answer from the project's metadata, so
it never explores; it still calls the real tools (tasks/oracle.py, OracleRollout), so every
tool_result is byte-for-byte what the agent will see, and the hidden `check(root, answer)`
verifies the work the same way an eval would. A policy is replayed with a `flaw` to get the
rejected side of a preference pair (same task, same prose choices, one deliberate defect, real
tool output again). Families are a plain dict FAMILIES of name -> function(project, rng, ph) ->
dict(prompt, check, desc, policy, flaws[, followup, tests_allowed, tests_view]); `make_task` turns
one into a Task. A check that runs the tests runs the project's own test files (Project.test_files),
so a test file the model added is never part of a verdict; that the tests themselves are the ones
built here is harness.resolved's job (tools/test_guard.py): create_test allows its new file, and
rename_symbol compares the tests modulo the rename.
TRAIN_FAMILIES are the ones training data may use; EVAL_ONLY_FAMILIES are never trained on.

Contracts: `make_task(family, seed, heldout, base)` is a pure function of (family, seed, heldout)
up to the base path: the same arguments give byte-identical projects, prompts and (through
`task.rollout()`) conversations. The check fails on the state make_task leaves. A family that
cannot use a project (no bug the tests catch, ...) raises; callers retry with the next project
seed (tasks/seeds.py, ATTEMPTS). Policies draw prose only from `r.rng`, never from the task's
rng, so replaying them is deterministic.
"""
from __future__ import annotations

import ast
import os
import random
import re

from tools.test_guard import capture
from tasks.names import MODULE_WORDS, pick_word
from tasks.oracle import OracleRollout, Task
from tasks.phrasing import phrase
from tasks.projects import (
    BASE, TEMPLATES, Func, Project, commit_all, generate_project, run_python, run_tests, setup_env,
    snapshot)

# --- helpers ---------------------------------------------------------------------------------------

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
    return lambda root, answer="": f.name in answer and any(k in answer.lower() for k in f.spec["keywords"])


def inject_bug(p: Project, f: Func, rng) -> tuple[str, str, str]:
    """Commit a bug in f that the test suite catches; returns (bad line as unique old_string, good
    line(s), what it did). A bug no test trips (~1 project in 20) is undone and the next one
    tried; ValueError when none trips a test (the caller moves on to another project)."""
    good_text = p.read(f.file)
    for old, new, desc in rng.sample(f.spec["bugs"], len(f.spec["bugs"])):
        replace_in_func(p, f, old, new)
        if not run_tests(p.root):
            break
        p.write(f.file, good_text)
    else:
        raise ValueError(f"no bug in {f.name} fails a test")
    text = p.read(f.file)
    bad_line = next(ln for ln in f.source().replace(old, new, 1).split("\n") if new in ln)
    bad = unique_line(text, bad_line)
    good = bad.replace(new, old)
    assert good in good_text
    commit_all(p, rng.choice([f"tweak {f.name}", f"refactor {f.module.split('/')[-1]}", "small cleanup"]), 25)
    return bad, good, desc


# --- families --------------------------------------------------------------------------------------

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
    f = pick_func(p, rng)
    prompt = ph("explain", fn=f.name, file=f.file)
    other = rng.choice([m for m in p.modules if m != f.file])
    wrong = TEMPLATES[rng.choice([t for t in sorted(TEMPLATES) if t != f.template])]["explain"]

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
    return dict(prompt=prompt, check=explain_check(f), desc=f"answer names {f.name} and one of {f.spec['keywords']}",
                policy=policy, flaws=["wrong_file", "repeat", "off_style", "asks_more"])


def fix_bug(p: Project, rng, ph) -> dict:
    f = pick_func(p, rng, lambda f: bool(f.spec["bugs"]))
    bad, good, desc = inject_bug(p, f, rng)  # ValueError: the synth retries another project
    prompt = ph("fix_bug", fn=f.name, test=f.test_name)

    def policy(r: OracleRollout):
        cmd = p.test_cmd
        r.call(r.pick("let me run the tests to see what fails.", "first, the failing test.", "running the tests."),
               "Bash", {"command": cmd})
        locate(r, f, f"`{f.test_name}` fails. let me find `{f.name}`.")
        r.call(f"reading `{f.name}` in `{f.file}`.", "Read", read_args(f, r, True))
        thought = f"found it: `{f.name}` {desc}. fixing that line."
        r.call(thought, "Edit", {"file_path": f.file, "old_string": bad, "new_string": good})
        r.call(r.pick("rerunning the tests.", "checking the tests again."), "Bash", {"command": cmd})
        r.done(f"done: fixed `{f.name}` in `{f.file}`: it {desc}. the tests pass now.")
    return dict(prompt=prompt, check=lambda root, answer="": run_tests(root, *p.test_files),
                desc="the test suite passes", policy=policy, flaws=["no_read", "repeat", "off_style", "asks_more"])


def stub_out(p: Project, f: Func, rng) -> tuple[str, str]:
    """Replace f's body with `raise NotImplementedError`; returns (old_string, new_string) to undo."""
    doc = f'    """{f.doc}"""'
    stub = f"{doc}\n    raise NotImplementedError"
    p.write(f.file, p.read(f.file).replace(f.source().rstrip("\n"), f"def {f.signature}:\n{stub}", 1))
    commit_all(p, rng.choice([f"stub {f.name}", f"todo: {f.name}", "sketch new helpers"]), 26)
    return stub, doc + "\n" + "\n".join(f.body)


def implement_stub(p: Project, rng, ph) -> dict:
    f = pick_func(p, rng)
    old, new = stub_out(p, f, rng)
    prompt = ph("implement_stub", fn=f.name, file=f.file)

    def policy(r: OracleRollout):
        located = f.file not in prompt
        if located:
            locate(r, f, f"let me find `{f.name}`.")
        r.call(r.pick("let me read the stub and its docstring.", f"reading `{f.file}` first."), "Read",
               read_args(f, r, located))
        r.call(f"the docstring says: {f.doc[0].lower() + f.doc[1:]} writing the body.", "Edit",
               {"file_path": f.file, "old_string": old, "new_string": new})
        r.call("running the tests.", "Bash", {"command": p.test_cmd})
        r.done(f"done: implemented `{f.name}` in `{f.file}`; it {f.spec['explain']} the tests pass.")

    def check(root, answer=""):
        return "NotImplementedError" not in open(os.path.join(root, f.file)).read() and run_tests(root, *p.test_files)
    return dict(prompt=prompt, check=check, desc="no NotImplementedError left and the tests pass",
                policy=policy, flaws=["no_read", "repeat", "off_style", "asks_more"])


def rename_symbol(p: Project, rng, ph) -> dict:
    f = pick_func(p, rng)
    new = next(n for n in (rng.choice(f.spec["names"]).format(noun=pick_word(rng, p.heldout))
                           for _ in range(50))
               if n not in p.functions and n != f.name)
    prompt = ph("rename_symbol", fn=f.name, new=new)
    word = re.compile(rf"\b{f.name}\b")

    def policy(r: OracleRollout):
        out = r.call(f"let me find every use of `{f.name}`.", "Grep", {"pattern": f"\\b{f.name}\\b"})
        hits = [m.groups() for m in re.finditer(r"^(.+?):(\d+):(.*)$", out, re.M)]
        files = sorted({h[0] for h in hits})
        for i, (path, _, content) in enumerate(hits):
            text = open(os.path.join(r.root, path)).read()
            if not word.search(content):
                continue  # already renamed by an earlier edit
            old = unique_line(text, content)
            thought = (f"{len(hits)} matches in {len(files)} files. renaming them one by one, starting with `{path}`."
                       if i == 0 else f"next: `{path}`.")
            r.call(thought, "Edit", {"file_path": path, "old_string": old, "new_string": word.sub(new, old)})
        r.call("running the tests.", "Bash", {"command": p.test_cmd})
        r.done(f"done: renamed `{f.name}` to `{new}` in " + ", ".join(f"`{x}`" for x in files) + "; the tests pass.")

    def check(root, answer=""):
        files = snapshot(root)
        return (not any(word.search(t) for t in files.values()) and f"def {new}(" in files.get(f.file, "")
                and run_tests(root, *p.test_files))
    either = re.compile("|".join(re.escape(n) for n in sorted((f.name, new), key=len, reverse=True)).encode())
    return dict(prompt=prompt, check=check, desc=f"no `{f.name}` left, `def {new}(` exists, tests pass",
                policy=policy, flaws=["repeat", "off_style", "asks_more"],
                tests_view=lambda data: either.sub(b"\0", data))  # tests may change by the rename only


def add_parameter(p: Project, rng, ph) -> dict:
    f = pick_func(p, rng, lambda f: "param" in f.spec)
    pname, default, old, new, hidden = f.spec["param"]
    prompt = ph("add_parameter", fn=f.name, param=pname, default=default)
    body_line = next(b for b in f.body if b.strip() == old.strip())
    new_line = body_line[:len(body_line) - len(body_line.lstrip())] + new.strip()
    dotted = f.module.replace("/", ".")

    def policy(r: OracleRollout):
        r.call(f"let me read `{f.name}` first.", "Grep", {"pattern": f"def {f.name}\\(", "-A": 6})
        r.call("reading the whole function.", "Read", read_args(f, r, True))
        r.call(f"adding `{pname}` (default {default}) to the signature.", "Edit",
               {"file_path": f.file, "old_string": f"def {f.signature}:",
                "new_string": f"def {f.name}({f.spec['params']}, {pname}={default}):"})
        old_s = unique_line(open(os.path.join(r.root, f.file)).read(), body_line)
        r.call(f"now using `{pname}` in the body.", "Edit",
               {"file_path": f.file, "old_string": old_s, "new_string": old_s[:-len(body_line)] + new_line})
        r.call("running the tests.", "Bash", {"command": p.test_cmd})
        r.done(f"done: `{f.name}` now takes `{pname}` (default {default}), used in `{new_line.strip()}`; "
               "existing callers behave as before and the tests pass.")

    def check(root, answer=""):
        try:
            tree = ast.parse(open(os.path.join(root, f.file)).read())
        except (OSError, SyntaxError):
            return False
        fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == f.name), None)
        if fn is None or pname not in [a.arg for a in fn.args.args]:
            return False
        code = f"from {dotted} import {f.name}\nassert " + hidden.format(name=f.name)
        return run_python(root, code) and run_tests(root, *p.test_files)
    return dict(prompt=prompt, check=check, desc=f"{f.name} has {pname}={default}; {hidden.format(name=f.name)}; tests pass",
                policy=policy, flaws=["no_read", "repeat", "off_style", "asks_more"])


def create_file(p: Project, rng, ph) -> dict:
    if rng.random() < 0.5:
        f = pick_func(p, rng)
        test = f"tests/test_{f.name}.py"
        tests = [t.format(name=f.name) for t in f.spec["tests"]]
        content = (f"from {f.module.replace('/', '.')} import {f.name}\n\n\n"
                   + "\n\n\n".join(f"def test_{f.name}_{i + 1}():\n    {t}" for i, t in enumerate(tests)) + "\n")
        prompt = ph("create_test", fn=f.name, test=test)

        def policy(r: OracleRollout):
            locate(r, f, f"let me find `{f.name}` so the tests match what it does.")
            r.call(f"reading `{f.name}`.", "Read", read_args(f, r, True))
            r.call(f"writing `{test}` with {len(tests)} tests.", "Edit", {"file_path": test, "new_string": content})
            r.call("running the new tests.", "Bash", {"command": f"python -m pytest -q {test}"})
            r.done(f"done: added `{test}` with {len(tests)} tests for `{f.name}`; they pass.")

        def check(root, answer=""):
            path = os.path.join(root, test)
            return os.path.isfile(path) and f.name in open(path).read() and run_tests(root, test, *p.test_files)
        return dict(prompt=prompt, check=check, desc=f"{test} exists, uses {f.name}, and passes with the other tests",
                    policy=policy, flaws=["no_read", "repeat", "off_style", "asks_more"], tests_allowed=(test,))
    used = {f.template for f in p.functions.values()}
    t = rng.choice(sorted(set(TEMPLATES) - used) or sorted(TEMPLATES))
    spec = TEMPLATES[t]
    mod = rng.choice(sorted(set(MODULE_WORDS) - {os.path.basename(m)[:-3] for m in p.modules}))
    name = rng.choice(spec["names"]).format(noun=pick_word(rng, p.heldout))
    file, dotted = f"{p.package}/{mod}.py", f"{p.package}.{mod}"
    doc = spec["doc"][0].lower() + spec["doc"][1:]
    src = Func(name, t, file[:-3], file, 3, f"{name}({spec['params']})", spec["doc"],
               ["    " + b.format() for b in spec["body"]], "", "").source()
    content = f'"""{mod.replace("_", " ").capitalize()} helpers for {p.package}."""\n\n\n' + src
    tests = [x.format(name=name) for x in spec["tests"]]
    prompt = ph("create_module", fn=name, file=file, doc=doc)

    def policy(r: OracleRollout):
        r.call("let me look at the package layout first.", "Bash", {"command": f"ls {p.package}"})
        r.call(f"writing `{file}` with `{name}`.", "Edit", {"file_path": file, "new_string": content})
        r.call("a quick check that it imports and works.", "Bash",
               {"command": f"python -c 'from {dotted} import {name}; {tests[0]}; print(\"ok\")'"})
        r.done(f"done: created `{file}` with `{name}`, which {spec['explain']}")

    def check(root, answer=""):
        return run_python(root, f"from {dotted} import {name}\n" + "\n".join(tests))
    return dict(prompt=prompt, check=check, desc=f"{dotted}.{name} passes: {'; '.join(tests)}",
                policy=policy, flaws=["repeat", "off_style", "asks_more"])


def run_command(p: Project, rng, ph) -> dict:
    kind = rng.choice(["tests", "tests", "lines", "ls"])
    if kind == "tests":
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
    kind = rng.choice(["last", "changes", "count"])
    subject = p.commits[-1]
    if kind == "last":
        prompt, cmds = ph("git_last"), [rng.choice(["git log -1 --stat", "git show --stat HEAD", "git log --oneline -n 3"])]
        answer = f"the latest commit is \"{subject}\"."
        check, desc = (lambda root, answer="": subject in answer), f"answer quotes {subject!r}"
    elif kind == "count":
        k = len(p.commits)
        prompt, cmds = ph("git_count"), ["git log --oneline"]
        answer = f"{k} commits; the latest is \"{subject}\"."
        check, desc = (lambda root, answer="": re.search(rf"\b{k}\b", answer) is not None), f"answer says {k}"
    else:
        f = pick_func(p, rng)
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
        f = pick_func(p, rng)
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


def user_rejects(p: Project, rng, ph) -> dict:
    if rng.random() < 0.5:
        cmd = p.test_cmd
        prompt, name, args = ph("rejects_run"), "Bash", {"command": cmd}
        thought = "let me run the test suite."
        reads: list[tuple[str, str, dict]] = []
        answer = f"okay, i didn't run anything. i was going to run `{cmd}` to check whether the tests pass."
        followups = ["don't run anything. what were you going to check?", "no, skip that. what was the plan?",
                     "not now. just tell me what you'd run."]
    else:
        f = pick_func(p, rng)
        old, new = stub_out(p, f, rng)
        prompt, name = ph("rejects_edit", fn=f.name), "Edit"
        args = {"file_path": f.file, "old_string": old, "new_string": new}
        thought = "replacing the stub with the implementation."
        reads = [(f"let me find the stub of `{f.name}` first.", "Grep", {"pattern": f"def {f.name}\\("}),
                 ("reading it.", "Read", {"file_path": f.file})]
        answer = (f"understood, `{f.file}` is unchanged. i was going to replace the `raise NotImplementedError` "
                  f"in `{f.name}` with a body that {f.spec['explain'].split(',')[0].split(':')[0].rstrip('.')}.")
        followups = ["don't touch the file. what would you have written?", "no edits please. describe the change.",
                     "leave it as it is. what was the idea?"]
    followup = rng.choice(followups)
    before = snapshot(p.root)

    def policy(r: OracleRollout):
        # A rejection ends the turn (agent/driver.py): the user speaks next, as at inference.
        for t, n, a in reads:
            r.call(t, n, a)
        r.reject(thought, name, args)
        r.user(followup)
        if r.flaw == "retry":  # ignores what the user said and tries the same call again
            r.reject("let me try that again.", name, args)
            r.user(r.pick("i said no.", "no. stop trying to do that."))
        r.done(answer)

    def check(root, answer=""):
        return bool(answer.strip()) and "anything else" not in answer.lower() and snapshot(root) == before
    return dict(prompt=prompt, check=check, followup=followup,
                desc="after the rejection and the user's follow-up, explains without changing files",
                policy=policy, flaws=["retry", "off_style", "asks_more"])


FAMILIES = {
    "find_definition": find_definition, "explain": explain, "fix_bug": fix_bug,
    "implement_stub": implement_stub, "create_file": create_file, "run_command": run_command,
    "git_inspect": git_inspect, "recover_error": recover_error, "user_rejects": user_rejects,
    "rename_symbol": rename_symbol, "add_parameter": add_parameter,
}
EVAL_ONLY_FAMILIES = ["rename_symbol", "add_parameter"]
TRAIN_FAMILIES = [f for f in FAMILIES if f not in EVAL_ONLY_FAMILIES]


def make_task(family: str, seed: int, heldout: bool = False, base: str = BASE) -> Task:
    """Build `family`'s project for `seed` at base/<seed>/<name> (wiped first) and its task.
    The check fails on the state left here; `task.rollout()` runs the oracle. task.guarded is the
    tests as built here (tools.test_guard.capture), what harness.resolved judges a change with."""
    setup_env()
    rng = random.Random(f"{family}:{seed}:{heldout}")
    p = generate_project(rng, os.path.join(base, str(seed)), heldout)
    d = FAMILIES[family](p, rng, lambda key, **kw: phrase(key, rng, heldout, **kw))
    return Task(family, seed, heldout, p, d["prompt"], d["check"], d["desc"], d["policy"], d["flaws"],
                d.get("followup"), capture(p.root), d.get("tests_allowed", ()), d.get("tests_view"))
