"""Destructive-command classifier: why a shell command line needs a person. Never runs anything.

Contract:
* `destructive(command, home, root)` names why a command can lose work, harm the machine or
  change what runs or is allowed, or None. Every sub-command (tools/shell.py splits them) is
  judged and the first reason found is returned. Beyond rm -r & co. it flags spellings that hide
  the command (`$'-rf'`, brace expansion, a command name built by `$(...)`, wrappers such as
  setsid/flock/taskset/watch/busybox, a shell fed through a pipe or heredoc, awk `system()`,
  interpreter `-c` code that deletes or runs commands, shell function definitions), abbreviated
  long options (`git reset --ha`), risky git config (`-c clean.requireForce=false`,
  `core.hooksPath`), text naming nanocode settings or git hooks, and, given the project `root`,
  rm/mv/truncate/`: >`/writes to paths outside it (`cd` is followed), and deleting, moving or
  overwriting an existing path inside it that undo cannot restore (ignored by git, too big, a
  `.git` or the root's `.nanocode`: tools/snapshot.unrestorable, which runs git to read the
  ignore rules; globs are expanded; a target computed at run time counts as unknown; where paths
  land is tools/command_paths.py's). Git
  commands that drop history or refs ask: pathspec checkouts, `rm -r/-f`, `update-ref`,
  `reflog expire/delete`, `gc --prune`, `prune`, `tag -d`, `branch -f/-D`. `bash -c` (`-lc`, `-ec`,
  `-c --`), `su -c`, `env -S`, `eval`, `flock -c`, `watch` and `find -exec` strings are re-parsed;
  heredoc bodies are read as commands (may over-ask).
* Temp dirs (/tmp, /var/tmp, $TMPDIR when set) are scratch, given the root: writing, moving,
  truncating or deleting (rm -r too) a literal path below one is not "outside the project".
  Not scratch: the temp dir itself (`rm -rf /tmp`), globs (`/tmp/*`), anything under $HOME, the
  project or a folder holding it, and moving project files into a temp dir (they are lost).
* `dynamic(command)` names constructs whose real command cannot be read from the text (deny
  rules cannot judge them); `side_effects(seg)` names a redirection to a file or a substitution
  in one sub-command (prefix allow rules must not cover them); INTERPRETERS matches the names of
  script interpreters.

Trade-offs: this is a reason to ask, not the boundary. The unrestorable check costs a few git
processes per command that names an existing project path for rm/mv/cp-like writes (none
otherwise); it asks about an ignored build artefact too (`rm build/x.o` where build/ is
ignored). Only the text is judged, so scripts,
`$VAR` expansion and aliases can still hide anything; the boundary is the OS sandbox in
tools/sandbox.py (writes only to the project, /tmp a private per-call tmpfs), and without it
every Bash call asks anyway. That is also why temp dirs count as scratch (symlinks inside them
are not followed). Tuned for few false positives on everyday commands (`rm file`,
`git reset --soft`, `grep -r`, `chmod +x`, `cp f{,.bak}`, `pytest > /tmp/out.txt`).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from tools.command_paths import GIT_DIR, Where, home_dotfile, target_reason
from tools.shell import GIT_GLOBAL_VALUE, KEYWORDS, SUB, braces, split_command, tokens, unwrap
from tools.workspace import HOOK_DIRS, hooks_paths, user_settings_dir


_SETTINGS = re.compile(r"\.nanocode(?:/|\b)|settings\.local\.json|\.mcp\.json|\.config/nanocode|nanocode_home|refs/+nanocode", re.I)
_HOOKS = re.compile(r"\.git/+hooks|(?:^|[\s/'\"=])\.(?:husky|githooks)(?:/|\b)", re.I)
_SHELL_NAMES = {"sh", "bash", "zsh", "dash", "ksh", "fish", "ash"}  # take their script with -c
_SHELLS = re.compile(r"^(?:sh|bash|zsh|dash|ksh|fish|ash|source|\.|python[\d.]*|perl|ruby|node|php|deno|bun)$")
INTERPRETERS = re.compile(r"^(?:python[\d.]*|node|perl|ruby|php|deno|bun)$")
_INLINE_FLAGS = {"-c", "-e", "-E", "-r", "--eval", "--command", "eval"}
_INLINE_HARM = re.compile(  # interpreter code that deletes, moves or runs commands
    r"\b(?:os\.(?:remove|unlink|rmdir|removedirs|system|popen|exec\w*|spawn\w*|rename|replace|truncate)|"
    r"shutil\.(?:rmtree|move)|subprocess|child_process|unlink(?:Sync)?|rm(?:Sync|dir(?:Sync)?)?\s*\(|"
    r"system\s*\(|exec\s*\(|File\.delete|FileUtils|\.write_(?:text|bytes)|\bfork\b)")
_DELETERS = {"rm", "unlink", "rmdir", "shred", "truncate", "mv"}
_DOWNLOAD = {"curl", "wget", "fetch", "http", "https", "aria2c"}
_INPUT = {"<", "<<", "<<-", "<<<"}
_REDIRECTS = {">", ">>", ">|", "&>", "&>>", ">&", "<>"} | _INPUT
# Fork bombs without a function: a command that starts itself ($0 is the shell's own script or
# name), or an endless loop that puts jobs in the background (`while :; do $0 & done`).
_SELF = r"(?:\$\{?0\}?|\$\{?BASH_SOURCE(?:\[0\])?\}?)(?![\w}])"
_STARTS_ITSELF = re.compile(r"(?:^|[;&|(){}`]|\b(?:do|then|else|exec|eval|nohup|setsid|command|"
                            r"(?:ba|da|z|k)?sh(?:\s+-\w+)*))\s*[\"']?" + _SELF)
_ENDLESS_BACKGROUND = re.compile(
    r"\b(?:while\s+(?::|true|\[\s*1\s*\]|\(\(\s*1\s*\)\))|until\s+false|for\s*\(\(\s*;\s*;\s*\)\))"
    r"\s*;?\s*do\b(?:(?!\bdone\b)[\s\S])*?[^&>|]&(?![&>])")
_FUNCTION = re.compile(r"(?:^|[\s;&|(])(?:function\s+[\w.:-]+|[\w.:-]+\s*\(\s*\))\s*[{(]")
_GIT_RISKY_CONFIG = re.compile(r"^(?:core\.(?:hookspath|fsmonitor|sshcommand|pager|editor|askpass)|"
                               r"clean\.requireforce|alias\..+|diff\.external|filter\..+|credential\.helper|"
                               r"uploadpack\.packobjectshook|protocol\..+\.allow)$", re.I)


def _long(args, name: str) -> bool:
    """`name` (e.g. "--hard") or an abbreviation of it that getopt/git accept (`--ha`) is in args."""
    return any(a.startswith("--") and len(a) > 3 and name.startswith(a.split("=", 1)[0]) for a in args)


def _short(args) -> str:
    return "".join(a[1:] for a in args if a.startswith("-") and not a.startswith("--"))


def _git_reason(args: list[str]) -> str | None:
    config = []
    while args and args[0].startswith("-"):
        if args[0] in GIT_GLOBAL_VALUE:
            config += [args[1]] if args[0] in ("-c", "--config-env") and len(args) > 1 else []
            args = args[2:]
        else:
            args = args[1:]
    risky = next((c.split("=", 1)[0] for c in config if _GIT_RISKY_CONFIG.match(c.split("=", 1)[0])), None)
    if risky:
        return f"git -c {risky} changes what git runs or deletes"
    if not args:
        return None
    sub, rest = args[0], args[1:]
    short, plain = _short(rest), [a for a in rest if not a.startswith("-")]
    force, delete = "f" in short or _long(rest, "--force"), "d" in short or _long(rest, "--delete")
    if sub == "config" and plain and _GIT_RISKY_CONFIG.match(plain[0]) and len(plain) > 1:
        return f"git config {plain[0]} changes what git runs or deletes"
    if sub == "reset" and _long(rest, "--hard"):
        return "git reset --hard discards uncommitted changes"
    if sub == "clean" and not ("n" in short or _long(rest, "--dry-run")):
        return "git clean deletes untracked files"
    if sub == "push":
        if force or any(a.startswith("--force") for a in rest) or any(a[:1] == "+" for a in plain):
            return "git push --force rewrites remote history"
        if delete or any(a.startswith(":") for a in plain):
            return "git push --delete deletes a remote branch"
    if sub in ("checkout", "restore", "switch"):
        discard = "--" in rest or "." in plain or force or _long(rest, "--discard-changes")
        if sub == "checkout" and not ({"b", "B"} & set(short) or _long(rest, "--orphan")):
            discard = discard or len(plain) > 1 or any(re.match(r"[.:/*]|.*[*?\[]", p) for p in plain)
        if sub == "restore":
            staged_only = ("S" in short or _long(rest, "--staged")) and not ("W" in short or _long(rest, "--worktree"))
            discard = bool(plain) and not staged_only
        if discard:
            return f"git {sub} discards uncommitted changes"
    if sub == "branch" and ("D" in short or (delete and force)):
        return "git branch -D deletes an unmerged branch"
    if sub == "branch" and (force or "M" in short or "C" in short):
        return "git branch -f/-M/-C moves or overwrites a branch"
    if sub == "rm" and not _long(rest, "--cached") and ("r" in short or force):
        return "git rm -r/-f deletes files with their uncommitted changes"
    if sub == "update-ref":
        return "git update-ref moves or deletes refs directly (branches, the stash, undo's refs)"
    if sub == "reflog" and rest[:1] in (["expire"], ["delete"]):
        return f"git reflog {rest[0]} drops the history that recovers lost commits"
    if sub == "prune" or (sub == "gc" and any(a.startswith("--prune") for a in rest)):
        return f"git {sub} deletes unreachable objects (dropped stashes, deleted branches)"
    if sub == "tag" and delete:
        return "git tag -d deletes a tag"
    if sub == "stash" and rest[:1] in (["drop"], ["clear"]):
        return f"git stash {rest[0]} loses stashed work"
    return None


def _shell_script(cmd: str, args: list[str]) -> str | None:
    """The script a shell runs from its arguments: `bash -c x`, `-lc x`, `-ec x`, `-c -- x`, `su -c x`."""
    if cmd == "su":
        i = next((k for k, a in enumerate(args) if a in ("-c", "--command")), None)
        return args[i + 1] if i is not None and i + 1 < len(args) else None
    inline, i = False, 0
    while i < len(args):
        a = args[i]
        if a == "--":
            return args[i + 1] if inline and i + 1 < len(args) else None
        if a in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            i += 2; continue
        if a[:1] in "-+" and len(a) > 1:
            inline = inline or (not a.startswith("--") and "c" in a[1:])
            i += 1; continue
        return a if inline else None
    return None


def _inline_code(cmd: str, args: list[str]) -> str | None:
    """The code an interpreter runs from its arguments (`python -c x`, `node -e x`), or None."""
    if not INTERPRETERS.match(cmd):
        return None
    for i, a in enumerate(args[:-1]):
        if a in _INLINE_FLAGS or (a.startswith("-") and not a.startswith("--") and a[-1:] in "ce" and len(a) <= 4):
            return args[i + 1]
        if not a.startswith("-"):
            return None  # a script: its own arguments follow
    return None


def _sources(args: list[str], files: list[str]) -> list[str]:
    """The source operands of cp/mv-like `args`: all but the last, or all with -t DIR."""
    named = {args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-t", "--target-directory")}
    if named or any(a.startswith("--target-directory=") for a in args):
        return [a for a in files if a not in named]
    return files[:-1]


def _words_reason(words: list[str], wrappers: list[str], where: Where, depth: int) -> str | None:
    cmd, args = os.path.basename(words[0]), words[1:]
    if SUB in cmd:
        return "the command name is computed at run time ($(...) or backticks)"
    if cmd in _SHELL_NAMES | {"su"}:
        script = _shell_script(cmd, args)
        return _judge(script, where, depth + 1) if script is not None else None
    if cmd == "eval":
        return _judge(" ".join(args), where, depth + 1)
    code = _inline_code(cmd, args)
    if code is not None and _INLINE_HARM.search(code):
        return f"inline {cmd} code deletes files or runs commands ({_INLINE_HARM.search(code).group(0)})"
    if cmd in ("awk", "gawk", "mawk", "nawk") and any(re.search(r"system\s*\(|\|\s*\"|\|&", a) for a in args):
        return f"{cmd} runs shell commands (system() or a pipe)"
    if cmd == "cd":
        where.cd(args)
        return None
    opts = args[:args.index("--")] if "--" in args else args
    files = [a for a in args if not a.startswith("-") or a == "-"]
    if "xargs" in wrappers and cmd in _DELETERS:
        return f"xargs {cmd} acts on every name in its input"
    if cmd == "rm":
        operands = [a for a in opts if not a.startswith("-") or a == "-"] + args[len(opts) + 1:]
        scratch = operands and all(map(where.scratch, operands))
        if ("r" in _short(opts).lower() or _long(opts, "--recursive")) and not scratch:
            return f"recursive delete ({' '.join(['rm'] + [a for a in opts if a.startswith('-')])})"
        if any(home_dotfile(a, where.home) for a in files):
            return f"deletes a dot-file in $HOME ({next(a for a in files if home_dotfile(a, where.home))})"
    if cmd in _DELETERS:
        named = files[1:] if cmd == "truncate" and "-s" in opts and files else files
        named = _sources(args, files) if cmd == "mv" else named
        out = next((a for a in named if where.outside(a)), None)
        if out:
            return f"{cmd} of a path outside the project ({out})"
        git = next((a for a in named if GIT_DIR.search(a)), None)
        if git:
            return f"{cmd} in git internals ({git})"
        lost = where.lost(named, computed=True)
        if lost:
            return f"{cmd} destroys {lost}, which undo cannot restore (ignored by git, not snapshotted or unknown)"
    if cmd == "find":
        if "-delete" in args:
            return "find -delete deletes every match"
        for i, a in enumerate(args[:-1]):
            run = os.path.basename(args[i + 1])
            if a in ("-exec", "-execdir", "-ok", "-okdir") and (run in _DELETERS | {"shred"} or _SHELLS.match(run)):
                return f"find -exec {run} runs on every match"
    if cmd == "git":
        return _git_reason(args)
    if cmd in ("chmod", "chown", "chgrp") and ("R" in _short(opts) or _long(opts, "--recursive")):
        return f"recursive {cmd} ({cmd} -R)"
    if cmd == "dd":
        target = next((a[3:] for a in args if a.startswith("of=")), None)
        return f"dd writes raw data (of={target})" if target is not None else None
    if cmd.startswith("mkfs") or cmd in ("mke2fs", "wipefs", "mkswap", "fdisk", "sfdisk", "parted"):
        return f"formats or repartitions a disk ({cmd})"
    if cmd == "shred":
        return "shred destroys file contents"
    targets: list[str] = []
    in_place = "i" in _short(opts) or _long(opts, "--in-place")
    if cmd in ("tee", "truncate") or (cmd in ("sed", "perl") and in_place):
        targets = files
    elif cmd in ("cp", "mv", "ln", "install", "rsync") and files:
        named = [args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-t", "--target-directory")]
        named += [a.split("=", 1)[1] for a in args if a.startswith("--target-directory=")]
        targets = named or files[-1:]
        into = [t for t in targets if os.path.isdir(where.abspath(t) or "")]  # `cp a b dir/`: dir/a, dir/b
        targets = [f"{t.rstrip('/')}/{os.path.basename(a.rstrip('/'))}" for t in into
                   for a in _sources(args, files)] or targets
        lost = where.lost(targets, computed=True) if cmd in ("cp", "mv") else None
        if lost:
            return f"{cmd} overwrites {lost}, which undo cannot restore"
        if cmd == "mv" and any(map(where.scratch, targets)) and not all(map(where.scratch, files)):
            return f"mv moves files out of the project into a temp dir ({targets[0]})"
    return next((r for r in map(lambda t: target_reason(t, where), targets) if r), None)


def _words(seg: str) -> tuple[list[str], list[str], list[str]]:
    """(command words, wrappers stripped, raw tokens) of one sub-command: redirections with their
    targets, stray punctuation and keywords dropped, braces expanded, wrappers unwrapped."""
    toks = tokens(seg)
    words, skip = [], False
    for t in toks:
        if not skip and t not in KEYWORDS and not set(t) <= set("<>&|;()"):
            words.append(t)
        skip = t in _REDIRECTS
    words, wrappers = unwrap([b for w in words for b in braces(w)])
    return words, wrappers, toks


def _fed_shell(words: list[str], toks: list[str], op: str) -> str | None:
    """The shell or interpreter that reads its script from stdin (a pipe, `<`, heredoc), or None."""
    name = os.path.basename(words[0]) if words else ""
    if _SHELLS.match(name) and not [a for a in words[1:] if not a.startswith("-")]:
        if op == "|" or any(t in _INPUT for t in toks):
            return name
    return None


def _segment_reason(seg: str, op: str, where: Where, depth: int) -> str | None:
    words, wrappers, toks = _words(seg)
    for i, t in enumerate(toks[:-1]):  # write redirections: > >> >| &> &>> >& <>
        target = toks[i + 1]
        if t not in _REDIRECTS or t in _INPUT or (t.endswith("&") and target.isdigit()) or target == "/dev/null":
            continue
        reason = target_reason(target, where)
        if reason:
            return reason if words else f"truncates a file outside the project ({target})"
    fed = _fed_shell(words, toks, op)
    if fed:
        return f"feeds a script to {fed} through stdin"
    reason = _words_reason(words, wrappers, where, depth) if words else None
    sudo = next((w for w in wrappers if w in ("sudo", "doas")), None)
    return reason or (f"runs as root ({sudo})" if sudo else None)


def _aliases(root) -> list[str]:
    """Other names of the protected folders in the project: the targets of `.nanocode`, `.husky`
    and `.githooks` when they are symlinks, and core.hooksPath (relative to the root)."""
    if root is None:
        return []
    out = [os.path.relpath(h, os.path.realpath(root)) for h in hooks_paths(root)]
    for name in (".nanocode",) + HOOK_DIRS:
        full = os.path.join(root, name)
        if os.path.islink(full):
            out.append(os.path.relpath(os.path.realpath(full), root))
    out = [re.sub(r"^(?:\./)+", "", a).rstrip("/") for a in out if a and not os.path.isabs(a)]
    return [a + "/" for a in out if a not in ("", ".") and not a.startswith("..")]


def destructive(command: str, home=None, root=None) -> str | None:
    """Why `command` (a shell command line) can lose work, harm the machine or change what runs or
    is allowed, or None. Every sub-command is judged; the first reason found is returned. `root`
    (the project) enables the checks on paths outside it."""
    if not isinstance(command, str):
        return None
    return _judge(command, Where(Path.home() if home is None else home, root), 0)


def _judge(command: str, where: Where, depth: int) -> str | None:
    if depth > 5:
        return "command nested too deeply"
    command = command.replace("\\\n", "")
    m = re.search(r"([\w:.-]+)\s*\(\)\s*\{(.*?)\}", command, re.S)
    if m and re.search(re.escape(m.group(1)) + r"\s*\|\s*" + re.escape(m.group(1)), m.group(2)):
        return "fork bomb"
    if _STARTS_ITSELF.search(command):
        return "fork bomb (the command starts itself: $0)"
    if _ENDLESS_BACKGROUND.search(command):
        return "fork bomb (an endless loop that starts background jobs)"
    if _FUNCTION.search(command):
        return "defines a shell function (what its calls run cannot be judged)"
    if _SETTINGS.search(command) or os.fspath(user_settings_dir(where.home)) in command:
        return "names nanocode permission settings"
    if _HOOKS.search(command) or any(p in command for p in _aliases(where.root)):
        return "names git hooks or settings under another name (a symlink or core.hooksPath)"
    segs, _ = split_command(command)
    downloading = False
    for op, seg in segs:
        head = unwrap([t for t in tokens(seg) if t not in KEYWORDS])[0][:1]
        name = os.path.basename(head[0]) if head else ""
        if op not in ("|", "sub"):
            downloading = False
        fetched = re.search(r"(?:[$<]\(|`)\s*(?:curl|wget)\b", seg)  # bash <(curl ..), sh -c "$(curl ..)"
        if _SHELLS.match(name) and (downloading and op == "|" or fetched):
            return f"download piped to a shell ({name})"
        downloading = downloading or name in _DOWNLOAD
        reason = _segment_reason(seg, op, where, depth)
        if reason:
            return reason
    return None


def dynamic(command: str) -> str | None:
    """Why the commands that `command` really runs cannot be read from its text (so a deny rule
    cannot judge it), or None: a command name computed at run time, a shell or interpreter given
    its script as a string or on stdin, eval/source, find -exec, xargs, awk, a function definition."""
    if not isinstance(command, str):
        return None
    command = command.replace("\\\n", "")
    if _FUNCTION.search(command):
        return "defines a shell function"
    for op, seg in split_command(command)[0]:
        words, wrappers, toks = _words(seg)
        if not words:
            continue
        cmd, args = os.path.basename(words[0]), words[1:]
        if SUB in words[0] or words[0].startswith("$"):
            return "the command name is computed at run time"
        if "xargs" in wrappers:
            return "xargs runs a command on its input"
        if cmd in ("eval", "source", ".") or (cmd in _SHELL_NAMES | {"su"} and _shell_script(cmd, args) is not None):
            return f"{cmd} runs a script given as text"
        if _inline_code(cmd, args) is not None or _fed_shell(words, toks, op):
            return f"{cmd} runs code given inline or on stdin"
        if cmd == "find" and {"-exec", "-execdir", "-ok", "-okdir"} & set(args):
            return "find -exec runs a command on every match"
        if cmd in ("awk", "gawk", "mawk", "nawk"):
            return f"{cmd} programs can run commands"
    return None


def side_effects(seg: str) -> str | None:
    """What in one sub-command reaches beyond its own words: a redirection to or from a file
    (`>`, `>>`, `<`, `2>`; not fd duplication like 2>&1, not /dev/null, not heredocs) or a
    command/process substitution; None when there is none. Quotes are respected."""
    q, i, n = None, 0, len(seg)
    while i < n:
        c = seg[i]
        if q == "'":
            q = None if c == "'" else q
            i += 1; continue
        if c == "\\":
            i += 2; continue
        if c == "`" or (c == "$" and seg[i + 1:i + 2] == "("):
            return "a command substitution"
        if q is None and c in "<>" and seg[i + 1:i + 2] == "(":
            return "a process substitution"
        if c == '"' or (c == "'" and q is None):
            q = None if q == c else c
        elif q is None and c in "<>":
            m = re.match(r"(<<<|<<-?|[<>]+[&|]?)\s*((?:[^\s;&|<>()'\"]|'[^']*'|\"[^\"]*\")*)", seg[i:])
            op, target = m.group(1), m.group(2).strip("'\"")
            if not (op.startswith("<<") or re.fullmatch(r"\d*-?", target) and op.endswith("&") or target == "/dev/null"):
                return f"a redirection ({op} {target})"
            i += len(m.group(0)); continue
        i += 1
    return None
