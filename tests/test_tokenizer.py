"""Tokenizer and conversation rendering: train a 768-token BPE in-process on ~400 KB of stdlib source
plus unicode text (well under a second), then check round trips, masks, prefixes and the file format."""

import json
import os
import random
import sysconfig
from pathlib import Path

import pytest
import rustbpe

from nanocode.tokenizer import (
    MIN_VOCAB_SIZE,
    SPECIAL_TOKENS,
    SPLIT_PATTERN,
    TOKENIZER_FILE,
    Tokenizer,
    train_tokenizer,
)

VOCAB = 768

UNICODE_SAMPLES = [
    "",
    "hello world",
    "The quick brown fox jumps over the lazy dog. 1234567890 3.14159",
    "def f(x):\n\treturn x ** 2  # squared\r\n",
    "emoji 😀🎉👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️",
    "中文字符测试，日本語のテキスト、한국어 텍스트",
    "combining: e\u0301 a\u0308 n\u0303 Z\u0335\u0321a\u0336\u0322l\u0337g\u0338o",
    "Ελληνικά, русский текст, עברית, العربية, हिन्दी, ไทย",
    "null\x00byte and \x01\x7f control chars, \u200b zero width, \ufeff bom, \u202e rtl",
    "math 𝕏 𝔸 ∑ ∫ √ ≠ ≤ ∞, private use \ue000\U000f0000, max \U0010ffff",
    "   leading and trailing spaces   \n\n\n\t\t  \r\n \r",
    "numbers 1 12 123 1234 12345 -7 +8 0x1F 1e-9 ١٢٣ ½",
    "it's they're we've I'LL don't",
    "<|bos|> <|user_start|>not special<|user_end|> <|tool_call_end|>",
]


