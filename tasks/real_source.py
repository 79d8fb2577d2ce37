"""Real functions from the Python standard library made into task material: each harvested
function comes with the module-level code it needs (helpers, constants, imports), tests recorded
by running it, and one-line bugs (tasks/mutations.py) that those tests catch.

The method is SWE-smith's in miniature and offline: take real functions, record what they do,
change one line procedurally (an operator, a comparison, a constant off by one, swapped
arguments, a wrong variable, a dropped `not`) and keep the change only when a recorded test then
fails. Inputs come from the docstring's doctests and from pools chosen by parameter name (a
`text` gets strings, a `count` gets ints, an unknown name tries every pool); a call is recorded
only when it returns a value whose repr reads back equal, the same under two hash seeds, in
bounded time.

Trade-offs: only functions whose free names resolve to module-level functions, constants, small
exception classes or pure modules (SAFE_MODULES) are taken, and none that reads files, prints,
or reflects on globals: the recorded code runs in a child process with limits, but a function
that could touch the disk is never run at all. That leaves out most of the standard library
(everything that does I/O or needs a class instance) and keeps parsers, formatters, text and
number helpers, the code a small project is made of. Results depend on the installed Python's
sources, so tasks are deterministic per machine (Python version), not across versions.

Code that is not the standard library's (a package's) is untrusted: it must also meet
tasks/real_packages.py's untrusted_ok, and its child denies file access, imports, processes and
sockets through an audit hook (CHILD), so a way round the rules still finds nothing to write with.
Its module-level code never runs: only the excerpt (the function's closure) does.

Contract: `harvest(path, module)` is a pure function of the file's text, the module's name and
whether the file is the standard library's: the same RealFuncs (sources, recorded asserts, bugs)
every time; it never raises on an unusable file (it returns []).
"""
from __future__ import annotations

import ast
import builtins
import functools
import json
import os
import random
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from tasks.mutations import mutations
from tasks.real_packages import untrusted_ok

SAFE_MODULES = frozenset("""re math string itertools functools operator collections bisect heapq
    textwrap unicodedata keyword binascii struct fractions calendar colorsys types stat warnings
    copy reprlib codecs html html.entities urllib.parse decimal numbers""".split())
# modules used only through these attributes are safe too (paths as strings, platform constants)
SAFE_ATTRS = {"os": frozenset("""fspath fsencode fsdecode sep altsep curdir pardir extsep pathsep
                  linesep PathLike path""".split()),
              "os.path": frozenset("""join split splitext basename dirname normpath normcase
                  commonprefix commonpath isabs splitdrive""".split()),
              "sys": frozenset("maxsize maxunicode byteorder float_info int_info hexversion".split())}
# builtins that read or write files, print, run code or reflect on the caller's globals
UNSAFE_BUILTINS = frozenset("""open exec eval compile input print __import__ globals locals vars
    setattr delattr exit quit breakpoint help id hash super memoryview""".split())
SAFE_BUILTINS = frozenset(dir(builtins)) - UNSAFE_BUILTINS
MAX_FUNC_LINES, MAX_EXCERPT_LINES = 40, 90
MAX_ASSERTS, MIN_ASSERTS, CALLS_TRIED = 4, 2, 40

STRINGS = ["hello world", "a,b,c", "  Mixed Case  ", "", "x=1&y=2", "foo/bar/baz.txt",
           "line one\nline two", "ABC", "3.14", "tab\tsep", "spam_eggs", "a b  c"]
