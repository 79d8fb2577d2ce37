"""A real Agent whose model is scripted: the tiny engine really runs (prefill, decode, cache reuse)
and the loop's own grammar mask stays in the path, but at each step only the next scripted token
is allowed (a Script is the sampler's extra_mask). The fixtures that build the engine and the
project (`tok`, `engine`, `repo`) are in tests/conftest.py; TEXTS and BIG are what they are
built from.

Trade-off: a script is a list of token sequences, one per generation, so a retried reply takes
the next scripted one; `make` turns retries off unless a test asks for them."""

from agent_builder import new_agent
from nanocode.protocol import system_prompt
from tiny_models import next_token_mask

BIG = "".join(f"value_{i} = {i} * 2\n" for i in range(100))  # big.py: long enough to be cut
TEXTS = [system_prompt("{cwd}")] * 3 + [BIG] * 3 + ["def main():\n    return 1\n" * 20,
                                   "let me look. done: it returns 1. rejected by user error"]


def same_text(tok, a, b):
    """Byte-identical text and the same special tokens (a model may split text differently)."""
    sp = lambda ids: [t for t in ids if tok.is_special(t)]  # noqa: E731
    by = lambda ids: b"".join(tok.id_to_bytes(t) for t in ids)  # noqa: E731
    return sp(a) == sp(b) and by(a) == by(b)


class Script:
    """extra_mask that allows only the next scripted token; one token list per generation.
    Also checks, at the start of every generation, that the session holds exactly the rendered
    conversation plus the open <|assistant_start|> (train/inference identity)."""

    def __init__(self, tok, replies):
        self.tok, self.replies, self.i = tok, replies, -1
        self.agent = None
        self.identity = []
        self.V = None

    def __call__(self, out):
        if not out:
            self.i += 1
            a = self.agent
            want = a.sampler.tok.render_conversation({"messages": a.messages})[0] + [
                a.sampler.tok.encode_special("<|assistant_start|>")]
            self.identity.append(a.sampler.cache.ids == want)
        return next_token_mask(self.replies[min(self.i, len(self.replies) - 1)], out, self.V)


def call(tok, text, name, **args):
    """A reply that says `text`, then calls tool `name` with `args`."""
    return tok.encode(text) + tok.encode_tool_call({"name": name, "args": args})


def reply(tok, text):
    """A final answer: `text`, then <|assistant_end|>."""
    return tok.encode(text) + [tok.encode_special("<|assistant_end|>")]


def make(engine, repo, replies, **kw):
    """An Agent whose model writes `replies`, one per generation (no retries unless asked: a
    retried reply would take the next scripted one)."""
    kw.setdefault("retries", 0)
    script = Script(engine.tokenizer, replies)
    script.V = engine.cfg.vocab_size
    agent = new_agent(engine, repo, extra_mask=script, **kw)
    script.agent = agent
    return agent, script
