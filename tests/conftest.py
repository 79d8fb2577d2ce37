"""Fixtures shared by several test modules. Each is module-scoped where building it costs a
compile or a tokenizer training, so one module builds it once. A module that needs a different
one of the same name (another vocabulary, another project) defines its own, which pytest
prefers within that module.

  tok, engine, repo  the scripted agent's tiny world (tests/scripted_agent.py): a 512-token BPE
                     on scripted_agent.TEXTS, a random tiny model with a 2048-token context, and
                     a committed git project (a.py, big.py) with its own NANOCODE_HOME
  proj               that project with a.py alone (one_file_project)
  tokenizer          the fine-tuning stages' 512-token BPE (tests/train_helpers.corpus_texts)
  ckpt               a tiny random checkpoint with its tokenizer, as `train` saves one
  no_sandbox         this machine as one where no OS sandbox starts (NANOCODE_SANDBOX=off), and
                     without the user's --unsandboxed choice
  unsandboxed        the same machine with that choice made (tools/checks.py)
"""
import atexit
import os
import shutil
import sys
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
# The tools' commands in a test's throwaway project run this interpreter (with pytest), as the task
# harness's do (tasks/projects.setup_env); tests/test_project_env.py clears it to test the choice.
os.environ["NANOCODE_PYTHON_ENV"] = sys.prefix
# A test machine where no OS sandbox starts (a container without user namespaces) is a throwaway
# one: the task checks run there without it (tools/checks.py); the refusal's tests clear this.
from tools import checks  # noqa: E402
if checks.missing() is not None:
    os.environ.setdefault(checks.UNSANDBOXED_ENV, "1")


def _sandbox_off(monkeypatch, chosen: str):
    """The probe answers "no sandbox" (NANOCODE_SANDBOX=off) and checks.UNSANDBOXED_ENV is
    `chosen` until the test ends; the probe is asked again afterwards."""
    from tools import sandbox as sbx
    monkeypatch.setenv(sbx.ENV_SWITCH, "off")
    monkeypatch.setenv(checks.UNSANDBOXED_ENV, chosen)
    assert not sbx.bash_sandbox(refresh=True)["available"]
    yield
    monkeypatch.delenv(sbx.ENV_SWITCH)
    sbx.bash_sandbox(refresh=True)


@pytest.fixture
def no_sandbox(monkeypatch):
    """No OS sandbox here and no user's choice: what runs model code must refuse."""
    yield from _sandbox_off(monkeypatch, "0")


@pytest.fixture
def unsandboxed(monkeypatch):
    """No OS sandbox here, and the user's choice to run checks anyway (--unsandboxed)."""
    yield from _sandbox_off(monkeypatch, "1")


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


@pytest.fixture(scope="module")
def tok():
    from scripted_agent import TEXTS
    from tiny_models import tiny_tokenizer
    return tiny_tokenizer(TEXTS, 512)


@pytest.fixture(scope="module")
def engine(tok):
    from nanocode.engine import Engine
    from tiny_models import random_params, tiny
    cfg = tiny(vocab_size=tok.vocab_size, sequence_len=2048)
    return Engine(random_params(cfg), cfg, tok, buckets=(64, 256, 1024))


def one_file_project(tmp_path, monkeypatch, **more_files):
    """tmp_path/proj, a git repository with a.py (`x = 1`) and `more_files` committed, and a
    NANOCODE_HOME of its own (no user settings, shadow dirs or accepted files leak in)."""
    from tiny_models import commit_all
    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path / "home"))
    root = tmp_path / "proj"
    root.mkdir()
    for name, text in {"a.py": "x = 1\n", **more_files}.items():
        (root / name).write_text(text)
    commit_all(root)
    return root.resolve()


@pytest.fixture
def proj(tmp_path, monkeypatch):
    """The one-file project (one_file_project)."""
    return one_file_project(tmp_path, monkeypatch)


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """The one-file project with big.py beside a.py (a file too long to read at once)."""
    from scripted_agent import BIG
    return one_file_project(tmp_path, monkeypatch, **{"big.py": BIG})


@pytest.fixture(scope="module")
def tokenizer():
    from nanocode.tokenizer import train_tokenizer
    from train_helpers import corpus_texts
    return train_tokenizer(iter(corpus_texts()), 512)
