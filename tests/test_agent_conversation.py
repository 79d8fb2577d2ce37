"""The conversation store (agent/loop/conversation.py) alone, saved by the real SessionStore: defaults
filled in, turns recorded and marked, saved to the session file, and cleared into a new session."""
import json

import pytest

from agent.loop.conversation import Conversation
from agent.sessions import SessionStore


def test_conversation_records_marks_saves_and_clears(tmp_path):
    store = SessionStore(tmp_path, "abc")
    conv = Conversation(str(tmp_path), [{"role": "user", "content": "hi"}], {"id": "abc"}, store)
    assert conv.meta["cwd"] == str(tmp_path) and conv.meta["turns"] == []  # defaults filled in
    conv.messages.append({"role": "assistant", "content": "hello"})
    conv.record_turn(0, "done", [], None)
    assert conv.mark("good") == (1, None)
    with pytest.raises(ValueError, match="turn 1 is already marked good"):
        conv.mark("good")
    assert conv.mark("bad") == (1, "good")  # one verdict per turn: the latest
    assert conv.mark("good") == (1, "bad")
    saved = json.loads(store.path.read_text())
    assert saved["messages"][-1]["content"] == "hello" and saved["meta"]["turns"][0]["mark"] == "good"
    conv.clear()
    assert conv.messages == [] and conv.id != "abc" and conv.store.path != store.path
