"""Task families that change the project: fix a committed bug, implement a stub, rename, add a
parameter, create a file, and the user who rejects a change. Each builds its task on a project
and returns the family dict tasks/families.py describes; a change's check runs the project's own
tests (Project.test_files) or reads the code it asked for, and tools/test_guard.py (through
tasks.harness.resolved) makes sure the tests it runs are the ones built here.
"""
from __future__ import annotations

import ast
import os
import re

from tasks.names import MODULE_WORDS, pick_word
from tasks.oracle import OracleRollout
from tasks.projects import (
    CONSTANT_NAMES, CONSTANT_VALUES, TEMPLATES, Func, Project, commit_all, run_python, run_tests, snapshot)
from tasks.steps import documented, first_caught, inject_bug, locate, pick_func, read_args, stub_out, unique_line


def fix_bug(p: Project, rng, ph) -> dict:
    f = pick_func(p, rng, lambda f: bool(f.spec["bugs"]))
    bad, good, desc = inject_bug(p, f, rng)  # ValueError: the synth retries another project
    return _bug_task(p, f, ph, lambda r: [(f"reading `{f.name}` in `{f.file}`.", "Read", read_args(f, r, True))],
                     f.file, bad, good, f"found it: `{f.name}` {desc}. fixing that line.",
                     f"done: fixed `{f.name}` in `{f.file}`: it {desc}. the tests pass now.")


def _bug_task(p: Project, f: Func, ph, reads, file: str, bad: str, good: str, thought: str, answer: str) -> dict:
    """The family dict of a committed bug that f's test catches: the user asks to fix it; the
    oracle runs the tests, finds f, makes the calls `reads(r)` lists ((thought, tool, args), drawn
    when it gets there: Reads, a Grep), replaces `bad` with `good` in `file`, and reruns the tests."""
    def policy(r: OracleRollout):
        cmd = p.test_cmd
        r.call(r.pick("let me run the tests to see what fails.", "first, the failing test.", "running the tests."),
               "Bash", {"command": cmd})
        locate(r, f, f"`{f.test_name}` fails. let me find `{f.name}`.")
        for why, tool, args in reads(r):
            r.call(why, tool, args)
        r.call(thought, "Edit", {"file_path": file, "old_string": bad, "new_string": good})
        r.call(r.pick("rerunning the tests.", "checking the tests again."), "Bash", {"command": cmd})
        r.done(answer)
    return dict(prompt=ph("fix_bug", fn=f.name, test=f.test_name),
                check=lambda root, answer="": run_tests(root, *p.test_files), desc="the test suite passes",
                policy=policy, flaws=["no_read", "repeat", "off_style", "asks_more"])


def fix_bug_across(p: Project, rng, ph) -> dict:
    """A failing test whose function is right: the bug is in a helper it imports from another
    module of the package (moved there by an earlier commit), introduced by the last commit.
    Real-code projects only (their functions' spec carries helper_bugs)."""
    f = pick_func(p, rng, lambda f: any(_lone_def(p, f, b[0]) for b in f.spec.get("helper_bugs", ())))
    helper = rng.choice(sorted({b[0] for b in f.spec["helper_bugs"] if _lone_def(p, f, b[0])}))
    util = _move_helper(p, f, helper, next(b[1] for b in f.spec["helper_bugs"] if b[0] == helper), rng)
    good_text = p.read(util)
    bugs = rng.sample(f.spec["helper_bugs"], len(f.spec["helper_bugs"]))
    variants = ((good_text.replace(g, b, 1), g, b, d) for name, _, g, b, d in bugs
                if name == helper and good_text.count(g) == 1)
    good_line, bad_line, desc = first_caught(p, util, variants, helper)
    bad = unique_line(p.read(util), bad_line)
    good = bad.replace(bad_line, good_line)
    commit_all(p, rng.choice([f"tweak {helper}", f"simplify {helper}", "small cleanup"]), 25)

    def reads(r: OracleRollout) -> list:
        """Read f's file, then the helper's: straight there when the failures named its path (a
        traceback through it), else found by a Grep first (the import names a module, not a path)."""
        first = (f"reading `{f.file}`.", "Read", {"file_path": f.file})
        if any(util in m["content"] for m in r.messages if m["role"] == "tool_result"):
            return [first, (f"`{f.name}` calls `{helper}`, imported from `{util}`. reading that.", "Read",
                            {"file_path": util})]
        return [first, (f"`{f.name}` calls `{helper}`. let me find where `{helper}` is defined.", "Grep",
                        {"pattern": f"def {helper}\\("}),
                (f"`{helper}` is in `{util}`. reading that.", "Read", {"file_path": util})]
    return _bug_task(p, f, ph, reads, util, bad, good, f"found it: `{helper}` {desc}. fixing that line.",
                     f"done: the bug was in `{helper}` in `{util}`, which `{f.name}` calls: it {desc}. "
                     "the tests pass now.")


