"""The real-code task world beyond the standard library: package roots (folders, wheels, sdists)
listed and unpacked, their functions harvested under the untrusted rules (nothing of theirs ever
writes a file), training-side only (the eval split is the same task for task), deterministic, and
named by `train synth --real-source`."""
import io
import os
import random
import re
import tarfile
import zipfile

import pytest

from tasks import make_task, snapshot
from tasks.real_projects import generate_real_project, module_functions, module_pool, package_pool, real_modules
from tasks.real_source import _run_child, candidates, harvest
from train.cli import main as cli_main
from train.corpus import DataError
from train.oracle_audit import audit
from train.real_sources import resolve_real_sources
from train.synth import generate_one

MODULE = '''"""Text helpers number {i}."""
import re


WIDTH_{i} = 8


def _wrap_{i}(text):
    return "[" + text + "]"


def framed_{i}(text):
    """Return the text wrapped in square brackets and upper-cased."""
    return _wrap_{i}(text).upper()


def squash_{i}(text):
    """Collapse every run of spaces in the text to one dash."""
    return re.sub(" +", "-", text)


def pad_{i}(text, width):
    """Pad the text on the left with dots up to the given width."""
    return "." * (width - len(text)) + text
'''


def write_package(root, name="tinytext", modules=40):
    """A package of `modules` modules of three liftable functions each, under root/name."""
    pkg = root / name
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""Tiny text helpers."""\n')
    for i in range(modules):
        (pkg / f"text{i}.py").write_text(MODULE.format(i=i))
    return str(root)


@pytest.fixture(scope="module")
def pkg_root(tmp_path_factory):
    return write_package(tmp_path_factory.mktemp("site"))


def test_a_root_lists_its_packages_and_skips_reserved_names_with_reasons(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    write_package(first, "tinytext", modules=1)
    (first / "tinytext" / "tests").mkdir()
    (first / "tinytext" / "tests" / "test_x.py").write_text("def test(): pass\n")
    for name in ("json", "collections"):  # an eval package; a standard-library one
        (first / name).mkdir()
        (first / name / "__init__.py").write_text("def loads(s):\n    return s\n")
    (first / "re.py").write_text("X = 1\n")  # the eval side's `re`: an eval package
    (first / "setup.py").write_text("X = 1\n")
    (first / "solo.py").write_text("def f(x):\n    return x\n")
    (first / "my-dist.dist-info").mkdir()
    write_package(second, "tinytext", modules=2)  # the first root's tinytext wins
    modules, skipped = package_pool((str(first), str(second)))
    assert list(modules) == ["solo", "tinytext", "tinytext.text0"]
    assert modules["tinytext.text0"] == str(first / "tinytext" / "text0.py")
    assert skipped == {"eval package": 2, "standard-library name": 1, "build or test script": 1, "duplicate": 1}


def test_the_eval_side_is_the_same_task_for_task_with_package_roots(pkg_root, tmp_path):
    sources = (pkg_root,)
    assert real_modules("eval", sources) == real_modules("eval")
    assert set(real_modules("train", sources)) - set(real_modules("train")) == {
        f"tinytext.text{i}" for i in range(40)}
    for family, seed in [("find_definition", 3), ("fix_bug", 5)]:
        plain = make_task(family, seed, True, str(tmp_path / "plain"), world="real")
        with_roots = make_task(family, seed, True, str(tmp_path / "roots"), world="real", sources=sources)
        assert plain.prompt == with_roots.prompt and snapshot(plain.root) == snapshot(with_roots.root)


def test_roots_that_add_no_module_leave_training_projects_unchanged(tmp_path):
    (tmp_path / "site" / "json").mkdir(parents=True)  # skipped: every training draw is as without roots
    (tmp_path / "site" / "json" / "__init__.py").write_text("def loads(s):\n    return s\n")
    for seed in range(2):
        a = generate_real_project(random.Random(seed), str(tmp_path / "a"))
        b = generate_real_project(random.Random(seed), str(tmp_path / "b"), sources=(str(tmp_path / "site"),))
        assert snapshot(a.root) == snapshot(b.root)


def test_package_functions_reach_training_projects_deterministically(pkg_root, tmp_path):
    sources = (pkg_root,)
    mixed = []
    for seed in range(4):
        p = generate_real_project(random.Random(seed), str(tmp_path / "a" / str(seed)), sources=sources)
        if any("`tinytext`'s `tinytext.text" in open(os.path.join(p.root, m)).readline() for m in p.modules):
            mixed.append((seed, p))
    assert mixed, "no project drew a package module"
    seed, p = mixed[0]
    assert "`tinytext`" in snapshot(p.root)["README.md"]
    again = generate_real_project(random.Random(seed), str(tmp_path / "b" / str(seed)), sources=sources)
    assert snapshot(again.root) == snapshot(p.root)
    funcs = module_functions("tinytext.text0", sources)
    assert {f.name for f in funcs} == {"framed_0", "squash_0", "pad_0"} and any(f.bugs for f in funcs)
    assert any(f.helper_bugs for f in funcs)  # _wrap_0: fix_bug_across can use it


HOSTILE = '''import codecs
import re

open(MARKER + "-import", "w").write("ran on import")


def shout(text):
    """Return the text in upper case with an exclamation mark."""
    return text.upper() + "!"


def spaced(text):
    """Return the text with its spaces doubled."""
    return re.sub(" ", "  ", text)


def escape(text):
    """Reach os.system through the class tree."""
    for c in ().__class__.__base__.__subclasses__():
        if c.__name__ == "_wrap_close":
            c.__init__.__globals__["system"]("touch " + MARKER + "-escape")
    return text


def sneak(text):
    """Write a file through codecs, a module the rules call pure."""
    codecs.open(MARKER + "-codecs", "w").write(text)
    return text


def by_name(text):
    """Look an attribute up by a computed name."""
    return getattr(text, "up" + "per")()
'''


def test_a_hostile_package_is_harvested_without_any_of_its_code_writing_a_file(tmp_path):
    marker = str(tmp_path / "pwned")
    pkg = tmp_path / "site" / "hostile"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"open({marker!r}, 'w').write('ran on import')\n")
    (pkg / "text.py").write_text(f"MARKER = {marker!r}\n" + HOSTILE)
    modules, _ = package_pool((str(tmp_path / "site"),))
    assert [c.fn.name for c in candidates(modules["hostile.text"])] == ["shout", "spaced"]
    funcs = module_functions("hostile.text", (str(tmp_path / "site"),))
    assert {f.name for f in funcs} == {"shout", "spaced"} and all(len(f.asserts) >= 2 for f in funcs)
    assert not list(tmp_path.glob("pwned*")), "package code wrote a file"


def test_the_untrusted_child_denies_writes_that_slip_past_the_rules(tmp_path):
    attacks = [f'import codecs\ndef f(x):\n    codecs.open({str(tmp_path / "a")!r}, "w").write(x)\n    return x\n',
               'def f(x):\n    for c in ().__class__.__base__.__subclasses__():\n'
               '        if c.__name__ == "_wrap_close":\n'
               f'            c.__init__.__globals__["system"]("touch {tmp_path / "b"}")\n    return x\n']
    jobs = [{"excerpt": a, "calls": ["f('x')"], "mutants": [], "expect": []} for a in attacks]
    assert _run_child(jobs, 1, untrusted=True) == [{"recorded": [], "caught": []}] * 2
    assert not list(tmp_path.iterdir())
    _run_child(jobs, 1)  # the same jobs as trusted code: the attacks are real
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]
    ok = [{"excerpt": "import re\ndef f(x):\n    return re.sub('x', 'y', x)\n", "calls": ["f('x')"], "mutants": [],
           "expect": []}]
    assert _run_child(ok, 1, untrusted=True)[0]["recorded"] == [["f('x')", "'y'"]]


def _wheel(path, members):
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in members.items():
            zf.writestr(name, text)
    return path


def test_archives_unpack_once_into_the_cache_as_import_roots(tmp_path):
    text = MODULE.format(i=0)
    wheel = _wheel(tmp_path / "tinytext-1.0-py3-none-any.whl", {
        "tinytext/__init__.py": "", "tinytext/text0.py": text,
        "tinytext-1.0.dist-info/METADATA": "Name: tinytext\n", "../../escaped.py": "X = 1\n",
        "/tmp/abs_escaped_realpkgs.py": "X = 1\n"})
    sdist = tmp_path / "other-2.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tf:
        for name, data in {"other-2.0/src/other/__init__.py": b"", "other-2.0/src/other/core.py": text.encode(),
                           "other-2.0/setup.py": b"X = 1\n"}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    cache = tmp_path / "work" / "real-sources"
    roots = resolve_real_sources([str(wheel), str(sdist)], str(cache))
    assert [os.path.dirname(r) for r in roots] == [str(cache)] * 2
    assert sorted(os.listdir(roots[0])) == ["tinytext"] and os.path.isfile(os.path.join(roots[0], "tinytext/text0.py"))
    assert sorted(os.listdir(roots[1])) == ["other", "setup.py"]
    assert not (tmp_path / "escaped.py").exists() and not os.path.exists("/tmp/abs_escaped_realpkgs.py")
    assert sorted(os.listdir(cache)) == sorted(os.path.basename(r) for r in roots)  # no temporary folder left
    before = os.stat(roots[0]).st_mtime_ns
    assert resolve_real_sources([str(wheel)], str(cache)) == roots[:1] and os.stat(roots[0]).st_mtime_ns == before
    modules, skipped = package_pool(roots)
    assert {"tinytext.text0", "other.core"} <= set(modules) and skipped == {"build or test script": 1}
    assert module_pool(roots)["other.core"].startswith(str(cache))
    assert {f.name for f in harvest(modules["other.core"], "other.core")} == {"framed_0", "squash_0", "pad_0"}


def test_a_bad_real_source_is_named_with_the_fix(tmp_path, capsys):
    with pytest.raises(DataError, match="--real-source .*nope: not a folder or a package archive.*site-packages"):
        resolve_real_sources([str(tmp_path / "nope")], str(tmp_path / "cache"))
    base = ["synth", "--out", str(tmp_path / "out"), "--workdir", str(tmp_path / "work"), "--n", "1", "--n-eval", "0"]
    assert cli_main(base + ["--real-ratio", "1", "--real-source", str(tmp_path / "nope")]) == 2
    assert "nope: not a folder or a package archive" in capsys.readouterr().out
    with pytest.raises(DataError, match="holds the work folder"):
        resolve_real_sources([str(tmp_path)], str(tmp_path / "work" / "real-sources"))
    (tmp_path / "empty").mkdir()
    assert cli_main(base + ["--real-ratio", "1", "--real-source", str(tmp_path / "empty")]) == 2
    assert "no liftable pure-Python function" in capsys.readouterr().out
    assert cli_main(base + ["--real-source", str(tmp_path / "empty")]) == 2
    assert "--real-source needs --real-ratio above 0" in capsys.readouterr().out


def test_synth_jobs_carry_the_roots_to_the_real_world(pkg_root, tmp_path):
    rows = [generate_one((0, i, ["find_definition"], 0.0, 0.0, str(tmp_path), 1.0, (pkg_root,)))[0] for i in range(4)]
    assert {r["world"] for r in rows} == {"real"}
    text = "".join(m["content"] for r in rows for m in r["messages"])
    assert re.search(r"\b(framed|squash|pad)_\d+\b", text), "no conversation about a package function"


HELPED = '''"""Count helpers number {i}."""


def spread_{i}(count):
    """Return the count scaled by three plus one."""
    return count * 3 + 1


def tally_{i}(count):
    """Return the spread of the count, plus the count itself."""
    return spread_{i}(count) + count
'''


def test_fix_bug_across_builds_where_a_packages_helper_is_public(tmp_path):
    """A package's helpers are public functions, harvested in their own right (the standard
    library's are private): a fix_bug_across project from such a package used to track the helper
    as a task's function too, so no helper qualified and the task could not be built
    (IndexError on every project). Only the picked functions are tasks' now; and the oracle's
    path to the helper is one the conversation showed."""
    pkg = tmp_path / "site" / "tinyhelp"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""Tiny label helpers."""\n')
    for i in range(60):
        (pkg / f"labels{i}.py").write_text(HELPED.format(i=i))
    sources = (str(tmp_path / "site"),)
    assert any(f.helper_bugs for f in module_functions("tinyhelp.labels0", sources))
    origins = []
    for seed in range(4):
        task = make_task("fix_bug_across", 500 + seed, False, str(tmp_path / "projects"), "real", sources)
        origins.append("`tinyhelp`" in open(os.path.join(task.root, "README.md")).read())
        conv = task.rollout()
        assert task.check(task.root, conv["messages"][-1]["content"])
        # the helper's path is one the conversation showed: a wrong value fails no line of the
        # helper's file, so the oracle Greps for its def before reading it
        assert audit([conv])["counts"]["path"][0] == audit([conv])["counts"]["path"][1], conv["messages"]
    assert any(origins)  # the package's modules were among the projects
