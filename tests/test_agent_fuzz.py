"""Fuzz the agent loop: random token streams never raise and never write outside the project.

Trade-off: the model is an engine DOUBLE (`StreamEngine`) that emits scripted random streams, not
a JAX model. What is fuzzed is the loop's own work: streaming/decoding, stopping, parsing calls,
the grammar state machine, dispatch, permissions, tools, undo snapshots and context dropping; a
JAX forward per token would make 10,000 streams take hours and add nothing to that. The double
keeps the engine Decoder's contract (ids, room(), append() raising ContextOverflow when the
context is full, generate() with the budget check, the mask hook called before every token, a
stop on <|assistant_end|>/<|tool_call_end|>). Everything else is real: the BPE tokenizer, the
Agent, tools.permissions.Policy, the four tools and tools.undo on a temporary git repo.

Streams: random prose and raw byte tokens, random specials anywhere, well-formed and broken calls
(unknown or misspelled tool names, unknown / missing / duplicated arguments, no <|tool_val|>,
unterminated calls, nested call starts), huge values (up to ~12k characters, and replies cut at
`max_tokens`), and paths aimed outside: `../x`, absolute paths into the sentinel tree, `/tmp/<u>`,
`~/...` with HOME in the sentinel tree, a symlink in the project pointing out, NUL bytes, `.git/`
and `.nanocode/`. Half the agents run unconstrained (the stream is taken as is), half with the
grammar on (the double obeys the mask: where the script wants a token the mask forbids, it
draws an allowed one at random, as sampling would). Ctrl-C arrives at random events; between
turns /undo, /diff, /clear, /compact and mode switches happen at random.

Bash policy: Bash only ever runs through the real permission layer (modes ask / accept-edits /
plan, never auto, so every Bash call asks) and the scripted user approves only a fixed list of
harmless commands (SAFE_BASH); every other command, including the destructive and escaping ones
the streams aim at it, is answered "no". Edit runs for real on project files (accept-edits mode,
or a random yes/always from the user), and the test checks that many edits did succeed.

"Never writes outside": a sentinel tree around the project (tmp_path: HOME, an `outside/` folder
with files, the symlink target, plus `/tmp/<unique>` names the streams aim at) is fingerprinted
(path, type, size, mtime, content hash) before and after; only the project and NANOCODE_HOME
(the agent's own state: undo snapshots) may change. Invariants after every turn: the turn
returns a known stop reason and the conversation renders (saved sessions stay trainable data);
at every generation the engine's history is the render plus <|assistant_start|> (same bytes,
same specials: the model sees exactly the conversation).

Default suite: 500 streams (FUZZ_STREAMS=N to change); `-m slow` runs the full 10,000.
"""

import hashlib
import os
import threading
import uuid
from types import SimpleNamespace

import numpy as np
import pytest

from agent_builder import new_agent
from nanocode.engine import ContextOverflow
from nanocode.protocol import REJECTED, SPECIAL_TOKENS, STOP_REASONS, TOOL_ARGS
from nanocode.protocol import system_prompt
from scripted_agent import same_text
from tiny_models import commit_all, tiny_tokenizer
from tools.permissions import Policy
from tools.undo import UndoError

FUZZ_STREAMS = int(os.environ.get("FUZZ_STREAMS", "500"))
SAFE_BASH = ("echo hi", "pwd", "ls", "cat a.py", "false", "printf 'a\\nb'")
NAMES = ["Read", "Edit", "Grep", "Bash", "read", "Foo", "Rea", "ReadEdit", " Read ", "Bash\n",
         "<|tool_arg|>", "Write", "é"]
KEYS = ["file_path", "old_string", "new_string", "offset", "limit", "pattern", "path", "-A",
        "-B", "command", "x", " file_path", "file_path\n", "FILE_PATH", "cmd", "<|tool_val|>"]
TEXT = ("let me look. done: x is 2. def main():\n    return 1\n fixing the bug in a.py "
        "rejected by user error: nope ../ ~/ /tmp é ü 中文 \t\r\n").split(" ")


@pytest.fixture(scope="module")
def tok():
    texts = [system_prompt("{cwd}")] * 3 + ["def main():\n    return 1\n" * 20,
                            "let me look. done: it returns 1. rejected by user error x = 2\n" * 5]
    return tiny_tokenizer(texts, 512)


