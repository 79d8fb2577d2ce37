"""nanocode/load.py, the one model loader, on real checkpoints of a tiny model: a path or a run tag
gives the same checked model and engine; each bad checkpoint is one ModelError line naming it."""
import jax.numpy as jnp
import pytest

from nanocode.checkpoint import save
from nanocode.common import ModelError
from nanocode.load import load_engine, load_model
from tiny_models import random_params, tiny, tiny_tokenizer

TEXTS = ["def total(items):\n    return sum(i.price for i in items)\n"] * 20


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer(TEXTS, 280)


def test_a_path_and_a_tag_load_the_same_checked_model(tmp_path, monkeypatch, tok):
    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path))
    cfg = tiny(vocab_size=300)
    ckpts = tmp_path / "runs" / "mine" / "checkpoints"
    save(ckpts, 2, random_params(cfg), config=cfg, tokenizer=tok, metadata={"stage": "sft"})
    save(ckpts, 5, random_params(cfg, seed=1), config=cfg, tokenizer=tok, metadata={"stage": "sft"})
    by_tag, by_path = load_model("mine"), load_model(str(ckpts))
    assert (by_tag.ckpt, by_tag.tag, by_tag.step) == (ckpts, "mine", 5) == (by_path.ckpt, by_path.tag, by_path.step)
    assert by_tag.cfg == cfg and by_tag.meta["stage"] == "sft"
    assert by_tag.tokenizer.encode(TEXTS[0]) == tok.encode(TEXTS[0])
    assert load_model("mine", step=2).step == 2
    engine = load_engine(ckpts, dtype=jnp.bfloat16)
    assert engine.tokenizer is not None and engine.params["wte"].dtype == jnp.bfloat16


def test_each_bad_checkpoint_is_one_line_naming_it(tmp_path, tok):
    cfg = tiny(vocab_size=300)
    no_tok = tmp_path / "no_tok"
    save(no_tok, 1, random_params(cfg), config=cfg)
    small = tmp_path / "small"
    save(small, 1, random_params(tiny(vocab_size=200)), config=tiny(vocab_size=200), tokenizer=tok)
    cases = {str(no_tok): "has no tokenizer", str(small): "tokenizer of 280 tokens for a model of 200",
             str(tmp_path / "nothing"): "no checkpoint for"}
    for spec, words in cases.items():
        with pytest.raises(ModelError) as e:
            load_engine(spec)
        assert words in str(e.value) and "\n" not in str(e.value), str(e.value)