INTS = [0, 1, 2, 3, 7, 10, 42, -1, 100, 2024]
FLOATS = [0.0, 0.25, 0.5, 1.0, 2.5]
LISTS = [[], [1, 2, 3], [3, 1, 2], ["a", "b"], [1, 1, 2], [5]]
BYTES = [b"hello", b"", b"a=b\n", b"\x00\xff"]
POOL_HINTS = [  # parameter-name pattern -> pools tried (first match wins)
    (r"^(s|str|text|string|word|line|name|path|url|prefix|suffix|sep|chars|pattern|header|addr|"
     r"address|value_str|fmt|format|template|char|c|ch|msg|label|host|query|fragment)\d?$|"
     r"(text|str|name|path|line|word)s?$", [STRINGS]),
    (r"^(n|i|j|k|m|count|size|width|length|num|index|pos|start|end|stop|level|year|month|day|"
     r"base|bits|digits|x|y|precision|depth|limit|maxlen|max|min|step|offset|cols|tabsize)\d?$",
     [INTS, FLOATS]),
    (r"^(seq|items|iterable|lst|list|values|args|words|lines|parts|elements|a|b|data|elems)\d?$",
     [LISTS, STRINGS]),
    (r"^(r|g|b|h|l|v|f|fraction|ratio|scale)\d?$", [FLOATS, INTS]),
    (r"(bytes|buf|octets|binary|raw)$", [BYTES]),
]


@dataclass(frozen=True)
class RealFunc:
    """One harvested function: `excerpt` is a self-contained module text (imports, the helpers and
    constants it needs, then the function itself, `source`), assembled from `imports` and `parts`
    (so several functions of one file merge into one module); `asserts` are recorded test lines
    with `{name}` for the function's name; `bugs` are (good line, bad line, what the bad line
    does) with the good line unique in `source`; `helper_bugs` are the same for the module-level
    helper functions it calls that need nothing but imports (so a project can move one into a
    module of its own): (helper, its import lines, good line, bad line, what it does), each
    caught by the asserts."""
    module: str                 # dotted stdlib module, e.g. "email.quoprimime"
    name: str
    line: int                   # the def's line in the source file
    params: str                 # the parameter list as written
    doc: str                    # the docstring's first line
    source: str                 # the def, docstring included, as in the file (dedented)
    imports: tuple[str, ...]    # the import lines the excerpt needs
    parts: tuple[tuple[int, str], ...]  # (line in the source file, text): helpers, constants, the def
    deps: tuple[str, ...]       # names of the module-level helpers/constants/classes it needs
    asserts: tuple[str, ...]
    bugs: tuple[tuple[str, str, str], ...]
    helper_bugs: tuple[tuple[str, tuple[str, ...], str, str, str], ...] = ()

    @property
    def excerpt(self) -> str:
        return _excerpt(list(self.imports), list(self.parts))


@functools.lru_cache(maxsize=1)
def stdlib_modules() -> dict[str, str]:
    """dotted module name -> path of every candidate standard-library source file (cached: the
    caller must not change it)."""
    root = os.path.dirname(os.__file__)
    skip = {"test", "tests", "idlelib", "lib2to3", "tkinter", "turtledemo", "ensurepip",
            "site-packages", "dist-packages", "distutils", "pydoc_data", "__pycache__", "venv"}
    out = {}
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in skip and not d.startswith("."))
        for f in sorted(files):
            if f.endswith(".py") and f not in ("__main__.py", "this.py", "antigravity.py"):
                rel = os.path.relpath(os.path.join(dirpath, f), root)[:-3]
                out[rel.replace(os.sep, ".").removesuffix(".__init__")] = os.path.join(dirpath, f)
    return out


# ---- which functions can be lifted out ---------------------------------------------------------

