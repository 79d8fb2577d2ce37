"""Adversarial tests of path containment: the real tools (tools.dispatch.run_tool)
and the real Policy.check in real temp git repositories, in every mode; each test checks the damage
on disk (the outside sentinel unchanged, nothing created under .git/hooks ...), not only the text.

The race tests run a separate process that swaps a path component between a real directory (or
file) and a symlink to the outside while thousands of Reads/Edits run: the secret must never be
read and nothing outside may be written."""
import os
import subprocess

import pytest

from nanocode.protocol import MODES
from race_helpers import flipper, race_target  # noqa: F401 - flipper is a fixture
from tools.files import read_memory
from tools.dispatch import run_tool
from tools.files import MAX_READ_BYTES, MAX_READ_LINES
from tools.permissions import Policy
from tools.workspace import protected, trust_problem

SECRET = "TOP-SECRET-CONTENT"


@pytest.fixture
def repo(tmp_path, monkeypatch):
    monkeypatch.delenv("NANOCODE_HOME", raising=False)
    proj, out, home = tmp_path / "proj", tmp_path / "outside", tmp_path / "home"
    for d in (proj, out, home):
        d.mkdir()
    subprocess.run(["git", "init", "-q", str(proj)], check=True)
    (proj / "a.py").write_text("x = 1\n")
    (out / "secret.txt").write_text(SECRET + "\n")
    return proj


def outside_state(proj):
    out = proj.parent / "outside"
    return {n: (os.lstat(out / n).st_ino, (out / n).read_bytes()) for n in sorted(os.listdir(out))}


def gate(policy, name, args):
    """What the agent does: run the call only when the policy allows it."""
    d = policy.check(name, args)
    return d, (run_tool(policy.root, name, args) if d.action == "allow" else None)


# ------------------------------------------------------------------ item 1: symlink races

@pytest.mark.parametrize("what", ["dir", "file"])
def test_read_race_never_leaks_the_outside_secret(repo, flipper, what):
    name, target, path = race_target(repo, what)
    flipper(name, target)
    results = [run_tool(repo, "Read", {"file_path": path}) for _ in range(1500)]
    assert not [r for r in results if SECRET in r]
    assert any(r == "    1→safe" for r in results)  # the race really ran against working reads


@pytest.mark.parametrize("what", ["dir", "file"])
@pytest.mark.parametrize("engine", ["rg", "python"])
def test_grep_race_never_leaks_the_outside_secret(repo, flipper, what, engine):
    """Grep checks each file, then searches the descriptor it opened there (rg reads /dev/fd/N):
    a swap between the two finds the checked file or nothing, never the outside one."""
    from tools import grep as grep_mod
    if engine == "rg" and grep_mod._rg_path() is None:
        pytest.skip("rg not installed")
    name, target, path = race_target(repo, what)
    flipper(name, target)
    results = [grep_mod.grep(repo, {"pattern": "safe|" + SECRET, "path": path.split("/")[0]},
                             use_rg=engine == "rg") for _ in range(300)]
    assert not [r for r in results if SECRET in r]
    assert any(r.endswith(":1:safe") for r in results)  # the race ran against working searches


@pytest.mark.parametrize("kind", ["edit", "create"])
def test_edit_race_never_writes_outside(repo, flipper, kind):
    (repo / "d").mkdir()
    (repo / "d" / "f.txt").write_text("value\n")
    (repo.parent / "outside" / "f.txt").write_text("value\n")
    before = outside_state(repo)
    swapper = flipper(repo / "d", repo.parent / "outside")
    ok = 0
    for i in range(300):
        args = ({"file_path": "d/f.txt", "old_string": "value", "new_string": "value"} if kind == "edit" else
                {"file_path": f"d/new{i}.txt", "new_string": "x\n"})
        ok += not run_tool(repo, "Edit", args).startswith("error:")
    swapper.kill()  # stopped first: the checks below must not race it
    swapper.wait()
    assert outside_state(repo) == before  # same names, same inodes (no rename onto them), same bytes
    assert ok > 0
    real = next(p for p in (repo / "d", repo / "d.link", repo / "d.real") if p.is_dir() and not p.is_symlink())
    assert not [n for n in os.listdir(real) if n.startswith(".nanocode-edit-")]  # temp files cleaned up


@pytest.mark.parametrize("path", ["link.txt", "dlink/secret.txt", "../outside/secret.txt", "{out}/secret.txt",
                                  "d/../../outside/secret.txt", "dangling/secret.txt"])
