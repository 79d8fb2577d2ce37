"""tools/settings_file.py alone, on real files: what one settings file holds once read (rules,
mode, env, hooks, MCP servers), and that every bad file, however odd, is a SettingsError naming
the file, the problem and the fix, never another exception. The module only reads: writing the
accepted-settings store is tools/workspace.py's."""
import json
import os

import pytest

from tools.settings_file import Hook, SettingsError, default_user_file, load_file, parse, parse_rule


def write(tmp_path, content, name="settings.json"):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
    return path


def error_of(path) -> str:
    with pytest.raises(SettingsError) as e:
        load_file(path)
    assert str(path) in str(e.value) and "; fix: " in str(e.value), e.value
    return str(e.value)


def test_a_full_file_reads_back_as_its_parts(tmp_path):
    path = write(tmp_path, {
        "$schema": "x", "mode": "accept-edits", "env": ["PYTHONPATH"],
        "permissions": {"allow": ["Bash(npm run test:*)", "Read"], "deny": ["mcp__files"]},
        "hooks": {"PreToolUse": [{"matcher": "Bash|Edit", "command": "./check.sh", "timeout": 5}],
                  "Stop": [{"command": "make lint"}]},
        "mcpServers": {"files": {"command": "npx", "args": ["-y", "server"]}}})
    got = load_file(path)
    assert got["mode"] == "accept-edits" and got["env"] == ["PYTHONPATH"]
    assert got["allow"] == ["Bash(npm run test:*)", "Read"] and got["ask"] == [] and got["deny"] == ["mcp__files"]
    assert got["hooks"] == [Hook("PreToolUse", "./check.sh", "Bash|Edit", 5.0, str(path)),
                            Hook("Stop", "make lint", None, 30.0, str(path))]
    assert [s.name for s in got["mcp"]] == ["files"]


def test_missing_empty_and_bom_files_are_empty_settings(tmp_path):
    assert load_file(tmp_path / "nope.json") == {}
    assert load_file(write(tmp_path, b"  \n"))["allow"] == []
    bom = write(tmp_path, b"\xef\xbb\xbf" + json.dumps({"mode": "plan"}).encode())  # Windows editors
    assert load_file(bom)["mode"] == "plan"


def test_a_symlinked_user_file_is_followed(tmp_path):
    """The user's own file may be a link into a dotfiles folder (project files are read through
    the workspace guard instead: tools/workspace.project_settings)."""
    target = write(tmp_path, {"mode": "auto"}, "dotfiles.json")
    link = tmp_path / "settings.json"
    link.symlink_to(target)
    assert load_file(link)["mode"] == "auto"
    dangling = tmp_path / "gone.json"
    dangling.symlink_to(tmp_path / "absent.json")
    assert load_file(dangling) == {}


def test_unreadable_files_name_the_fix(tmp_path):
    (tmp_path / "dir.json").mkdir()
    assert "cannot read settings" in error_of(tmp_path / "dir.json")
    assert "readable UTF-8" in error_of(write(tmp_path, b'{"mode": "\xff"}'))
    if os.geteuid() != 0:  # root reads a mode-000 file anyway
        locked = write(tmp_path, {}, "locked.json")
        locked.chmod(0)
        assert "cannot read settings" in error_of(locked)


@pytest.mark.parametrize("content, problem", [
    (b'{"mode": "ask",}', "invalid JSON at line 1 column 16"),
    (b'{"mode": "ask" // no\n}', "JSON has no comments"),
    (b"[1, 2]", "must be a JSON object"),
    ({"mdoe": "ask"}, "unknown key 'mdoe'"),
    ({"permissions": {"allow": [], "alow": []}}, "unknown key 'alow'"),
    ({"permissions": ["Bash"]}, '"permissions" must be an object'),
    ({"permissions": {"allow": "Bash"}}, '"permissions.allow" must be a list'),
    ({"permissions": {"deny": ["Bassh(rm*)"]}}, 'bad rule in "permissions.deny"'),
    ({"permissions": {"ask": ["Bash()"]}}, "empty pattern"),
    ({"permissions": {"allow": [7]}}, "not a rule: 7"),
    ({"mode": "yolo"}, "unknown mode 'yolo'"),
    ({"mode": ["ask"]}, "unknown mode"),
    ({"env": "PATH"}, '"env" must be a list'),
    ({"env": ["NOT-A-NAME"]}, '"env" must be a list'),
    ({"hooks": []}, '"hooks" must be an object'),
    ({"hooks": {"OnSave": []}}, '"hooks.OnSave": not an event name'),
    ({"hooks": {"Stop": [{"command": "x", "matcher": "Bash"}]}}, "only the keys command, timeout"),
    ({"hooks": {"PreToolUse": [{"command": "  "}]}}, ".command must be a non-empty"),
    ({"hooks": {"PreToolUse": [{"command": "x", "timeout": True}]}}, ".timeout must be seconds"),
    ({"hooks": {"PreToolUse": [{"command": "x", "timeout": 0}]}}, ".timeout must be seconds"),
    (b'{"hooks": {"PreToolUse": [{"command": "x", "timeout": NaN}]}}', ".timeout must be seconds"),
    ({"hooks": {"PreToolUse": [{"command": "x", "matcher": "(Bash"}]}}, "not a regular expression"),
    ({"hooks": {"PreToolUse": [{"command": "x", "matcher": None}]}}, "not a regular expression"),
    ({"mcpServers": {"a": {"type": "sse", "url": "http://x"}}}, "SSE servers are not supported"),
])
def test_each_bad_file_names_its_problem(tmp_path, content, problem):
    assert problem in error_of(write(tmp_path, content))


@pytest.mark.parametrize("content, problem", [
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (json.dumps({"hooks": {"PreToolUse": [{"command": "x", "matcher": "(" * 5000 + ")" * 5000}]}}).encode(),
     "not a regular expression"),
    (json.dumps({"hooks": {"PreToolUse": [{"command": "x", "matcher": "a{4294967296}"}]}}).encode(),
     "not a regular expression"),
])
def test_a_hostile_file_is_a_settings_error_not_a_crash(tmp_path, content, problem):
    """Deep nesting and regexes the re module cannot build (RecursionError, OverflowError) are
    problems of the file like any other."""
    assert problem in error_of(write(tmp_path, content))


def test_rules_parse_as_documented():
    assert parse_rule("Bash") == ("Bash", None)
    assert parse_rule(" Bash( git status* ) ") == ("Bash", "git status*")
    assert parse_rule("Bash(npm run test:*)") == ("Bash", "npm run test*")
    assert parse_rule("mcp__files__read") == ("mcp__files__read", None)
    assert parse_rule("mcp__files") == ("mcp__files__*", None)
    for junk in ["", "bash", "Bash(", "Nope(x)", "Bash(a\x00b)", None, ["Bash"]]:
        with pytest.raises(ValueError):
            parse_rule(junk)


def test_parse_reads_bytes_and_the_user_file_sits_in_the_home(tmp_path, monkeypatch):
    assert parse(tmp_path / "x.json", b'{"env": []}')["env"] == []
    monkeypatch.delenv("NANOCODE_HOME", raising=False)
    assert default_user_file(tmp_path) == tmp_path / ".config" / "nanocode" / "settings.json"
    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path / "h"))
    assert default_user_file(tmp_path) == tmp_path / "h" / "settings.json"