# ---- the engine double -------------------------------------------------------------------------
class StreamEngine:
    """Engine stand-in: `decoder()` gives StreamDecoders whose generate() plays `next_stream()`.
    `obey`: follow the mask hook (grammar on); otherwise the stream is emitted as is. Past the end
    of a stream that did not stop, random ordinary tokens follow until the budget runs out."""

    def __init__(self, tok, max_len, next_stream, rng, obey):
        self.tokenizer, self.max_len, self.next_stream = tok, max_len, next_stream
        self.cfg = SimpleNamespace(vocab_size=tok.vocab_size)
        self.stop_ids = (tok.encode_special("<|assistant_end|>"),
                         tok.encode_special("<|tool_call_end|>"))
        self.rng, self.obey, self.streams = rng, obey, 0
        self.agent = None  # set once the Agent exists: generate() checks its history

    def decoder(self):
        return StreamDecoder(self)


class StreamDecoder:
    def __init__(self, engine):
        self.engine, self.ids = engine, []
        self.stats = {"prefilled": 0, "generated": 0, "prefilled_total": 0, "generated_total": 0}

    def room(self):
        return self.engine.max_len - len(self.ids)

    def append(self, ids):
        ids = [int(t) for t in ids]
        if len(ids) > self.room():
            raise ContextOverflow(f"{len(ids)} tokens do not fit ({self.room()} free)")
        self.ids += ids
        self.stats["prefilled"] = len(ids)
        self.stats["prefilled_total"] += len(ids)

    def generate(self, max_tokens=None, stop=None, temperature=0.0, top_k=0, top_p=1.0, seed=0,
                 allowed=None):
        a = self.engine.agent  # what the model sees is the conversation, at every generation
        want = a.sampler.rendered_ids(a.messages) + [a.sampler.tok.encode_special("<|assistant_start|>")]
        assert same_text(a.sampler.tok, self.ids, want), "the decoder is not the rendered conversation"
        budget = self.room() if max_tokens is None else max_tokens
        if budget > self.room() or budget < 1:
            raise ContextOverflow(f"{max_tokens} new tokens do not fit ({self.room()} free)")
        e = self.engine
        e.streams += 1
        return self._stream(e.next_stream(), budget, set(e.stop_ids if stop is None else stop),
                            allowed)

    def _stream(self, script, budget, stops, allowed):
        e, out, n_text = self.engine, [], self.engine.tokenizer.bos_id
        self.stats["generated"] = 0
        for i in range(budget):
            m = None if allowed is None else np.asarray(allowed(out))
            t = script[i] if i < len(script) else int(e.rng.integers(n_text))
            if e.obey and m is not None and not m[t]:
                t = int(e.rng.choice(np.flatnonzero(m)))
            out.append(t)
            self.ids.append(t)
            self.stats["generated"] += 1
            self.stats["generated_total"] += 1
            yield t
            if t in stops:
                return


