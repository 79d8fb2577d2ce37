"""Permission policy: decide allow / ask / deny for each tool call before it runs. The settings
file format it reads (keys, rule syntax, hooks, mcpServers) is tools/settings_file.py's.

Design trade-offs (read these first):

* A speed bump, not a sandbox: Bash commands are judged by their text (tools/shell.py splits,
  tools/destructive.py names destructive ones); containment lives in the OS sandbox every Bash
  call runs in (tools/sandbox.py) and in tools/workspace.py, and the user decides every "ask".
  `sandboxed` says whether that sandbox is in effect (the agent sets it): without it every Bash
  call asks, in every mode, whatever rule matches. An allow rule must match EVERY
  sub-command; a deny or ask rule matches if ANY sub-command or the whole text does, so
  `Bash(git status*)` never allows `git status && rm -rf x`. A rule with a wildcard never covers
  a sub-command with a file redirection or a substitution (`git status > ../x`, `ls $(rm x)`):
  only a rule naming that exact text does (the bare `Bash` rule allows everything). Unbalanced
  quotes never auto-allow.
* Deny rules judge text, so when any Bash deny rule exists, a command whose real commands the
  text hides (a command name built by `$(...)`, `python -c`, `bash -c`, eval, find -exec, xargs,
  awk: destructive.dynamic) asks instead of being allowed by auto mode or an allow rule.
* Precedence: hard denies (unknown tool, malformed args, plan mode for Edit/Bash, Edit outside
  the project) > deny rules > destructive command, unparsable text, hidden commands under a
  deny rule, protected Edit (all ask in every mode, whatever allow or session rule matches) >
  ask rules > allow and session rules > the mode's default. In a turn whose request is a
  question (`question`, set by the driver), the mode's default allows no Edit: it asks.
* Settings: user file + project `.nanocode/settings.json` + `settings.local.json`; lists
  concatenate, the last file naming a mode wins, an explicit mode wins over all. A project file
  ships with the repository, so a hostile repo could grant itself `auto` and `Read(/**)`: a
  project file applies only when the user accepted exactly its bytes for this project
  (tools/workspace.project_settings; the CLI asks on interactive starts) or `trust_settings`
  (--trust-settings) says so; else NOTHING of it applies, its deny and ask rules included. Those
  would only restrict, so honouring them would be harmless, but a half-applied file is harder to
  reason about than "ignored", and the rules a user relies on belong in the user file. `sources`
  lists every file, an ignored one as `<path> (ignored: <why and the fix>)` (/settings shows
  them); a `.nanocode` or settings file linking out of the project is never loaded. Edits of
  protected places (workspace.protected: any `.git` or `.nanocode` component, hook folders,
  core.hooksPath, the user settings folder; literal and resolved path, any case) always ask,
  and a Bash command naming nanocode settings or git hooks is destructive, so the model cannot
  widen its own permissions or plant code that runs later.
  Unknown settings keys are errors (a typo must not drop deny rules). `"env": [names]` lists
  environment variables Bash may see beyond tools/bash.ENV_ALLOW (API keys never pass unlisted).
  `"hooks"` is parsed here into `Hook`s (`policy.hooks`, user file first) and run by agent/loop/hooks.py,
  so a project's hooks, like the rest of its file, apply only once the user accepted it.
* MCP tools (agent/mcp.py; `external`, set by the agent, holds the ones offered now) are named
  `mcp__server__tool`; a rule names one, or `mcp__server` / `mcp__server__*` all of a server's
  (`*` globs). With no rule matching one asks, in every mode: what it does is the server's. Plan
  mode denies it unless its server marks it read-only (readOnlyHint). The servers themselves come
  from the settings' `"mcpServers"` and the project's `.mcp.json` (`mcp_servers`), that file too
  only once accepted; `mcp_ignored` names the servers of a file that does not apply, and why.
* Path rules are gitignore-style globs on the project-relative path (`*.md` at any depth,
  `docs/**` = `docs/` = the folder, `src/*.py` anchored); `~/` and absolute patterns match the
  resolved absolute path. `Read(...)` rules also govern Grep; a Grep of a folder is judged by
  the folder's path, so denying one file does not stop a Grep of its parent.
* `always()` adds session rules and returns exactly the rules it added (the UI shows them). Bash
  gets a prefix only where the leading words say what runs: a tool and its subcommand
  (`git status*`, `npm run test*`: run/exec subcommands keep what they run), an interpreter and
  its script or module (`python x.py*`, `python -m pytest*`) or a test runner / checker in
  PREFIX_PROGRAMS (`pytest*`, `ls*`, `echo*`); everything else, and any sub-command with a redirection or
  substitution, gets its exact text (`Bash(cat README.md)`: `cat*` would print any file). It
  never makes a rule for a call that asks whatever the rules say (returns "") and outside-read
  rules never cover `/`, $HOME or a parent of the project (the file instead).
* Check = use: a Read or Grep decision records what it judged (Decision.inside, .identity) and
  the driver runs the tool on exactly that, so a symlink swapped in after the check gives an
  `error:`, never the other file. A path that changes under a check is denied ("changed while
  it was checked"), and neither check nor always raises (always then makes no rule).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from pathlib import Path

from nanocode.protocol import MODE_TOOLS, MODES, PLAN_REASON, TOOLS, call_path
from tools.destructive import INTERPRETERS, destructive, dynamic, side_effects
from tools.mcp_config import FIX as MCP_FIX, merge, parse_mcp_json, server_names
from tools.settings_file import (  # noqa: F401 - theirs
    HOOK_EVENTS, KINDS, Hook, SettingsError, default_user_file, load_file, parse, parse_rule)
from tools.shell import normalized, split_command
from tools.workspace import OUTSIDE, PathOutside, identity, is_inside, project_settings, protected, real_root, resolve

NO_SANDBOX = "no OS sandbox is in effect, so every command asks"
QUESTION_EDIT = "the request asks for no change (a question or a look-up): an edit asks first, whatever the mode"
_ALLOWED = {"allow": "allowed by rule", "session": "allowed for this session"}
NOT_ACCEPTED = ("not accepted yet: run nanocode here once interactively to review them, "
                "or pass --trust-settings")
MCP_FILE = ".mcp.json"
MCP_PLAN = "plan mode is read-only: this MCP tool's server does not mark it read-only (readOnlyHint)"


@dataclass(frozen=True)
class Decision:
    """For Read and Grep also what was judged, so the call runs on exactly that (check = use):
    `inside` (the resolved target is in the project: run without allow_outside, so the tool's
    descriptor-level open refuses whatever became outside) and `identity` ((st_dev, st_ino) of
    the target the check saw, workspace.MISSING when nothing was there): the tool refuses any
    other file. None for other calls."""
    action: str  # "allow" | "ask" | "deny"
    reason: str
    rule: str | None = None
    always: str = ""  # for an ask: the session rule(s) "always" would store ("": none)
    inside: bool | None = field(default=None, compare=False)
    identity: tuple[int, int] | None = field(default=None, compare=False)


# ------------------------------------------------------------------------------ rules

def _mcp_file(path: Path, raw: bytes) -> dict:
    """An accepted `.mcp.json`: its servers, as a settings file's "mcp" (SettingsError if malformed)."""
    try:
        return {"mcp": parse_mcp_json(raw, str(path))}
    except ValueError as e:
        raise SettingsError(f"{path}: {e}; fix: {MCP_FIX}") from None


