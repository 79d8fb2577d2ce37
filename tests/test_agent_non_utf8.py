"""A project file whose name is not UTF-8 (b'caf\\xe9.py', a Latin-1 name): Python holds it as a
lone surrogate ('caf\\udce9.py'), which no terminal and no strict UTF-8 encoder accepts. An
@-mention of it must run the turn, show the name escaped, save the session (readable back to the
same string) and print the answer: it used to crash the TUI's turn and, headless, lose the answer
in a traceback from sessions.save."""
import os
import subprocess
import sys
from pathlib import Path

from agent.loop.mentions import complete, mentioned, project_files
from agent.sessions import SessionStore, list_sessions, load_session
from agent.tui.app import NanocodeApp
from scripted_agent import reply
from tiny_models import commit_all
from tui_pilot import drive, engine, make, submit, tok, until  # noqa: F401 - fixtures

ROOT = Path(__file__).resolve().parents[1]
NAME = os.fsdecode(b"caf\xe9.py")  # 'caf\udce9.py'


def latin1_project(root: Path) -> Path:
    root.mkdir()
    (root / "a.py").write_text("x = 1\n")
    with open(os.fsencode(root) + b"/caf\xe9.py", "w") as f:
        f.write("y = 2\n")
    commit_all(root)
    return root


def test_completion_skips_the_name_and_a_mention_still_pins_it(tmp_path):
    root = latin1_project(tmp_path / "p")
    assert NAME in project_files(root) and complete("@caf", project_files(root)) == []
    assert mentioned(f"explain @{NAME}", root) == [NAME]


def test_headless_mention_saves_the_session_and_prints(ckpt, tmp_path):
    root = latin1_project(tmp_path / "p")
    r = subprocess.run([sys.executable, "-m", "agent.cli", "-p", b"explain @caf\xe9.py", "--model",
                        str(ckpt), "--cwd", str(root), "--max-tokens", "8", "--max-steps", "2"],
                       cwd=ROOT, capture_output=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "NANOCODE_HOME": str(tmp_path / "home")})
    assert r.returncode in (0, 3, 4) and b"Traceback" not in r.stderr, r.stderr.decode()[-2000:]
    r.stdout.decode("utf-8")  # what reached the terminal is UTF-8
    [path] = list_sessions(root)
    path.read_bytes().decode("utf-8")  # the file too
    messages, _ = load_session(path)
    assert messages[1] == {"role": "user", "content": f"explain @{NAME}"}
    pinned = messages[2]["tool_call"]  # the pinned Read of the file, and what it read
    assert pinned == {"name": "Read", "args": {"file_path": NAME}} and "y = 2" in messages[3]["content"]


def test_tui_mention_runs_the_turn_and_shows_the_name_escaped(engine, tok, tmp_path, monkeypatch):
    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path / "home"))
    root = latin1_project(tmp_path / "p")
    agent, _ = make(engine, root, [reply(tok, "done: it returns 1.")])
    agent.conv.store = SessionStore(root, agent.meta["id"])
    app = NanocodeApp(agent=agent, model_name="tiny")

    async def body(pilot):
        await submit(pilot, f"explain @{NAME}")
        await until(pilot, lambda: app.turns == 1)
        shown = app.transcript_text()
        assert "caf\\udce9.py" in shown and NAME not in shown
    drive(app, body)
    [path] = list_sessions(root)
    assert load_session(path)[0][1]["content"] == f"explain @{NAME}"
