"""`nanocode`: the terminal coding agent. Only argparse at import time, so --help is instant
(no jax, numpy, textual or prompt-toolkit until a model is actually run).

`nanocode serve` puts the model behind an OpenAI-compatible HTTP API instead (agent/serve.py).
Faces of the one loop (agent/loop/driver.Agent): `-p PROMPT` headless (agent/headless.py; with
`--best-of N` N rollouts in copies of the project, agent/loop/best_of.py), `--plain` a
prompt-toolkit REPL (agent/repl.py), otherwise the Textual TUI (agent/tui/app.py). The model is our
engine on a checkpoint (`--model`), or any OpenAI-compatible server (`--base-url`,
agent/samplers/remote.py).

Before anything loads, two questions a repository cannot answer for the user: folder trust
(`trusted`) and the project's settings (`review_settings`): `.nanocode/settings.json` and
`settings.local.json` ship with the repository and could grant `auto` and `Read(/**)`, and
`.mcp.json` names MCP servers, programs to run, so they apply only once the user has accepted
exactly their bytes. Interactive starts (the TUI, --plain)
show a new file, or the diff of a changed one against what was accepted (capped, escaped for the
terminal), and ask `use these project settings? [y/N]`; yes records them
(tools/workspace.accept_settings), no ignores them for this run. Headless (-p) and a stdin that
is not a terminal never ask: the files are ignored with one stderr line naming them and the fix
(accept them interactively once, or `--trust-settings`, which honours them without asking).
"""

from __future__ import annotations

import argparse
import difflib
import os
import signal
import sys
import threading
from pathlib import Path

from agent.display import printable
from agent.headless import OUTPUT_FORMATS, read_prompt, run_best_of, run_headless
from agent.model import AgentOptions, ModelError, build_agent, resolve_model
from agent.repl import run_repl
from agent.run_options import add_options, settings
from agent.sessions import SessionStore, find_session, load_session
from nanocode import __version__
from nanocode.protocol import MODES
from tools.checks import add_flag, gate_or_exit
from tools.workspace import accept_settings, project_settings, trust_problem


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nanocode",
        description="nanocode: a coding agent in your terminal, running a small model trained "
        "end to end in pure JAX. With no options it opens the full-screen interface on the "
        "current directory. `nanocode serve --help`: the model behind an OpenAI-compatible "
        "HTTP API.",
    )
    p.add_argument("--version", action="version", version=f"nanocode {__version__}")
    p.add_argument(
        "--model", metavar="PATH|TAG",
        help="checkpoint directory, or a run tag under $NANOCODE_HOME/runs/<tag>/checkpoints "
        "(default: the model embedded in the package); with --base-url, the server's model name "
        "(default: the first it lists)",
    )
    p.add_argument(
        "--base-url", metavar="URL",
        help="use the model behind an OpenAI-compatible API instead of a checkpoint, e.g. "
        "http://127.0.0.1:8000/v1 (`nanocode serve`, vLLM, llama.cpp, Ollama); the key, if "
        "any, comes from $NANOCODE_API_KEY and goes only to this URL's server (`nanocode serve` prints "
        "one); $OPENAI_API_KEY is sent only to https://api.openai.com; redirects are never followed",
    )
    p.add_argument("--context", type=int, metavar="TOKENS",
                   help="with --base-url: the model's context when the server does not say it "
                   "(default 8192)")
    face = p.add_mutually_exclusive_group()
    face.add_argument(
        "-p", "--print", metavar="PROMPT", dest="prompt", nargs="?", const="-",
        help="headless: run one prompt to completion, print the answer on stdout (progress on "
        "stderr) and exit; calls that would ask for approval are rejected unless --mode/--yes "
        "allows them. With no PROMPT, or '-', the prompt is read from stdin. Exit status: 0 "
        "answered, 3 a call needed approval, 4 stopped early (step limit, repeated call, reply "
        "cut), 5 context full, 6 the model server failed, 130 cancelled",
    )
    face.add_argument(
        "--plain", action="store_true",
        help="line-based prompt-toolkit interface instead of the full-screen one",
    )
    perm = p.add_mutually_exclusive_group()
    perm.add_argument(
        "--mode", choices=MODES, metavar="MODE",
        help="permission mode: ask before edits and commands (ask, the default), apply edits "
        "without asking but ask before commands (accept-edits), ask only for destructive "
        "commands (auto), read-only (plan)",
    )
    perm.add_argument(
        "-y", "--yes", dest="mode", action="store_const", const="auto",
        help="same as --mode auto",
    )
    add_options(p, "nanocode")  # --temperature --top-k --max-tokens --seed --max-steps --network --no-sandbox
    p.add_argument("--output-format", choices=OUTPUT_FORMATS,
                   help="with -p: the answer as text (the default); JSON with answer, tool_calls, "
                   "files_changed, steps, stop_reason, usage; or stream-json, one JSON event per "
                   "line as it happens (text deltas, tool calls and results, then the result)")
    add_best_of_flags(p)
    add_project_flags(p)
    return p