def _glob_re(pat: str) -> str:
    out, i = [], 0
    while i < len(pat):
        if pat.startswith("**/", i):
            out.append("(?:.*/)?"); i += 3; continue
        if pat.startswith("**", i):
            out.append(".*"); i += 2; continue
        c = pat[i]
        j = pat.find("]", i + 2) if c == "[" else -1
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif j > 0:
            body = pat[i + 1:j]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body.replace("\\", "\\\\")) + "]")
            i = j
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _path_matches(pattern: str, abs_path: str, rel: str | None, home: Path) -> bool:
    """gitignore-style: a pattern that matches a folder matches everything below it."""
    if pattern == "~" or pattern.startswith("~/"):
        pattern = os.path.realpath(home) + pattern[1:]
    if pattern.startswith("/"):  # absolute: resolve the glob-free head like the tool paths are
        parts = pattern.split("/")
        k = next((n for n, p in enumerate(parts) if re.search(r"[*?\[]", p)), len(parts))
        pattern = os.path.realpath("/".join(parts[:k]) or "/").rstrip("/") + "/" + "/".join(parts[k:])
        target = abs_path
    elif rel is None:
        return False
    else:
        target, pattern = rel, pattern.removeprefix("./")
        if "/" not in pattern.rstrip("/"):
            pattern = "**/" + pattern
    while pattern.endswith(("/", "/**")):  # "docs/**" and "docs/" = the folder docs
        pattern = pattern.removesuffix("/**").removesuffix("/")
    rx, bits = re.compile(_glob_re(pattern)), target.split("/")
    return not pattern or any(rx.fullmatch("/".join(bits[:n])) for n in range(1, len(bits) + 1))


