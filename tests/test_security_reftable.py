"""/undo's refs in a reftable repository (`git init --ref-format=reftable`, git >= 2.45), whose
refs live in one table stack, not in files the sandbox could mount read-only: a command in the
sandbox that deletes or re-points them, then prunes, must not take the user's /undo away
(tools/sandbox_paths.pin_reftable_undo: the refs are put back after the call, a kept pack
mounted read-only holds their objects). Each case executes the attack through the sandboxed Bash
tool on a real repository with a real snapshot turn, then checks every undo ref, its objects and
a working undo. Where this git has no reftable the same mechanism runs on a files repository
with the read-only refs/nanocode mount turned off (so only the reftable route protects it), and
a control shows the attack does the damage without it."""
import subprocess

import pytest

import tools.sandbox_paths as sp
from test_security_escapes import (UNDO_ATTACKS, _git, _undo_store_intact, needs_sandbox, proj,  # noqa: F401
                                   run, turn)


def _has_reftable(tmp_path) -> str | None:
    """None when this git makes reftable repositories, else why not."""
    r = subprocess.run(["git", "init", "-q", "--ref-format=reftable", str(tmp_path / "probe")],
                       capture_output=True, text=True)
    if r.returncode == 0:
        return None
    version = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip()
    return f"{version} cannot make a reftable repository (needs git >= 2.45)"


@pytest.fixture
def reftable_turn(tmp_path, monkeypatch):
    """`turn`'s repository and snapshot turn, in the reftable format."""
    why = _has_reftable(tmp_path)
    if why:
        pytest.skip(why)
    monkeypatch.setenv("GIT_DEFAULT_REF_FORMAT", "reftable")  # the `proj` fixture's `git init`
    return None


REFTABLE_ATTACKS = [
    "git update-ref -d refs/nanocode/turns/{id}-before",
    "git for-each-ref --format='delete %(refname)' refs/nanocode | git update-ref --stdin",
    "git for-each-ref --format='delete %(refname)' refs/nanocode | git update-ref --stdin; "
    "git reflog expire --expire=now --all && git gc -q --prune=now",
    "git pack-refs --all; git update-ref -d refs/nanocode/turns/{id}-after; git repack -q -a -d; git prune --expire=now",
    "git update-ref refs/nanocode/turns/{id}-before HEAD~0^{{tree}}",
    "rm -f .git/objects/pack/*; git update-ref -d refs/nanocode/turns/{id}-before; git gc -q --prune=now",
]


@needs_sandbox
@pytest.mark.parametrize("command", REFTABLE_ATTACKS)
def test_reftable_undo_refs_survive_the_command(reftable_turn, request, command):
    proj, snaps, t, refs = request.getfixturevalue("turn")
    assert sp.uses_reftable(str(proj / ".git"))
    out = run(proj, command.format(id=t.id))
    _undo_store_intact(proj, snaps, t, refs)
    assert "sandbox: undid" in out or "update-ref -d" not in command  # the command is told


@pytest.fixture
def files_as_reftable(monkeypatch):
    """A files repository protected only the way a reftable one is: no read-only refs/nanocode."""
    monkeypatch.setattr(sp, "UNDO_STORE", ("nanocode",))
    monkeypatch.setattr(sp, "uses_reftable", lambda git: True)


@needs_sandbox
def test_control_without_the_pin_the_refs_and_objects_go(turn, monkeypatch):
    proj, _, t, refs = turn
    monkeypatch.setattr(sp, "UNDO_STORE", ("nanocode",))
    run(proj, REFTABLE_ATTACKS[2].format(id=t.id))
    assert not [r for r in refs if _git(proj, "rev-parse", "-q", "--verify", r, check=False).returncode == 0]
    assert [s for s in refs.values() if _git(proj, "cat-file", "-e", s, check=False).returncode]


@needs_sandbox
@pytest.mark.parametrize("command", REFTABLE_ATTACKS + UNDO_ATTACKS)
def test_the_reftable_route_protects_a_files_repository_too(turn, files_as_reftable, command):
    proj, snaps, t, refs = turn
    run(proj, command.format(id=t.id))
    _undo_store_intact(proj, snaps, t, refs)
    kept = [p for p in (proj / ".git" / "objects" / "pack").iterdir() if p.suffix == ".keep"]
    assert len(kept) == 1 and kept[0].read_text().startswith(sp.KEEP_MARK)
    run(proj, "true")  # a second call packs nothing new
    assert len([p for p in (proj / ".git" / "objects" / "pack").iterdir() if p.suffix == ".keep"]) == 1
