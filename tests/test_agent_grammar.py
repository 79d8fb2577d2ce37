"""The tool-call grammar (agent/masks/grammar.py) alone, without grounding, over the scripted agent's
tokenizer: random walks through the mask only finish calls that parse to a known tool with valid
arguments, and computing a mask stays cheap. The grounded grammar is tests/test_grounding.py's,
whole names and prose spans tests/test_whole_names.py's."""
import time

import numpy as np

from agent.masks.grammar import Grammar
from nanocode.protocol import check_call


def test_mask_fuzz_every_terminated_call_is_valid(tok):
    """Random walks through the mask (uniform over allowed tokens, terminators boosted) always
    give calls that parse to a known tool with valid arguments."""
    g = Grammar(tok, 512)
    rng = np.random.default_rng(0)
    start, end = tok.encode_special("<|tool_call_start|>"), tok.encode_special("<|tool_call_end|>")
    special = [tok.encode_special(s) for s in ("<|tool_arg|>", "<|tool_val|>")] + [end]
    done = 0
    for _ in range(400):
        st, out = g.state(), [start]
        for _ in range(60):
            m = st.allowed(out)
            ok = np.flatnonzero(m)
            boost = [t for t in special if m[t]]
            t = int(rng.choice(boost) if boost and rng.random() < 0.3 else rng.choice(ok))
            out.append(t)
            if t == end:
                break
        if out[-1] == end:
            c = tok.parse_tool_call(out)
            assert check_call(c["name"], c["args"]) is None, (c, tok.decode(out))
            done += 1
    assert done > 100


def test_mask_cost_per_token(engine, tok):
    g = Grammar(tok, engine.cfg.vocab_size)
    seq = [tok.encode_special("<|tool_call_start|>")] + tok.encode_tool_call(
        {"name": "Edit", "args": {"file_path": "a.py", "old_string": "x", "new_string": "y"}})[1:]
    st = g.state()
    st.allowed([])
    t = time.perf_counter()
    n = 0
    for _ in range(200):
        st = g.state()
        for k in range(len(seq) + 1):
            st.allowed(seq[:k])
            n += 1
    per = (time.perf_counter() - t) / n
    print(f"mask: {per * 1e6:.1f} us per token")
    assert per < 1e-3