def _bound(fn: ast.AST) -> set[str]:
    """Names a function binds itself (parameters, assignments, loop and comprehension targets,
    nested defs, except-as, local imports)."""
    out = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) and node is not fn:
            out.add(node.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            out.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
    return out


def _free(node: ast.AST) -> set[str] | None:
    """Names `node` reads but does not bind; None when it does something never run here
    (global/nonlocal, yield, await, an unsafe builtin, a star import)."""
    for sub in ast.walk(node):
        if isinstance(sub, (ast.Global, ast.Nonlocal, ast.Yield, ast.YieldFrom, ast.Await,
                            ast.AsyncFunctionDef)):
            return None
    loaded = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    free = loaded - _bound(node)
    if free & UNSAFE_BUILTINS or not all(_attrs_safe(node, m) for m in free & set(SAFE_ATTRS)):
        return None
    return free - SAFE_BUILTINS


def _attrs_safe(node: ast.AST, module: str) -> bool:
    """Whether every use of `module` in node is one of SAFE_ATTRS[module] (os.path.X: X checked)."""
    uses = [n for n in ast.walk(node) if isinstance(n, ast.Name) and n.id == module]
    attrs = {id(n.value): n for n in ast.walk(node) if isinstance(n, ast.Attribute)}
    for use in uses:
        attr = attrs.get(id(use))
        if attr is None or attr.attr not in SAFE_ATTRS[module]:
            return False
        if module == "os" and attr.attr == "path":
            outer = attrs.get(id(attr))
            if outer is None or outer.attr not in SAFE_ATTRS["os.path"]:
                return False
    return True


def _top_level(tree: ast.Module) -> dict[str, ast.AST]:
    """name -> the top-level statement defining it (defs, small exception classes, single-name
    assignments, imports of SAFE_MODULES)."""
    table: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not node.decorator_list:
            table[node.name] = node
        elif isinstance(node, ast.ClassDef) and not node.decorator_list and node.end_lineno - node.lineno < 8:
            if all(isinstance(b, ast.Name) and b.id in SAFE_BUILTINS for b in node.bases):
                table[node.name] = node
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            table[node.targets[0].id] = node
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name in SAFE_MODULES or a.name in SAFE_ATTRS:
                    table[a.asname or a.name] = node
        elif isinstance(node, ast.ImportFrom) and node.module in SAFE_MODULES and node.level == 0:
            for a in node.names:
                if a.name != "*":
                    table[a.asname or a.name] = node
    return table


def _closure(fn: ast.FunctionDef, table: dict[str, ast.AST]) -> list[ast.AST] | None:
    """The top-level statements `fn` needs, transitively (fn excluded); None when a name is
    unresolvable or unsafe."""
    need, seen, todo = [], {fn.name}, [fn]
    while todo:
        free = _free(todo.pop())
        if free is None:
            return None
        for name in sorted(free - seen):
            seen.add(name)
            node = table.get(name)
            if node is None:
                return None
            if node not in need:
                need.append(node)
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    todo.append(node)
    return need


def trusted(path: str) -> bool:
    """Whether the file is the standard library's (the rest is untrusted)."""
    return path in _stdlib_paths()


@functools.lru_cache(maxsize=1)
def _stdlib_paths() -> frozenset[str]:
    return frozenset(stdlib_modules().values())


def _segment(lines: list[str], node: ast.AST) -> str:
    return "\n".join(lines[node.lineno - 1:node.end_lineno])


def _excerpt(imports: list[str], parts: list[tuple[int, str]]) -> str:
    """One importable module text: the imports, then the statements in file order."""
    blocks = (["\n".join(sorted(set(imports)))] if imports else []) + [t for _, t in sorted(set(parts))]
    return "\n\n\n".join(blocks) + "\n"


def _import_text(node: ast.AST) -> str:
    if isinstance(node, ast.Import):
        return "import " + ", ".join(sorted(a.name + (f" as {a.asname}" if a.asname else "") for a in node.names
                                            if a.name in SAFE_MODULES or a.name in SAFE_ATTRS))
    return f"from {node.module} import " + ", ".join(a.name + (f" as {a.asname}" if a.asname else "")
                                                      for a in node.names)


@dataclass(frozen=True)
class Candidate:
    """A liftable function: its node, the import lines and statements [(line, text)] it needs
    (itself last), the names of the helpers, constants and classes among them, and the helper
    functions among them that need only imports: (name, text, import lines)."""
    fn: ast.FunctionDef
    imports: tuple[str, ...]
    parts: tuple[tuple[int, str], ...]
    deps: tuple[str, ...]
    movable: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    @property
    def excerpt(self) -> str:
        return _excerpt(list(self.imports), list(self.parts))

    @property
    def source(self) -> str:
        return self.parts[-1][1]


def candidates(path: str) -> list[Candidate]:
    """The public, liftable top-level functions of a file (documented by a first line of 12
    characters or more, or not at all), in file order; a file not the standard library's meets
    the untrusted rules too."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        tree = ast.parse(text)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return []
    if not text.isascii():
        return []
    lines, table, out, strict = text.split("\n"), _top_level(tree), [], not trusted(path)
    for fn in tree.body:
        if not isinstance(fn, ast.FunctionDef) or fn.name.startswith("_") or fn.decorator_list:
            continue
        doc = ast.get_docstring(fn)
        a = fn.args
        required = len(a.posonlyargs) + len(a.args) - len(a.defaults)
        if doc is not None and len(doc.split("\n")[0].strip()) < 12 or not 1 <= required <= 3 or a.kwonlyargs and \
                len(a.kw_defaults) != sum(d is not None for d in a.kw_defaults):
            continue
        if fn.end_lineno - fn.lineno >= MAX_FUNC_LINES:
            continue
        need = _closure(fn, table)
        if need is None or strict and not untrusted_ok(need + [fn]):
            continue
        imports = [_import_text(n) for n in need if isinstance(n, (ast.Import, ast.ImportFrom))]
        stmts = [n for n in need if not isinstance(n, (ast.Import, ast.ImportFrom))]
        parts = [(n.lineno, _segment(lines, n)) for n in stmts + [fn]]
        if _excerpt(imports, parts).count("\n") > MAX_EXCERPT_LINES:
            continue
        deps = [n.name if isinstance(n, (ast.FunctionDef, ast.ClassDef)) else n.targets[0].id for n in stmts]
        out.append(Candidate(fn, tuple(imports), tuple(parts), tuple(deps), _movable(stmts, table, lines)))
    return out


def _movable(stmts: list[ast.AST], table: dict[str, ast.AST], lines: list[str]):
    """(name, text, import lines) of the helper functions among stmts whose free names are all
    imports: the ones a project can move into a module of their own."""
    out = []
    for node in stmts:
        free = _free(node) if isinstance(node, ast.FunctionDef) else None
        if free is not None and all(isinstance(table.get(n), (ast.Import, ast.ImportFrom)) for n in free):
            imports = tuple(sorted({_import_text(table[n]) for n in free}))
            out.append((node.name, _segment(lines, node), imports))
    return tuple(out)


@functools.lru_cache(maxsize=None)
def module_constants(path: str) -> tuple[tuple[int, str], ...]:
    """(line, text) of the file's one-line module-level `NAME = <int>` constants (NAME in
    capitals): real settings a project module may carry beside its functions."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        tree = ast.parse(text)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return ()
    lines = text.split("\n")
    return tuple((n.lineno, lines[n.lineno - 1]) for n in tree.body
                 if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
                 and re.fullmatch(r"[A-Z][A-Z0-9_]*", n.targets[0].id) and isinstance(n.value, ast.Constant)
                 and type(n.value.value) is int and n.lineno == n.end_lineno and lines[n.lineno - 1].isascii())


