import atexit
import os
import shutil
import tempfile
import warnings

import pytest

# Tests run on the CPU unless the caller chose a platform; never grab all accelerator memory.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
# The user's nanocode folders (settings, accepted project settings, the saved-sessions record,
# caches) are never read or written by a test: one throwaway folder per test session.
os.environ["NANOCODE_HOME"] = tempfile.mkdtemp(prefix="nanocode-tests-")
_OWNER = os.getpid()  # a forked child that exits must not remove it under the test run
atexit.register(lambda home=os.environ["NANOCODE_HOME"]: os.getpid() == _OWNER and shutil.rmtree(home, True))


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    """A tiny random checkpoint with its tokenizer, saved the way `train` saves one (one per
    test module)."""
    from nanocode.checkpoint import save
    from nanocode.tokenizer import train_tokenizer
    from nanocode.protocol import system_prompt
    from tiny_models import random_params, tiny
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tok = train_tokenizer(iter([system_prompt("{cwd}")] * 3 + ["def f(x):\n    return x\n"] * 20), 400)
    cfg = tiny(vocab_size=tok.vocab_size, sequence_len=1024)
    d = tmp_path_factory.mktemp("ckpt") / "checkpoints"
    save(d, 1, random_params(cfg), config=cfg, tokenizer=tok)
    return d
