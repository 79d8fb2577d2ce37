"""Adversarial tests: no harness git call runs code a repository's config names, and undo never
loses data. All cases run real git in temporary repositories.

Part 1 crosses every harness git call site (Grep, closest names, grounding's file list, best-of
copy, an undo turn: begin/end/diff/undo, auto-commit) with every config that makes git run a
program (fsmonitor in .git/config, fsmonitor in a nested vendor/lib/.git/config, a clean/smudge/
process filter assigned by .gitattributes, a diff textconv plus external diff, core.hooksPath
with hooks, core.pager, gpg.program with commit.gpgsign); the program would create a marker file,
which must not exist afterwards. CONTROL proves each attack is live with plain git. Part 2: the
undo data-loss scenarios, checked byte for byte on disk."""
import os
import subprocess
from types import SimpleNamespace

import pytest

from agent.loop import project_copy
from agent.loop.driver import Agent
from agent.loop.turn import Turn
from agent.loop.turn_undo import TurnUndo
from agent.masks.grounding import Grounding
from tools import closest, snapshot
from tools.git import safe_env
from tools.grep import grep
from tools.undo import Snapshots, UndoError

KINDS = ["fsmonitor", "nested_fsmonitor", "filter", "diff", "hooks", "pager", "gpg"]
HOOKS = ["post-checkout", "pre-commit", "post-commit", "reference-transaction", "post-index-change",
         "pre-auto-gc", "post-rewrite"]


def git(d, *args, check=True):
    r = subprocess.run(["git", *args], cwd=d, capture_output=True, check=check)
    return r.stdout.decode()


def write(root, rel, data):
    p = os.path.join(root, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)