def _corpus() -> list[str]:
    texts, size = [], 0
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(stdlib.glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        texts.append(text)
        size += len(text)
        if size > 400_000:
            break
    english = "the model reads the file before editing it, and says what changed and why. " * 50
    return texts + [english] + UNICODE_SAMPLES * 20


def _random_texts(n: int, seed: int = 0) -> list[str]:
    """Seeded random strings over ASCII, BMP and astral code points (no surrogates)."""
    rng = random.Random(seed)
    ranges = [(0x00, 0x7F), (0x80, 0x7FF), (0x800, 0xD7FF), (0xE000, 0xFFFF), (0x10000, 0x10FFFF)]
    out = []
    for _ in range(n):
        chars = []
        for _ in range(rng.randint(0, 60)):
            lo, hi = rng.choice(ranges)
            chars.append(chr(rng.randint(lo, hi)))
        out.append("".join(chars))
    return out


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return _corpus()


@pytest.fixture(scope="module")
def tok(corpus) -> Tokenizer:
    return train_tokenizer(iter(corpus), VOCAB)


def test_vocab_layout(tok):
    assert tok.vocab_size == VOCAB
    n = VOCAB - len(SPECIAL_TOKENS)
    assert [tok.encode_special(s) for s in SPECIAL_TOKENS] == list(range(n, VOCAB))
    assert tok.bos_id == n and tok.is_special(n) and not tok.is_special(n - 1)
    assert [tok.decode([tok.encode_special(s)]) for s in SPECIAL_TOKENS] == SPECIAL_TOKENS
    with pytest.raises(ValueError, match="unknown special token"):
        tok.encode_special("<|eos|>")


@pytest.mark.parametrize("text", UNICODE_SAMPLES + _random_texts(200))
def test_round_trip(tok, text):
    ids = tok.encode(text)
    assert all(0 <= i < tok.bos_id for i in ids)
    assert tok.decode(ids) == text


def test_encode_batch_matches_encode(tok):
    texts = UNICODE_SAMPLES + _random_texts(50, seed=1)
    assert tok.encode_batch(texts, num_threads=2) == [tok.encode(t) for t in texts]


def test_special_strings_stay_text(tok):
    for name in SPECIAL_TOKENS:
        ids = tok.encode(f"a {name} b {name}")
        assert not any(tok.is_special(i) for i in ids)
        assert tok.decode(ids) == f"a {name} b {name}"
    assert tok.bos_id not in tok.encode("<|bos|>")


def test_token_bytes(tok):
    tb = tok.token_bytes()
    assert tb.shape == (VOCAB,) and tb.dtype.name == "int32"
    assert (tb[tok.bos_id :] == 0).all() and (tb[: tok.bos_id] >= 1).all() and (tb[:256] == 1).all()
    for text in UNICODE_SAMPLES + _random_texts(50, seed=2):
        assert int(tb[tok.encode(text)].sum()) == len(text.encode("utf-8"))
    assert tok.id_to_bytes(ord("a")) == b"a" and tok.id_to_token(tok.bos_id) == "<|bos|>"


def test_vocab_too_small():
    with pytest.raises(ValueError, match=str(MIN_VOCAB_SIZE)):
        train_tokenizer(["abc"], MIN_VOCAB_SIZE - 1)
    assert train_tokenizer(["abc"], MIN_VOCAB_SIZE).vocab_size == MIN_VOCAB_SIZE  # bytes only, no merges


def test_small_corpus_warns():
    with pytest.warns(UserWarning, match="ran out of pairs"):
        tok = train_tokenizer(["ab ab ab"], 400)
    assert tok.vocab_size < 400 and tok.decode(tok.encode("ab abc")) == "ab abc"


def test_tiktoken_matches_rustbpe(tok, corpus):
    """tiktoken (used to encode) must split and merge exactly as rustbpe (used to train) does."""
    bpe = rustbpe.Tokenizer()
    bpe.train_from_iterator(iter(corpus), VOCAB - len(SPECIAL_TOKENS), pattern=SPLIT_PATTERN)
    assert {bytes(k): v for k, v in bpe.get_mergeable_ranks()} == tok.mergeable_ranks  # training is deterministic
    for text in corpus[:5] + UNICODE_SAMPLES:
        assert bpe.encode(text) == tok.encode(text)


def test_save_load_round_trip(tok, tmp_path):
    path = tok.save(tmp_path / "tok")
    assert path == str(tmp_path / "tok" / TOKENIZER_FILE)
    assert os.listdir(tmp_path / "tok") == [TOKENIZER_FILE]  # no temp file left behind
    loaded = Tokenizer.load(tmp_path / "tok")
    assert loaded.vocab_size == tok.vocab_size and loaded.pattern == tok.pattern
    texts = UNICODE_SAMPLES + _random_texts(30, seed=3)
    assert [loaded.encode(t) for t in texts] == [tok.encode(t) for t in texts]
    assert (loaded.token_bytes() == tok.token_bytes()).all()
    assert Tokenizer.from_dict(json.loads(json.dumps(tok.to_dict()))).mergeable_ranks == tok.mergeable_ranks
    assert Tokenizer.load(path).vocab_size == tok.vocab_size  # the file itself also works


def test_load_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="train tokenizer") as e:
        Tokenizer.load(tmp_path / "nope")
    assert str(tmp_path / "nope" / TOKENIZER_FILE) in str(e.value)


@pytest.mark.parametrize(
    "content",
    ["{not json", "", '{"format": "nanocode-tokenizer/1"}', '{"format": "other"}', "[1, 2]"],
)
def test_load_corrupt(tok, tmp_path, content):
    (tmp_path / TOKENIZER_FILE).write_text(content)
    with pytest.raises(ValueError, match="corrupt tokenizer file .*train tokenizer") as e:
        Tokenizer.load(tmp_path)
    assert str(tmp_path / TOKENIZER_FILE) in str(e.value)


def test_load_wrong_specials(tok, tmp_path):
    d = tok.to_dict()
    specials = d["special_tokens"]
    specials["<|bos|>"], specials["<|user_start|>"] = specials["<|user_start|>"], specials["<|bos|>"]
    (tmp_path / TOKENIZER_FILE).write_text(json.dumps(d))
    with pytest.raises(ValueError, match="special tokens"):
        Tokenizer.load(tmp_path)


# --- rendering ----------------------------------------------------------------------------------

CALL = {"name": "Read", "args": {"file_path": "src/app.py", "offset": 10, "limit": 5}}
CONV = {
    "messages": [
        {"role": "system", "content": "you are nanocode."},
        {"role": "user", "content": "what does main do?"},
        {"role": "assistant", "content": "let me read it.", "tool_call": CALL},
        {"role": "tool_result", "content": "   11→def main():\n   12→    return 0"},
        {"role": "assistant", "content": ""},  # empty content allowed
        {"role": "user", "content": "and <|assistant_end|> here?"},
        {"role": "assistant", "content": "main returns 0."},
    ]
}
CALL_TEXT = (
    "<|tool_call_start|>Read<|tool_arg|>file_path<|tool_val|>src/app.py<|tool_arg|>offset<|tool_val|>10"
    "<|tool_arg|>limit<|tool_val|>5<|tool_call_end|>"
)


