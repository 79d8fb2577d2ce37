"""Tests for tools/permissions.py: modes x tools, precedence, settings files, rules over compound
commands, session rules, and destructive commands as the Policy asks about them (the classifier
alone is tests/test_tools_destructive.py's, command splitting tests/test_tools_shell.py's). Real
files in tmp_path; nothing under test is mocked."""
import json
from pathlib import Path

import pytest

from shell_samples import EVERYDAY
from tools.destructive import destructive
from tools.permissions import MODES, Decision, Policy, SettingsError, parse_rule


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.delenv("NANOCODE_HOME", raising=False)
    proj, home, out = tmp_path / "proj", tmp_path / "home", tmp_path / "outside"
    for d in (proj / "src", proj / "docs", home / "notes", out):
        d.mkdir(parents=True)
    (proj / "src" / "a.py").write_text("x = 1\n")
    (proj / "docs" / "guide.md").write_text("# guide\n")
    (out / "data.txt").write_text("data\n")
    (home / "notes" / "n.md").write_text("note\n")
    return tmp_path


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def policy(env, mode=None, user=None, project=None, local=None):
    proj, home = env / "proj", env / "home"
    user_file = home / ".config" / "nanocode" / "settings.json"
    for path, data in ((user_file, user), (proj / ".nanocode/settings.json", project),
                       (proj / ".nanocode/settings.local.json", local)):
        if data is not None:
            write(path, data)
    return Policy.load(proj, mode=mode, user_file=user_file, home=home, trust_settings=True)


def perms(**kw):
    return {"permissions": kw}


def act(p, name, **args):
    return p.check(name, args).action


# ------------------------------------------------------------------ modes x tools

EXPECT = {  # mode: (Edit inside, Bash)
    "ask": ("ask", "ask"), "accept-edits": ("allow", "ask"), "auto": ("allow", "allow"), "plan": ("deny", "deny")}


@pytest.mark.parametrize("mode", MODES)
def test_mode_defaults(env, mode):
    p = policy(env, mode=mode)
    outside = str(env / "outside" / "data.txt")
    assert act(p, "Read", file_path="src/a.py") == "allow"
    assert act(p, "Grep", pattern="x") == "allow"
    assert act(p, "Grep", pattern="x", path="docs") == "allow"
    assert act(p, "Read", file_path=outside) == "ask"
    assert act(p, "Grep", pattern="x", path=str(env / "outside")) == "ask"
    assert act(p, "Edit", file_path="src/a.py", old_string="1", new_string="2") == EXPECT[mode][0]
    assert act(p, "Edit", file_path="src/new.py", new_string="x") == EXPECT[mode][0]
    assert act(p, "Bash", command="ls") == EXPECT[mode][1]
    edit_out = p.check("Edit", {"file_path": outside, "new_string": "x"})
    assert edit_out.action == "deny"
    assert edit_out.reason == ("path outside the project" if mode != "plan" else edit_out.reason)
    assert p.check("Frobnicate", {}) == Decision("deny", "unknown tool")
    assert act(p, "Bash", command="rm -rf build") == ("deny" if mode == "plan" else "ask")


def test_plan_mode_reason_and_rules_do_not_override(env):
    p = policy(env, mode="plan", project=perms(allow=["Bash", "Edit"]))
    d = p.check("Bash", {"command": "ls"})
    assert d.action == "deny" and "plan mode is read-only" in d.reason
    assert act(p, "Edit", file_path="a.py", new_string="x") == "deny"
    assert act(p, "Read", file_path="src/a.py") == "allow"


def test_edit_through_symlink_out_of_project_is_denied(env):
    (env / "proj" / "link").symlink_to(env / "outside")
    d = policy(env, mode="auto").check("Edit", {"file_path": "link/data.txt", "new_string": "x"})
    assert d == Decision("deny", "path outside the project")


@pytest.mark.parametrize("name,args", [
    ("Bash", None), ("Bash", "ls"), ("Bash", {}), ("Bash", {"command": 3}), ("Bash", {"command": "  "}),
    ("Bash", {"command": "echo 'unclosed"}), ("Read", {}), ("Read", {"file_path": ["x"]}),
    ("Edit", {"file_path": "a\x00b", "new_string": "x"}), ("Grep", {"path": 5}), (None, {}), (3, None)])
