"""Projects made of real code: a package whose modules are excerpts of standard-library modules
(tasks/real_source.py harvests them: real functions with the helpers and constants they need,
recorded tests, bugs those tests catch), laid out as people lay out a small project (the package,
tests/, README.md, pyproject.toml, .gitignore, a 2-3 commit history), so the names a request
carries are real ones: `header_length`, `quoteattr`, `email/quoprimime.py`.

The split is by source module, decided by its top-level package (so `email.utils` and
`email.quoprimime` fall on one side) and recorded in EVAL_PACKAGES: evals draw only those;
training draws every other package, so no function an eval asks about was ever trained on.
posixpath sits with ntpath (the same function names) on the eval side.

Contract: `generate_real_project(rng, base, heldout)` is a pure function of the rng state and the
installed Python's sources, like generate_project; it returns the same Project type, whose Funcs
carry their own spec (bugs, tests, explain, keywords, names, params), so the families run on it
unchanged where a family's needs are met (docstrings for explain and stubs; recorded bugs for
fix_bug).
"""
from __future__ import annotations

import ast
import functools
import os
import random
import re
import shutil

from tasks.names import NOUNS, SUFFIXES
from tasks.projects import Func, Project, commit_history
from tasks.real_source import RealFunc, candidates, harvest, module_constants, stdlib_modules

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


@functools.lru_cache(maxsize=2)
def real_modules(split: str) -> tuple[str, ...]:
    """The source modules of `split` that have a candidate function (harvested lazily later)."""
    return tuple(m for m, path in stdlib_modules().items() if split_of(m) == split and candidates(path))


def module_functions(module: str) -> tuple[RealFunc, ...]:
    """The harvested functions of a dotted source module (tasks.real_source.harvest, cached)."""
    return harvest(stdlib_modules()[module])


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


def generate_real_project(rng: random.Random, base: str, heldout: bool = False, need=None) -> Project:
    """A project of 2-3 modules of real code from the split's source modules, under base/<name>
    (removed first), committed to git. With `need` (a RealFunc predicate), the first module is
    one with such a function and that function is among its picks (the same rng draws otherwise)."""
    modules = list(real_modules("eval" if heldout else "train"))
    name = rng.choice(NOUNS) + rng.choice(SUFFIXES)
    root = os.path.join(base, name)
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    p = Project(name, root, name, [], {}, {}, {}, heldout=heldout)
    picked: list[tuple[str, list[RealFunc]]] = []
    taken: set[str] = set()  # one function of a name per project
    want = rng.choice([2, 3])
    order = rng.sample(modules, len(modules))
    if need is not None:
        order.sort(key=lambda m: not any(need(f) and _split_def(f.source) for f in module_functions(m)))
    for module in order:
        usable = [f for f in module_functions(module) if f.name not in taken and _split_def(f.source)]
        if usable:
            funcs = rng.sample(usable, min(len(usable), rng.randint(2, 4)))
            needed = [f for f in usable if need is not None and not picked and need(f)]
            if needed and not any(f in needed for f in funcs):
                funcs[0] = rng.choice(needed)
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
        _write_module(p, module, f"{name}/{stem}.py", f"tests/test_{stem}.py", funcs, rng)
    p.write(f"{name}/__init__.py", f'"""{name}: helpers adapted from the Python standard library."""\n')
    p.write(".gitignore", "__pycache__/\n.pytest_cache/\n*.pyc\n*.egg-info/\n")
    sources = ", ".join(f"`{m}`" for m, _ in picked)
    layout = [f"- `{mod}`: " + ", ".join(f"`{f.name}`" for f in p.functions.values() if f.file == mod)
              for mod in p.modules]
    p.write("README.md", "\n".join([f"# {name}", "", f"Small helpers adapted from the Python standard library "
                                    f"({sources}).", "", "## Layout", "", *layout, "", "## Tests", "",
                                    f"    {p.test_cmd}", ""]))
    p.write("pyproject.toml", f'[project]\nname = "{name}"\nversion = "0.1.0"\n'
                              f'description = "Small helpers adapted from the standard library"\n'
                              f'requires-python = ">=3.11"\n')
    commit_history(p, rng)
    return p


def _write_module(p: Project, source_module: str, mod: str, test_file: str, funcs: list[RealFunc],
                  rng: random.Random) -> None:
    """Write one module (every picked function with the helpers it needs, and up to three of the
    source module's own int constants, in the source file's order) and its recorded tests; fill
    p.functions and p.classes."""
    imports = sorted({i for f in funcs for i in f.imports})
    parts = {part for f in funcs for part in f.parts}
    consts = [c for c in module_constants(stdlib_modules()[source_module]) if c not in parts]
    parts = sorted(parts | set(rng.sample(consts, min(len(consts), rng.randint(1, 3)))))
    title = f'"""{source_module.split(".")[-1].replace("_", " ").strip().capitalize()} helpers, from the standard library\'s `{source_module}`."""'
    text = "\n\n\n".join([title] + (["\n".join(imports)] if imports else []) + [t for _, t in parts]) + "\n"
    p.modules.append(mod)
    p.write(mod, text)
    tree = ast.parse(text)
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    by_name = {f.name: f for f in module_functions(source_module)}
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
