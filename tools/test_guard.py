"""Guarding a project's tests while a change is judged: a change is judged against the test files
as they were before the turn, so a model cannot make a check pass by editing the tests
(`assert f(x) == y` -> `return f(x) == y`), deleting or skipping them, or steering pytest with a
new conftest.py, pytest configuration, sitecustomize.py / usercustomize.py or .pth file.

Guarded files (`kind`): tests (test_*.py, *_test.py, and every file under a `tests/` or `test/`
directory, fixtures and data included), conftest.py, pytest configuration (pytest.ini,
.pytest.ini, pytest.toml, .pytest.toml, pyproject.toml, setup.cfg, tox.ini) and interpreter hooks
(sitecustomize.py, usercustomize.py, *.pth), wherever they are in the tree. Of a configuration file
only its pytest part counts (`pytest_section`): an unrelated pyproject.toml edit is no tampering.

Contracts: `capture` before the turn; `tampered` after it names every guarded file that changed
without being allowed: an existing one modified or deleted, a new conftest.py, a new configuration
with a pytest part, any new or changed interpreter hook (never allowed). A new test file is no
tampering, but it is not the request's either: `unasked_tests` lists it so a verdict leaves it out
(it could patch the code under test at import time). `allowed` holds fnmatch patterns of paths
relative to the captured root ("*": every test, conftest and configuration file). A tampered tree
is judged unresolved without running anything, so nothing here rewrites a tree. `run_tests` runs a
project's test command for a verdict (best-of's verifier), leaving the unasked test files out.

Trade-offs: the walk skips .git, caches, virtual environments and node_modules, so a hook written
into an in-project venv's site-packages is not seen; capture reads every guarded file whole, so a
project with large fixture files under tests/ pays for reading them once per capture.
`asks_for_test_changes` is a wording heuristic for requests typed by a user: it errs towards
allowing test edits (a rename or removal must touch the tests that use the name), which only loses
protection, never blocks a legitimate change.
"""
from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import tomllib

from tools import checks

SKIP_DIRS = {".git", ".nanocode", "__pycache__", ".pytest_cache", ".mypy_cache", ".tox", ".nox",
             "node_modules", "site-packages", ".venv", "venv"}
CONFIGS = {"pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "pyproject.toml", "setup.cfg",
           "tox.ini"}
HOOKS = {"sitecustomize.py", "usercustomize.py"}
INI_SECTION = {"setup.cfg": "tool:pytest", "tox.ini": "pytest"}

_ASKS = re.compile(
    r"\b(write|add|create|update|change|edit|modify|rewrite|adjust|extend|amend|correct|remove|delete|"
    r"cover)\b(?:\W+\S+){0,5}?\W+(unit\s+|pytest\s+|regression\s+)?(tests?|test_\w+|conftest|pytest\.ini)\b"
    r"|\btests?\b[^.!?\n]{0,30}\b(is|are)\s+(wrong|outdated|incorrect|obsolete)\b"
    r"|\bneed\s+(some\s+|more\s+)?tests\b|\btest\s+(file|module)\b"
    r"|\b(rename|remove|delete|move|swap)\b", re.I)
_NOT_THE_TESTS = re.compile(r"\bnot\s+the\s+tests?\b", re.I)


def kind(path: str) -> str | None:
    """"hook", "conftest", "config", "test" or None (not guarded) for a relative path."""
    parts = path.replace(os.sep, "/").split("/")
    name = parts[-1]
    if name in HOOKS or name.endswith(".pth"):
        return "hook"
    if name == "conftest.py":
        return "conftest"
    if name in CONFIGS:
        return "config"
    if (name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))) \
            or any(d in ("tests", "test") for d in parts[:-1]):
        return "test"
    return None


def pytest_section(name: str, data: bytes | None) -> str | None:
    """The part of configuration file `name` that pytest reads, None when it has none: the whole
    of pytest.ini / pytest.toml, [tool.pytest.ini_options] and [tool.pytest] of pyproject.toml (the
    raw text when it does not parse), [tool:pytest] of setup.cfg, [pytest] of tox.ini."""
    if data is None:
        return None
    text = data.decode("utf-8", errors="replace")
    base = os.path.basename(name)
    if base not in INI_SECTION and base != "pyproject.toml":
        return text
    if base == "pyproject.toml":
        try:
            part = tomllib.loads(text).get("tool", {}).get("pytest")
        except tomllib.TOMLDecodeError:
            return text
        return None if part is None else json.dumps(part, sort_keys=True)
    lines, inside = [], False
    for line in text.splitlines():
        if re.match(r"\s*\[[^\]]*\]", line):
            inside = line.strip() == f"[{INI_SECTION[base]}]"
        if inside:
            lines.append(line.rstrip())
    return "\n".join(lines) if lines else None


def _read(root: str, rel: str) -> bytes | None:
    try:
        with open(os.path.join(root, rel), "rb") as f:
            return f.read()
    except OSError:  # gone, a directory now, unreadable: not what was captured
        return None