def test_weird_input_never_raises(env, name, args):
    d = policy(env, mode="auto").check(name, args)
    assert isinstance(d, Decision) and d.action in ("ask", "deny") and d.reason


def test_unparsable_command_asks_even_in_auto(env):
    d = policy(env, mode="auto", project=perms(allow=["Bash(echo*)"])).check("Bash", {"command": "echo 'x; rm y"})
    assert d.action == "ask" and "parse" in d.reason


# ------------------------------------------------------------------ precedence and rules

def test_precedence_deny_destructive_ask_allow(env):
    p = policy(env, mode="auto", project=perms(allow=["Bash", "Bash(git*)"], ask=["Bash(git push*)"],
                                               deny=["Bash(curl*)"]))
    assert p.check("Bash", {"command": "curl example.com"}).rule == "Bash(curl*)"
    assert act(p, "Bash", command="curl example.com") == "deny"
    d = p.check("Bash", {"command": "git push --force"})
    assert d.action == "ask" and d.reason.startswith("destructive: git push --force")
    assert p.check("Bash", {"command": "git push"}) == Decision("ask", "ask rule", "Bash(git push*)")
    assert act(p, "Bash", command="git log") == "allow"
    p.session.append("Bash(rm*)")
    assert act(p, "Bash", command="rm -rf x") == "ask"  # destructive beats allow and session rules
    p.deny.append("Bash(rm*)")
    assert act(p, "Bash", command="rm -rf x") == "deny"  # deny beats destructive


def test_rules_merge_user_project_local(env):
    p = policy(env, user={"mode": "accept-edits", "permissions": {"allow": ["Bash(pytest*)"]}},
               project=perms(deny=["Edit(secrets/**)", "Read(.env)"], ask=["Edit(*.md)"]),
               local={"mode": "ask", "permissions": {"allow": ["Bash(git status*)", "Read(~/notes/**)"]}})
    assert p.mode == "ask"  # the local file names a mode last
    d = p.check("Bash", {"command": "pytest -q"})
    assert d == Decision("allow", "allowed by rule", "Bash(pytest*)")
    assert act(p, "Bash", command="git status -s") == "allow"
    assert act(p, "Bash", command="git push") == "ask"
    assert p.check("Edit", {"file_path": "secrets/k.txt", "new_string": "x"}).rule == "Edit(secrets/**)"
    assert act(p, "Read", file_path=".env") == "deny"
    assert act(p, "Grep", pattern="k", path=".env") == "deny"  # Read rules govern Grep too
    assert act(p, "Edit", file_path="docs/guide.md", new_string="x", old_string="#") == "ask"
    assert act(p, "Read", file_path=str(env / "home" / "notes" / "n.md")) == "allow"
    assert act(p, "Read", file_path="~/notes/n.md") == "ask"  # "~" in a tool path is the real $HOME
    assert policy(env, mode="plan").mode == "plan"  # explicit mode wins over the files


def test_nanocode_home_env_and_missing_files(env, monkeypatch):
    write(env / "nh" / "settings.json", {"mode": "auto"})
    monkeypatch.setenv("NANOCODE_HOME", str(env / "nh"))
    assert Policy.load(env / "proj", home=env / "home").mode == "auto"
    monkeypatch.delenv("NANOCODE_HOME")
    p = Policy.load(env / "proj", home=env / "home")
    assert (p.mode, p.allow, p.ask, p.deny, p.session) == ("ask", [], [], [], [])


@pytest.mark.parametrize("pattern,path,hit", [
    ("docs/**", "docs/guide.md", True), ("docs/**", "src/a.py", False), ("docs/", "docs/x/y.md", True),
    ("*.md", "docs/guide.md", True), ("*.md", "a.md", True), ("src/*.py", "src/a.py", True),
    ("src/*.py", "src/sub/a.py", False), ("src/**/*.py", "src/sub/a.py", True), ("src/**/*.py", "src/a.py", True),
    ("build", "x/build/out.o", True), ("a.py", "src/a.py", True), ("/src/a.py", "src/a.py", False)])
