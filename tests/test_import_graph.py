"""The packages are layers and no import points up. Bottom to top:

    nanocode (the model, tokenizer, checkpoints, protocol) < tools < agent < tasks < train, evals

A module may import its own package and any package below it. train and evals share the top
layer: evals may import train (bits per byte reuses training's evaluator, loader and placement,
the model card lists the speedrun's stages), train never imports evals (the speedrun runs the evals
as separate processes). bench and tests sit above everything and may import anything; nothing
imports them.

Every import counts, wherever it sits (module level, inside a function, under TYPE_CHECKING):
a function-local import is as much a dependency as one at the top. Imports are read with `ast`,
so the check needs no optional dependency and runs no module code. Within the layers, no two
modules import each other, directly or round a longer loop (a function-local import hides such a
cycle from Python, not from this check).
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYER = {"nanocode": 0, "tools": 1, "agent": 2, "tasks": 3, "train": 4, "evals": 4,
         "bench": 5, "tests": 5}
CHECKED = ("nanocode", "tools", "agent", "tasks", "train", "evals")  # bench and tests: anything
SIDEWAYS = {("evals", "train")}  # (importer, imported) within one layer, besides a package itself


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(root: Path, path: Path) -> set[str]:
    """Absolute names of every module `path` imports, at any depth: `import a.b` gives a.b,
    `from a import b` gives a, and a relative `from .b import c` is resolved against path."""
    package = module_name(root, path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            found.add(".".join(base + ([node.module] if node.module else [])))
    return found


def upward_imports(root: Path, packages=CHECKED) -> list[str]:
    """'importer -> imported' for every import that leaves the importer's package for one that is
    not below it (and not an allowed SIDEWAYS pair)."""
    wrong = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            for target in sorted(imported_modules(root, path)):
                top = target.split(".")[0]
                if top == package or top not in LAYER or (package, top) in SIDEWAYS:
                    continue
                if LAYER[top] >= LAYER[package]:
                    wrong.append(f"{path.relative_to(root)} -> {target}")
    return wrong


def module_graph(root: Path, packages=CHECKED) -> dict[str, set[str]]:
    """Module -> the repository modules it imports (any depth): `from a import b` names a.b where
    that is a module, else a."""
    paths = {module_name(root, p): p for package in packages for p in sorted((root / package).rglob("*.py"))}
    graph = {}
    for name, path in paths.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name in paths)
            elif isinstance(node, ast.ImportFrom):
                base = ".".join((package[:len(package) - node.level + 1] if node.level else [])
                                + ([node.module] if node.module else []))
                found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base for a in node.names)
        graph[name] = {m for m in found if m in paths and m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one module (Tarjan), each sorted."""
    index, low, stack, found = {}, {}, [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = stack[stack.index(v):]
            del stack[stack.index(v):]
            if len(part) > 1:
                found.append(sorted(part))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_two_modules_import_each_other():
    found = cycles(module_graph(ROOT))
    assert not found, ("modules that import each other (directly or round a loop): move what both "
                       "need into one of them or a module below both:\n  " + "\n  ".join(map(" <-> ".join, found)))


def test_the_cycle_check_sees_a_function_local_import(tmp_path):
    (tmp_path / "agent").mkdir()
    (tmp_path / "agent" / "a.py").write_text("from agent.b import x\n")
    (tmp_path / "agent" / "b.py").write_text("def x():\n    from agent import a\n")
    (tmp_path / "agent" / "c.py").write_text("import agent.a\n")
    assert cycles(module_graph(tmp_path, ("agent",))) == [["agent.a", "agent.b"]]


def test_no_module_imports_a_package_above_its_own():
    wrong = upward_imports(ROOT)
    assert not wrong, ("imports that point up the layers nanocode < tools < agent < tasks < "
                       "train, evals (evals may import train, not the reverse): move the shared code "
                       "down to the lower package, or pass it in from the caller:\n  "
                       + "\n  ".join(wrong))


@pytest.mark.parametrize("source,upward", [
    ("import train.loop\n", True),
    ("def f():\n    from agent import driver\n", True),  # function-local imports count
    ("from evals.bpb import main\n", True),
    ("from nanocode.protocol import Tool\nimport json\n", False),
    ("from . import files\nfrom .dispatch import run\n", False),  # relative: its own package
])
def test_the_check_sees_every_form_of_import(tmp_path, source, upward):
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "probe.py").write_text(source)
    wrong = upward_imports(tmp_path, packages=("tools",))
    assert bool(wrong) == upward, wrong


def test_train_may_not_import_evals_though_evals_may_import_train(tmp_path):
    for package in ("train", "evals"):
        (tmp_path / package).mkdir()
    (tmp_path / "evals" / "probe.py").write_text("from train.loop import place\n")
    (tmp_path / "train" / "probe.py").write_text("from evals.bpb import main\n")
    assert upward_imports(tmp_path, packages=("train", "evals")) == [
        "train/probe.py -> evals.bpb"]


def private_jax_uses(root: Path, packages=CHECKED + ("bench",)) -> list[str]:
    """'file: name' for every import of jax's private modules (jax._src, jaxlib) and every read of
    an underscored or private field through jax (`jax._src...`, `jax.typeof(x).manual_axis_type`):
    a jax release may rename them, and every train step would break on every backend."""
    private_fields = {"manual_axis_type"}  # public-looking names jax keeps private
    wrong = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            names = {m for m in imported_modules(root, path) if m.startswith(("jax._", "jaxlib"))}
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and (node.attr in private_fields or (
                        node.attr.startswith("_") and not node.attr.endswith("__")
                        and ast.unparse(node.value).startswith("jax"))):
                    names.add(ast.unparse(node))
            wrong += [f"{path.relative_to(root)}: {n}" for n in sorted(names)]
    return wrong


def test_no_module_reads_private_jax():
    wrong = private_jax_uses(ROOT)
    assert not wrong, "private jax (use the public API; jax pins to a release in pyproject):\n  " + "\n  ".join(wrong)


@pytest.mark.parametrize("source,private", [
    ("import jax._src.core as core\n", True),
    ("from jaxlib import xla_client\n", True),
    ("import jax\nt = jax.typeof(x).manual_axis_type\n", True),
    ("import jax\nm = jax._src.mesh\n", True),
    ("import jax\ny = jax.lax.psum(x, 'fsdp')\nz = obj._private\nv = jax.__version__\n", False),
])
def test_the_private_jax_check_sees_each_form(tmp_path, source, private):
    (tmp_path / "nanocode").mkdir()
    (tmp_path / "nanocode" / "probe.py").write_text(source)
    assert bool(private_jax_uses(tmp_path, packages=("nanocode",))) == private