# ------------------------------------------------------------------------------ policy

_SUBCOMMANDS = {"git", "npm", "pip", "pip3", "cargo", "uv", "yarn", "pnpm", "go", "make", "poetry", "pipenv", "ruff"}
_RUNNERS = {"run", "exec", "dlx", "x", "tool"}  # `uv run X`: X is what runs, so the rule keeps it
PREFIX_PROGRAMS = {"pytest", "py.test", "ls", "tox", "nox", "mypy", "pyright", "flake8", "pylint", "tsc",
                   "jest", "vitest", "mocha", "ctest", "bazel", "gradle", "mvn",
                   "echo", "printf", "pwd", "which", "date", "true"}  # these print only their words
_NO_PREFIX = re.compile(r"^(?:sh|bash|zsh|dash|ksh|fish|eval|exec|env|xargs|sudo|doas|su|timeout|nohup|"
                        r"nice|command|builtin|source|\.|time|stdbuf|ionice)$")


def _glob_escape(text: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", text)


def _bash_rule(seg: str) -> str:
    """Session rule for one sub-command: its leading words plus "*" where they say what runs
    (see the module docstring), else the exact text."""
    words = seg.split()
    exact = f"Bash({_glob_escape(seg)})"
    first = words[0]
    if _NO_PREFIX.match(first) or re.search(r"[=$`'\"\\*?\[(){}<>|;&]", first) or side_effects(seg):
        return exact
    lead = [first]
    nxt = words[1] if len(words) > 1 else ""
    if INTERPRETERS.match(first):
        if nxt == "-m" and len(words) > 2:
            lead += words[1:3]
        elif nxt and not nxt.startswith("-"):
            lead.append(nxt)
        else:
            return exact
    elif first in _SUBCOMMANDS and nxt:
        if nxt.startswith("-"):
            return exact
        lead.append(nxt)
        if nxt in _RUNNERS and len(words) > 2:
            if words[2].startswith("-"):
                return exact
            lead.append(words[2])
    elif first not in PREFIX_PROGRAMS and first not in _SUBCOMMANDS:
        return exact
    if any(re.search(r"[*?\[$`'\"\\]", w) for w in lead):
        return exact
    return f"Bash({' '.join(lead)}*)"


def _exact(pattern: str) -> bool:
    """True when the rule pattern has no wildcard (`_glob_escape`d characters are literal)."""
    return not re.search(r"[*?\[]", re.sub(r"\[[*?\[]\]", "", pattern))


@dataclass
class Policy:
    root: Path
    mode: str = "ask"
    allow: list = field(default_factory=list)
    ask: list = field(default_factory=list)
    deny: list = field(default_factory=list)
    session: list = field(default_factory=list)
    home: Path = field(default_factory=Path.home)
    sandboxed: bool = True  # Bash runs in tools/sandbox.py; False: every Bash call asks
    sources: list = field(default_factory=list)  # the settings files that were read (/settings)
    question: bool = False  # this turn's request is a question: the mode alone allows no Edit
    env: list = field(default_factory=list)  # variable names Bash gets beyond tools/bash.ENV_ALLOW
    hooks: list = field(default_factory=list)  # Hook, in settings order (agent/loop/hooks.py runs them)
    mcp_servers: list = field(default_factory=list)  # tools/mcp_config.ServerConfig that apply
    mcp_ignored: list = field(default_factory=list)  # (server name, why it does not start)
    external: dict = field(default_factory=dict)  # name -> protocol.Tool: the MCP tools now offered

    def __post_init__(self):
        if self.mode not in MODES:
            raise SettingsError(f"unknown mode {self.mode!r}; fix: use one of {', '.join(MODES)}")

    @classmethod
    def load(cls, root, mode=None, user_file=None, home=None, trust_settings: bool = False) -> "Policy":
        """The user file plus the project files the user accepted (all of them with
        trust_settings); a malformed file that applies is a SettingsError naming it."""
        home = Path.home() if home is None else Path(home)
        user_file = default_user_file(home) if user_file is None else Path(user_file)
        files, sources, ignored = [load_file(user_file)], [str(user_file)] if user_file.is_file() else [], []
        for f in project_settings(root, home):
            why = f.problem or ("" if trust_settings or f.trusted else NOT_ACCEPTED)
            if why:
                sources.append(f"{f.path} (ignored: {why})")
                ignored += [(name, f"{f.path} {why}") for name in server_names(f.data or b"")]
                continue
            files.append(_mcp_file(f.path, f.data) if f.path.name == MCP_FILE else parse(f.path, f.data))
            sources.append(str(f.path))
        lists = {key: [r for data in files for r in data.get(key, [])] for key in (*KINDS, "env", "hooks")}
        file_mode = next((data["mode"] for data in reversed(files) if "mode" in data), "ask")
        return cls(Path(root), file_mode if mode is None else mode, session=[], home=home,
                   sources=sources, mcp_servers=merge([s for data in files for s in data.get("mcp", [])]),
                   mcp_ignored=ignored, **lists)

    # -- matching

    def _rules(self, kind: str, tool: str):
        lists = {"allow": [("allow", self.allow), ("session", self.session)], "ask": [("ask", self.ask)],
                 "deny": [("deny", self.deny)]}[kind]
        for source, rules in lists:
            for text in rules:
                try:
                    t, pat = parse_rule(text)
                except ValueError:
                    continue
                if t == tool or (t == "Read" and tool == "Grep") or (
                        t.startswith("mcp__") and fnmatchcase(tool, t)):
                    yield source, text, pat

    def _match_path(self, kind, tool, abs_path, rel):
        for source, text, pat in self._rules(kind, tool):
            if pat is None or _path_matches(pat, abs_path, rel, self.home):
                return source, text
        return None

    def _match_bash(self, kind, segs, full):
        """deny/ask: any sub-command or the whole text; allow: every sub-command (rules listed)."""
        rules = list(self._rules(kind, "Bash"))
        hit = lambda s, pat: pat is None or fnmatchcase(s, pat)  # noqa: E731
        if kind != "allow":  # the raw text and its normalised form (`env /usr/bin/curl` = `curl`)
            seen = segs + [full] + [normalized(s) for s in segs]
            return next(((src, t) for src, t, p in rules for s in seen if hit(s, p)), None)
        covers = lambda s, pat: hit(s, pat) and (pat is None or _exact(pat) or not side_effects(s))  # noqa: E731
        used = [next(((src, t) for src, t, p in rules if covers(s, p)), None) for s in segs]
        if not used or None in used:
            return None
        texts = list(dict.fromkeys(t for _, t in used))
        return ("session" if all(src == "session" for src, _ in used) else "allow"), ", ".join(texts)

    # -- decisions

    def check(self, name, args) -> Decision:
        """allow / ask / deny for one tool call; never raises (a path that changes under the
        check is denied: the model may try again)."""
        try:
            return self._check(name, args)
        except Exception as e:  # a bug here must not crash the agent loop: let the user decide
            return Decision("ask", f"could not check this call ({type(e).__name__}: {e})")

    def _check(self, name, args) -> Decision:
        if name in self.external:
            return self._check_mcp(name)
        if name not in TOOLS:
            return Decision("deny", "unknown tool")
        if not isinstance(args, dict):
            return Decision("deny", "malformed arguments")
        if name not in MODE_TOOLS[self.mode]:
            return Decision("deny", PLAN_REASON)
        if name == "Bash":
            return self._check_bash(args.get("command"))
        path = call_path(name, args)
        if not isinstance(path, str) or not path:
            return Decision("deny", f"missing argument {TOOLS[name].path_arg}")
        try:
            full = resolve(self.root, path, write=False, allow_outside=True)
            judged = None if name == "Edit" else identity(self.root, full)
        except ValueError:
            return Decision("deny", f"invalid path {path!r}")
        except (PathOutside, OSError):  # e.g. a symlink swapped in between realpath and the walk
            return Decision("deny", f"{path!r} changed while it was checked; try again")
        inside = is_inside(self.root, full)
        decision = self._judge(name, path, full, inside)
        return decision if name == "Edit" else replace(decision, inside=inside, identity=judged)

    def _judge(self, name, path, full, inside) -> Decision:
        """The decision on the resolved `full` of a Read, Grep or Edit of `path`."""
        rel = os.path.relpath(full, real_root(self.root)).replace(os.sep, "/") if inside else None
        if name == "Edit" and not inside:
            return Decision("deny", OUTSIDE)
        shown = rel if inside else str(full)
        for kind, action, why in (("deny", "deny", "denied by rule"), ("ask", "ask", "ask rule")):
            m = self._match_path(kind, name, str(full), rel)
            if m:
                return Decision(action, f"{why}: {name} {shown}", m[1])
        why = protected(self.root, path, self.home) if name == "Edit" else None
        if why:  # settings, hooks, git config: what is allowed, code that runs later
            return Decision("ask", why)
        m = self._match_path("allow", name, str(full), rel)
        if m:
            return Decision("allow", _ALLOWED[m[0]], m[1])
        if name != "Edit":
            return Decision("allow", "reads inside the project") if inside else \
                Decision("ask", f"reads outside the project: {shown}")
        if self.mode in ("accept-edits", "auto") and self.question:
            return Decision("ask", QUESTION_EDIT)
        if self.mode in ("accept-edits", "auto"):
            return Decision("allow", f"{self.mode} mode allows edits")
        return Decision("ask", f"edits {shown}")

    def _check_mcp(self, name) -> Decision:
        """An MCP tool: plan mode runs only one its server marks read-only; then the rules; with
        none matching it asks, in every mode (auto too: what it does is the server's)."""
        if self.mode == "plan" and self.external[name].changes_files:
            return Decision("deny", MCP_PLAN)
        for kind, action, why in (("deny", "deny", "denied by rule"), ("ask", "ask", "ask rule"),
                                  ("allow", "allow", "")):
            m = next(iter(self._rules(kind, name)), None)
            if m:
                return Decision(action, why or _ALLOWED[m[0]], m[1])
        server = name.split("__")[1]
        return Decision("ask", f"calls the MCP tool {name} (a rule {name} or mcp__{server}__* allows it)")

    def _check_bash(self, command) -> Decision:
        if not isinstance(command, str) or not command.strip():
            return Decision("deny", "missing argument command")
        pairs, ok = split_command(command)
        segs, full = [s for _, s in pairs], " ".join(command.split())
        m = self._match_bash("deny", segs, full)
        if m:
            return Decision("deny", "denied by rule", m[1])
        return self._bash_asks(command, ok) or self._bash_rules(segs, full)

    def _bash_asks(self, command: str, ok: bool) -> Decision | None:
        """The asks that no allow rule, session rule or mode overrides."""
        if not self.sandboxed:
            return Decision("ask", NO_SANDBOX)
        reason = destructive(command, self.home, self.root)
        if reason:
            return Decision("ask", f"destructive: {reason}")
        if not ok:
            return Decision("ask", "could not parse the command (unbalanced quotes or brackets)")
        hidden = dynamic(command) if any(True for _ in self._rules("deny", "Bash")) else None
        if hidden:
            return Decision("ask", f"a deny rule cannot judge this command: {hidden}")
        return None

    def _bash_rules(self, segs, full) -> Decision:
        m = self._match_bash("ask", segs, full)
        if m:
            return Decision("ask", "ask rule", m[1])
        m = self._match_bash("allow", segs, full)
        if m:
            return Decision("allow", _ALLOWED[m[0]], m[1])
        if self.mode == "auto":
            return Decision("allow", "auto mode allows commands")
        return Decision("ask", "runs a shell command")

    def always(self, name, args, store: bool = True) -> str:
        """Add the session rule(s) for "always allow this" and return exactly those added, joined
        by ", "; "" when none is made (hard denies, calls that ask whatever the rules say, calls
        already allowed, a path that changed under the check). store=False only says what would
        be added: the faces show it on the "always" choice before the user picks it. Never
        raises."""
        try:
            return self._always(name, args, store)
        except (OSError, ValueError, PathOutside):  # a path changing meanwhile (PathSwapped): no rule
            return ""

    def _always(self, name, args, store: bool) -> str:
        if (name not in TOOLS and name not in self.external) or not isinstance(args, dict):
            return ""
        d = self.check(name, args)
        if d.action == "deny" or (d.action == "ask" and d.rule):  # an ask rule outranks any allow
            return ""
        rules: list[str] = []
        if name in self.external:
            rules.append(name)
        elif name == "Bash":
            command = args.get("command")
            pairs, ok = split_command(command)
            if self._bash_asks(command, ok):
                return ""
            for _, seg in pairs:
                if not self._match_bash("allow", [seg], seg):
                    rules.append(_bash_rule(seg))
        elif name == "Edit":
            if protected(self.root, args.get("file_path") or "", self.home):
                return ""
            rules.append("Edit")
        else:
            full = resolve(self.root, call_path(name, args), write=False, allow_outside=True)
            if is_inside(self.root, full):
                return ""
            folder = str(full) if full.is_dir() else str(full.parent)
            home, root = os.path.realpath(self.home), str(real_root(self.root))
            whole = folder in ("/", home) or is_inside(folder, root)  # never all of / or $HOME
            shown = str(full) if whole else folder
            shown = "~" + shown[len(home):] if shown.startswith(home.rstrip("/") + "/") else shown
            rules.append(f"Read({_glob_escape(shown)}{'' if whole else '/**'})")
        added = [r for r in dict.fromkeys(rules) if r not in self.session]
        if store:
            self.session += added
        return ", ".join(added)