def _lone_def(p: Project, f: Func, helper: str) -> bool:
    """Whether `helper` is a module-level def of f's file once, and no function the tasks track."""
    return helper not in p.functions and p.read(f.file).count(f"\ndef {helper}(") == 1


def _move_helper(p: Project, f: Func, helper: str, imports: tuple[str, ...], rng) -> str:
    """Move `helper` out of f's file into a new module of the package that f's file imports it
    from, commit that, and return the new module's path (the tests pass before and after)."""
    text = p.read(f.file)
    tree = ast.parse(text)
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == helper)
    seg = "\n".join(text.split("\n")[node.lineno - 1:node.end_lineno])
    package = os.path.dirname(f.file)
    stem = next(s for s in rng.sample(["util", "helpers", "_helpers", "common", "_util"], 5)
                if f"{package}/{s}.py" not in p.modules)
    util = f"{package}/{stem}.py"
    p.write(util, "\n\n\n".join([f'"""Helpers shared by the {package} modules."""']
                                  + (["\n".join(imports)] if imports else []) + [seg]) + "\n")
    text = text.replace(seg + "\n\n\n", "", 1) if seg + "\n\n\n" in text else text.replace("\n\n\n" + seg, "", 1)
    body, k = ast.parse(text).body, 1  # after the module docstring and its imports
    while k < len(body) and isinstance(body[k], (ast.Import, ast.ImportFrom)):
        k += 1
    lines, line = text.split("\n"), f"from {package.replace('/', '.')}.{stem} import {helper}"
    lines[body[k - 1].end_lineno:body[k - 1].end_lineno] = [line] if k > 1 else ["", "", line]
    p.write(f.file, "\n".join(lines))
    p.modules.append(util)
    defs = {n.name: n.lineno for n in ast.parse(p.read(f.file)).body if isinstance(n, ast.FunctionDef)}
    for g in p.functions.values():
        if g.file == f.file:
            g.line = defs[g.name]
    if not run_tests(p.root):
        raise ValueError(f"moving {helper} into {util} broke the tests")
    commit_all(p, rng.choice([f"move {helper} into {stem}.py", "refactor: shared helpers module",
                              f"split helpers out of {os.path.basename(f.file)}"]), 24)
    return util


def implement_stub(p: Project, rng, ph) -> dict:
    f = pick_func(p, rng, documented)
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
    real = any(f.template == "real" for f in p.functions.values())
    if rng.random() < 0.5 or real:  # a real project gets tests, never a template's module
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
        f = pick_func(p, rng, documented)
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
        # A rejection ends the turn (agent/loop/driver.py): the user speaks next, as at inference.
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


def _constants(p: Project) -> list[tuple[str, str, str, int]]:
    """(file, line text, NAME, int value) of the module-level `NAME = <int>` lines of the project,
    NAME in capitals (a constant a person would ask to change)."""
    out = []
    for mod in p.modules:
        text = p.read(mod)
        lines = text.split("\n")
        for node in ast.parse(text).body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and re.fullmatch(r"_?[A-Z][A-Z0-9_]*", node.targets[0].id) and isinstance(node.value, ast.Constant)
                    and type(node.value.value) is int and node.lineno == node.end_lineno
                    and text.count(lines[node.lineno - 1]) == 1):
                out.append((mod, lines[node.lineno - 1], node.targets[0].id, node.value.value))
    return out