def test_path_rule_globs(env, pattern, path, hit):
    p = policy(env, project=perms(allow=[f"Edit({pattern})"]))
    assert act(p, "Edit", file_path=path, new_string="x") == ("allow" if hit else "ask")


def test_absolute_pattern_matches_outside_reads(env):
    p = policy(env, user=perms(allow=[f"Read({env}/outside/**)"]))
    assert act(p, "Read", file_path=str(env / "outside" / "data.txt")) == "allow"
    assert act(p, "Read", file_path=str(env / "home" / "notes" / "n.md")) == "ask"


def test_edits_to_nanocode_settings_always_ask(env):
    p = policy(env, mode="auto", project=perms(allow=["Edit"]))
    assert act(p, "Edit", file_path=".nanocode/settings.json", new_string="{}") == "ask"
    assert act(p, "Edit", file_path="src/a.py", new_string="x", old_string="1") == "allow"
    assert destructive("echo '{}' > .nanocode/settings.json")


# ------------------------------------------------------------------ compound commands

@pytest.mark.parametrize("command,action", [
    ("git status", "allow"), ("git status -s", "allow"), ("git status && pytest -q", "allow"),
    ("git status && rm -rf x", "ask"), ("git status; curl x | sh", "ask"), ("git status | grep foo", "ask"),
    ("git status && echo hi", "ask"), ("git status $(touch x)", "ask"), ("git status `touch x`", "ask"),
    ('git status "$(touch x)"', "ask"), ("git status '$(touch x)'", "allow"), ('git status "a && b"', "allow"),
    ("git status\nls", "ask"), ("git status & ls", "ask"), ("git status || ls", "ask"), ("(git status)", "allow"),
    ("git status 2>&1", "allow"), ("git status # && ls", "allow"), ("git status > /tmp/x", "ask"),
    ("git status > ../other/file", "ask"), ("git status >> notes.txt", "ask"), ("git status 2> err.txt", "ask"),
    ("git status < /etc/passwd", "ask"), ("git status <(cat /etc/passwd)", "ask"), ("git status >/dev/null", "allow"),
    ("git status 'a > b'", "allow"), ("git status $(git status)", "ask"), ("pytest -q 2>&1 | git status", "allow")])
def test_allow_rule_must_cover_every_subcommand(env, command, action):
    p = policy(env, project=perms(allow=["Bash(git status*)", "Bash(pytest*)"]))
    assert act(p, "Bash", command=command) == action


@pytest.mark.parametrize("command", ["curl x", "ls && curl x", "echo $(curl x)", "ls | curl -d @- x"])
def test_deny_rule_matches_any_subcommand(env, command):
    p = policy(env, mode="auto", project=perms(deny=["Bash(curl*)"]))
    assert p.check("Bash", {"command": command}) == Decision("deny", "denied by rule", "Bash(curl*)")


# ------------------------------------------------------------------ settings errors

@pytest.mark.parametrize("text,needle", [
    ("{not json", "invalid JSON"), ("[1, 2]", "JSON object"), ('{"mode": "yolo"}', "unknown mode"),
    ('{"mode": 3}', "unknown mode"), ('{"premissions": {}}', "unknown key"), ('{"permissions": []}', "must be an object"),
    ('{"permissions": {"allow": "Bash"}}', "must be a list"), ('{"permissions": {"allow": [3]}}', "bad rule"),
    ('{"permissions": {"deny": ["Bash("]}}', "bad rule"), ('{"permissions": {"ask": ["Write(x)"]}}', "bad rule"),
    ('{"permissions": {"allow": ["Bash()"]}}', "bad rule"), ('{"permissions": {"alow": []}}', "unknown key"),
    (b"\xff\xfe", "cannot read")])
@pytest.mark.parametrize("where", ["user", "project", "local"])
def test_malformed_settings_name_the_file(env, text, needle, where):
    path = {"user": env / "home" / ".config" / "nanocode" / "settings.json",
            "project": env / "proj" / ".nanocode" / "settings.json",
            "local": env / "proj" / ".nanocode" / "settings.local.json"}[where]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(SettingsError) as e:
        policy(env)
    assert str(path) in str(e.value) and needle in str(e.value) and "fix" in str(e.value)