def _runs(tok, ids, mask):
    """Contiguous runs of equal mask, decoded: [(mask, text), ...]."""
    runs = []
    for i, m in zip(ids, mask):
        if runs and runs[-1][0] == m:
            runs[-1][1].append(i)
        else:
            runs.append((m, [i]))
    return [(m, tok.decode(r)) for m, r in runs]


def test_render_masks(tok):
    ids, mask = tok.render_conversation(CONV)
    assert len(ids) == len(mask) and set(mask) == {0, 1}
    assert _runs(tok, ids, mask) == [
        (0, "<|bos|><|user_start|>you are nanocode.\n\nwhat does main do?<|user_end|><|assistant_start|>"),
        (1, "let me read it." + CALL_TEXT + "<|assistant_end|>"),
        (0, "<|tool_result_start|>   11→def main():\n   12→    return 0<|tool_result_end|><|assistant_start|>"),
        (1, "<|assistant_end|>"),
        (0, "<|user_start|>and <|assistant_end|> here?<|user_end|><|assistant_start|>"),
        (1, "main returns 0.<|assistant_end|>"),
    ]
    # the "<|assistant_end|>" typed by the user is text, so exactly 3 real ones, all trained on
    end = tok.encode_special("<|assistant_end|>")
    assert [m for i, m in zip(ids, mask) if i == end] == [1, 1, 1]
    assert all(m == 0 for i, m in zip(ids, mask) if i == tok.encode_special("<|assistant_start|>"))
    assert CONV["messages"][1]["content"] == "what does main do?"  # input not mutated


def test_render_truncates(tok):
    ids, mask = tok.render_conversation(CONV)
    ids7, mask7 = tok.render_conversation(CONV, max_tokens=7)
    assert (ids7, mask7) == (ids[:7], mask[:7])
    assert tok.render_conversation(CONV, max_tokens=10**6) == (ids, mask)


def test_completion_is_prefix(tok):
    full, _ = tok.render_conversation(CONV)
    msgs = CONV["messages"]
    checked = 0
    for k in range(2, len(msgs)):
        if msgs[k]["role"] == "assistant":
            prompt = tok.render_for_completion({"messages": msgs[:k]})
            assert prompt[-1] == tok.encode_special("<|assistant_start|>")
            assert full[: len(prompt)] == prompt
            checked += 1
    assert checked == 3


def test_inference_transcript_matches_training(tok):
    """Rebuild the render the way the agent does at inference: prompt, generated tokens (up to
    <|tool_call_end|> or <|assistant_end|>), the agent's own <|assistant_end|> after a call, then the
    tool result and the next prompt."""
    msgs = CONV["messages"]
    ids = tok.render_for_completion({"messages": msgs[:2]})
    ids += tok.encode("let me read it.") + tok.encode_tool_call(CALL)  # model stops on <|tool_call_end|>
    ids += [tok.encode_special("<|assistant_end|>")]  # appended by the agent
    nxt = tok.render_for_completion({"messages": msgs[:4]})
    assert nxt[: len(ids)] == ids
    ids = nxt
    ids += [tok.encode_special("<|assistant_end|>")]  # model's own end on an empty reply
    nxt = tok.render_for_completion({"messages": msgs[:6]})
    assert nxt[: len(ids)] == ids
    ids = nxt + tok.encode("main returns 0.") + [tok.encode_special("<|assistant_end|>")]
    assert ids == tok.render_conversation(CONV)[0]


def test_parse_tool_call(tok):
    ids = tok.encode("let me read it.") + tok.encode_tool_call(CALL) + [tok.encode_special("<|assistant_end|>")]
    assert tok.parse_tool_call(ids) == CALL  # offset/limit come back as ints
    assert tok.parse_tool_call(tok.encode("no call here")) is None
    edit = {"name": "Edit", "args": {"file_path": "12", "old_string": " x = 1\n", "new_string": "<|tool_val|>"}}
    assert tok.parse_tool_call(tok.encode_tool_call(edit)) == edit  # values kept exactly, str stays str
    grep = {"name": "Grep", "args": {"pattern": "def ", "-A": "2", "-B": "x"}}
    assert tok.parse_tool_call(tok.encode_tool_call(grep))["args"] == {"pattern": "def ", "-A": 2, "-B": "x"}


