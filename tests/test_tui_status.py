"""agent/tui/status.py alone: the Textual face's status line over a real Agent (a RemoteSampler
on a loopback server that only lists its model, so nothing is generated): the fields and their
order, the lesser ones dropped first as the width shrinks, the state always last and cut only
when it alone does not fit, a long venv name cut, the context fill, and Shift+Tab's mode cycle."""
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agent.loop.driver import Agent
from agent.samplers.remote import RemoteSampler
from agent.settings import TurnSettings
from agent.tui.status import SEP, next_mode, status_fields, status_line
from nanocode.protocol import MODES
from tools.permissions import Policy
from tools.project_env import OVERRIDE, SHORT_NAME
from tools.sandbox import for_commands


class Models(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"data": [{"id": "tiny-remote", "context_length": 131072}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def url():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Models)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project whose commands' python is a venv with a long name (outside the project)."""
    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(OVERRIDE, raising=False)
    venv = tmp_path / "tmp.qnfsCD7rHF" / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    (venv / "pyvenv.cfg").write_text("version = 3.11.7\n")
    monkeypatch.setenv("VIRTUAL_ENV", str(venv))
    root = tmp_path / "proj"
    root.mkdir()
    (root / "a.py").write_text("x = 1\n")
    return root


def agent_in(url, root, sandbox: bool) -> Agent:
    return Agent(RemoteSampler(url), root, Policy.load(root, mode="accept-edits"),
                 TurnSettings(snapshots=False, sandbox=sandbox))


def test_the_full_line_names_every_field_in_order(url, project):
    agent = agent_in(url, project, sandbox=False)
    used = agent.sampler.context_used(agent.messages)
    line = status_line(agent, "tiny", 12.345, "ready")
    venv = "python venv …" + "tmp.qnfsCD7rHF/venv"[-(SHORT_NAME - 1):] + " 3.11.7"  # the name's end kept
    assert line.split(SEP) == ["tiny", "mode accept-edits", venv, "NO SANDBOX",
                               f"context {used:,}/131,072", "12.3 tok/s", "ready"]
    assert status_line(agent, "", None, "working").split(SEP)[0] == "nanocode"
    assert "– tok/s" in status_line(agent, "tiny", 0.0, "ready")
    assert status_line(None, "tiny", None, "loading") == f"tiny{SEP}loading"  # before the model is up


def test_fields_go_lesser_first_and_keep_their_order(url, project):
    agent = agent_in(url, project, sandbox=False)
    full = status_line(agent, "tiny", 9.0, "waiting for your approval")
    seen = []
    for width in range(len(full), -1, -1):
        line = status_line(agent, "tiny", 9.0, "waiting for your approval", width)
        assert len(line) <= width
        if width >= len("waiting for your approval"):
            assert line.endswith("waiting for your approval")
        parts = line.split(SEP)[:-1]
        if parts and (not seen or parts != seen[-1]):
            seen.append(parts)
    dropped = [next(p for p in a if p not in b) for a, b in zip(seen, seen[1:] + [[]])]
    assert [d.split()[0] for d in dropped] == ["9.0", "python", "tiny", "context", "NO", "mode"]
    assert status_line(agent, "tiny", 9.0, "waiting for your approval", 10) == "waiting f…"
    assert status_line(agent, "tiny", 9.0, "ready", 1) == "…"
    assert status_line(agent, "tiny", 9.0, "ready", 0) == ""  # at most the width, even 0


def test_a_working_sandbox_is_the_field_that_goes_before_the_model(url, project):
    if for_commands(True)[0] is None:
        pytest.skip("no OS sandbox on this machine")
    agent = agent_in(url, project, sandbox=True)
    ranks = dict((text, rank) for rank, text in status_fields(agent, "tiny", 1.0))
    assert "sandbox" in ranks and "NO SANDBOX" not in ranks
    order = sorted(ranks, key=ranks.get)
    assert order[:4] == ["1.0 tok/s", order[1], "sandbox", "tiny"] and order[1].startswith("python")


def test_shift_tab_cycles_the_modes():
    assert [next_mode(m) for m in MODES] == [*MODES[1:], MODES[0]]
    assert MODES == ("ask", "accept-edits", "auto", "plan")
    assert next_mode("bogus") == "ask"


def test_the_line_follows_the_agent(url, project):
    agent = agent_in(url, project, sandbox=False)
    agent.set_mode("plan")
    before = agent.sampler.context_used(agent.messages)
    agent.messages.append({"role": "user", "content": "word " * 4000})
    line = status_line(agent, "tiny", None, "ready")
    assert "mode plan" in line.split(SEP)
    after = agent.sampler.context_used(agent.messages)
    assert after > before + 1000 and f"context {after:,}/131,072" in line.split(SEP)
    assert os.environ["VIRTUAL_ENV"].endswith("venv")