# ---- calls to record --------------------------------------------------------------------------------

def _pools(param: str, rng: random.Random) -> list[list]:
    """The pools tried for a parameter: its name's hint most of the time, any pool otherwise."""
    for pattern, pools in POOL_HINTS:
        if re.search(pattern, param.lower()) and rng.random() < 0.75:
            return pools
    return [STRINGS, INTS, LISTS, BYTES, FLOATS]


def _doctest_calls(fn: ast.FunctionDef) -> list[str]:
    """Calls of fn in its docstring's examples whose arguments are literals."""
    out = []
    for line in (ast.get_docstring(fn) or "").split("\n"):
        line = line.strip()
        if not line.startswith(">>> "):
            continue
        try:
            call = ast.parse(line[4:], mode="eval").body
        except SyntaxError:
            continue
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == fn.name \
                and not call.keywords and all(_literal(a) for a in call.args):
            out.append(ast.unparse(call))
    return out


def _literal(node: ast.AST) -> bool:
    try:
        ast.literal_eval(node)
        return True
    except ValueError:
        return False


def planned_calls(fn: ast.FunctionDef, rng: random.Random) -> list[str]:
    """The call texts to try: doctest examples first, then CALLS_TRIED draws from the pools."""
    a = fn.args
    params = [p.arg for p in (a.posonlyargs + a.args)][:len(a.posonlyargs) + len(a.args) - len(a.defaults)]
    calls = _doctest_calls(fn)
    for _ in range(CALLS_TRIED):
        args = [repr(rng.choice(rng.choice(_pools(p, rng)))) for p in params]
        text = f"{fn.name}({', '.join(args)})"
        if text not in calls:
            calls.append(text)
    return calls


