"""Throwaway Python projects that tasks are set on: a package of small functions and a few module
constants, pytest tests, a README, sometimes a NANOCODE.md, and a 2-3 commit git history, all drawn from a seeded RNG; and the
environment the tools run in on them (setup_env) and the hidden checks' runners (run_tests,
run_python, snapshot).

Trade-offs: functions come from a fixed list of hand-written templates (TEMPLATES) rather than
being generated, so every function is correct, has a test that pins its behaviour, known bug
mutations the test catches, a one-line explanation and (for some) a parameter that can be added.
Variety comes from names (tasks/names.py: training and held-out pools), module layout,
which templates are picked and git history; the code bodies themselves repeat across projects.
Git runs with a fixed author, committer, dates and no user config, so commit hashes are identical
for the same seed. Projects live at a fixed path by default (BASE/<seed>/<name>, wiped before
use), so the working directory in prompts and tool output is the same on every run; two
concurrent runs with the same seeds and base would collide there.
"""
from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

from tools import checks, project_env
from tasks.names import (
    CLASS_SUFFIXES, HELDOUT_PROJECT_WORDS, MODULE_WORDS, PROJECT_WORDS, SUFFIXES, pick_names, pick_word)

BASE = "/tmp/nanocode-synth"  # default parent of task projects: BASE/<seed>/<name>