def test_reads_and_edits_through_outside_links_are_refused(repo, path):
    out = repo.parent / "outside"
    (repo / "link.txt").symlink_to(out / "secret.txt")
    (repo / "dlink").symlink_to(out)
    (repo / "d").mkdir()
    (repo / "dangling").symlink_to(out / "nowhere")
    path = path.format(out=out)
    before = outside_state(repo)
    assert SECRET not in run_tool(repo, "Read", {"file_path": path})
    r = run_tool(repo, "Edit", {"file_path": path, "old_string": SECRET, "new_string": "pwned"})
    assert r.startswith("error: path outside the project")
    run_tool(repo, "Edit", {"file_path": path, "new_string": "pwned"})
    assert outside_state(repo) == before and not (out / "nowhere").exists()


def test_approved_outside_read_still_works(repo):
    secret = str(repo.parent / "outside" / "secret.txt")
    assert run_tool(repo, "Read", {"file_path": secret}, allow_outside=True) == f"    1→{SECRET}"
    assert run_tool(repo, "Read", {"file_path": secret}) == "error: path outside the project"


def test_inside_symlinks_and_fifos_still_behave(repo):
    (repo / "src").mkdir()
    (repo / "src" / "real.py").write_text("y = 2\n")
    (repo / "alias.py").symlink_to("src/real.py")
    assert run_tool(repo, "Read", {"file_path": "alias.py"}) == "    1→y = 2"
    assert run_tool(repo, "Edit", {"file_path": "alias.py", "old_string": "2", "new_string": "3"}).startswith("src/real.py")
    assert (repo / "alias.py").is_symlink() and (repo / "src" / "real.py").read_text() == "y = 3\n"
    os.mkfifo(repo / "pipe")
    assert run_tool(repo, "Read", {"file_path": "pipe"}) == "error: not a regular file"
    assert run_tool(repo, "Edit", {"file_path": "pipe", "old_string": "a", "new_string": "b"}) == "error: not a regular file"


# ------------------------------------------------------------------ item 2: protected places ask in every mode

PROTECTED = [".git/hooks/pre-commit", ".GIT/hooks/pre-commit", ".git/config", ".Git/Info/exclude",
             "vendor/lib/.git/HEAD", "vendor/lib/.git/config", ".nanocode/settings.json",
             ".NanoCode/settings.local.json", ".husky/pre-commit", ".githooks/pre-push", "hooksdir/pre-push",
             "conflink/settings.json", "conf/settings.json", "sub/../.git/hooks/post-checkout"]


def _protected_repo(proj):
    subprocess.run(["git", "-C", str(proj), "config", "core.hooksPath", "hooksdir"], check=True)
    (proj / "conf").mkdir()
    (proj / ".nanocode").symlink_to("conf")  # a repo shipping `.nanocode -> conf/`
    (proj / "conflink").symlink_to(".nanocode")  # and `conflink -> .nanocode`
    (proj / "sub").mkdir()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("path", PROTECTED)
def test_protected_edits_ask_in_every_mode(repo, mode, path):
    _protected_repo(repo)
    home = repo.parent / "home"
    p = Policy(root=repo, mode=mode, allow=["Edit", "Edit(**)"], session=["Edit"], home=home)
    hooks = sorted(os.listdir(repo / ".git" / "hooks"))
    d, result = gate(p, "Edit", {"file_path": path, "new_string": "#!/bin/sh\necho pwned\n"})
    assert d.action == ("deny" if mode == "plan" else "ask") and result is None, d
    assert sorted(os.listdir(repo / ".git" / "hooks")) == hooks
    assert not (repo / "conf" / "settings.json").exists() and not (repo / "hooksdir").exists()
    assert p.always("Edit", {"file_path": path, "new_string": "x"}) == ""


@pytest.mark.parametrize("mode", ["accept-edits", "auto"])
def test_ordinary_edits_still_run_unasked(repo, mode):
    _protected_repo(repo)
    p = Policy(root=repo, mode=mode, home=repo.parent / "home")
    d, result = gate(p, "Edit", {"file_path": "src/new.py", "new_string": "z = 1\n"})
    assert d.action == "allow" and (repo / "src" / "new.py").read_text() == "z = 1\n"
    assert protected(repo, "gitignore.txt") is None and protected(repo, "docs/git/notes.md") is None