# ---- random streams ----------------------------------------------------------------------------
class Streams:
    """Random token streams for one project (paths aim inside and outside it)."""

    def __init__(self, tok, rng, root, outside, tmp_names):
        self.tok, self.rng, self.n_new = tok, rng, 0
        self.sp = {s: tok.encode_special(s) for s in SPECIAL_TOKENS}
        self.paths = ["a.py", "big.py", "sub/new.txt", f"sub/n{rng.integers(1e9)}.py", "../x",
                      "../outside/f.txt", f"{outside}/f.txt", f"{outside}/new.txt", "link/f.txt",
                      "link/new.txt", "linkfile", "~/x", "~/.bashrc", "/etc/hostname", ".",
                      "/", ".git/config", ".git/new", ".nanocode/settings.json", "a.py\x00b",
                      "sub/../../x", f"{root}/../outside/g.txt", "", " a.py"] + \
            [f"/tmp/{n}" for n in tmp_names] + [f"/tmp/{tmp_names[0]}/x"]
        self.bash = list(SAFE_BASH) + [
            "rm -rf ~", "echo x > ../escape.txt", f"touch /tmp/{tmp_names[0]}", "git push --force",
            "cat /etc/hostname", "rm -rf /", "echo $(id)", "sleep 30", "echo 'unbalanced"]

    def pick(self, xs):
        return xs[int(self.rng.integers(len(xs)))]

    def prose(self, n=None):
        n = int(self.rng.integers(0, 12)) if n is None else n
        return "".join(self.pick(TEXT) + self.pick(["", " ", "\n"]) for _ in range(n))

    def huge(self):
        return self.prose(int(self.rng.integers(300, 2500)))

    def value(self, key, name):
        r = self.rng.random()
        if r < 0.05:
            return self.huge()
        if key in ("offset", "limit", "-A", "-B"):
            return self.pick(["5", "-3", "0", "abc", "99999999999999999999", "1" * 5000, " 2 ", ""])
        if key == "command" or name == "Bash":
            return self.pick(self.bash)
        if key in ("file_path", "path"):
            return self.pick(self.paths) if r < 0.9 else self.prose()
        if key == "old_string":
            return self.pick(["x = 1", "x = 2", "", "value_1 = 1 * 2", "1"]) if r < 0.7 \
                else self.prose()
        if key == "pattern":
            return self.pick(["x", "(", "def .*", "[", "\\", "value_\\d+"])
        return self.prose()

    def sane_edit(self):
        """An Edit that can succeed: flip a.py's x, or create a new file."""
        self.n_new += 1
        old = self.pick(["x = 1", "x = 2"])
        args = {"file_path": f"sub/n{self.n_new}.py", "new_string": self.prose()}
        if self.rng.random() < 0.5:
            args = {"file_path": "a.py", "old_string": old, "new_string": f"x = {3 - int(old[-1])}"}
        return self.tok.encode_tool_call({"name": "Edit", "args": args})

    def call(self):
        """A tool call, well-formed or broken in one of many ways (as a token list)."""
        enc, sp, rng = self.tok.encode, self.sp, self.rng
        if rng.random() < 0.15:
            return self.sane_edit()
        name = self.pick(NAMES if rng.random() < 0.3 else list(TOOL_ARGS))
        req, opt = TOOL_ARGS.get(name, ((), ()))
        keys = [k for k in req if rng.random() < 0.9] + [k for k in opt if rng.random() < 0.5]
        if rng.random() < 0.2:
            keys.append(self.pick(KEYS))
        ids = [sp["<|tool_call_start|>"]] + enc(name)
        for k in keys:
            ids += [sp["<|tool_arg|>"]] + enc(k)
            if rng.random() > 0.03:
                ids.append(sp["<|tool_val|>"])
            ids += enc(self.value(k, name))
        if rng.random() < 0.05:  # a stray special inside the call
            pos = int(rng.integers(1, len(ids) + 1))
            ids.insert(pos, self.pick(list(sp.values())))
        if rng.random() > 0.08:  # else unterminated
            ids.append(sp["<|tool_call_end|>"])
        return ids

    def stream(self):
        rng, sp, out = self.rng, self.sp, []
        for _ in range(int(rng.integers(1, 5))):
            r = rng.random()
            if r < 0.35:
                out += self.tok.encode(self.prose())
            elif r < 0.45:
                out += [int(t) for t in rng.integers(0, self.tok.bos_id, int(rng.integers(1, 40)))]
            elif r < 0.55:
                out += [self.pick(list(sp.values())) for _ in range(int(rng.integers(1, 4)))]
            else:
                out += self.call()
        if rng.random() < 0.6:
            out.append(sp["<|assistant_end|>"])
        return out


# ---- the sentinel ------------------------------------------------------------------------------
def fingerprint(top, skip):
    """{relative path: (kind, size, mtime_ns, sha1)} of everything under `top` but `skip`."""
    seen = {}
    for d, dirs, files in os.walk(top):
        dirs[:] = [x for x in dirs if os.path.join(d, x) not in skip]
        for name in dirs + files:
            p = os.path.join(d, name)
            st = os.lstat(p)
            digest = ""
            if os.path.isfile(p) and not os.path.islink(p):
                with open(p, "rb") as f:
                    digest = hashlib.sha1(f.read()).hexdigest()
            kind = "link" if os.path.islink(p) else "dir" if os.path.isdir(p) else "file"
            seen[os.path.relpath(p, top)] = (kind, st.st_size if kind != "dir" else 0,
                                             st.st_mtime_ns if kind == "file" else 0, digest)
    return seen