# ---- the child process that runs real code ----------------------------------------------------------

CHILD = r"""
import ast, json, resource, signal, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 31, 1 << 31))
resource.setrlimit(resource.RLIMIT_CPU, (120, 120))
jobs = json.load(sys.stdin)
if sys.argv[1:] == ["untrusted"]:  # every module an excerpt may use is loaded; then no file, import, process, socket
    for m in MODULES: __import__(m)
    DENIED = ("open", "import", "os.", "subprocess.", "shutil.", "socket.", "ctypes.", "_posixsubprocess.",
              "pty.", "fcntl.", "mmap.", "code.__new__", "function.__new__", "tempfile.", "glob.", "webbrowser.")
    def deny(event, args):
        if event.startswith(DENIED): raise PermissionError(event)
    sys.addaudithook(deny)
class Slow(Exception): pass
def alarm(*_): raise Slow()
signal.signal(signal.SIGALRM, alarm)
def timed(f):
    signal.setitimer(signal.ITIMER_REAL, 0.25)
    try: return f()
    finally: signal.setitimer(signal.ITIMER_REAL, 0)
def load(src):
    ns = {"__name__": "excerpt"}
    timed(lambda: exec(compile(src, "<excerpt>", "exec"), ns))
    return ns
def value(ns, call):
    v = timed(lambda: eval(call, ns))
    r = repr(v)
    if len(r) > 70 or not r.isascii() or type(ast.literal_eval(r)) is not type(v) or ast.literal_eval(r) != v: raise ValueError
    return r
out = []
for job in jobs:
    res = {"recorded": [], "caught": []}
    try: ns = load(job["excerpt"])
    except BaseException: out.append(res); continue
    for call in job["calls"]:
        try: res["recorded"].append([call, value(ns, call)])
        except BaseException: pass
    for mutant in job["mutants"]:
        try:
            mns = load(mutant)
            caught = any(value(mns, c) != r for c, r in job["expect"])
        except BaseException: caught = True
        res["caught"].append(caught)
    out.append(res)
print(json.dumps(out))
""".replace("MODULES", repr(sorted(SAFE_MODULES | set(SAFE_ATTRS))))


def _run_child(jobs: list[dict], hashseed: int, untrusted: bool = False) -> list[dict]:
    """CHILD's results for `jobs` (with its audit hook for `untrusted` code); every job empty when
    the child dies or overruns."""
    with tempfile.TemporaryDirectory(prefix="nanocode-harvest-") as tmp:
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONHASHSEED": str(hashseed), "PYTHONDONTWRITEBYTECODE": "1"}
        try:
            r = subprocess.run([sys.executable, "-I", "-c", CHILD] + ["untrusted"] * untrusted, input=json.dumps(jobs), capture_output=True,
                               text=True, cwd=tmp, env=env, timeout=300)
            return json.loads(r.stdout)
        except (subprocess.TimeoutExpired, json.JSONDecodeError):
            return [{"recorded": [], "caught": []} for _ in jobs]


