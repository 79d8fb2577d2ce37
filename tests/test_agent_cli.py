"""The `nanocode` command: model selection, headless -p (text and JSON), the plain REPL driven
by a scripted console, and --help without jax."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent import cli, headless, model
from agent.repl import run_repl
from agent.sessions import list_sessions, load_session
from agent_builder import new_agent
from tools.permissions import Policy

ROOT = Path(__file__).resolve().parents[1]



def test_help_imports_no_jax():
    code = ("import sys\nfrom agent import cli\n"
            "for argv in (['--help'], ['--version']):\n"
            "    try:\n        cli.main(argv)\n    except SystemExit:\n        pass\n"
            "heavy = {'jax', 'numpy', 'textual', 'prompt_toolkit'} & set(sys.modules)\n"
            "assert not heavy, heavy\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_flags_parse():
    a = cli.parse_args(["--yes", "--temperature", "0.7", "--max-tokens", "9", "-p", "hi",
                        "--output-format", "json", "--resume", "ab12", "--cwd", "/tmp"])
    assert (a.mode, a.temperature, a.max_tokens, a.prompt, a.output_format, a.resume) == \
        ("auto", 0.7, 9, "hi", "json", "ab12")
    assert cli.parse_args(["--mode", "plan"]).mode == "plan"
    a = cli.parse_args([])
    assert a.mode is None  # settings files decide, else ask
    with pytest.raises(SystemExit):
        cli.parse_args(["--continue", "--resume", "x"])
    assert cli.parse_args(["-p"]).prompt == "-"  # the prompt comes from stdin


@pytest.mark.parametrize("argv, says", [
    (["--max-tokens", "0"], "--max-tokens must be at least 1"),
    (["--max-steps", "0"], "--max-steps must be at least 1"),
    (["--top-k", "-1"], "--top-k must be at least 0"),
    (["--temperature", "-1"], "--temperature must be >= 0"),
    (["--temperature", "nan"], "--temperature must be >= 0"),
])
def test_bad_numbers_are_refused(argv, says, capsys):
    with pytest.raises(SystemExit) as e:
        cli.parse_args(["-p", "hi", *argv])
    assert e.value.code == 2 and says in capsys.readouterr().err


def test_empty_prompt_is_refused(proj, monkeypatch, capsys):
    """-p "" and an empty stdin: exit 2 before any model loads (no --model needed to see it)."""
    assert cli.main(["-p", "", "--cwd", str(proj)]) == 2
    assert "the prompt is empty" in capsys.readouterr().err
    import io
    monkeypatch.setattr(sys, "stdin", io.StringIO("  \n"))
    assert cli.main(["-p", "--cwd", str(proj)]) == 2


def test_missing_default_model_says_how_to_train(proj, tmp_path, monkeypatch, capsys):
    import nanocode.common
    monkeypatch.setattr(nanocode.common, "DEFAULT_MODEL", tmp_path / "nope")
    assert cli.main(["-p", "hi", "--cwd", str(proj)]) == 2
    err = capsys.readouterr().err
    assert "no default model" in err and "train speedrun" in err and "train sft" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_bad_checkpoint_is_one_line(proj, ckpt, tmp_path, capsys):
    import shutil
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli.main(["-p", "hi", "--model", str(empty), "--cwd", str(proj)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no checkpoint for") and len(err.strip().splitlines()) == 1
    bad = tmp_path / "bad" / "checkpoints" / "5"  # a step folder with nothing loadable in it
    bad.mkdir(parents=True)
    assert cli.main(["-p", "hi", "--model", str(bad.parent), "--cwd", str(proj)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: no complete checkpoint in") and len(err.strip().splitlines()) == 1
    broken = tmp_path / "broken"  # complete, but its params' data files are junk
    shutil.copytree(ckpt, broken)
    for f in broken.rglob("params/**/d/*"):
        f.write_bytes(b"junk")
    assert cli.main(["-p", "hi", "--model", str(broken), "--cwd", str(proj)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot load the model") and len(err.strip().splitlines()) == 1
    assert cli.main(["-p", "hi", "--model", "no-such-tag", "--cwd", str(proj)]) == 2
    assert "no checkpoint for 'no-such-tag'" in capsys.readouterr().err


def test_model_tag_resolves_under_runs(proj, tmp_path):
    run = tmp_path / "home" / "runs" / "mytag" / "checkpoints"
    (run / "10").mkdir(parents=True)
    assert model.resolve_model("mytag") == (run, "mytag")


def test_headless_json(ckpt, proj, capsys):
    rc = cli.main(["-p", "what is x?", "--model", str(ckpt), "--cwd", str(proj),
                   "--output-format", "json", "--max-tokens", "24", "--temperature", "1"])
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert set(data) >= {"answer", "tool_calls", "files_changed", "steps", "stop_reason", "usage"}
    assert rc == headless.EXIT_CODES[data["stop_reason"]], err  # 0 only when it answered
    assert data["stop_reason"] in ("done", "max_tokens", "rejected", "repeat", "step_limit")
    u = data["usage"]
    assert u["completion_tokens"] >= 1 and u["prompt_tokens"] > 10 and u["seconds"] >= u["generate_s"] > 0
    from tools.sandbox import bash_sandbox
    said = "sandbox: namespaces, network off" if bash_sandbox()["available"] else "NO SANDBOX"
    assert data["sandbox"].startswith(said) and err.splitlines()[0].endswith(data["sandbox"])
    # the session was saved and renders
    [path] = list_sessions(proj)
    messages, meta = load_session(path)
    assert meta["id"] == data["session"] and messages[1]["content"] == "what is x?"
    from nanocode.checkpoint import load_tokenizer
    load_tokenizer(ckpt).render_conversation({"messages": messages})
    # --continue picks it up
    rc = cli.main(["-p", "and y?", "--model", str(ckpt), "--cwd", str(proj), "--continue",
                   "--max-tokens", "8"])
    assert rc in (0, 3, 4)
    messages, _ = load_session(path)
    assert [m["content"] for m in messages if m["role"] == "user"] == ["what is x?", "and y?"]
    rc = cli.main(["-p", "and z?", "--model", str(ckpt), "--cwd", str(proj), "--resume",
                   data["session"], "--max-tokens", "4"])
    assert rc in (0, 3, 4) and len(list_sessions(proj)) == 1
    assert [m["content"] for m in load_session(path)[0] if m["role"] == "user"][-1] == "and z?"
    assert cli.main(["-p", "x", "--model", str(ckpt), "--cwd", str(proj), "--resume", "nope"]) == 2


def test_headless_subprocess_text(ckpt, proj):
    """The real entry point in a fresh process: exit 0, the answer alone on stdout."""
    r = subprocess.run([sys.executable, "-m", "agent.cli", "-p", "hi", "--model", str(ckpt),
                        "--cwd", str(proj), "--max-tokens", "8", "--temperature", "0"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode in (0, 3, 4), r.stderr
    assert "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "agent.cli", "-p", "hi", "--model", str(ckpt), "--cwd",
                        str(proj), "--max-tokens", "8", "--no-sandbox", "--output-format", "json"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    data = json.loads(r.stdout)  # said loudly first, and in the JSON
    assert r.returncode == headless.EXIT_CODES[data["stop_reason"]], r.stderr
    assert r.stderr.startswith("warning: NO SANDBOX (turned off): every command asks")
    assert data["sandbox"] == "NO SANDBOX (turned off): every command asks"


def test_headless_stream_json_from_stdin(ckpt, proj):
    """The prompt on stdin, one JSON event per line on stdout (init, text deltas ... the result
    with usage), the exit status from the stop reason."""
    r = subprocess.run([sys.executable, "-m", "agent.cli", "-p", "--model", str(ckpt), "--cwd",
                        str(proj), "--max-tokens", "12", "--temperature", "1", "--output-format",
                        "stream-json"], input="what is x?\n", cwd=ROOT, capture_output=True,
                       text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    events = [json.loads(line) for line in r.stdout.splitlines()]
    assert events[-1]["type"] == "result" and events[-2]["type"] == "turn_end"
    init, end = events[0], events[-1]  # the first line says who is talking, before anything runs
    assert init == {"type": "init", "session": end["session"], "model": str(ckpt), "cwd": str(proj),
                    "mode": "ask", "tools": ["Read", "Edit", "Grep", "Bash"], "sandbox": end["sandbox"]}
    assert r.returncode == headless.EXIT_CODES[end["stop_reason"]], r.stderr
    assert end["usage"]["completion_tokens"] >= 1
    texts = "".join(e["text"] for e in events if e["type"] == "text")
    assert end["answer"].strip() in texts  # the answer was streamed before the result line
    assert {e["type"] for e in events} >= {"text", "turn_end", "result"}
    assert len(r.stderr.splitlines()) == 1  # only the sandbox line
    from agent.sessions import list_sessions as sessions
    [path] = sessions(proj)
    assert load_session(path)[0][1]["content"] == "what is x?\n"


def test_every_stop_reason_has_an_exit_code():
    from nanocode.protocol import STOP_REASONS
    assert set(headless.EXIT_CODES) == set(STOP_REASONS) and headless.EXIT_CODES["done"] == 0


def test_ctrl_c_during_start_up_exits_at_once(ckpt, proj):
    """SIGINT while jax loads: exit 130 with one line, no traceback, nothing run or saved."""
    import signal
    import time
    p = subprocess.Popen([sys.executable, "-m", "agent.cli", "-p", "hi", "--model", str(ckpt),
                          "--cwd", str(proj)], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    time.sleep(1.0)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130 and "interrupted during start-up" in err, err
    assert "Traceback" not in err and out == "" and list_sessions(proj) == []


class FakeConsole:
    def __init__(self, lines):
        self.lines, self.out = list(lines), []

    def ask(self, prompt):
        self.out.append(prompt)
        if not self.lines:
            raise EOFError
        return self.lines.pop(0)

    def write(self, text):
        self.out.append(text)

    def dim(self, text):
        self.out.append(text + "\n")


def test_repl_slash_commands_and_a_turn(ckpt, proj):
    from agent.model import load_engine
    engine = load_engine(ckpt)
    agent = new_agent(engine, proj, max_tokens=8)
    con = FakeConsole(["/help", "/mode plan", "hello", "/diff", "/undo", "/mode nope", "/clear",
                       "/quit"])
    assert run_repl(agent, "tiny", console=con) == 0
    text = "".join(con.out)
    assert "/undo" in text and "mode: plan" in text and "unknown mode" in text
    assert "new conversation" in text and agent.messages == []
    assert agent.sandbox_status + "\n" in con.out  # the banner says what contains commands
    (proj / ".nanocode").mkdir()
    (proj / ".nanocode" / "settings.json").write_text('{"permissions": {"allow": ["Bash(pytest*)"]}}')
    (proj / "AGENTS.md").write_text("run pytest\n")
    agent = new_agent(engine, proj, max_tokens=8, policy=Policy.load(proj, trust_settings=True))
    con = FakeConsole(["/model", "/memory", "/resume", "/settings", "/session", "/help", "/exit"])
    assert run_repl(agent, "tiny", console=con) == 0
    text = "".join(con.out)  # the TUI's commands, here too (one table: agent/commands.py)
    for want in ("layers, width", "AGENTS.md (in the system prompt", "run pytest",
                 "saved sessions", "allow rules: Bash(pytest*)", "hooks: -",
                 str(proj / '.nanocode' / 'settings.json'), "session "):
        assert want in text, want
    from agent.commands import COMMANDS, help_text
    assert help_text() + "\n" in con.out and all(c.name in help_text() for c in COMMANDS)
    off = new_agent(engine, proj, max_tokens=8, sandbox=False)
    con = FakeConsole(["/quit"])
    run_repl(off, "tiny", console=con)
    assert "warning: NO SANDBOX (turned off): every command asks\n" in con.out


def test_headless_best_of_json(ckpt, proj, capsys):
    """--best-of 2 on a project without git: two rollouts in copies, progress on stderr, the
    rollouts summary in the JSON, the winner's conversation saved at the project's path."""
    rc = cli.main(["-p", "what is x?", "--model", str(ckpt), "--cwd", str(proj), "--best-of", "2",
                   "--output-format", "json", "--max-tokens", "8"])
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert rc == headless.EXIT_CODES[data["stop_reason"]], err
    bo = data["best_of"]
    assert bo["n"] == 2 and [r["index"] for r in bo["rollouts"]] == [0, 1] and bo["pick"] in (0, 1)
    assert (bo["pass_at_1"]["temperature"], bo["rollouts"][1]["temperature"]) == (0.0, 0.7)
    assert "rollout 1/2" in err and "rollout 2/2" in err and "best of 2" in err
    assert (proj / "a.py").read_text() == "x = 1\n" and data["files_changed"] == bo["applied"]
    [path] = list_sessions(proj)
    messages, meta = load_session(path)
    assert meta["id"] == data["session"] and messages[1]["content"] == "what is x?"
    assert str(proj) in messages[0]["content"] and "nanocode-best-of" not in json.dumps(messages)


def test_folder_trust(tmp_path, monkeypatch, capsys):
    """/, $HOME or a folder with no project marker: headless cannot ask, so it refuses (exit 1,
    before any model loads) unless --trust; a project folder says nothing."""
    home = tmp_path / "home"
    (home / "scratch").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    assert cli.main(["-p", "hi", "--cwd", str(home), "--model", "no-such-tag"]) == 1
    err = capsys.readouterr().err
    assert "your home folder" in err and "not trusted" in err and "--trust" in err
    assert cli.main(["-p", "hi", "--cwd", "/", "--model", "no-such-tag"]) == 1
    assert "file-system root" in capsys.readouterr().err
    assert cli.main(["-p", "hi", "--cwd", str(home / "scratch"), "--model", "no-such-tag"]) == 1
    err = capsys.readouterr().err
    assert "no project marker" in err and "not trusted" in err and "--trust" in err
    # --trust goes on (to the next error: the missing model)
    assert cli.main(["-p", "hi", "--cwd", str(home), "--trust", "--model", "no-such-tag"]) == 2
    assert cli.main(["-p", "hi", "--cwd", str(home / "scratch"), "--trust", "--model", "no-such-tag"]) == 2
    (home / "scratch" / ".git").mkdir()
    assert cli.main(["-p", "hi", "--cwd", str(home / "scratch"), "--model", "no-such-tag"]) == 2
    assert "warning" not in capsys.readouterr().err


@pytest.mark.parametrize("stdin", [subprocess.DEVNULL, "q\n"])
def test_no_terminal_no_full_screen_app(proj, stdin):
    """`nanocode < /dev/null | tail` and `echo q | nanocode`: no terminal to draw on or read keys
    from, so exit 2 at once naming -p and --plain (the full-screen app used to start into the
    pipe and never exit)."""
    r = subprocess.run([sys.executable, "-m", "agent.cli", "--cwd", str(proj)], cwd=ROOT,
                       input=stdin if isinstance(stdin, str) else None,
                       stdin=stdin if not isinstance(stdin, str) else None,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout[-300:])
    assert "stdin is not a terminal" in r.stderr and "-p" in r.stderr and "--plain" in r.stderr
    assert "Traceback" not in r.stderr


def test_plain_reads_requests_from_a_pipe(ckpt, proj):
    """--plain is the face for pipes: requests line by line, /quit (or the end of input) leaves."""
    r = subprocess.run([sys.executable, "-m", "agent.cli", "--plain", "--model", str(ckpt), "--cwd",
                        str(proj)], input="/mode plan\n/quit\n", cwd=ROOT, capture_output=True,
                       text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0 and "mode: plan" in r.stdout, r.stderr[-2000:]


def test_output_format_needs_a_headless_run(capsys):
    with pytest.raises(SystemExit) as e:
        cli.parse_args(["--output-format", "json"])
    assert e.value.code == 2 and "--output-format goes with -p" in capsys.readouterr().err
    assert cli.parse_args(["-p", "hi"]).output_format == "text"


def test_repl_undo_then_diff_says_what_happened(engine, tok, repo):
    """A turn that edits a.py and creates norep.txt, then in the --plain REPL: /undo yes says
    which file it restored and which it removed (it used to say "restored: norep.txt" for a file
    it deleted); /diff no longer shows the undone change; a second /undo yes says nothing is left
    and how to reach earlier sessions."""
    from scripted_agent import call, make, reply
    bash = call(tok, "", "Bash", command="echo y = 2 > a.py && echo new > norep.txt")
    agent, _ = make(engine, repo, [bash, reply(tok, "done.")], mode="auto")
    con = FakeConsole(["change it", "/undo yes", "/diff", "/undo yes", "/quit"])
    assert run_repl(agent, "tiny", console=con) == 0
    text = "".join(con.out)
    assert "undid request 1: restored a.py; removed (the request created them) norep.txt" in text
    assert (repo / "a.py").read_text() == "x = 1\n" and not (repo / "norep.txt").exists()
    assert "request 1 was undone: none of its changes are in the files now" in text
    assert "+y = 2" not in text
    assert ("nothing left to undo (request 1 is undone already) in this session; /undo all reaches "
            "the last request of any session") in text


def test_repl_marks_calls_and_says_how_to_resume(engine, tok, repo):
    """--plain: a tool call is marked `• `, its result `  └ ` (not the user's `> `); /good twice
    says the turn is marked already, /bad after it says what it replaces; leaving (Ctrl-D) prints
    how to resume the session."""
    from scripted_agent import call, make, reply
    agent, _ = make(engine, repo, [call(tok, "", "Read", file_path="a.py"), reply(tok, "x is 1.")])
    con = FakeConsole(["what is x?", "/good", "/good", "/bad"])
    assert run_repl(agent, "tiny", console=con) == 0
    text = "".join(con.out)
    assert '• Read(file_path="a.py")\n' in text and "  └ " in text and "> Read" not in text
    assert "turn 1 marked good (" in text and "turn 1 is already marked good" in text
    assert "turn 1 marked bad, no longer good" in text and agent.meta["turns"][0]["mark"] == "bad"
    assert text.endswith(f"resume this session with: nanocode --resume {agent.meta['id']}\n")
    con = FakeConsole([])  # nothing asked: nothing to resume
    assert run_repl(new_agent(engine, repo), "tiny", console=con) == 0
    assert "--resume" not in "".join(con.out)


def test_progress_lines_show_patterns_as_written():
    """A Grep pattern reads as the model wrote it, not double-escaped (`def f\\\\(` was shown)."""
    from agent.display import call_title, format_call
    assert format_call("Grep", {"pattern": r"def f\(", "path": "."}) == r'Grep(pattern="def f\(", path=".")'
    assert call_title("Grep", {"pattern": r"\d+\s", "path": "src"}) == r'Grep "\d+\s" src'
    assert format_call("Bash", {"command": "a\nb"}) == r'Bash(command="a\nb")'


def test_repl_switches_model_and_session(ckpt, proj, tmp_path):
    """/model NAME goes on with another checkpoint (a bad name changes nothing and says why);
    /resume ID continues a saved session in place (it used to only list them)."""
    import shutil

    from agent.model import load_engine
    engine = load_engine(ckpt)
    first = new_agent(engine, proj, max_tokens=4)
    from agent.sessions import SessionStore
    first.conv.store = SessionStore(proj, first.meta["id"])
    first.run_turn("what is x?")
    other = tmp_path / "other" / "checkpoints"
    shutil.copytree(ckpt, other)
    agent = new_agent(engine, proj, max_tokens=4)
    agent.meta["model"] = str(ckpt)
    con = FakeConsole(["/model nope", f"/model {other}", "/resume nope", f"/resume {first.meta['id']}",
                       "and y?"])
    assert run_repl(agent, "tiny", console=con) == 0
    text = "".join(con.out)
    assert "no checkpoint for 'nope'" in text and f"still using {ckpt}" in text
    assert f"model {other}\n" in text and agent.meta["model"] == str(other)
    assert agent.sampler.engine is not engine  # really loaded from the other checkpoint
    assert "no session 'nope'" in text
    assert f"resumed session {first.meta['id']} (1 earlier requests)" in text
    assert agent.meta["id"] == first.meta["id"]
    assert [m["content"] for m in agent.messages if m["role"] == "user"] == ["what is x?", "and y?"]


def test_repl_custom_commands_init_and_usage(engine, tok, repo, monkeypatch):
    """A markdown file under .nanocode/commands (or the user's commands folder) is a slash
    command whose text, $ARGUMENTS filled in, is sent as the request; /help lists it; a project
    file cannot shadow a built-in. /init writes a starter AGENTS.md read off the project and
    never overwrites it. Each turn ends with a usage line."""
    from scripted_agent import make, reply
    user = Path(os.environ["NANOCODE_HOME"]) / "commands"
    user.mkdir(parents=True)
    (user / "explain.md").write_text("Explain $ARGUMENTS in two sentences.\n")
    cmds = repo / ".nanocode" / "commands"
    cmds.mkdir(parents=True)
    (cmds / "review.md").write_text("---\ndescription: review a file for bugs\n---\nReview $ARGUMENTS for bugs.\n")
    (cmds / "undo.md").write_text("rm -rf everything\n")  # cannot replace the built-in /undo
    (cmds / "fix.md").write_text("Fix the failing test.\n")  # no $ARGUMENTS: they are appended
    (repo / "tests").mkdir()
    (repo / "tests" / "test_a.py").write_text("def test_a():\n    assert True\n")
    (repo / "README.md").write_text("# proj\n\nA tiny project that holds x.\n")
    agent, _ = make(engine, repo, [reply(tok, "ok.")] * 4)
    con = FakeConsole(["/help", "/review a.py", "/explain big.py", "/fix quickly", "/undo", "/init", "/init"])
    assert run_repl(agent, "tiny", console=con) == 0
    text = "".join(con.out)
    assert "/review [ARGS]" in text and "review a file for bugs" in text and "/explain [ARGS]" in text
    asks = [m["content"] for m in agent.messages if m["role"] == "user"]
    assert [a.splitlines()[-1] for a in asks] == ["Review a.py for bugs.", "Explain big.py in two sentences.",
                                                  "quickly"]
    assert asks[2].startswith("Fix the failing test.")
    assert "rm -rf" not in text and "nothing left to undo" in text  # the built-in ran
    assert text.count(" tokens in, ") == 3 and " out, " in text  # one usage line per turn
    notes = (repo / "AGENTS.md").read_text()
    for want in ("## proj", "A tiny project that holds x.", "- tests/ (1 files)", "- a.py",
                 "`python -m pytest -q`", "Python ("):
        assert want in notes, want
    assert "AGENTS.md exists already" in text and (repo / "AGENTS.md").read_text() == notes