def setup_env() -> None:
    """Tools see this interpreter's `python` (with pytest; chosen outright as the commands'
    Python environment, tools/project_env.OVERRIDE), no bytecode, no user git config, and no
    installed pytest plugins (generated projects use none; loading them through their entry points
    costs about as much as pytest's own start, and the output under -q is the same).
    Mutates os.environ of this process (idempotent); call it once per process that runs tools."""
    bindir = os.path.dirname(sys.executable)
    if not os.environ.get("PATH", "").startswith(bindir + os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    os.environ.update(PYTHONDONTWRITEBYTECODE="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1",
                      PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    os.environ[project_env.OVERRIDE] = sys.prefix


GIT_ENV = {"GIT_AUTHOR_NAME": "Sam Rivera", "GIT_AUTHOR_EMAIL": "sam@example.com",
           "GIT_COMMITTER_NAME": "Sam Rivera", "GIT_COMMITTER_EMAIL": "sam@example.com",
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}

# Each template: name formats ({noun}), params, docstring, body lines (4-space indented inside the
# def), test lines, bugs (old, new, what the bug did), a short explanation, keywords an
# explanation must hit, and optionally an addable parameter (name, default, old, new, hidden check).
TEMPLATES = {
    "mean": dict(
        names=["mean_{noun}", "average_{noun}"], params="values",
        doc="Return the arithmetic mean of values, or 0.0 for an empty list.",
        body=["if not values:", "    return 0.0", "return sum(values) / len(values)"],
        tests=["assert {name}([1, 2, 3]) == 2", "assert {name}([]) == 0.0"],
        bugs=[("sum(values) / len(values)", "sum(values) / (len(values) + 1)",
               "divided by len(values) + 1 instead of len(values)"),
              ("return 0.0", "return None", "returned None for an empty list instead of 0.0")],
        explain="returns the arithmetic mean of `values`, and 0.0 for an empty list instead of "
                "dividing by zero.",
        keywords=["mean", "average"],
        param=("default", "0.0", "return 0.0", "return default", "{name}([], default=-1.0) == -1.0")),
    "clamp": dict(
        names=["clamp_{noun}", "bound_{noun}"], params="value, low, high",
        doc="Limit value to the range [low, high].",
        body=["if value < low:", "    return low", "if value > high:", "    return high", "return value"],
        tests=["assert {name}(5, 0, 10) == 5", "assert {name}(-3, 0, 10) == 0",
               "assert {name}(42, 0, 10) == 10"],
        bugs=[("if value > high:", "if value < high:", "compared with `<` instead of > against high")],
        explain="keeps `value` inside [low, high]: below `low` it returns `low`, above `high` it "
                "returns `high`, otherwise the value itself.",
        keywords=["range", "low", "high"]),
    "count": dict(
        names=["count_{noun}", "tally_{noun}"], params="items, target",
        doc="Count how many items equal target.",
        body=["total = 0", "for item in items:", "    if item == target:", "        total += 1",
              "return total"],
        tests=["assert {name}([1, 2, 1, 3], 1) == 2", "assert {name}([], 5) == 0"],
        bugs=[("total += 1", "total += 2", "added 2 per match instead of 1"),
              ("if item == target:", "if item != target:", "counted the items that differ from target")],
        explain="loops over `items` and counts how many are equal to `target`.",
        keywords=["count", "equal"]),
    "slug": dict(
        names=["slugify_{noun}", "{noun}_slug"], params="text",
        doc="Turn text into a lowercase, dash-separated slug.",
        body=["words = text.lower().split()", 'return "-".join(words)'],
        tests=['assert {name}("Hello World") == "hello-world"',
               'assert {name}("  many   spaces ") == "many-spaces"'],
        bugs=[('"-".join(words)', '"_".join(words)', "joined the words with `_` instead of -"),
              ("text.lower().split()", "text.split()", "skipped lowercasing the text")],
        explain="lowercases `text`, splits it on whitespace and joins the words with dashes, "
                "giving a slug like `hello-world`.",
        keywords=["slug", "dash", "lowercase"],
        param=("sep", '"-"', 'return "-".join(words)', "return sep.join(words)",
               '{name}("a b", sep="_") == "a_b"')),
    "chunk": dict(
        names=["chunk_{noun}", "batch_{noun}"], params="items, size",
        doc="Split items into consecutive lists of at most size elements.",
        body=["return [items[i:i + size] for i in range(0, len(items), size)]"],
        tests=["assert {name}([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]", "assert {name}([], 3) == []"],
        bugs=[("items[i:i + size]", "items[i:i + size - 1]", "sliced one element short of size")],
        explain="splits `items` into consecutive lists of at most `size` elements; the last "
                "chunk may be shorter.",
        keywords=["split", "chunk", "size"]),
    "title": dict(
        names=["titlecase_{noun}", "capitalize_{noun}"], params="text",
        doc="Capitalize the first letter of every word in text.",
        body=['return " ".join(word[:1].upper() + word[1:] for word in text.split(" "))'],
        tests=['assert {name}("hello big world") == "Hello Big World"', 'assert {name}("") == ""'],
        bugs=[("word[:1].upper()", "word[:1].lower()", "lowercased the first letter instead of "
               "uppercasing it")],
        explain="uppercases the first letter of every space-separated word in `text` and leaves "
                "the rest of each word as it is.",
        keywords=["capitaliz", "first letter", "uppercase"]),
    "running": dict(
        names=["running_{noun}", "{noun}_totals"], params="values",
        doc="Return the running totals of values.",
        body=["totals = []", "current = 0", "for value in values:", "    current += value",
              "    totals.append(current)", "return totals"],
        tests=["assert {name}([1, 2, 3]) == [1, 3, 6]", "assert {name}([]) == []"],
        bugs=[("current += value", "current = value", "overwrote the total with each value instead "
               "of adding to it")],
        explain="returns the cumulative sums of `values`: element i is the sum of the first i + 1 "
                "values.",
        keywords=["running", "cumulative", "sum"],
        param=("start", "0", "current = 0", "current = start", "{name}([1], start=10) == [11]")),
    "dedupe": dict(
        names=["dedupe_{noun}", "unique_{noun}"], params="items",
        doc="Remove duplicates from items, keeping the order of first occurrence.",
        body=["seen = set()", "result = []", "for item in items:", "    if item not in seen:",
              "        seen.add(item)", "        result.append(item)", "return result"],
        tests=["assert {name}([3, 1, 3, 2, 1]) == [3, 1, 2]", "assert {name}([]) == []"],
        bugs=[("seen.add(item)", "seen.discard(item)", "never recorded seen items, so duplicates "
               "were kept")],
        explain="drops repeated items and keeps each one at the position where it first "
                "appeared, using a set of items already seen.",
        keywords=["duplicate", "order", "first"]),
    "percent": dict(
        names=["percent_{noun}", "{noun}_share"], params="part, whole",
        doc="Return part as a percentage of whole, rounded to two decimals.",
        body=["if whole == 0:", "    return 0.0", "return round(100.0 * part / whole, 2)"],
        tests=["assert {name}(1, 4) == 25.0", "assert {name}(1, 3) == 33.33", "assert {name}(5, 0) == 0.0"],
        bugs=[("100.0 * part / whole", "100.0 * whole / part", "divided whole by part instead of "
               "part by whole"),
              ("round(100.0 * part / whole, 2)", "round(100.0 * part / whole)", "rounded to a whole "
               "number instead of two decimals")],
        explain="returns `part` as a percentage of `whole`, rounded to two decimals, and 0.0 "
                "when `whole` is zero.",
        keywords=["percent"],
        param=("digits", "2", "return round(100.0 * part / whole, 2)",
               "return round(100.0 * part / whole, digits)", "{name}(1, 3, digits=1) == 33.3")),
    "truncate": dict(
        names=["truncate_{noun}", "shorten_{noun}"], params="text, width",
        doc="Shorten text to width characters, ending with '...' when cut.",
        body=["if len(text) <= width:", "    return text", 'return text[:width - 3] + "..."'],
        tests=['assert {name}("short", 10) == "short"', 'assert {name}("exact", 5) == "exact"',
               'assert {name}("a long sentence", 8) == "a lon..."'],
        bugs=[("text[:width - 3]", "text[:width]", "kept `width` characters before the `...`, so "
               "the result was too long"),
              ("if len(text) <= width:", "if len(text) < width:", "cut text that fit exactly")],
        explain="returns `text` unchanged when it fits in `width` characters, otherwise cuts it "
                "and ends it with `...` so the result is exactly `width` long.",
        keywords=["shorten", "truncat", "width", "cut"],
        param=("suffix", '"..."', 'return text[:width - 3] + "..."',
               "return text[:width - len(suffix)] + suffix", '{name}("abcdefgh", 5, suffix="!") == "abcd!"')),
    "words": dict(
        names=["word_counts_{noun}", "{noun}_words"], params="text",
        doc="Count how often each word appears in text, ignoring case.",
        body=["counts = {{}}", "for word in text.lower().split():",
              "    counts[word] = counts.get(word, 0) + 1", "return counts"],
        tests=['assert {name}("a b a") == {{"a": 2, "b": 1}}', 'assert {name}("A a") == {{"a": 2}}',
               'assert {name}("") == {{}}'],
        bugs=[("counts.get(word, 0) + 1", "counts.get(word, 1)", "never incremented the count"),
              ("text.lower().split()", "text.split()", "counted words case-sensitively")],
        explain="builds a dict mapping each lowercased word of `text` to how many times it "
                "appears.",
        keywords=["word", "count", "how often"]),
    "flatten": dict(
        names=["flatten_{noun}", "merge_{noun}"], params="nested",
        doc="Flatten one level of nesting: a list of lists into one list.",
        body=["result = []", "for group in nested:", "    result.extend(group)", "return result"],
        tests=["assert {name}([[1, 2], [3], []]) == [1, 2, 3]", "assert {name}([]) == []"],
        bugs=[("result.extend(group)", "result.append(group)", "appended each sub-list instead "
               "of extending with its items")],
        explain="concatenates a list of lists into one flat list (one level of nesting only).",
        keywords=["flat", "list of lists", "concatenat"]),
    "divide": dict(
        names=["safe_divide_{noun}", "{noun}_ratio"], params="a, b",
        doc="Divide a by b, returning None instead of raising when b is zero.",
        body=["if b == 0:", "    return None", "return a / b"],
        tests=["assert {name}(6, 3) == 2", "assert {name}(1, 0) is None"],
        bugs=[("return a / b", "return b / a", "divided b by a instead of a by b"),
              ("if b == 0:", "if a == 0:", "checked a instead of b for zero")],
        explain="returns `a / b`, or None when `b` is zero instead of raising ZeroDivisionError.",
        keywords=["divide", "zero"],
        param=("fallback", "None", "    return None", "    return fallback",
               "{name}(1, 0, fallback=0) == 0")),
    "spread": dict(
        names=["spread_{noun}", "{noun}_range"], params="values",
        doc="Return the difference between the largest and smallest value.",
        body=["if not values:", "    return 0", "return max(values) - min(values)"],
        tests=["assert {name}([4, 1, 9]) == 8", "assert {name}([]) == 0"],
        bugs=[("max(values) - min(values)", "max(values) - values[0]", "subtracted the first value "
               "instead of the smallest")],
        explain="returns the largest value minus the smallest, and 0 for an empty list.",
        keywords=["largest", "smallest", "difference"]),
}

# module settings a generated module may start with (what change_constant asks to change)
CONSTANT_NAMES = ["MAX_ITEMS", "DEFAULT_WIDTH", "TIMEOUT", "RETRIES", "PAGE_SIZE", "MAX_DEPTH",
                  "BATCH_SIZE", "PRECISION", "LIMIT", "TAB_SIZE", "MAX_LINE_LENGTH", "CACHE_SIZE"]
CONSTANT_VALUES = [3, 5, 8, 10, 16, 20, 32, 50, 64, 80, 100, 120]

CLASS_TEMPLATES = {
    "tracker": ("A simple tally of named {noun} counts.", [
        "def __init__(self):", "    self.counts = {{}}", "",
        "def add(self, key, amount=1):", '    """Add amount to the count of key."""',
        "    self.counts[key] = self.counts.get(key, 0) + amount", "",
        "def total(self):", '    """Return the sum of all counts."""', "    return sum(self.counts.values())"],
        ["t = {cls}()", 't.add("a")', 't.add("b", 3)', "assert t.total() == 4"]),
    "stack": ("A last-in, first-out stack of {noun} items.", [
        "def __init__(self):", "    self.items = []", "",
        "def push(self, item):", '    """Put item on top."""', "    self.items.append(item)", "",
        "def pop(self):", '    """Remove and return the top item, or None when empty."""',
        "    if not self.items:", "        return None", "    return self.items.pop()", "",
        "def __len__(self):", "    return len(self.items)"],
        ["s = {cls}()", "s.push(1)", "s.push(2)", "assert s.pop() == 2", "assert len(s) == 1",
         "assert {cls}().pop() is None"]),
}


@dataclass
class Func:
    """A function of a project. Generated ones come from a template (spec = TEMPLATES[template]);
    real ones (tasks/real_projects.py) carry their own spec with the same keys where they apply:
    bugs, tests, explain, keywords, names, params."""
    name: str
    template: str
    module: str          # e.g. "ledger/stats"
    file: str            # e.g. "ledger/stats.py"
    line: int            # 1-based line of the `def`
    signature: str       # "mean_price(values)"
    doc: str             # the docstring's first line ("" when it has none)
    body: list[str]      # body lines without the docstring, indented 4 spaces
    test_file: str
    test_name: str
    spec: dict = None    # TEMPLATES[template] unless given
    head: str = ""       # the def line(s) as written, default f"def {signature}:"
    doc_block: str = None  # the docstring's lines as written, default '    """{doc}"""'

    def __post_init__(self):
        self.spec = TEMPLATES[self.template] if self.spec is None else self.spec
        self.head = self.head or f"def {self.signature}:"
        self.doc_block = f'    """{self.doc}"""' if self.doc_block is None else self.doc_block

    def source(self) -> str:
        """The whole def as it is in the file, docstring included."""
        return "\n".join([self.head] + ([self.doc_block] if self.doc_block else []) + self.body) + "\n"


@dataclass
class Project:
    name: str
    root: str
    package: str
    modules: list[str]                 # module file paths, relative to root
    functions: dict[str, Func]
    classes: dict[str, tuple[str, int, str]]  # name -> (file, line, docstring)
    tests: dict[str, str]              # function name -> test file
    commits: list[str] = field(default_factory=list)      # subjects, oldest first
    memory: bool = False
    test_cmd: str = "python -m pytest -q"
    heldout: bool = False

    @property
    def test_files(self) -> list[str]:
        """The test files the project was generated with (relative paths), what checks run."""
        return sorted(set(self.tests.values()))

    def path(self, rel: str) -> str:
        return os.path.join(self.root, rel)

    def read(self, rel: str) -> str:
        with open(self.path(rel), encoding="utf-8") as f:
            return f.read()

    def write(self, rel: str, text: str) -> None:
        os.makedirs(os.path.dirname(self.path(rel)) or self.root, exist_ok=True)
        with open(self.path(rel), "w", encoding="utf-8") as f:
            f.write(text)


def git(root: str, *args: str, date: str | None = None) -> str:
    env = dict(os.environ, **GIT_ENV)
    if date:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
    r = subprocess.run(["git", *args], cwd=root, env=env, capture_output=True, text=True, check=True)
    return r.stdout


def commit_all(p: Project, subject: str, day: int) -> None:
    git(p.root, "add", "-A")
    git(p.root, "commit", "-q", "-m", subject, date=f"2024-03-{day:02d}T{9 + len(p.commits)}:30:00+0000")
    p.commits.append(subject)


def _render_module(p: Project, mod: str, funcs: list[tuple[str, str]], cls: tuple | None,
                   consts: list[tuple[str, int]] = ()) -> str:
    """Write module `mod` (path) with module constants [(NAME, value)], funcs [(template, name)]
    and an optional class; fill p.functions with line numbers."""
    title = os.path.basename(mod)[:-3].replace("_", " ")
    lines = [f'"""{title.capitalize()} helpers for {p.package}."""']
    if consts:
        lines += [""] + [f"{name} = {value}" for name, value in consts]
    for template, name in funcs:
        spec = TEMPLATES[template]
        lines += ["", ""]
        line = len(lines) + 1
        body = ["    " + b.format() if b else "" for b in spec["body"]]
        f = Func(name, template, mod[:-3], mod, line, f"{name}({spec['params']})", spec["doc"], body,
                 "", f"test_{name}")
        lines += f.source().rstrip("\n").split("\n")
        p.functions[name] = f
    if cls:
        cname, ctemplate, noun = cls
        doc, body, _ = CLASS_TEMPLATES[ctemplate]
        lines += ["", ""]
        p.classes[cname] = (mod, len(lines) + 1, doc.format(noun=noun))
        lines += [f"class {cname}:", f'    """{doc.format(noun=noun)}"""', ""]
        lines += ["    " + b.format() if b else "" for b in body]
    return "\n".join(lines) + "\n"


def _render_tests(p: Project, mod: str, names: list[str], cls: tuple | None) -> str:
    imports = names + ([cls[0]] if cls else [])
    dotted = mod[:-3].replace("/", ".")
    lines = [f"from {dotted} import {', '.join(imports)}"]
    for name in names:
        spec = TEMPLATES[p.functions[name].template]
        lines += ["", "", f"def test_{name}():"] + ["    " + t.format(name=name) for t in spec["tests"]]
    if cls:
        _, _, tests = CLASS_TEMPLATES[cls[1]]
        lines += ["", "", f"def test_{cls[0].lower()}():"] + ["    " + t.format(cls=cls[0]) for t in tests]
    return "\n".join(lines) + "\n"


def generate_project(rng: random.Random, base: str, heldout: bool = False) -> Project:
    """A fresh project under `base`/<name> (removed first if present), committed to git."""
    name = pick_word(rng, heldout, PROJECT_WORDS, HELDOUT_PROJECT_WORDS) + rng.choice(SUFFIXES)
    root = os.path.join(base, name)
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    p = Project(name, root, name, [], {}, {}, {}, heldout=heldout)
    n_mod = rng.randint(2, 4)
    mods = rng.sample(MODULE_WORDS, n_mod)
    templates = rng.sample(sorted(TEMPLATES), min(len(TEMPLATES), n_mod * 3))
    nouns = pick_names(rng, heldout, len(templates) + 1)
    cls_mod = rng.randrange(n_mod)
    cls_noun = nouns.pop()
    cls_name = cls_noun.capitalize() + rng.choice(CLASS_SUFFIXES)
    cls_template = "stack" if cls_name.endswith(("Stack", "Pile", "Buffer")) else "tracker"
    assigned: list[list[tuple[str, str]]] = [[] for _ in mods]
    for i, t in enumerate(templates):
        if i < n_mod or rng.random() < 0.55:
            fname = rng.choice(TEMPLATES[t]["names"]).format(noun=nouns[i])
            assigned[i % n_mod].append((t, fname))
    p.write(f"{name}/__init__.py", f'"""{name}: small utilities."""\n')
    names = rng.sample(CONSTANT_NAMES, len(CONSTANT_NAMES))
    for i, m in enumerate(mods):
        mod = f"{name}/{m}.py"
        cls = (cls_name, cls_template, cls_noun) if i == cls_mod else None
        consts = [(names.pop(), rng.choice(CONSTANT_VALUES)) for _ in range(rng.randint(1 if i == 0 else 0, 2))]
        p.modules.append(mod)
        p.write(mod, _render_module(p, mod, assigned[i], cls, consts))
        test_file = f"tests/test_{m}.py"
        p.write(test_file, _render_tests(p, mod, [n for _, n in assigned[i]], cls))
        for _, fname in assigned[i]:
            p.functions[fname].test_file = test_file
            p.tests[fname] = test_file
    p.write(".gitignore", "__pycache__/\n.pytest_cache/\n*.pyc\n")
    if rng.random() < 0.5:
        p.test_cmd = rng.choice(["python -m pytest -q", "python -m pytest -q tests"])
    fnames = sorted(p.functions)
    readme = [f"# {name}", "", f"Small {rng.choice(['helper', 'utility', 'toolbox'])} functions: "
              + ", ".join(f"`{f}`" for f in rng.sample(fnames, min(3, len(fnames)))) + ".",
              "", "## Tests", "", f"    {p.test_cmd}", ""]
    p.write("README.md", "\n".join(readme))
    if rng.random() < 0.35:
        p.memory = True
        notes = [f"- run the tests with `{p.test_cmd}`", "- keep functions small, with a docstring",
                 rng.choice(["- no third-party dependencies", "- prefer plain loops over clever tricks",
                             "- every function gets a test in tests/"])]
        p.write("NANOCODE.md", "# notes for nanocode\n\n" + "\n".join(notes) + "\n")
    commit_history(p, rng)
    return p


def commit_history(p: Project, rng: random.Random) -> None:
    """git init, then 2-3 commits: everything but the last module and its tests, that module
    ("add <module> module"), and half the time a README licence section."""
    day = rng.randint(1, 20)
    git(p.root, "init", "-q", "-b", "main")
    last = p.modules[-1]
    hold_test = f"tests/test_{os.path.basename(last)}"
    hold = {last: p.read(last), hold_test: p.read(hold_test)}
    for rel in hold:
        os.remove(p.path(rel))
    commit_all(p, rng.choice(["initial commit", f"start {p.name}", f"add {p.name} package"]), day)
    for rel, text in hold.items():
        p.write(rel, text)
    commit_all(p, f"add {os.path.basename(last)[:-3]} module", day + 1)
    if rng.random() < 0.5:
        p.write("README.md", p.read("README.md") + "\n## License\n\nMIT\n")
        commit_all(p, rng.choice(["readme: add license", "docs: license section"]), day + 2)


def snapshot(root: str) -> dict[str, str]:
    """path -> content of every file outside .git and caches (for 'unchanged' checks)."""
    out = {}
    for dirpath, dirs, filenames in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in (".git", "__pycache__", ".pytest_cache"))
        for fn in sorted(filenames):
            full = os.path.join(dirpath, fn)
            with open(full, encoding="utf-8", errors="replace") as f:
                out[os.path.relpath(full, root)] = f.read()
    return out


def run_tests(root: str, *targets: str) -> bool:
    """True when pytest passes in root on `targets` (default: whatever pytest collects there); used
    by hidden checks, not shown to the model. Runs as a check (tools/checks.py: sandboxed, no
    secrets, nothing left running); TimeoutError past 120 s, checks.Refused where no sandbox works
    and nobody chose to go on without. Installed pytest plugins are not loaded: generated
    projects use none, and loading them (pytest-benchmark, ...) costs more than the tests."""
    return _check([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *targets], root, 120,
                  {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})


def run_python(root: str, code: str) -> bool:
    """True when `code` runs without error in root (hidden behaviour checks); as run_tests, 60 s."""
    return _check([sys.executable, "-c", code], root, 60)


def _check(argv: list[str], root: str, timeout: float, env: dict | None = None) -> bool:
    ran = checks.run(argv, root, timeout, env=env)
    if ran.timed_out:
        raise TimeoutError(f"the check ran past {timeout:g} s")
    return ran.returncode == 0