def test_empty_settings_file_is_fine_and_bad_explicit_mode_errors(env):
    assert policy(env, project="  \n").mode == "ask"
    with pytest.raises(SettingsError):
        policy(env, mode="yolo")


@pytest.mark.parametrize("text,parsed", [
    ("Bash", ("Bash", None)), ("Bash(git status*)", ("Bash", "git status*")), ("Edit(docs/**)", ("Edit", "docs/**")),
    ("Read(~/notes/**)", ("Read", "~/notes/**")), (" Grep( *.py ) ", ("Grep", "*.py")),
    ("Bash(npm run test:*)", ("Bash", "npm run test*"))])
def test_parse_rule(text, parsed):
    assert parse_rule(text) == parsed


@pytest.mark.parametrize("junk", ["", "bash", "Write", "Bash(", "Bash()", "Bash(x", "Bash x", None, 3, "Bash(x)y"])
def test_parse_rule_rejects_junk(junk):
    with pytest.raises(ValueError):
        parse_rule(junk)


# ------------------------------------------------------------------ session rules (always)

@pytest.mark.parametrize("command,rule", [
    ("pytest -q tests", "Bash(pytest*)"), ("git status -s", "Bash(git status*)"),
    ("npm run test", "Bash(npm run test*)"), ("python -m pytest -q", "Bash(python -m pytest*)"),
    ("uv run pytest -q", "Bash(uv run pytest*)"), ("uv run --with x y", "Bash(uv run --with x y)"),
    ("cargo build", "Bash(cargo build*)"), ("python train.py --x 1", "Bash(python train.py*)"), ("ls -la", "Bash(ls*)"),
    ("git status && pytest", "Bash(git status*), Bash(pytest*)"), ('bash -c "ls"', 'Bash(bash -c "ls")'),
    ("FOO=1 make", "Bash(FOO=1 make)"), ("cat README.md", "Bash(cat README.md)"), ("head -5 a.py", "Bash(head -5 a.py)"),
    ("pytest -q > out.txt", "Bash(pytest -q > out.txt)"), ("cat [x]", "Bash(cat [[]x])")])
def test_always_bash_rule(env, command, rule):
    p = policy(env)
    assert p.always("Bash", {"command": command}) == rule
    assert p.session == rule.split(", ")
    assert p.check("Bash", {"command": command}).action == "allow"


def test_always_session_rule_scope(env):
    p = policy(env)
    p.always("Bash", {"command": "git status"})
    assert p.check("Bash", {"command": "git status --short"}) == \
        Decision("allow", "allowed for this session", "Bash(git status*)")
    assert act(p, "Bash", command="git push") == "ask"
    assert act(p, "Bash", command="git status; rm x") == "ask"
    assert p.always("Bash", {"command": "git status"}) == ""  # already covered: nothing added
    assert p.session == ["Bash(git status*)"]


@pytest.mark.parametrize("command", ["rm -rf build", "git push --force", "ls && rm -rf x", "curl x | sh", "sudo ls"])
def test_always_never_covers_destructive(env, command):
    p = policy(env)
    assert p.always("Bash", {"command": command}) == ""
    assert p.session == []
    p.always("Bash", {"command": "rm old.txt"})
    p.always("Bash", {"command": "git push origin main"})
    assert act(p, "Bash", command=command) == "ask"


def test_always_edit_and_outside_reads(env):
    p = policy(env)
    assert p.always("Edit", {"file_path": "src/a.py", "new_string": "x"}) == "Edit"
    assert act(p, "Edit", file_path="docs/guide.md", new_string="x") == "allow"
    assert p.always("Edit", {"file_path": str(env / "outside" / "data.txt"), "new_string": "x"}) == ""
    assert p.always("Read", {"file_path": "src/a.py"}) == ""
    assert p.always("Read", {"file_path": str(env / "outside" / "data.txt")}) == f"Read({env}/outside/**)"
    assert act(p, "Grep", pattern="x", path=str(env / "outside")) == "allow"
    assert p.always("Grep", {"pattern": "x", "path": str(env / "home" / "notes")}) == "Read(~/notes/**)"
    assert act(p, "Read", file_path=str(env / "home" / "notes" / "n.md")) == "allow"
    write(env / "home" / ".bashrc", "x")
    assert p.always("Read", {"file_path": str(env / "home" / ".bashrc")}) == "Read(~/.bashrc)"  # not all of $HOME
    assert p.always("Frob", {}) == "" and p.always("Bash", None) == ""
    assert policy(env, mode="plan").always("Bash", {"command": "ls"}) == ""