def _walk(root: str) -> list[str]:
    """Relative paths of the guarded files under root (SKIP_DIRS and symlinked dirs not entered)."""
    out = []
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not os.path.islink(os.path.join(dirpath, d)))
        rel = os.path.relpath(dirpath, root).replace(os.sep, "/")
        out += [p for p in ((f if rel == "." else f"{rel}/{f}") for f in sorted(files)) if kind(p)]
    return out


def capture(root: str, files: list[str] | None = None) -> dict[str, bytes]:
    """{relative path: bytes} of the guarded files under root: those of `files` (relative paths, e.g.
    what git ls-files lists) when given, else every one the walk finds."""
    paths = [p for p in files if kind(p)] if files is not None else _walk(root)
    return {p: data for p in paths if (data := _read(root, p)) is not None}


def _allowed(path: str, allowed) -> bool:
    return kind(path) != "hook" and any(fnmatch.fnmatchcase(path, pat) for pat in allowed)


def tampered(root: str, before: dict[str, bytes], allowed=(), view=None) -> list[str]:
    """Sorted relative paths of guarded files under root that differ from `before` (a capture of
    the same tree) and are not `allowed` (see the module docstring). `view` (bytes -> bytes), when
    given, maps both sides of a test or conftest comparison first: a task whose request implies a
    mechanical rewrite of the tests (a rename) compares them modulo that rewrite."""
    same = view or (lambda b: b)
    out = set()
    for path, old in before.items():
        new = _read(root, path)
        k = kind(path)
        if k == "config":
            changed = pytest_section(path, new) != pytest_section(path, old)
        else:
            changed = new is None or (same(new) != same(old) if k != "hook" else new != old)
        if changed and not _allowed(path, allowed):
            out.add(path)
    for path in _walk(root):
        if path in before or _allowed(path, allowed):
            continue
        k = kind(path)
        if k in ("hook", "conftest") or (k == "config" and pytest_section(path, _read(root, path)) is not None):
            out.add(path)
    return sorted(out)


def unasked_tests(root: str, before: dict[str, bytes], allowed=()) -> list[str]:
    """Sorted relative paths of new test files under root (not in `before`) that `allowed` does not
    cover: no tampering, but left out of a verdict."""
    return [p for p in _walk(root) if kind(p) == "test" and p not in before and not _allowed(p, allowed)]


def run_tests(command: str, cwd: str, timeout: float, sandbox=None, ignore=()) -> tuple[bool | None, str]:
    """(passed, last output line). pytest's "no tests collected" (exit 5) is None: no verdict.
    The command runs with bash as a check (tools/checks.py): the tests run model-written code, so
    in the OS sandbox (`sandbox`: the rollout's Sandbox, None the default one), without secrets,
    its process group killed at the timeout and after a normal exit too (a server or `sleep &` a
    test left behind does not outlive the verdict). Any pytest it runs leaves out the (absolute)
    paths in `ignore`. Raises OSError when bash cannot start, checks.Refused where no sandbox
    works and nobody chose to go on without."""
    env = {"PYTEST_ADDOPTS": " ".join(shlex.quote(f"--ignore={p}") for p in ignore)} if ignore else {}
    ran = checks.run(["bash", "-c", command], cwd, timeout, env=env, sandbox=sandbox)
    if ran.timed_out:
        return False, f"timed out after {timeout:g} s"
    lines = [x for x in ran.output.splitlines() if x.strip()]
    last = lines[-1].strip()[:200] if lines else ""
    if ran.returncode == 5 and "pytest" in command:
        return None, last
    return ran.returncode == 0, last


_SUMMARY = re.compile(r"(\d+) (passed|failed|errors?)\b")


def summary_counts(line: str) -> tuple[int, int] | None:
    """(passed, failed + errors) from pytest's summary line ("1 failed, 2 passed, 1 error in
    0.1s"), or None when the line is not one (another test runner, a timeout)."""
    if not re.search(r"\bin [\d.]+s\b", line):
        return None
    found = {word.rstrip("s"): int(n) for n, word in _SUMMARY.findall(line)}
    if not found:
        return None
    return found.get("passed", 0), found.get("failed", 0) + found.get("error", 0)


def fewer_failures(before: str, after: str) -> bool:
    """Whether a test run's summary line shows a change that fixed more than it broke: fewer
    failing tests (failures and errors) than the run before it and more passing ones (a change
    that only stops tests from being collected does not count)."""
    was, now = summary_counts(before), summary_counts(after)
    return was is not None and now is not None and now[1] < was[1] and now[0] > was[0]


def asks_for_test_changes(request: str) -> bool:
    """Whether a user's request asks for test changes: writing, adding, updating or removing tests
    ("add a test for parse", "the test is outdated, update it"), or a rename, move or removal,
    which has to touch the tests that use the name. "fix the failing test" or "make the tests pass"
    ask to fix the code; "... fix the code, not the tests" says so outright."""
    return not _NOT_THE_TESTS.search(request) and bool(_ASKS.search(request))
