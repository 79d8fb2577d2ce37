"""Projects made of real code: a package whose modules are excerpts of standard-library modules,
or of the pure-Python packages of extra source roots (tasks/real_source.py harvests them: real
functions with the helpers and constants they need, recorded tests, bugs those tests catch), laid
out as people lay out a small project (the package, tests/, README.md, pyproject.toml, .gitignore,
a 2-3 commit history), so the names a request carries are real ones: `header_length`,
`quoteattr`, `email/quoprimime.py`.

The split is by source module, decided by its top-level package (so `email.utils` and
`email.quoprimime` fall on one side) and recorded in EVAL_PACKAGES: evals draw only those;
training draws every other package, so no function an eval asks about was ever trained on.
posixpath sits with ntpath (the same function names) on the eval side. The modules of extra
`sources` (module_pool, tasks/real_packages.py) are training material only: a package named like
a standard-library module or an EVAL_PACKAGES one is skipped, so the eval side is the same with
or without them.

Contract: `generate_real_project(rng, base, heldout, need, sources)` is a pure function of the rng
state, the installed Python's sources and the source roots' files, like generate_project; it returns the same Project type, whose Funcs
carry their own spec (bugs, tests, explain, keywords, names, params), so the families run on it
unchanged where a family's needs are met (docstrings for explain and stubs; recorded bugs for
fix_bug).
"""
from __future__ import annotations

import ast
import functools
import itertools
import os
import random
import re
import shutil
import sys

from tasks.names import NOUNS, SUFFIXES
from tasks.projects import Func, Project, commit_history
from tasks.real_packages import package_modules
from tasks.real_source import RealFunc, candidates, harvest, module_constants, stdlib_modules, trusted

# top-level standard-library packages whose functions only evals use (about 40% of the harvest)
EVAL_PACKAGES = frozenset("""email http encodings colorsys ntpath posixpath nturl2path token xml
    calendar json re html tomllib glob string""".split())
# verbs whose synonym makes a rename a person would ask for (first word of a snake_case name)
SYNONYMS = {"get": "fetch", "parse": "read", "format": "render", "make": "build", "split": "divide",
            "join": "combine", "encode": "pack", "decode": "unpack", "quote": "escape",
            "unquote": "unescape", "escape": "quote", "is": "check", "has": "holds", "find": "locate",
            "read": "load", "write": "save", "to": "as", "normalize": "canonical", "check": "verify",
            "convert": "transform", "count": "tally", "compute": "calc", "update": "refresh",
            "add": "append", "header": "head", "body": "main", "safe": "guarded", "strip": "trim",
            "split_": "cut", "url": "link", "expand": "widen", "filter": "select", "wrap": "fold"}
STOPWORDS = frozenset("""return returns the a an of to and or in for with from that this is are be
    by as on at it its into given which when if not each all any string value""".split())


def split_of(module: str) -> str:
    """'eval' or 'train' for a dotted source module (by its top-level package)."""
    return "eval" if module.split(".")[0] in EVAL_PACKAGES else "train"


@functools.lru_cache(maxsize=4)
def package_pool(sources: tuple[str, ...]) -> tuple[dict[str, str], dict[str, int]]:
    """(dotted module -> path, {reason: top-level packages skipped}) of the source roots' modules
    (tasks/real_packages.py), none under a standard-library or EVAL_PACKAGES name (cached)."""
    reserved = {m.split(".")[0]: "standard-library name" for m in stdlib_modules()}
    reserved.update(dict.fromkeys(sys.stdlib_module_names, "standard-library name"))
    reserved.update(dict.fromkeys(EVAL_PACKAGES, "eval package"))
    return package_modules(sources, reserved)


def module_pool(sources: tuple[str, ...] = ()) -> dict[str, str]:
    """dotted module -> path of every module the real world draws from: the standard library's,
    then the source roots' (package_pool), in a stable order (the one definition of the pool)."""
    return stdlib_modules() if not sources else {**stdlib_modules(), **package_pool(sources)[0]}