@pytest.mark.parametrize("command", ["/usr/bin/curl x", "command curl x", "\\curl x", '"curl" x',
                                     "env curl x", "FOO=1 curl x", "git -C . push", "git --no-pager push"])
def test_deny_rules_see_through_paths_quotes_and_wrappers(tmp_path, command):
    p = Policy(root=tmp_path, mode="auto", deny=["Bash(curl*)", "Bash(git push*)"], home=tmp_path)
    assert p.check("Bash", {"command": command}).action == "deny"
    assert p.check("Bash", {"command": "git status"}).action == "allow"


def test_edits_to_git_internals_always_ask(tmp_path):
    p = Policy(root=tmp_path, mode="auto", allow=["Edit"], home=tmp_path)
    for path in (".git/config", ".git/hooks/pre-commit"):
        assert p.check("Edit", {"file_path": path, "new_string": "x"}).action == "ask"


def test_always_makes_no_rule_an_ask_rule_would_outrank(tmp_path):
    p = Policy(root=tmp_path, mode="ask", ask=["Bash(pytest*)"], home=tmp_path)
    assert p.always("Bash", {"command": "pytest -q"}) == "" and p.session == []


def test_always_returns_exactly_what_it_stored_and_exact_rules_stay_exact(env):
    p = policy(env)
    assert p.always("Bash", {"command": "cat README.md"}, store=False) == "Bash(cat README.md)"
    assert p.session == []  # the preview the faces show stores nothing
    assert p.always("Bash", {"command": "cat README.md"}) == "Bash(cat README.md)"
    for command in ("cat /etc/passwd", "cat /etc/passwd > ../x", "cat README.md > ../x", "cat README.md; ls"):
        assert act(p, "Bash", command=command) == "ask"
    assert p.always("Bash", {"command": "ls && cat README.md"}) == "Bash(ls*)"  # only the new rule
    assert p.session == ["Bash(cat README.md)", "Bash(ls*)"]
    assert act(p, "Bash", command="ls -la > ../listing") == "ask"
    assert p.always("Edit", {"file_path": ".git/hooks/pre-commit", "new_string": "x"}) == "" and "Edit" not in p.session


# ------------------------------------------------------------------ hidden destructive spellings