def add_best_of_flags(p: argparse.ArgumentParser) -> None:
    """--best-of N and what it runs: the rollouts' temperature, the verifier's command and its
    sandbox flag (tools/checks.py)."""
    p.add_argument("--best-of", type=int, default=1, metavar="N",
                   help="with -p: run the request N times in copies of the project and apply only "
                   "the best (tests pass for a change, agreement for a question) as one undoable "
                   "turn; rollout 1 uses --temperature/--seed, the others sample (default 1: off)")
    p.add_argument("--best-of-temperature", type=float, default=0.7, metavar="T",
                   help="with --best-of: sampling temperature of rollouts 2..N (default 0.7)")
    p.add_argument("--test-command", metavar="CMD",
                   help="with --best-of: the shell command that verifies a change (default: "
                   "python -m pytest -q when the project has tests)")
    add_flag(p)  # --best-of's verifier runs the rollouts' changes (tests)


def add_project_flags(p: argparse.ArgumentParser) -> None:
    """Which folder, whether to trust it and its settings, and which session to go on with."""
    p.add_argument("--trust-settings", action="store_true",
                   help="use the project's .nanocode settings without asking (by default they "
                   "apply only once you have accepted them in an interactive start)")
    p.add_argument("--trust", action="store_true",
                   help="trust the project folder without asking (asked when it is /, your home "
                   "folder, or holds no project marker such as .git or pyproject.toml)")
    resume = p.add_mutually_exclusive_group()
    resume.add_argument("-c", "--continue", dest="continue_", action="store_true",
                        help="continue the latest session of this project")
    resume.add_argument("--resume", metavar="ID",
                        help="continue the session ID (see .nanocode/sessions/)")
    p.add_argument(
        "--cwd", metavar="DIR", default=".",
        help="project directory to work in (default: the current directory)",
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    for flag, value, least in (("--best-of", args.best_of, 1), ("--max-tokens", args.max_tokens, 1),
                               ("--max-steps", args.max_steps, 1), ("--top-k", args.top_k, 0)):
        if value < least:
            parser.error(f"{flag} must be at least {least}, got {value}")
    if not args.temperature >= 0:
        parser.error(f"--temperature must be >= 0 (0 = greedy), got {args.temperature}")
    if args.best_of > 1 and args.prompt is None:
        parser.error("--best-of needs -p PROMPT (it runs headless)")
    if args.output_format is not None and args.prompt is None:
        parser.error("--output-format goes with -p PROMPT (a headless run); the interactive "
                     "interfaces have no output format")
    args.output_format = args.output_format or "text"
    if args.best_of_temperature <= 0:
        parser.error("--best-of-temperature must be > 0 (the extra rollouts sample)")
    if args.context is not None and (args.base_url is None or args.context < 64):
        parser.error("--context goes with --base-url and is at least 64 tokens")
    if args.base_url is not None:
        from agent.samplers.remote import base_url_error  # light: no jax
        if (bad := base_url_error(args.base_url)) is not None:
            parser.error(bad)
    # No default in argparse: `--yes --mode ask` is still a conflict, and without a flag (mode
    # None) the settings files decide, ask when none names a mode.
    return args


def agent_options(args):
    """The parsed flags as the library's AgentOptions (agent/model.py); the settings come from
    agent/run_options.py, which names each flag's field."""
    sampling, turn = settings(args, "nanocode")
    return AgentOptions(model=args.model, base_url=args.base_url, context=args.context, mode=args.mode,
                        trust_settings=args.trust_settings, sampling=sampling, turn=turn)


def _err(text: str) -> None:
    print(text, file=sys.stderr)


def trusted(root, headless: bool) -> bool:
    """The folder-trust prompt: a session in /, $HOME or a folder with no project marker
    (tools.workspace.trust_problem) may read and change everything below it, so the user says
    yes first. Headless (-p) and a stdin that is not a terminal cannot ask, so they
    refuse all three: a script that runs it in a scratch folder says --trust up front."""
    problem = trust_problem(root)
    if problem is None:
        return True
    _err(f"warning: {problem}: the agent may read, and with your approval change, anything in {root}")
    if headless or not sys.stdin.isatty():
        return False
    try:
        return input("trust this folder and start? [y/N] ").strip().lower() in ("y", "yes")
    except (EOFError, KeyboardInterrupt):
        return False


REVIEW_LINES = 60  # lines of a settings file, or of its diff, shown before the question
REVIEW_CHARS = 6000


def settings_review(f) -> str:
    """What the user reads before accepting one project settings file (a
    tools.workspace.ProjectSettings): the whole text when never accepted, else the unified diff
    against the accepted text; cut at REVIEW_LINES lines / REVIEW_CHARS characters (the rest is
    counted) and escaped for the terminal (agent/display.printable)."""
    text = f.data.decode("utf-8", "replace")
    what = ("project MCP servers" if f.path.name == ".mcp.json" else "project settings") + f" {f.path}"
    if f.accepted is None:
        runs = " (programs nanocode starts once you accept them)" if f.path.name == ".mcp.json" else ""
        head, lines = f"{what}{runs}:", text.splitlines()
    else:
        head = f"{what} changed since you accepted them:"
        lines = list(difflib.unified_diff(f.accepted.splitlines(), text.splitlines(), "accepted", "now",
                                          lineterm=""))
    shown, size = [], 0
    for line in lines[:REVIEW_LINES]:
        size += len(line) + 1
        if size > REVIEW_CHARS:
            break
        shown.append(line)
    more = len(lines) - len(shown)
    cut = [f"... ({more} more lines: read the file before you accept it)"] if more else []
    return printable("\n".join([head, *shown, *cut]))


def review_settings(root, headless: bool) -> bool:
    """The project-settings question (module docstring). Returns True only when the user said yes
    but the acceptance could not be recorded: then they apply to this run (as --trust-settings)."""
    files = project_settings(root)
    for f in files:
        if f.problem:
            _err(f"warning: ignoring {f.path}: {f.problem} (never loaded)")
    pending = [f for f in files if not f.problem and not f.trusted]
    if not pending:
        return False
    names = ", ".join(str(f.path) for f in pending)
    if headless or not sys.stdin.isatty():
        _err(f"warning: ignoring project settings {names}: not accepted yet (run nanocode here once "
             "interactively to review and accept them, or pass --trust-settings)")
        return False
    for f in pending:
        _err(settings_review(f))
    try:
        yes = input("use these project settings? [y/N] ").strip().lower() in ("y", "yes")
    except (EOFError, KeyboardInterrupt):
        yes = False
    if not yes:
        _err(f"ignoring {names} for this run")
        return False
    try:
        accept_settings(root, pending)
    except OSError as e:
        _err(f"warning: could not record that you accepted them ({e}): they apply to this run only")
        return True
    return False


def terminal_problem() -> str | None:
    """Why the full-screen interface cannot start here, or None: it needs a terminal on stdin
    and stdout (started into a pipe it would draw into the pipe and never see a key). The fix is
    a headless run, or --plain, which reads requests from a pipe line by line."""
    for name, stream in (("stdin", sys.stdin), ("stdout", sys.stdout)):
        if stream is None or not stream.isatty():
            return (f"{name} is not a terminal, so the full-screen interface cannot start: run one "
                    "request headless with -p \"...\" (or pipe it in: ... | nanocode -p), or use "
                    "--plain to read requests line by line")
    return None


def _interrupted_at_start(*_) -> None:
    """Ctrl-C before the agent is built: nothing is written yet, so leave at once (a
    KeyboardInterrupt inside jax's import or a loader thread can be swallowed)."""
    sys.stderr.write("\ninterrupted during start-up: nothing was run\n")
    sys.stderr.flush()
    os._exit(130)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:  # `nanocode serve`: the model behind an OpenAI-compatible API
        from agent.serve import main as serve
        return serve(argv[1:])
    args = parse_args(argv)
    if threading.current_thread() is not threading.main_thread():  # signals are the main thread's
        return _main(args, lambda: None)
    old = signal.signal(signal.SIGINT, _interrupted_at_start)
    try:
        return _main(args, lambda: signal.signal(signal.SIGINT, old))
    finally:
        signal.signal(signal.SIGINT, old)


def _main(args, started) -> int:
    """main's body; `started()` hands Ctrl-C back to the faces once the model is loaded."""


    if args.prompt is None and not args.plain and (problem := terminal_problem()):
        _err(f"error: {problem}")
        return 2
    if args.prompt is not None:
        args.prompt = read_prompt(args.prompt)
        if args.prompt is None:
            _err("error: the prompt is empty: pass it as -p \"...\" or pipe it on stdin (-p -)")
            return 2
    root = Path(args.cwd).expanduser()
    if not root.is_dir():
        _err(f"error: --cwd {root} is not a directory")
        return 2
    if args.best_of > 1:
        gate_or_exit("--best-of", args.unsandboxed)
    root = root.resolve()
    if not args.trust and not trusted(root, headless=args.prompt is not None):
        _err(f"not starting: {root} is not trusted (run nanocode in a project folder, or pass --trust)")
        return 1
    if not args.trust_settings:
        args.trust_settings = review_settings(root, headless=args.prompt is not None)
    try:
        model_dir = None if args.base_url else resolve_model(args.model)[0]
    except ModelError as e:
        _err(f"error: {e}")
        return e.code

    messages, meta, store = None, None, None
    if args.continue_ or args.resume:
        try:
            path = find_session(root, args.resume)
            messages, meta = load_session(path)
        except (OSError, ValueError) as e:
            _err(f"error: {e}")
            return 2
        store = SessionStore(root, meta.get("id") or path.stem.rsplit("-", 1)[-1], path)

    if args.prompt is None and not args.plain:  # the TUI loads the model in a worker
        started()  # the TUI loads in a worker and reads Ctrl-C as a key
        from agent.tui import app as tui
        return tui.run(tui.Loader(agent_options(args), root, model_dir, messages, meta, store), args)
    try:
        agent = build_agent(agent_options(args), root, model_dir, messages, meta, store)
    except ModelError as e:
        _err(f"error: {e}")
        return e.code
    started()
    if args.prompt is not None and args.best_of > 1:
        return run_best_of(agent, args.prompt, args.best_of, args.output_format,
                           args.best_of_temperature, args.test_command)
    if args.prompt is not None:
        return run_headless(agent, args.prompt, args.output_format)
    return run_repl(agent, model_name=agent.meta["model"])


if __name__ == "__main__":
    raise SystemExit(main())