def _choose(recorded: list[list[str]]) -> list[tuple[str, str]]:
    """Up to MAX_ASSERTS calls with distinct results, doctest calls first (they come first)."""
    seen, out = set(), []
    for call, result in recorded:
        if result not in seen and len(call) <= 70:
            seen.add(result)
            out.append((call, result))
    return out[:MAX_ASSERTS]


def _assert_line(name: str, call: str, result: str) -> str:
    """`assert {name}(args) == result`, braces of the literals doubled for str.format."""
    args = call[len(name):].replace("{", "{{").replace("}", "}}")
    return f"assert {{name}}{args} == " + result.replace("{", "{{").replace("}", "}}")


@functools.lru_cache(maxsize=None)
def harvest(path: str, module: str = "") -> tuple[RealFunc, ...]:
    """Every function of the file at `path` (dotted `module`; default: its standard-library name,
    else the file's stem) with MIN_ASSERTS recorded asserts or more (module docstring); cached per
    process."""
    module = module or next((m for m, p in stdlib_modules().items() if p == path), os.path.basename(path)[:-3])
    cands, untrusted = candidates(path), not trusted(path)
    jobs = [{"excerpt": c.excerpt, "calls": planned_calls(c.fn, random.Random(f"{module}.{c.fn.name}")),
             "mutants": [], "expect": []} for c in cands]
    first, second = (_run_child(jobs, seed, untrusted) if jobs else [] for seed in (1, 2))  # stable across hash seeds
    kept = []
    for c, a, b in zip(cands, first, second):
        chosen = _choose([rec for rec in a["recorded"] if rec in b["recorded"]])
        lines = c.source.split("\n")
        muts = [(lines[i], bad, desc) for i, bad, desc in mutations(c.fn, lines) if c.source.count(lines[i]) == 1]
        if len(chosen) >= MIN_ASSERTS:
            kept.append((c, chosen, muts, _helper_mutations(c)))
    jobs = [{"excerpt": c.excerpt, "calls": [], "expect": chosen,
             "mutants": [c.excerpt.replace(c.source, c.source.replace(good, bad, 1), 1) for good, bad, _ in muts]
             + [c.excerpt.replace(text, text.replace(good, bad, 1), 1) for text, (_, _, good, bad, _) in hmuts]}
            for c, chosen, muts, hmuts in kept]
    out = []
    for (c, chosen, muts, hmuts), res in zip(kept, _run_child(jobs, 1, untrusted) if jobs else []):
        bugs = tuple(m for m, caught in zip(muts, res["caught"]) if caught)
        helper_bugs = tuple(m for (_, m), caught in zip(hmuts, res["caught"][len(muts):]) if caught)
        params = ast.get_source_segment(c.source, ast.parse(c.source).body[0].args) or ""
        doc = (ast.get_docstring(c.fn) or "").split("\n")[0].strip()
        out.append(RealFunc(module, c.fn.name, c.fn.lineno, params, doc, c.source, c.imports, c.parts, c.deps,
                            tuple(_assert_line(c.fn.name, call, result) for call, result in chosen), bugs,
                            helper_bugs))
    return tuple(out)


def _helper_mutations(c: Candidate) -> list[tuple[str, tuple[str, tuple[str, ...], str, str, str]]]:
    """(helper text, (helper, imports, good, bad, desc)) for each one-line mutation of c's movable
    helpers whose good line occurs once in c's excerpt."""
    out = []
    for name, text, imports in c.movable:
        lines = text.split("\n")
        for i, bad, desc in mutations(ast.parse(text).body[0], lines):
            if c.excerpt.count(lines[i]) == 1:
                out.append((text, (name, imports, lines[i], bad, desc)))
    return out