FLAGGED = [  # each asks in auto mode and never gets an "always" rule
    "rm \\\n -rf ../x", "r\\\nm -rf build", "rm $'-rf' build", "rm $'\\x2drf' build", "rm -{r,f} build", "{rm,-rf,build}",
    "$(echo rm) -rf build", "`echo rm` -rf build", '"$(echo rm)" -rf build', "echo $(true #) && touch ../x\n)",
    "bash -lc 'rm -rf build'", "sh -ec 'rm -rf build'", "bash -c -- 'rm -rf build'", "env -S 'rm -rf build'",
    "setsid rm -rf build", "flock /tmp/l rm -rf build", "flock /tmp/l -c 'rm -rf build'", "taskset -c 0 rm -rf build",
    "nice -n 5 rm -rf build", "timeout -s KILL 5 rm -rf build", "stdbuf -oL rm -rf build", "watch rm -rf build",
    "busybox rm -rf build", "echo 'rm -rf build' | sh", "echo cm0gLXJmIGJ1aWxkCg== | base64 -d | sh",
    "bash <<EOF\necho hi\nEOF", "sh <<< 'echo hi'", "python3 - < script.py", "find . -exec sh -c 'rm {}' \\;",
    "find . -exec unlink {} \\;", "find . -execdir mv {} /tmp \\;", "awk 'BEGIN{system(\"rm -rf build\")}'",
    "awk '{print | \"sh\"}' f", "f() { command rm \"$@\"; }; f -rf build", "function f { rm $1; }; f ../x",
    "rm ../other/file", "rm ~/notes.txt", "unlink ../x", "truncate -s 0 ../x", "mv ../x y",
    "mv a.txt ../a.txt", ": > ../x", "> ../x", "echo x > ../other/file", "cd .. && rm other.txt",
    "git reset --ha", "git reset --har HEAD~1", "git push --forc", "git -c clean.requireForce=false clean -dx",
    "git clean -dx", "git -c core.hooksPath=/tmp/h commit -m x", "git config core.hooksPath .h",
    "python -c \"import os; os.remove('x')\"", "python3 -c 'import shutil; shutil.rmtree(\"build\")'",
    "node -e \"require('fs').rmSync('build', {recursive: true})\"", "perl -e 'unlink glob \"*\"'",
    "echo x > .nanocode/settings.local.json", "cp evil.json .nanocode/settings.json", "cat .NanoCode/settings.json",
    "echo {} > ~/.config/nanocode/settings.json", 'echo {} > "$NANOCODE_HOME/settings.json"',
    "echo x > .git/hooks/pre-commit", "cp hook .GIT/hooks/post-checkout", "echo x >> .git/config",
    "cp hook .husky/pre-commit", "xargs -a list.txt rm", "find . -name x | xargs unlink",
    "git checkout HEAD ./", "git checkout HEAD :/", "git checkout HEAD~1 src", "git checkout '*.py'",
    "git checkout main ./src", "git rm -rf .", "git rm -r src", "git rm -f a.py", "git rm --force a.py",
    "git update-ref -d refs/stash", "git update-ref -d refs/heads/x", "git update-ref refs/heads/main HEAD~3",
    "git reflog expire --expire=now --all", "git reflog delete stash@{0}", "git gc --prune=now", "git prune",
    "git stash drop && git reflog expire --expire=now --all && git gc --prune=now", "git tag -d v1",
    "git branch -f main HEAD~1", "git branch -M old", "git update-ref -d refs/nanocode/turns/1-before",
    "rm -rf .git/refs/nanocode", "rm .git/refs/nanocode/turns/1-after", "cat refs/nanocode/x",
    "git for-each-ref --format='delete %(refname)' refs/nanocode | git update-ref --stdin",
    "git for-each-ref --format='delete %(refname)' | git update-ref --stdin",
    ":(){ :|:& };:", "bomb(){ bomb | bomb & }; bomb", "b(){ b|b& };b",
    "python3 -c 'import os\nwhile True: os.fork()'", "perl -e 'fork while fork'", 'rm "$F"', "mv $X y",
]


# tmp_path lies in /tmp, which is scratch space: "outside the project" needs a root elsewhere. Bash
# commands are judged as text, so these need not exist (a missing .git/config reads as unset).
TEXT_ROOT, TEXT_HOME = Path("/srv/nanocode-test/proj"), Path("/home/nanocode-test")


@pytest.mark.parametrize("command", FLAGGED)
def test_hidden_destructive_spellings_ask_in_auto_mode(env, monkeypatch, command):
    monkeypatch.delenv("TMPDIR", raising=False)
    p = Policy(root=TEXT_ROOT, mode="auto", allow=["Bash"], home=TEXT_HOME)
    d = p.check("Bash", {"command": command})
    assert d.action == "ask", d
    assert p.always("Bash", {"command": command}) == "" and p.session == []


@pytest.mark.parametrize("command", EVERYDAY + ["cp a.py a.py.bak", "cp file{,.bak}", "mkdir -p src/{a,b}",
                                                "rm build/x.o", "mv a.txt docs/", "cd src && rm old.py",
                                                "python -c 'print(1)'", "pytest -q > /dev/null 2>&1",
                                                "git checkout -b feat origin/main", "git rm --cached a.py",
                                                "git rm a.py", "git tag v1", "git gc", "git checkout -"])
def test_everyday_commands_are_allowed_in_auto_mode_with_a_root(env, command):
    p = Policy(root=env / "proj", mode="auto", home=env / "home")
    assert p.check("Bash", {"command": command}).action == "allow", p.check("Bash", {"command": command})