def tree_bytes(d):
    """{path: bytes or ('link', target)} of everything under d but .git directories."""
    out = {}
    for cur, dirs, files in os.walk(d):
        dirs[:] = sorted(x for x in dirs if x != ".git")
        for x in files + [x for x in dirs if os.path.islink(os.path.join(cur, x))]:
            p = os.path.join(cur, x)
            rel = os.path.relpath(p, d)
            if os.path.islink(p):
                out[rel] = ("link", os.readlink(p))
            else:
                with open(p, "rb") as f:
                    out[rel] = f.read()
    return out


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path / "home"))
    gc = tmp_path / "gitconfig"  # a clean user config with an identity; no system config
    gc.write_text("[user]\n\tname = Tester\n\temail = tester@example.com\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(gc))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


def make_repo(tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    write(root, "a.txt", "hello a\n")
    write(root, "src/m.py", "def hello():\n    return 1\n")
    write(root, ".gitattributes", "* filter=evil diff=evil\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    lib = root / "vendor" / "lib"
    lib.mkdir(parents=True)
    git(lib, "init", "-q")
    write(lib, "v.txt", "hello vendor\n")
    git(lib, "add", "-A")
    git(lib, "commit", "-q", "-m", "v")
    return root


def arm(root, kind, tmp_path):
    """Configure `kind`'s program, which creates tmp_path/PWNED; returns the marker path."""
    marker = tmp_path / "PWNED"
    pwn = tmp_path / "pwn.sh"  # touches the marker, then acts as a pass-through filter/textconv
    pwn.write_text(f'#!/bin/sh\ntouch "{marker}"\nif [ -n "$1" ] && [ -f "$1" ]; then cat "$1"; '
                   'else cat; fi\nexit 0\n')
    pwn.chmod(0o755)
    fail = tmp_path / "pwn-fail.sh"
    fail.write_text(f'#!/bin/sh\ntouch "{marker}"\nexit 1\n')
    fail.chmod(0o755)
    cfg = lambda d, k, v: git(d, "config", k, v)  # noqa: E731
    if kind == "fsmonitor":
        cfg(root, "core.fsmonitor", str(fail))
    elif kind == "nested_fsmonitor":
        cfg(root / "vendor" / "lib", "core.fsmonitor", str(fail))
    elif kind == "filter":
        for k in ("clean", "smudge"):
            cfg(root, f"filter.evil.{k}", str(pwn))
        cfg(root, "filter.evil.process", str(fail))
        cfg(root, "filter.evil.required", "true")
        write(tmp_path, "inc.cfg", f'[filter "evil.inc"]\n\tclean = {fail}\n')  # via an include
        cfg(root, "include.path", str(tmp_path / "inc.cfg"))
        write(root, ".gitattributes", "* filter=evil\n*.py filter=evil.inc\n")
    elif kind == "diff":
        cfg(root, "diff.evil.textconv", str(pwn))
        cfg(root, "diff.evil.command", str(fail))
        cfg(root, "diff.external", str(fail))
    elif kind == "hooks":
        hooks = root / "evil-hooks"
        hooks.mkdir()
        for h in HOOKS:
            (hooks / h).write_text(f'#!/bin/sh\ntouch "{marker}"\n')
            (hooks / h).chmod(0o755)
            os.symlink(hooks / h, root / ".git" / "hooks" / h)
        cfg(root, "core.hooksPath", str(hooks))
    elif kind == "pager":
        cfg(root, "core.pager", str(fail))
        cfg(root, "pager.diff", str(fail))
    elif kind == "gpg":
        cfg(root, "commit.gpgsign", "true")
        cfg(root, "gpg.program", str(fail))
        cfg(root, "gpg.format", "openpgp")
    if marker.exists():
        marker.unlink()
    return marker


# ---- the harness call sites ----------------------------------------------------------------------

def site_grep(root, kind, tmp_path):
    assert "hello" in grep(root, {"pattern": "hello"})
    assert "v.txt:1:hello vendor" in grep(root, {"pattern": "hello", "path": "vendor/lib"})


def site_closest(root, kind, tmp_path):
    assert "a.txt" in closest.git_files(str(root))
    assert closest.git_files(str(root / "vendor" / "lib")) == ["v.txt"]
    assert "a.txt" in closest.path_hint(root, root / "a.tx", dirs=False)


def site_grounding(root, kind, tmp_path):
    assert b"a.txt" in Grounding(root)._list()
    assert Grounding(root / "vendor" / "lib")._list() == [b"v.txt"]


def site_best_of(root, kind, tmp_path):
    top, info = project_copy.probe(str(root))
    assert info is not None
    files = project_copy.project_files(top, True)
    project_copy.make_copy(top, info, files, str(tmp_path / "copy"))
    assert (tmp_path / "copy" / "a.txt").read_text() == "hello a\n"


def site_undo(root, kind, tmp_path):
    ck = Snapshots(root)
    t = ck.begin("attack")
    write(root, "a.txt", "changed by the turn\n")
    write(root, "src/new.py", "x = 1\n")
    write(root, "vendor/lib/v.txt", "vendor edit\n")
    t = ck.end(t)
    assert t.changed == ["a.txt", "src/new.py", "vendor/lib/v.txt"]
    assert "+changed by the turn" in ck.diff()
    assert sorted(ck.plan().restore) == ["a.txt", "vendor/lib/v.txt"]
    assert ck.undo() == ["a.txt", "src/new.py", "vendor/lib/v.txt"]
    assert (root / "a.txt").read_text() == "hello a\n" and not (root / "src" / "new.py").exists()
    assert (root / "vendor" / "lib" / "v.txt").read_text() == "hello vendor\n"


SITES = {"grep": site_grep, "closest": site_closest, "grounding": site_grounding,
         "best_of": site_best_of, "undo": site_undo}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("site", list(SITES))
def test_no_config_program_runs(tmp_path, site, kind):
    root = make_repo(tmp_path)
    marker = arm(root, kind, tmp_path)
    SITES[site](root, kind, tmp_path)
    assert not marker.exists(), f"{site} ran the {kind} program"


# the attacks are live: plain git runs each program
CONTROL = {
    "fsmonitor": ("", ["ls-files", "--others"]),
    "nested_fsmonitor": ("vendor/lib", ["ls-files", "--others"]),
    "filter": ("", ["hash-object", "a.txt"]),
    "diff": ("", ["diff", "HEAD~0", "--", "a.txt"]),
    "hooks": ("", ["update-ref", "refs/x", "HEAD"]),
    "gpg": ("", ["commit", "-q", "--allow-empty", "--no-verify", "-m", "x"]),
}


@pytest.mark.parametrize("kind", list(CONTROL))
def test_control_plain_git_runs_the_program(tmp_path, kind):
    root = make_repo(tmp_path)
    marker = arm(root, kind, tmp_path)
    sub, args = CONTROL[kind]
    write(root, "a.txt", "dirty\n")
    subprocess.run(["git", *args], cwd=root / sub, capture_output=True)
    assert marker.exists()


def test_empty_driver_passes_content_through_and_user_drivers_stay(tmp_path, monkeypatch):
    root = make_repo(tmp_path)
    git(root, "config", "filter.evil.clean", "tr a-z A-Z")
    git(root, "config", "filter.evil.required", "true")
    write(root, "a.txt", "lower case\n")
    raw = git(root, "hash-object", "--no-filters", "a.txt")
    env = safe_env(str(root))
    r = subprocess.run(["git", "hash-object", "a.txt"], cwd=root, env=env, capture_output=True, check=True)
    assert r.stdout.decode() == raw  # the repo's driver is off: content unchanged, no failure
    # a driver the user's own config defines is kept (git-lfs lives there)
    with open(os.environ["GIT_CONFIG_GLOBAL"], "a") as f:
        f.write('[filter "upper"]\n\tclean = tr a-z A-Z\n')
    write(root, ".gitattributes", "a.txt filter=upper\n")
    r = subprocess.run(["git", "hash-object", "a.txt"], cwd=root, env=safe_env(str(root)),
                       capture_output=True, check=True)
    upper = subprocess.run(["git", "hash-object", "--stdin"], input=b"LOWER CASE\n", capture_output=True)
    assert r.stdout == upper.stdout != raw.encode()


def test_safe_env_drops_location_vars_and_keeps_user_config(tmp_path, monkeypatch):
    root = make_repo(tmp_path)
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("GIT_EXTERNAL_DIFF", "touch /nonexistent/x")
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "user.name")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "From Env")
    env = safe_env(str(root))
    assert "GIT_DIR" not in env and "GIT_EXTERNAL_DIFF" not in env
    assert env["GIT_CONFIG_KEY_0"] == "user.name" and env["GIT_CONFIG_KEY_1"] == "core.fsmonitor"
    r = subprocess.run(["git", "config", "user.name"], cwd=root, env=env, capture_output=True)
    assert r.stdout.decode().strip() == "From Env"


def test_model_made_bare_repo_is_not_discovered(tmp_path):
    root = make_repo(tmp_path)
    bare = root / "evil.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(bare, "config", "core.fsmonitor", "true")
    r = subprocess.run(["git", "rev-parse", "--git-dir"], cwd=bare, env=safe_env(str(bare)),
                       capture_output=True)
    assert r.returncode != 0 and b"bare" in r.stderr


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="chown needs root")
def test_repo_owned_by_another_user_is_walked_and_shadowed(tmp_path):
    root = make_repo(tmp_path)
    git(root, "config", "core.fsmonitor", f"touch {tmp_path}/PWNED; false #")
    for cur, dirs, files in os.walk(root):
        for x in dirs + files + ["."]:
            os.lchown(os.path.join(cur, x), 12345, 12345)
    assert closest.git_files(str(root)) is None  # git refuses it: the callers walk instead
    assert "a.txt:1:hello a" in grep(root, {"pattern": "hello"})
    ck = Snapshots(root)
    assert ck.shadow
    t = ck.begin()
    write(root, "a.txt", "edit\n")
    assert ck.end(t).changed == ["a.txt"] and ck.undo() == ["a.txt"]
    assert (root / "a.txt").read_text() == "hello a\n" and not (tmp_path / "PWNED").exists()