@pytest.mark.parametrize(
    "pieces, error",
    [
        (["<|tool_call_start|>", "Bash", "<|tool_arg|>", "command", "<|tool_val|>", "ls"], "no <|tool_call_end|>"),
        (["<|tool_call_start|>", "Bash", "<|tool_arg|>", "command", "ls", "<|tool_call_end|>"], "exactly one"),
        (["<|tool_call_start|>", "<|tool_arg|>", "command", "<|tool_val|>", "ls", "<|tool_call_end|>"], "no tool name"),
        (["<|tool_call_start|>", "Bash", "<|assistant_end|>", "<|tool_call_end|>"], "unexpected <|assistant_end|>"),
        (["<|tool_call_start|>", "Bash", "<|tool_arg|>", "<|tool_val|>", "x", "<|tool_call_end|>"], "empty name"),
        (
            ["<|tool_call_start|>", "Read", "<|tool_arg|>", "limit", "<|tool_val|>", "1"]
            + ["<|tool_arg|>", "limit", "<|tool_val|>", "2", "<|tool_call_end|>"],
            "given twice",
        ),
    ],
)
def test_parse_tool_call_malformed(tok, pieces, error):
    ids = []
    for p in pieces:
        ids += [tok.encode_special(p)] if p in SPECIAL_TOKENS else tok.encode(p)
    with pytest.raises(ValueError, match=error.replace("|", r"\|")):
        tok.parse_tool_call(ids)


@pytest.mark.parametrize(
    "messages, error",
    [
        ([{"role": "bot", "content": "x"}], r"message 0: unknown role 'bot'"),
        (
            [{"role": "user", "content": "x"}, {"role": "tool_result", "content": "", "tool_call": CALL}],
            "message 1 .*only assistant",
        ),
        ([{"role": "user", "content": "x"}, {"role": "assistant"}], "message 1 .*no content"),
        ([{"role": "user", "content": 3}], "message 0 .*must be a string"),
        ([{"role": "user", "content": "x"}, {"role": "system", "content": "y"}], "message 1: a system message"),
        ([{"role": "system", "content": "x"}, {"role": "assistant", "content": "y"}], "message 0: a system message"),
        ([{"role": "assistant", "content": "", "tool_call": {"name": "Read", "args": {"x": True}}}], "message 0"),
        ([{"role": "assistant", "content": "", "tool_call": {"name": "", "args": {}}}], "message 0.*name"),
        ([{"role": "assistant", "content": "", "tool_call": {"name": "Read", "args": [1]}}], "message 0.*args"),
        ([], "at least one message"),
    ],
)
def test_render_validation(tok, messages, error):
    with pytest.raises(ValueError, match=error):
        tok.render_conversation({"messages": messages})


def test_completion_needs_user_or_tool_result_last(tok):
    with pytest.raises(ValueError, match="message 2: .*user or tool_result"):
        tok.render_for_completion({"messages": CONV["messages"][:3]})
    with pytest.raises(ValueError, match="followed by a user"):
        tok.render_for_completion({"messages": CONV["messages"][:1]})
    # a conversation that is only a tool call and its result is a valid prompt
    ids = tok.render_for_completion({"messages": [CONV["messages"][1], CONV["messages"][3]]})
    assert ids[-1] == tok.encode_special("<|assistant_start|>")


def test_the_compound_split_writes_a_name_the_same_everywhere():
    """`train tokenizer --split compound`: a compound identifier is one pre-token, so its tokens do
    not depend on the character before it (GPT-4's split attaches a space, not a backtick)."""
    from nanocode.tokenizer import COMPOUND_SPLIT_PATTERN, SPLIT_PATTERNS, train_tokenizer
    corpus = ["def parse_header(line):\n    return line.split(':')\n", "see `parse_header` and moving_average "] * 50
    name = "parse_header"
    for split, same in (("compound", True), ("gpt4", False)):
        tok = train_tokenizer(corpus, 300, SPLIT_PATTERNS[split])
        ids = {ctx: tok.encode(ctx + name + ")")[len(tok.encode(ctx)):-1] for ctx in (" ", "`", '"', "/", ".")}
        assert (len(set(map(tuple, ids.values()))) == 1) is same, (split, ids)
    assert SPLIT_PATTERNS["compound"] == COMPOUND_SPLIT_PATTERN
