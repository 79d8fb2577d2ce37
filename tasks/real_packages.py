"""Real-code source roots besides the standard library: folders of pure-Python packages (a
site-packages, a checkout's import root, an unpacked wheel or sdist), listed for the modules the
real-code task world may draw training functions from.

A root is a folder one would put on sys.path: each `name.py` and each package folder `name/` at
its top (`name` an identifier) is a top-level package, read down through its sub-packages (test,
docs and example folders left out). A top-level name in `reserved` (the standard library's
modules, the eval split's packages: tasks/real_projects.py says which) is skipped, so a package
never shadows one nor brings functions under an eval package's name; so is a name an earlier
root already gave (the first root wins) and a build or test script (setup.py, conftest.py).
Skips are counted by reason. Symbolic links are never followed.

Nothing here imports or runs the code: it is only listed. The harvest (tasks/real_source.py)
reads a module with `ast` and runs excerpts of it only in its limited child, and only those that
meet the rules for untrusted code on top of its own (untrusted_ok): no dunder name, attribute or
string (the way from any object to the interpreter's modules and builtins), no attribute looked
up by a computed name (getattr, attrgetter, a format field), no code objects (types), no `.open`
(codecs.open writes files).

Contract: `package_modules(roots, reserved)` is a pure function of the roots' file trees: the
same modules in the same (sorted) order every time.
"""
from __future__ import annotations

import ast
import os
from collections.abc import Mapping

SKIP_DIRS = frozenset("""test tests testing __pycache__ docs doc examples example benchmarks
    site-packages dist-packages build""".split())
SCRIPTS = frozenset("setup conftest noxfile fabfile manage".split())  # top-level .py that are no package
# untrusted code (not the standard library's) may not use these names or attributes either
UNTRUSTED_NAMES = frozenset("getattr types".split())
UNTRUSTED_ATTRS = frozenset("open attrgetter methodcaller get_field Formatter FunctionType CodeType".split())


def package_modules(roots: tuple[str, ...], reserved: Mapping[str, str]
                    ) -> tuple[dict[str, str], dict[str, int]]:
    """(dotted module -> path, {reason: top-level names skipped}) for the pure-Python modules
    under `roots`, root by root in the given order, each root's entries sorted. `reserved` maps
    a top-level name to the reason it is skipped."""
    modules: dict[str, str] = {}
    skipped: dict[str, int] = {}
    taken: set[str] = set()
    for root in roots:
        for entry in sorted(os.listdir(root)):
            path = os.path.join(root, entry)
            if os.path.islink(path):
                continue
            if entry.endswith(".py") and os.path.isfile(path):
                top = entry[:-3]
            elif os.path.isdir(path) and entry not in SKIP_DIRS:
                top = entry
            else:
                continue
            if not top.isidentifier():
                continue
            why = (reserved.get(top) or ("build or test script" if top in SCRIPTS else None)
                   or ("duplicate" if top in taken else None))
            if why:
                skipped[why] = skipped.get(why, 0) + 1
                continue
            taken.add(top)
            modules.update(_package_files(path, top))
    return modules, skipped


def _package_files(path: str, top: str) -> dict[str, str]:
    """dotted module -> path of a top-level module file or of a package folder's .py files."""
    if os.path.isfile(path):
        return {top: path}
    out = {}
    for dirpath, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and d.isidentifier()
                         and not os.path.islink(os.path.join(dirpath, d)))
        package = [top] + [p for p in os.path.relpath(dirpath, path).split(os.sep) if p != "."]
        for f in sorted(files):
            full = os.path.join(dirpath, f)
            if f.endswith(".py") and f[:-3].isidentifier() and not os.path.islink(full):
                out[".".join(package + ([] if f == "__init__.py" else [f[:-3]]))] = full
    return out


def untrusted_ok(nodes: list[ast.AST]) -> bool:
    """Whether untrusted code may run these statements: no dunder identifier or string, none
    of UNTRUSTED_NAMES (imported or read) or UNTRUSTED_ATTRS."""
    for node in nodes:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and "__" in sub.value:
                return False
            names = ([sub.id] if isinstance(sub, ast.Name) else [sub.arg] if isinstance(sub, ast.arg)
                     else [a.asname or a.name for a in sub.names] if isinstance(sub, (ast.Import, ast.ImportFrom))
                     else [sub.name] if isinstance(sub, (ast.FunctionDef, ast.ClassDef)) else [])
            if any(n.startswith("__") or n.split(".")[0] in UNTRUSTED_NAMES for n in names):
                return False
            if isinstance(sub, ast.Attribute) and (sub.attr.startswith("__") or sub.attr in UNTRUSTED_ATTRS):
                return False
    return True