@pytest.fixture
def world(tmp_path, monkeypatch):
    """tmp_path/{proj (git repo), outside, home (= HOME), state (= NANOCODE_HOME)}."""
    state, home, outside, root = (tmp_path / n for n in ("state", "home", "outside", "proj"))
    for d in (state, home, outside / "dir", root / "sub"):
        d.mkdir(parents=True)
    monkeypatch.setenv("NANOCODE_HOME", str(state))
    monkeypatch.setenv("HOME", str(home))
    (home / ".bashrc").write_text("# sentinel\n")
    (outside / "f.txt").write_text("outside\n")
    (outside / "dir" / "f.txt").write_text("outside dir\n")
    (root / "a.py").write_text("x = 1\n")
    (root / "big.py").write_text("".join(f"value_{i} = {i} * 2\n" for i in range(200)))
    (root / "link").symlink_to(outside / "dir")
    (root / "linkfile").symlink_to(outside / "f.txt")
    commit_all(root)
    tmp_names = [f"nanocode-fuzz-{uuid.uuid4().hex[:12]}" for _ in range(2)]
    return SimpleNamespace(root=root, outside=outside, tmp=tmp_path, tmp_names=tmp_names,
                           skip={str(root), str(state)})


def fuzz(tok, world, n_streams, seed=0):
    """Drive agents with random streams until n_streams generations ran. Returns tool results."""
    rng = np.random.default_rng(seed)
    streams = Streams(tok, rng, world.root, world.outside, world.tmp_names)
    results, total = [], 0

    def approve(name, args, decision):
        if name == "Bash":
            return "yes" if args.get("command") in SAFE_BASH else streams.pick(["no", "n", "??"])
        return streams.pick(["yes", "y", "always", "a", "no", "", "maybe", None])

    while total < n_streams:
        engine = StreamEngine(tok, int(streams.pick([768, 2048, 8192])), streams.stream, rng,
                              obey=rng.random() < 0.5)
        policy = Policy(world.root, mode=streams.pick(["ask", "accept-edits", "plan"]))
        agent = new_agent(engine, world.root, policy=policy, tool_timeout=5.0,
                          max_tokens=int(streams.pick([16, 64, 256, 1024, 4096])),
                          max_steps=int(rng.integers(1, 8)), constrain=engine.obey,
                          retries=2 if engine.obey else 0,  # raw streams: every bad call reaches the tools
                          snapshots=rng.random() < 0.5)
        engine.agent = agent
        for _ in range(int(rng.integers(1, 6))):
            cancel = threading.Event()
            p_cancel = streams.pick([0.0, 0.0, 0.01, 0.1])

            def on_event(ev, cancel=cancel, p=p_cancel):
                assert ev.kind in ("text", "tool_call", "approval", "tool_result", "status",
                                   "turn_end"), ev
                if rng.random() < p:
                    cancel.set()
            user = (streams.prose() or "go") if rng.random() > 0.03 else streams.huge() * 4
            res = agent.run_turn(user, approve=approve, on_event=on_event, cancel=cancel)
            assert res.stop_reason in STOP_REASONS
            results += [c["result"] for c in res.tool_calls]
            tok.render_conversation({"messages": agent.messages})  # renders: valid schema
            r = rng.random()
            if r < 0.1:
                try:
                    agent.undo() if rng.random() < 0.5 else agent.diff()
                except UndoError:
                    pass
            elif r < 0.15:
                agent.clear()
            elif r < 0.2:
                agent.set_mode(streams.pick(["ask", "accept-edits", "plan"]))
            elif r < 0.25:
                assert agent.compact() >= 0
        total += engine.streams
    return results


def check_fuzz(tok, world, n):
    before = fingerprint(world.tmp, world.skip)
    results = fuzz(tok, world, n)
    after = fingerprint(world.tmp, world.skip)
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    assert not changed, f"written outside the project: {sorted(changed)}"
    for name in world.tmp_names:
        assert not os.path.lexists(f"/tmp/{name}"), f"/tmp/{name} was created"
    seen = lambda s: sum(s in r for r in results)  # noqa: E731 - the fuzz reached each path
    edits = sum(r.startswith(("a.py\n", "sub/")) for r in results)
    print(f"{n} streams: {len(results)} tool results, {edits} edits applied, "
          f"{sum(r.startswith('error') for r in results)} errors, {seen(REJECTED)} rejected")
    for want in ("error: unknown tool", "error: missing argument", "error: malformed tool call",
                 "error: path outside the project", REJECTED, "    1→"):
        assert seen(want), want
    assert edits > n // 200


def test_fuzz_streams(tok, world):
    check_fuzz(tok, world, FUZZ_STREAMS)


@pytest.mark.slow
def test_fuzz_10000_streams(tok, world):
    check_fuzz(tok, world, 10_000)
