"""Shared pieces of the adversarial tests: a process that swaps a path for a symlink to the
outside in a loop (renameat2 RENAME_EXCHANGE, so the name always exists), and the smallest model
the agent's driver accepts, one that writes scripted tool calls."""
import subprocess
import sys
import textwrap

import pytest

from agent.samplers.sampler import Reply
from agent.settings import SamplerSettings

FLIPPER = textwrap.dedent("""
    import ctypes, os, sys
    name, outside = sys.argv[1], sys.argv[2]
    link = name + ".link"
    os.symlink(outside, link)
    libc = ctypes.CDLL(None, use_errno=True)
    AT_FDCWD, RENAME_EXCHANGE = -100, 2
    def exchange():  # atomic: the name is always there, a real entry or a symlink to the outside
        if libc.renameat2(AT_FDCWD, name.encode(), AT_FDCWD, link.encode(), RENAME_EXCHANGE):
            raise OSError(ctypes.get_errno(), "renameat2")
    try:
        exchange()
        exchange()
    except (OSError, AttributeError):  # no renameat2 here: rename dance (the name is briefly missing)
        real = name + ".real"
        os.unlink(link)
        def exchange():
            os.rename(name, real); os.symlink(outside, link); os.rename(link, name)
            os.unlink(name); os.rename(real, name)
    print("go", flush=True)
    while True:
        exchange()
""")


@pytest.fixture
def flipper():
    """start(name, outside): swap `name` with a symlink to `outside` until the test ends."""
    procs = []

    def start(name, outside):
        p = subprocess.Popen([sys.executable, "-c", FLIPPER, str(name), str(outside)], stdout=subprocess.PIPE)
        assert p.stdout.readline().strip() == b"go"
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.kill()
        p.wait()


def race_target(proj, what):
    """(name to swap, what the symlink points at, the path asked for): a folder `d` holding
    secret.txt (`what` = "dir") or a file f.txt, both reading "safe", inside `proj`; the outside
    is proj/../outside."""
    out = proj.parent / "outside"
    if what == "dir":
        (proj / "d").mkdir()
        (proj / "d" / "secret.txt").write_text("safe\n")
        return proj / "d", out, "d/secret.txt"
    (proj / "f.txt").write_text("safe\n")
    return proj / "f.txt", out / "secret.txt", "f.txt"


class ScriptedModel:
    """agent/samplers/sampler.Sampler with no model behind it: each reply is the next scripted call
    [(name, args), ...], then a plain answer. Fast enough for thousands of driver calls."""
    settings = SamplerSettings(max_tokens=64)
    max_len, reserve, n_replies = 1 << 16, 1024, 0

    def __init__(self, calls):
        self.calls = list(calls)

    def reply(self, conv, tools, emit, cancel, usage, retry=False):
        call = None
        if self.calls:
            name, args = self.calls.pop(0)
            call = {"name": name, "args": args}
        msg = {"role": "assistant", "content": "" if call else "done", **({"tool_call": call} if call else {})}
        conv.messages.append(msg)
        return Reply(msg, call, None, "stop")

    def count(self, text):
        return len(text) // 4 + 1

    def sync(self, conv, emit, usage):
        pass

    def invalidate(self):
        pass

    def reset(self):
        pass

    def tree_changed(self):
        pass

    def fork(self, root, settings):
        return ScriptedModel(self.calls)

    def context_used(self, messages):
        return sum(self.count(m["content"]) for m in messages)

    def describe(self):
        return "scripted calls"
