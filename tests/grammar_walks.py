"""Driving the tool-call grammar's mask from a test (agent/masks/grammar.py, with or without a
Grounding): random calls walked through the mask, a call tokenized every way (canonically, byte
by byte, at random splits), whether a call is admitted, and the word and identifier sets the
grounded Grep patterns are checked against. Plus write_files, for the projects these walk.
Randomness comes from the caller's seeded numpy Generator, so a failing walk replays."""

import os
import re

import numpy as np

from nanocode.protocol import TOOLS, check_call


def write_files(root, files):
    """Write {relative path: text or bytes} under root, making folders as needed."""
    for rel, body in files.items():
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p) or root, exist_ok=True)
        with open(p, "wb") as f:
            f.write(body if isinstance(body, bytes) else body.encode())


def sp(tok, name):
    """A special token's id by its bare name: sp(tok, "tool_arg") is <|tool_arg|>."""
    return tok.encode_special(f"<|{name}|>")


def walk(g, tok, ground, rng, tools=tuple(TOOLS), prefix=(), max_len=120):
    """A random call under the mask: <|tool_call_start|> and `prefix` (each must be allowed),
    then uniform draws over the allowed tokens, stop tokens boosted. Asserts every mask is
    non-empty and never allows a padded id."""
    st, out = g.state(tools=tools, ground=ground), []
    for t in [sp(tok, "tool_call_start"), *prefix]:
        assert st.allowed(out)[t], tok.decode(out + [t])
        out.append(t)
    stops = [sp(tok, s) for s in ("tool_arg", "tool_val", "tool_call_end")]
    while len(out) < max_len and out[-1] != stops[-1]:
        m = st.allowed(out)
        ok = np.flatnonzero(m)
        assert len(ok) and ok.max() < tok.vocab_size, tok.decode(out)
        boost = [t for t in stops if m[t]]
        out.append(int(rng.choice(boost) if boost and rng.random() < 0.3 else rng.choice(ok)))
    return out


def calls(g, tok, ground, rng, n, **kw):
    """n random terminated calls: (parsed call, raw value bytes by argument)."""
    out = []
    while len(out) < n:
        ids = walk(g, tok, ground, rng, **kw)
        if ids[-1] == sp(tok, "tool_call_end"):
            c = tok.parse_tool_call(ids)
            assert check_call(c["name"], c["args"]) is None, c
            out.append((c, raw_values(tok, ids)))
    return out


def raw_values(tok, ids) -> dict:
    """Argument name -> the exact bytes of its value (before any UTF-8 decoding)."""
    arg, val, end = sp(tok, "tool_arg"), sp(tok, "tool_val"), sp(tok, "tool_call_end")
    out, key, buf = {}, None, b""
    for t in ids[ids.index(arg):]:
        if t in (arg, end):
            if key is not None:
                out[key] = buf
            key, buf = None, b""
        elif t == val:
            key, buf = buf.decode(), b""
        else:
            buf += tok.id_to_bytes(t)
    return out


def render(tok, call, encode):
    """A call in the wire format, its texts tokenized by `encode`."""
    ids = [sp(tok, "tool_call_start"), *encode(call["name"])]
    for k, v in call["args"].items():
        ids += [sp(tok, "tool_arg"), *encode(k), sp(tok, "tool_val"), *encode(str(v))]
    return ids + [sp(tok, "tool_call_end")]


def splits(tok, call, rng):
    """The call canonically (tok.encode_tool_call), byte by byte, and split at random tokens."""
    ranks = tok.mergeable_ranks
    longest = max(len(b) for b in ranks)

    def random_split(text):
        b, ids, i = text.encode(), [], 0
        while i < len(b):
            options = [j for j in range(i + 1, min(len(b), i + longest) + 1) if b[i:j] in ranks]
            j = options[rng.integers(len(options))]
            ids.append(ranks[b[i:j]])
            i = j
        return ids
    return [tok.encode_tool_call(call), render(tok, call, lambda s: [ranks[bytes([c])] for c in s.encode()]),
            render(tok, call, random_split)]


def admitted(g, ground, ids, tools=tuple(TOOLS)) -> bool:
    st = g.state(tools=tools, ground=ground)
    return all(st.allowed(ids[:k])[t] for k, t in enumerate(ids))


def admits(g, tok, ground, rng, name, tools=tuple(TOOLS), **args) -> bool:
    """Whether the call is admitted; the three splits must agree."""
    got = {admitted(g, ground, ids, tools) for ids in splits(tok, {"name": name, "args": args}, rng)}
    assert len(got) == 1, (name, args)
    return got.pop()


def prefix(tok, name, **args):
    """A call's tokens without its start and end, then <|tool_arg|>: the sampler, given these,
    writes the rest of the call."""
    ids = tok.encode_tool_call({"name": name, "args": args})[1:-1]
    return ids + [sp(tok, "tool_arg")] if args else ids


def words_of(texts) -> set[bytes]:
    return {w for t in texts for w in re.findall(rb"[A-Za-z0-9_]+", t)}


def ident_runs(pattern: bytes) -> list[bytes]:
    """Identifier runs of a regex; a backslash and the byte after it are syntax."""
    runs, cur, i = [], b"", 0
    while i < len(pattern):
        c = pattern[i:i + 1]
        if c == b"\\" or not re.fullmatch(rb"[A-Za-z0-9_]", c):
            runs, cur = runs + [cur] * bool(cur), b""
            i += 2 if c == b"\\" else 1
            continue
        cur += c
        i += 1
    return runs + [cur] * bool(cur)