@pytest.mark.parametrize("command", [
    "find . -name '*.tmp' -exec unlink {} \\;", "python -c \"__import__('os').remove('x')\"", "$(echo rm) x",
    "`echo rm` x", "R=rm; $R x", "bash -c 'rm x'", "sh -c \"rm x\"", "eval rm x", "echo rm x | sh", "xargs rm < list",
    "awk '{print}' f", "f() { rm \"$@\"; }; f x"])
def test_deny_rules_are_not_bypassed_by_hidden_command_words(env, command):
    p = Policy(root=env / "proj", mode="auto", deny=["Bash(rm*)"], home=env / "home")
    assert p.check("Bash", {"command": command}).action in ("ask", "deny")
    assert Policy(root=env / "proj", mode="auto", home=env / "home").check("Bash", {"command": "python -c 'print(1)'"}).action == "allow"


# ------------------------------------------------------------------ temp dirs are scratch space

@pytest.mark.parametrize("command,action", [
    ("pytest > /tmp/out.txt", "allow"), ("rm -rf /tmp/x", "allow"), ("rm /tmp/outside.txt", "allow"),
    ("cd /tmp; rm x", "allow"), ("cd /tmp && rm -rf x", "allow"), ("mv /tmp/a /tmp/b", "allow"),
    ("echo x > /var/tmp/y", "allow"), ("truncate -s 0 /tmp/x", "allow"), ("rm -r -- /tmp/a", "allow"),
    ("rm -rf /tmp", "ask"), ("rm -rf /tmp/", "ask"), ("rm -rf /tmp/x/..", "ask"), ("rm -rf /tmp/*", "ask"),
    ("rm -rf /var/tmp", "ask"), ("rm -rf ~/x", "ask"), ("rm ~/x", "ask"), ("echo x > ~/x", "ask"),
    ("rm -rf /tmp/x build", "ask"), ("rm -rf /tmp/x -- -build", "ask"), ("mv src /tmp/old", "ask"),
    ("mv -t /tmp/old src", "ask"), ("rm -rf /tmpx", "ask")])
@pytest.mark.parametrize("where", ["tmp_path", "text"])
def test_temp_dirs_are_scratch_in_auto_mode(env, monkeypatch, command, action, where):
    monkeypatch.delenv("TMPDIR", raising=False)
    root, home = (env / "proj", env / "home") if where == "tmp_path" else (TEXT_ROOT, TEXT_HOME)
    d = Policy(root=root, mode="auto", home=home).check("Bash", {"command": command})
    assert d.action == action, d


def test_temp_dir_scratch_excludes_the_project_and_its_folders_and_follows_tmpdir(env, monkeypatch):
    monkeypatch.delenv("TMPDIR", raising=False)
    p = Policy(root=env / "proj", mode="auto", home=env / "home")
    for command, action in ((f"rm -rf {env}", "ask"), (f"mv {env}/proj /tmp/p", "ask"), ("rm -rf ../x", "allow"),
                            (f"rm -rf {env}/proj/build", "ask"), ("rm -rf build", "ask")):
        assert p.check("Bash", {"command": command}).action == action, command
    text = Policy(root=TEXT_ROOT, mode="auto", home=TEXT_HOME)
    assert text.check("Bash", {"command": "rm -rf /scratch/t/x"}).action == "ask"
    monkeypatch.setenv("TMPDIR", "/scratch/t/")
    for command, action in (("rm -rf /scratch/t/x", "allow"), ("echo x > /scratch/t/y", "allow"),
                            ("rm -rf /scratch/t", "ask"), ("rm -rf /scratch/x", "ask")):
        assert text.check("Bash", {"command": command}).action == action, command
    for tmpdir in ("/", "/home"):  # a $TMPDIR of / or one holding $HOME is not scratch
        monkeypatch.setenv("TMPDIR", tmpdir)
        assert text.check("Bash", {"command": "rm /home/other/x"}).action == "ask"
    assert destructive("rm -rf /tmp/x", home=env / "home") == "recursive delete (rm -rf)"  # no root: unknown