@functools.lru_cache(maxsize=4)
def real_modules(split: str, sources: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The source modules of `split` that have a candidate function (harvested lazily later); the
    eval split never draws from `sources`."""
    pool = module_pool(sources if split == "train" else ())
    return tuple(m for m, path in pool.items() if split_of(m) == split and candidates(path))


def pool_stats(sources: tuple[str, ...]) -> dict:
    """What the `sources` roots add to the training side: modules, top-level packages, modules
    with a candidate function, and the top-level packages skipped by reason (it also warms the
    caches a forked worker inherits)."""
    modules, skipped = package_pool(sources)
    added = len(real_modules("train", sources)) - len(real_modules("train"))
    return {"modules": len(modules), "packages": len({m.split(".")[0] for m in modules}),
            "with_candidates": added, "skipped": dict(sorted(skipped.items()))}


def module_functions(module: str, sources: tuple[str, ...] = ()) -> tuple[RealFunc, ...]:
    """The harvested functions of a dotted source module (tasks.real_source.harvest, cached)."""
    return harvest(module_pool(sources)[module], module)


def third_person(doc: str) -> str:
    """'Return the x.' -> 'returns the x.' (a docstring's first line as an explanation)."""
    first, _, rest = doc.partition(" ")
    verb = first.lower()
    if not verb.endswith("s") or verb.endswith("ss"):  # "Returns" stays, "Pass" becomes "passes"
        if re.search(r"(s|sh|ch|x|z)$", verb):
            verb += "es"
        elif re.search(r"[^aeiou]y$", verb):
            verb = verb[:-1] + "ies"
        else:
            verb += "s"
    text = f"{verb} {rest}".strip()
    return text if text.endswith(".") else text + "."


def keywords(doc: str, name: str) -> list[str]:
    """Up to four content words of a docstring line (not the name's own words): what an
    explanation must touch."""
    own = set(name.lower().split("_"))
    words = [w for w in re.findall(r"[a-z]{4,}", doc.lower()) if w not in STOPWORDS and w not in own]
    return sorted(set(words), key=lambda w: (-len(w), w))[:4]


def rename_targets(name: str) -> list[str]:
    """New names a person might ask for: a synonym for the first word, else a suffix."""
    first, sep, rest = name.partition("_")
    out = [f"{SYNONYMS[first]}{sep}{rest}"] if first in SYNONYMS else []
    return out + [f"{name}_impl", f"{name}_helper"]


def _split_def(source: str) -> tuple[str, str, list[str]] | None:
    """A def's (header lines, docstring lines, body lines); None when its layout is unusual
    (docstring on the def line, a body not indented by 4 spaces)."""
    fn = ast.parse(source).body[0]
    lines = source.split("\n")
    first = fn.body[0]
    has_doc = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)
    head_end = first.lineno - 1
    if head_end < 1 or (has_doc and len(fn.body) < 2):
        return None
    body_start = first.end_lineno if has_doc else head_end
    body = lines[body_start:]
    if any(b and not b.startswith("    ") for b in body):
        return None
    return "\n".join(lines[:head_end]), "\n".join(lines[head_end:body_start]) if has_doc else "", body


def usable_doc(f: RealFunc) -> str:
    """f's docstring line when it explains f in words (not a signature like `capwords(s [,sep])
    -> string`, and with a content word to check an explanation by), else ""."""
    doc = f.doc
    if not doc or not doc[0].isalpha() or f"{f.name}(" in doc or "->" in doc or not keywords(doc, f.name):
        return ""
    return doc


def _spec(f: RealFunc) -> dict:
    doc = usable_doc(f)
    return {"bugs": list(f.bugs), "helper_bugs": list(f.helper_bugs), "tests": list(f.asserts),
            "explain": third_person(doc) if doc else "",
            "keywords": keywords(doc, f.name), "names": rename_targets(f.name), "params": f.params, "doc": doc}


def generate_real_project(rng: random.Random, base: str, heldout: bool = False, need=None,
                          sources: tuple[str, ...] = ()) -> Project:
    """A project of 2-3 modules of real code from the split's source modules (training: the
    standard library's and those of the `sources` roots), under base/<name> (removed first),
    committed to git. With `need` (a RealFunc predicate), the first module is one with such a
    function and that function is among its picks (the same rng draws otherwise)."""
    sources = () if heldout else sources
    modules = list(real_modules("eval" if heldout else "train", sources))
    name = rng.choice(NOUNS) + rng.choice(SUFFIXES)
    root = os.path.join(base, name)
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    p = Project(name, root, name, [], {}, {}, {}, heldout=heldout)
    picked: list[tuple[str, list[RealFunc]]] = []
    taken: set[str] = set()  # one function of a name per project
    want = rng.choice([2, 3])
    order = rng.sample(modules, len(modules))
    if need is not None:  # those with a needed function first, found lazily (each costs a harvest)
        has = lambda m: any(need(f) and _split_def(f.source) for f in module_functions(m, sources))  # noqa: E731
        order = itertools.chain((m for m in order if has(m)), (m for m in order if not has(m)))
    for module in order:
        usable = [f for f in module_functions(module, sources) if f.name not in taken and _split_def(f.source)]
        if usable:
            funcs = rng.sample(usable, min(len(usable), rng.randint(2, 4)))
            needed = [f for f in usable if need is not None and not picked and need(f)]
            if needed and not any(f in needed for f in funcs):
                funcs[0] = rng.choice(needed)
            if needed and not trusted(module_pool(sources)[module]):
                # a package's helpers are public functions: one picked as a task's own would not
                # be a helper (the standard library's are private, and its projects unchanged)
                helpers = {b[0] for f in funcs if f in needed for b in f.helper_bugs}
                funcs = [f for f in funcs if f.name not in helpers]
                taken.update(helpers)
            picked.append((module, funcs))
            taken.update(f.name for f in picked[-1][1])
        if len(picked) == want:
            break
    if len(picked) < 2:
        raise ValueError("fewer than two usable source modules")
    files = set()
    for module, funcs in picked:
        stem = module.split(".")[-1].lstrip("_") or "core"
        stem = stem if stem not in files else module.replace(".", "_")
        files.add(stem)
        _write_module(p, module, f"{name}/{stem}.py", f"tests/test_{stem}.py", funcs, rng, sources)
    origin = _origin([m for m, _ in picked])
    p.write(f"{name}/__init__.py", f'"""{name}: helpers adapted from {origin}."""\n')
    p.write(".gitignore", "__pycache__/\n.pytest_cache/\n*.pyc\n*.egg-info/\n")
    listed = ", ".join(f"`{m}`" for m, _ in picked)
    layout = [f"- `{mod}`: " + ", ".join(f"`{f.name}`" for f in p.functions.values() if f.file == mod)
              for mod in p.modules]
    p.write("README.md", "\n".join([f"# {name}", "", f"Small helpers adapted from {origin} "
                                    f"({listed}).", "", "## Layout", "", *layout, "", "## Tests", "",
                                    f"    {p.test_cmd}", ""]))
    p.write("pyproject.toml", f'[project]\nname = "{name}"\nversion = "0.1.0"\n'
                              f'description = "Small helpers adapted from {origin.replace("Python standard", "standard")}"\n'
                              f'requires-python = ">=3.11"\n')
    commit_history(p, rng)
    return p


def _origin(modules: list[str]) -> str:
    """Where a project's code comes from, in words: 'the Python standard library', or the
    packages' names ('`six` and the Python standard library')."""
    packages = sorted({m.split(".")[0] for m in modules if m not in stdlib_modules()})
    if not packages:
        return "the Python standard library"
    named = ", ".join(f"`{n}`" for n in packages)
    return named + (" and the Python standard library" if len(packages) < len(modules) else "")


def _from(module: str) -> str:
    """'the standard library's `m`' or '`pkg`'s `m`': where one module's code comes from."""
    return f"the standard library's `{module}`" if module in stdlib_modules() else f"`{module.split('.')[0]}`'s `{module}`"


def _write_module(p: Project, source_module: str, mod: str, test_file: str, funcs: list[RealFunc],
                  rng: random.Random, sources: tuple[str, ...]) -> None:
    """Write one module (every picked function with the helpers it needs, and up to three of the
    source module's own int constants, in the source file's order) and its recorded tests; fill
    p.functions and p.classes."""
    imports = sorted({i for f in funcs for i in f.imports})
    parts = {part for f in funcs for part in f.parts}
    consts = [c for c in module_constants(module_pool(sources)[source_module]) if c not in parts]
    parts = sorted(parts | set(rng.sample(consts, min(len(consts), rng.randint(1, 3)))))
    title = f'"""{source_module.split(".")[-1].replace("_", " ").strip().capitalize()} helpers, from {_from(source_module)}."""'
    text = "\n\n\n".join([title] + (["\n".join(imports)] if imports else []) + [t for _, t in parts]) + "\n"
    p.modules.append(mod)
    p.write(mod, text)
    tree = ast.parse(text)
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    by_name = {f.name: f for f in module_functions(source_module, sources)}
    if not trusted(module_pool(sources)[source_module]):  # a package's helpers are public: only picks
        by_name = {f.name: f for f in funcs}  # are tasks' functions (the standard library's unchanged)
    names = []
    for fname, node in defs.items():
        real = by_name.get(fname)
        if isinstance(node, ast.ClassDef):
            p.classes[fname] = (mod, node.lineno, (ast.get_docstring(node) or "").split("\n")[0])
            continue
        parts_of = _split_def(real.source) if real and not fname.startswith("_") else None
        if parts_of is None or fname in p.functions:
            continue
        head, doc_block, body = parts_of
        p.functions[fname] = Func(fname, "real", mod[:-3], mod, node.lineno, f"{fname}({real.params})", usable_doc(real),
                                  body, test_file, f"test_{fname}", spec=_spec(real), head=head,
                                  doc_block=doc_block)
        p.tests[fname] = test_file
        names.append(fname)
    dotted = mod[:-3].replace("/", ".")
    lines = [f"from {dotted} import {', '.join(names)}"]
    for fname in names:
        lines += ["", "", f"def test_{fname}():"] + ["    " + t.format(name=fname) for t in p.functions[fname].spec["tests"]]
    p.write(test_file, "\n".join(lines) + "\n")