def change_constant(p: Project, rng, ph) -> dict:
    """Set a module-level constant to a new value; nothing else in its file may change (the
    recorded tests may then fail: the user asked for the new value). A project without one gets a
    setting line in an earlier commit."""
    consts = _constants(p)
    if not consts:  # a module without settings gets one, committed before the request
        mod = rng.choice(p.modules)
        text = p.read(mod)
        doc_end = ast.parse(text).body[0].end_lineno if ast.get_docstring(ast.parse(text)) else 0
        lines = text.split("\n")
        setting = f"{rng.choice(CONSTANT_NAMES)} = {rng.choice(CONSTANT_VALUES)}"
        p.write(mod, "\n".join(lines[:doc_end] + ["", setting] + lines[doc_end:]))
        commit_all(p, rng.choice([f"add a setting to {os.path.basename(mod)}", "settings"]), 27)
        consts = _constants(p)
    mod, line, name, value = rng.choice(consts)
    new = rng.choice(sorted({value + 1, value * 2, value + 10, 100} - {value}))
    new_line = line.replace(str(value), str(new), 1) if f"= {value}" in line else f"{name} = {new}"
    lines = p.read(mod).split("\n")
    at = lines.index(line)
    prompt = ph("change_constant", const=name, value=str(new), file=mod)

    def policy(r: OracleRollout):
        r.call(r.pick(f"let me find `{name}`.", f"searching for `{name} =`."), "Grep", {"pattern": f"^{name} ="})
        r.call(f"changing `{name}` from {value} to {new} in `{mod}`.", "Edit",
               {"file_path": mod, "old_string": line, "new_string": new_line})
        r.done(f"done: `{name}` is now {new} in `{mod}` (it was {value}).")

    def check(root, answer=""):
        try:
            got = open(os.path.join(root, mod), encoding="utf-8").read().split("\n")
            node = ast.parse(got[at].strip()).body[0] if len(got) == len(lines) else None
        except (OSError, SyntaxError, IndexError):
            return False
        return (isinstance(node, ast.Assign) and ast.unparse(node) == f"{name} = {new}"
                and got[:at] == lines[:at] and got[at + 1:] == lines[at + 1:])
    return dict(prompt=prompt, check=check, desc=f"{mod}: `{line}` -> `{new_line}`, nothing else changed",
                policy=policy, flaws=["repeat", "off_style", "asks_more"])


def _body_dump(text: str, name: str, drop_doc: bool) -> str | None:
    """ast.dump of top-level function `name`'s body in `text` (its docstring dropped when
    drop_doc), None when the file does not parse or has no such function."""
    try:
        fn = next((n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == name), None)
    except SyntaxError:
        return None
    if fn is None:
        return None
    body = fn.body[1:] if drop_doc and ast.get_docstring(fn) is not None else fn.body
    return ast.dump(ast.Module(body=body, type_ignores=[])) + ast.dump(fn.args)


def add_docstring(p: Project, rng, ph) -> dict:
    """A function lost its docstring in the last commit; the user asks for one. The code must
    stay as it was and the tests pass."""
    f = pick_func(p, rng, documented)
    text = p.read(f.file)
    p.write(f.file, text.replace(f.source(), f.source().replace(f.doc_block + "\n", "", 1), 1))
    commit_all(p, rng.choice([f"tidy {f.name}", f"refactor {f.module.split('/')[-1]}", "trim comments"]), 27)
    code = _body_dump(p.read(f.file), f.name, False)
    doc = f"    \"\"\"{f.doc}\"\"\""
    prompt = ph("add_docstring", fn=f.name)

    def policy(r: OracleRollout):
        locate(r, f, r.pick(f"let me find `{f.name}`.", f"looking for `{f.name}`."))
        r.call(f"reading `{f.name}` to see what it does.", "Read", read_args(f, r, True))
        r.call("adding a one-line docstring under the signature.", "Edit",
               {"file_path": f.file, "old_string": f.head, "new_string": f"{f.head}\n{doc}"})
        r.call("running the tests.", "Bash", {"command": p.test_cmd})
        r.done(f"done: `{f.name}` in `{f.file}` now has a docstring: \"{f.doc}\"")

    def check(root, answer=""):
        try:
            after = open(os.path.join(root, f.file), encoding="utf-8").read()
            fn = next(n for n in ast.parse(after).body if isinstance(n, ast.FunctionDef) and n.name == f.name)
        except (OSError, SyntaxError, StopIteration):
            return False
        return bool((ast.get_docstring(fn) or "").strip()) and _body_dump(after, f.name, True) == code \
            and run_tests(root, *p.test_files)
    return dict(prompt=prompt, check=check, desc=f"{f.name} has a docstring, its code unchanged, tests pass",
                policy=policy, flaws=["no_read", "repeat", "off_style", "asks_more"])