def test_user_settings_inside_the_project_are_protected(repo, monkeypatch):
    home = repo  # a session started in $HOME
    assert protected(repo, ".config/nanocode/settings.json", home).startswith("changes nanocode user settings")
    monkeypatch.setenv("NANOCODE_HOME", str(repo / "cfg"))
    p = Policy(root=repo, mode="auto", home=repo.parent / "home")
    d, _ = gate(p, "Edit", {"file_path": "cfg/settings.json", "new_string": '{"mode": "auto"}'})
    assert d.action == "ask" and not (repo / "cfg").exists()


# ------------------------------------------------------------------ item 5: self-granted permissions via Bash

SELF_GRANT = ["echo '{\"mode\":\"auto\"}' > .nanocode/settings.local.json", "cp x.json .nanocode/settings.json",
              "tee ~/.config/nanocode/settings.json < x", "cp x.json \"$NANOCODE_HOME/settings.json\"",
              "python -c \"open('.nanocode/settings.local.json','w').write('{}')\"", "cp x.json conf/settings.json",
              "ln -sf /tmp/x .NANOCODE", "cp hook hooksdir/pre-commit", "printf x > .git/hooks/pre-commit",
              "git config core.hooksPath /tmp/hooks", "cat evil >> vendor/lib/.git/config",
              "echo {} > {home}/.config/nanocode/settings.json"]


@pytest.mark.parametrize("command", SELF_GRANT)
@pytest.mark.parametrize("mode", ["ask", "accept-edits", "auto"])
def test_bash_that_names_settings_or_hooks_asks(repo, command, mode):
    _protected_repo(repo)
    home = repo.parent / "home"
    p = Policy(root=repo, mode=mode, allow=["Bash(cp*)", "Bash(echo*)", "Bash(git*)"], home=home)
    d = p.check("Bash", {"command": command.replace("{home}", str(home))})
    assert d.action == "ask" and d.reason.startswith("destructive:"), d


# ------------------------------------------------------------------ item 3: folder trust

def test_trust_problem(repo, tmp_path):
    home = tmp_path / "home"
    assert "root" in trust_problem("/", home)
    assert "home folder" in trust_problem(home, home)
    assert "contains your home" in trust_problem(tmp_path, home)
    (tmp_path / "bare").mkdir()
    assert "no project marker" in trust_problem(tmp_path / "bare", home)
    assert trust_problem(repo, home) is None
    (tmp_path / "py").mkdir()
    (tmp_path / "py" / "pyproject.toml").write_text("")
    assert trust_problem(tmp_path / "py", home) is None


# ------------------------------------------------------------------ item 6: caps, memory

@pytest.mark.parametrize("line,limit", [("x", 10**12), ("y" * 3000, 10**12), ("z" * 150, 5000), ("é" * 900, 10**6)])
def test_read_output_is_capped(repo, line, limit):
    data = (line + "\n").encode()
    (repo / "big.txt").write_bytes(data * (42 * 2**20 // len(data) if line == "x" else 5000))  # x: 42 MB
    r = run_tool(repo, "Read", {"file_path": "big.txt", "limit": limit})
    lines = r.split("\n")
    assert len(r.encode()) <= MAX_READ_BYTES + 100 and len(lines) <= MAX_READ_LINES + 1
    assert lines[-1] == f"[truncated at {len(lines) - 1} lines: use offset/limit to read on]"
    assert lines[-2].startswith(f"{len(lines) - 1:>5}→")


def test_small_reads_are_unchanged_and_exact_fits_are_not_marked(repo):
    (repo / "n.txt").write_text("".join(f"l{i}\n" for i in range(MAX_READ_LINES)))
    r = run_tool(repo, "Read", {"file_path": "n.txt", "limit": 10**9})
    assert len(r.split("\n")) == MAX_READ_LINES and "truncated" not in r
    assert run_tool(repo, "Read", {"file_path": "n.txt", "limit": 2}) == "    1→l0\n    2→l1"


@pytest.mark.parametrize("setup", ["outside_link", "fifo", "dir_link"])
def test_memory_file_is_read_through_the_guard(repo, setup):
    out = repo.parent / "outside"
    if setup == "outside_link":
        (repo / "NANOCODE.md").symlink_to(out / "secret.txt")
    elif setup == "fifo":
        os.mkfifo(repo / "NANOCODE.md")
    else:
        (repo / "AGENTS.md").symlink_to(out / "secret.txt")
    (repo / "sub").mkdir()
    assert read_memory(repo) is None
    (repo / "AGENTS.md").unlink(missing_ok=True)
    (repo / "AGENTS.md").write_text("be brief\n")
    assert read_memory(repo) == ("AGENTS.md", "be brief")