# ---- undo never loses data -----------------------------------------------------------------------

@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    write(root, "a.py", "x = 1\n")
    write(root, ".gitignore", ".env\n*.sqlite\nmodels/\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    write(root, ".env", "SECRET=1\n")
    write(root, "db.sqlite", b"\x00sqlite\xff")
    write(root, "models/w.bin", b"\x01" * 1000)
    write(root, "notes.txt", "untracked notes\n")
    return root


IGNORED = {".env": b"SECRET=1\n", "db.sqlite": b"\x00sqlite\xff",
           os.path.join("models", "w.bin"): b"\x01" * 1000}


@pytest.mark.parametrize("rules", ["gitignore", "info_exclude"])
def test_turn_that_unignores_files_never_deletes_them(repo, rules):
    if rules == "info_exclude":
        write(repo, ".gitignore", "")
        git(repo, "commit", "-q", "-am", "rules move to info/exclude")
        write(repo, ".git/info/exclude", ".env\n*.sqlite\nmodels/\n")
    before = tree_bytes(repo)
    ck = Snapshots(repo)
    t = ck.begin("unignore")
    write(repo, ".gitignore" if rules == "gitignore" else ".git/info/exclude", "")
    write(repo, "a.py", "x = 2\n")
    t = ck.end(t)
    assert t.changed == ([".gitignore", "a.py"] if rules == "gitignore" else ["a.py"])
    assert "b/.env" not in ck.diff() and "models/w.bin" not in ck.diff()
    ck.undo()
    after = tree_bytes(repo)
    for p, data in IGNORED.items():
        assert after[p] == data
    if rules == "info_exclude":
        write(repo, ".git/info/exclude", ".env\n*.sqlite\nmodels/\n")
    assert tree_bytes(repo) == before


def test_ignored_file_edited_by_the_turn_is_kept_not_deleted(repo):
    ck = Snapshots(repo)
    t = ck.begin()
    write(repo, ".gitignore", "")  # unignore and edit them in one turn
    write(repo, ".env", "SECRET=2\n")
    write(repo, "models/new.bin", b"new")
    t = ck.end(t)
    assert t.changed == [".gitignore"]
    assert ck.undo() == [".gitignore"]
    assert (repo / ".env").read_bytes() == b"SECRET=2\n" and (repo / "models" / "new.bin").exists()
    assert (repo / ".gitignore").read_text() == ".env\n*.sqlite\nmodels/\n"


def test_files_that_become_ignored_are_still_checked_before_restore(repo):
    ck = Snapshots(repo)
    t = ck.begin()
    write(repo, "a.py", "x = 2\n")
    ck.end(t)
    write(repo, ".git/info/exclude", "a.py\n")  # the user hides a.py, then edits it
    write(repo, "a.py", "user work\n")
    with pytest.raises(UndoError, match="a.py changed since"):
        ck.undo()
    assert (repo / "a.py").read_text() == "user work\n"


@pytest.mark.parametrize("how", ["bash_git_init", "git_init_with_commit", "edit_made_dotgit"])
def test_nested_repo_made_in_a_turn_keeps_undo_working(repo, tmp_path, how):
    ck = Snapshots(repo)
    before = tree_bytes(repo)
    t = ck.begin("nested")
    x = repo / "x"
    if how == "edit_made_dotgit":  # a model Edit writes .git files, fsmonitor included
        write(repo, "x/.git/HEAD", "ref: refs/heads/main\n")
        write(repo, "x/.git/config", f'[core]\n\tfsmonitor = "touch {tmp_path}/PWNED; false #"\n')
        os.makedirs(x / ".git" / "objects")
        os.makedirs(x / ".git" / "refs")
    else:
        git(repo, "init", "-q", "x")
    write(repo, "x/a.txt", "nested file\n")
    if how == "git_init_with_commit":
        git(x, "add", "-A")
        git(x, "commit", "-q", "-m", "n")
    t = ck.end(t)
    assert t.changed == ["x/a.txt"] and t.skipped == []
    assert ck.undo() == ["x/a.txt"]
    assert tree_bytes(repo) == before  # x/.git stays (the turn made it), nothing else is left
    assert not (tmp_path / "PWNED").exists()
    t2 = ck.begin("later turn")  # later turns still snapshot and undo
    write(repo, "x/b.txt", "b\n")
    write(repo, "a.py", "x = 3\n")
    assert ck.end(t2).changed == ["a.py", "x/b.txt"]
    assert ck.undo() == ["a.py", "x/b.txt"]
    assert (repo / "a.py").read_text() == "x = 1\n"


def test_tracked_dir_turned_into_a_nested_repo(repo):
    ck = Snapshots(repo)
    write(repo, "lib/t.py", "t = 1\n")
    git(repo, "add", "lib")
    git(repo, "commit", "-q", "-m", "lib")
    t = ck.begin()
    git(repo / "lib", "init", "-q")
    write(repo, "lib/t.py", "t = 2\n")
    t = ck.end(t)
    assert t.changed == ["lib/t.py"]
    ck.undo()
    assert (repo / "lib" / "t.py").read_text() == "t = 1\n"


def test_big_nested_repo_is_skipped_with_a_note(repo, monkeypatch):
    monkeypatch.setattr(snapshot, "MAX_NESTED_FILES", 3)
    ck = Snapshots(repo)
    t = ck.begin()
    git(repo, "init", "-q", "big")
    for i in range(5):
        write(repo, f"big/f{i}.txt", f"{i}\n")
    write(repo, "a.py", "x = 5\n")
    t = ck.end(t)
    assert t.changed == ["a.py"] and t.skipped == ["big/"]
    assert ck.undo() == ["a.py"]
    assert sorted(os.listdir(repo / "big")) == [".git"] + [f"f{i}.txt" for i in range(5)]


def test_plan_is_a_dry_run_and_committed_turns_need_consent(repo):
    ck = Snapshots(repo)
    t = ck.begin()
    write(repo, "a.py", "x = 2\n")
    write(repo, "new.py", "n\n")
    ck.end(t)
    state = tree_bytes(repo)
    plan = ck.plan()
    assert (plan.restore, plan.remove, plan.committed) == (["a.py"], ["new.py"], [])
    assert plan.describe() == "restore a.py; remove new.py" and tree_bytes(repo) == state
    git(repo, "commit", "-q", "-am", "the user commits the turn's a.py")
    assert ck.plan().committed == ["a.py"]
    with pytest.raises(UndoError, match="committed since"):
        ck.undo()
    assert tree_bytes(repo) == state
    assert ck.undo(allow_committed=True) == ["a.py", "new.py"]
    assert (repo / "a.py").read_text() == "x = 1\n"


def test_undo_is_scoped_to_the_session(repo):
    ck = Snapshots(repo)
    t1 = ck.begin("s1", session="s1")
    write(repo, "a.py", "from s1\n")
    ck.end(t1)
    t2 = ck.begin("s2", session="s2")
    write(repo, "s2.txt", "from s2\n")
    ck.end(t2)
    t3 = ck.begin("s1 again", session="s1")  # reads only
    ck.end(t3)
    assert ck.plan(session="s1").turn == t1.id
    assert ck.undo(session="s1") == ["a.py"]
    assert (repo / "s2.txt").exists()
    with pytest.raises(UndoError, match="in this session"):
        ck.undo(session="s1")
    assert ck.undo() == ["s2.txt"]  # no session: any


# ---- the loop's glue (an Agent without an engine: only the undo parts run) ----------------------

def bare_agent(root, sid="sess"):
    """The turn driver's call path with no model behind it (sizes counted in words)."""
    from agent.loop.conversation import Conversation
    from tools.permissions import Policy
    a = object.__new__(Agent)
    from agent.settings import TurnSettings
    a.root, a.policy, a.settings = str(root), Policy.load(str(root), mode="auto"), TurnSettings(tool_timeout=10)
    a.conv = Conversation(str(root), [{"role": "user", "content": "edit it"}],
                          {"id": sid, "turns": [], "approvals": []})
    a.sampler = SimpleNamespace(count=lambda text: len(text.split()), tree_changed=lambda: None)
    a.undo_log, a.sandbox, a._said_no_snapshot = TurnUndo(str(root)), None, False
    from agent.loop.hooks import Hooks
    a.hooks = Hooks(a.root, a.policy, None)  # the settings have none: a no-op
    a.result_budget, a.read_limit = 10**9, 100
    a.events = []
    a._emit = a.events.append
    return a


def test_loop_refuses_the_call_when_the_snapshot_fails(repo):
    a = bare_agent(repo)
    ck = a.undo_log.snapshots()
    os.makedirs(ck.meta_dir, exist_ok=True)
    open(os.path.join(ck.meta_dir, "index.lock"), "w").close()  # another snapshot "in progress"
    args = {"file_path": "a.py", "old_string": "x = 1", "new_string": "x = 9"}
    result, stop = Turn(a, None, a._emit, None).run_call("Edit", args)
    assert result.startswith("error: not run: the project could not be snapshotted") and stop is None
    assert (repo / "a.py").read_text() == "x = 1\n"
    assert any("so the call was not run" in getattr(e, "text", "") for e in a.events)
    result, _ = Turn(a, None, a._emit, None).run_call("Bash", {"command": "echo hi > made.txt"})
    assert result.startswith("error: not run") and not (repo / "made.txt").exists()
    os.unlink(os.path.join(ck.meta_dir, "index.lock"))
    result, _ = Turn(a, None, a._emit, None).run_call("Edit", args)
    assert not result.startswith("error") and (repo / "a.py").read_text() == "x = 9\n"
    a2 = bare_agent(repo)
    a2.undo_log = TurnUndo(str(repo), enabled=False)  # the opt-out: runs without a snapshot
    result, _ = Turn(a2, None, a2._emit, None).run_call("Bash", {"command": "echo hi > made.txt"})
    assert (repo / "made.txt").exists() and not a2.undo_log.made


def test_agent_undo_scoped_planned_and_told_to_the_model(repo):
    mine, other = bare_agent(repo, "mine"), bare_agent(repo, "other")
    for agent, path in ((other, "other.txt"), (mine, "a.py"), (other, "other2.txt")):
        agent.undo_log.begin("edit it", agent.meta["id"])
        write(repo, path, f"by {agent.meta['id']}\n")
        agent.undo_log.end()
    assert mine.undo_plan().restore == ["a.py"]
    assert "+by mine" in mine.diff()
    assert mine.undo() == ["a.py"]
    assert (repo / "a.py").read_text() == "x = 1\n" and (repo / "other2.txt").exists()
    assert mine.undo_log.notes == ["[the user undid an earlier request's changes (restore a.py): those "
                                   "files are back as they were before it]"]
    with pytest.raises(UndoError, match="in this session"):
        mine.undo()
    assert mine.undo(all_sessions=True) == ["other2.txt"]


@pytest.mark.slow
def test_the_next_user_message_says_what_was_undone(tmp_path, tok, engine):
    """On the real engine (the scripted agent's tiny model, tests/scripted_agent.py): the edit,
    /undo, then the next turn's user message starts with the undo note."""
    from scripted_agent import call, make, reply
    from tiny_models import commit_all
    root = tmp_path / "p"
    root.mkdir()
    (root / "a.py").write_text("x = 1\n")
    commit_all(root)
    edit = call(tok, "", "Edit", file_path="a.py", old_string="x = 1", new_string="x = 2")
    agent, _ = make(engine, root, [edit, reply(tok, "done"), reply(tok, "ok")], mode="accept-edits")
    agent.run_turn("set x to 2")
    assert agent.undo() == ["a.py"] and (root / "a.py").read_text() == "x = 1\n"
    agent.run_turn("what now?")
    user = agent.messages[-2]["content"]
    assert user == ("[the user undid an earlier request's changes (restore a.py): those files are "
                    "back as they were before it]\nwhat now?")