def _used(p: Project, name: str) -> bool:
    """Whether any module of the project reads `name` outside its own def (a call, a reference)."""
    for mod in p.modules:
        for node in ast.parse(p.read(mod)).body:
            if not (isinstance(node, ast.FunctionDef) and node.name == name) and any(
                    isinstance(n, ast.Name) and n.id == name for n in ast.walk(node)):
                return True
    return False


def remove_function(p: Project, rng, ph) -> dict:
    """Delete a function nothing but its test calls, and that test: the module keeps every other
    function as it was, the test file every other test, and the remaining tests pass."""
    pool = [f for f in p.functions.values() if not _used(p, f.name)]
    if not pool:
        raise ValueError("every function is used by another")
    f = rng.choice(sorted(pool, key=lambda g: g.name))
    test_text = p.read(f.test_file)
    test_src = next(seg for seg in test_text.split("\n\n\n") if seg.startswith(f"def {f.test_name}("))
    import_line = next(ln for ln in test_text.split("\n") if ln.startswith("from ") and " import " in ln
                       and f.name in [n.strip() for n in ln.split(" import ", 1)[1].split(",")])
    names = [n.strip() for n in import_line.split(" import ", 1)[1].split(",")]
    if names == [f.name]:  # its test was the file's only one: the import line goes too
        old_import, new_import = import_line + "\n", ""
    else:
        old_import = import_line
        new_import = import_line.split(" import ", 1)[0] + " import " + ", ".join(n for n in names if n != f.name)

    def defs(text: str, drop: str) -> dict | None:
        try:
            tree = ast.parse(text)
        except SyntaxError:
            return None
        return {n.name: ast.dump(n) for n in tree.body if isinstance(n, ast.FunctionDef) and n.name != drop}
    mod_defs, test_defs = defs(p.read(f.file), f.name), defs(test_text, f.test_name)
    prompt = ph("remove_function", fn=f.name)

    def policy(r: OracleRollout):
        r.call(f"let me find every use of `{f.name}` first.", "Grep", {"pattern": f"\\b{f.name}\\b"})
        r.call(f"only its test uses it. reading `{f.file}`.", "Read", {"file_path": f.file})
        r.call(f"removing `{f.name}`.", "Edit",
               {"file_path": f.file, "old_string": "\n\n\n" + f.source().rstrip("\n"), "new_string": ""})
        r.call(f"now its test. reading `{f.test_file}`.", "Read", {"file_path": f.test_file})
        r.call(f"removing `{f.test_name}`.", "Edit",
               {"file_path": f.test_file, "old_string": "\n\n\n" + test_src.rstrip("\n"), "new_string": ""})
        r.call("and the import.", "Edit", {"file_path": f.test_file, "old_string": old_import, "new_string": new_import})
        r.call("running the tests.", "Bash", {"command": p.test_cmd})
        r.done(f"done: removed `{f.name}` from `{f.file}` and `{f.test_name}` from `{f.test_file}`; the other tests pass.")

    def check(root, answer=""):
        try:
            mod = open(os.path.join(root, f.file), encoding="utf-8").read()
            test = open(os.path.join(root, f.test_file), encoding="utf-8").read()
        except OSError:
            return False
        gone = f"def {f.name}(" not in mod and f"def {f.test_name}(" not in test and not re.search(rf"\b{f.name}\b", test)
        return gone and defs(mod, f.name) == mod_defs and defs(test, f.test_name) == test_defs \
            and run_tests(root, *p.test_files)
    return dict(prompt=prompt, check=check, tests_allowed=(f.test_file,),
                desc=f"{f.name} and {f.test_name} gone, every other function and test unchanged, tests pass",
                policy=policy, flaws=["repeat", "off_style", "asks_more"])
