"""Shell command text: split into sub-commands and flag the destructive ones. Never runs anything.

A speed bump, not a sandbox: the text is judged, so `python -c`, scripts, `$VAR` expansion and
aliases can still hide anything (containment lives in tools/bash.py). Splitting is conservative:
unquoted `&&` `||` `;` `|` `&`, newlines and parentheses cut sub-commands; `$(...)`, backticks and
`<(...)` are sub-commands too (also inside double quotes, where the shell runs them). Quoted text
is data (`echo "rm -rf /"` is harmless) but `bash -c`, `sh -c`, `su -c` and `eval` strings are
re-parsed; heredoc bodies are read as commands (may over-ask). `destructive()` is tuned for few
false positives on everyday commands (`rm file`, `git reset --soft`, `grep -r`, `chmod +x`).
"""
from __future__ import annotations

import os
import re
import shlex
from pathlib import Path


# ------------------------------------------------------------------ command splitting

def _close(s: str, i: int) -> int:
    """Index closing the backtick or "(" at s[i] (quotes inside are not tracked: an early close
    leaves an unbalanced quote behind, which makes the call ask)."""
    if s[i] == "`":
        j = s.find("`", i + 1)
        return j if j > 0 else len(s)
    depth = 0
    for j in range(i, len(s)):
        depth += {"(": 1, ")": -1}.get(s[j], 0)
        if depth == 0:
            return j
    return len(s)


def _scan(s: str, out: list, op: str) -> bool:
    """Append (operator before it, sub-command text) pairs to `out`; False on an unclosed quote."""
    cur, q, i, ok, n = [], None, 0, True, len(s)

    def flush(next_op):
        nonlocal op
        text = "".join(cur).strip()
        if text:
            out.append((op, text))
        cur.clear()
        op = next_op

    while i < n:
        c = s[i]
        if q == "'":
            q = None if c == "'" else q
            cur.append(c); i += 1; continue
        if c == "\\":
            cur.append(s[i:i + 2]); i += 2; continue
        opens_sub = c == "`" or (c in "$<>" and s[i + 1:i + 2] == "(" and (q is None or c == "$"))
        if opens_sub:
            j = _close(s, i if c == "`" else i + 1)
            ok = _scan(s[(i + 1 if c == "`" else i + 2):j], out, "sub") and j < n and ok
            cur.append(s[i:j + 1]); i = j + 1; continue
        if c == '"' or (c == "'" and q is None):
            q = None if q == c else c
        elif q is None and c == "#" and (i == 0 or s[i - 1] in " \t\n;&|("):
            while i < n and s[i] != "\n":
                i += 1
            continue
        elif q is None and c in ";\n|&()":
            prev, nxt = s[i - 1:i], s[i + 1:i + 2]
            if (c == "&" and (prev in "<>" and prev or nxt == ">")) or (c == "|" and prev == ">"):
                cur.append(c); i += 1; continue
            two = s[i:i + 2]
            sep = two if two in ("&&", "||", "|&") else c
            flush("|" if sep in ("|", "|&") else sep)
            i += len(sep); continue
        cur.append(c); i += 1
    flush(op)
    return ok and q is None


_KEYWORDS = {"if", "then", "else", "elif", "do", "while", "until", "!", "{", "}", "fi", "done", "esac"}


def split_command(command: str) -> tuple[list[tuple[str, str]], bool]:
    """([(op, sub-command)], parsed_ok). op is "", ";", "&&", "||", "&", "\\n", "(", ")", "|", "sub"."""
    out: list = []
    ok = _scan(command, out, "")
    segs = [(op, " ".join(_strip_keywords(text.split()))) for op, text in out]
    return [(op, text) for op, text in segs if text], ok


def _strip_keywords(words: list[str]) -> list[str]:
    while words and words[0] in _KEYWORDS:
        words = words[1:]
    return words


def _tokens(seg: str) -> list[str]:
    lex = shlex.shlex(seg, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    try:
        return list(lex)
    except ValueError:
        return seg.split()


# ---------------------------------------------------------------- destructive commands

_HOME_DOT = re.compile(r"^(?:~[\w.-]*|\$HOME|\$\{HOME\}|/home/[^/]+|/Users/[^/]+|/root)/+\.")
_SYSTEM = re.compile(r"^/(?:etc|boot|usr|bin|sbin|lib|lib32|lib64|sys|proc)(?:/|$)")
_DISK = re.compile(r"^/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|disk|md|dm-)")
_SHELLS = re.compile(r"^(?:sh|bash|zsh|dash|ksh|fish|source|\.|python[\d.]*|perl|ruby|node|php)$")
_DOWNLOAD = {"curl", "wget", "fetch", "http", "https", "aria2c"}
_REDIRECTS = {">", ">>", ">|", "&>", "&>>", ">&", "<>", "<", "<<<"}
_ASSIGN = re.compile(r"^[A-Za-z_]\w*=")
# wrapper -> its options that take a separate value
_WRAPPERS = {"sudo": "ugCDhprtU", "doas": "uC", "env": "uCS", "nice": "n", "nohup": "", "time": "",
             "timeout": "sk", "command": "", "exec": "a", "builtin": "", "stdbuf": "ioe",
             "ionice": "cnp", "xargs": "IdEenLlPsa"}


def _home_dotfile(path: str, home) -> bool:
    if _HOME_DOT.match(path):
        return True
    h = os.path.realpath(home).rstrip("/") + "/"
    return path.startswith(h) and path[len(h):].lstrip("/").startswith(".")


def _target_reason(path: str, home) -> str | None:
    if _home_dotfile(path, home):
        return f"writes to a dot-file in $HOME ({path})"
    if _DISK.match(path):
        return f"writes to a raw disk device ({path})"
    if _SYSTEM.match(path):
        return f"writes to a system path ({path})"
    if ".nanocode/settings" in path:
        return f"changes nanocode permission settings ({path})"
    return None


def _unwrap(words: list[str]) -> tuple[list[str], str | None]:
    """Strip `VAR=x`, sudo, env, timeout, xargs, ... (and their options); return (words, sudo)."""
    sudo, words = None, list(words)
    while words:
        w = os.path.basename(words[0])
        if _ASSIGN.match(words[0]):
            words.pop(0); continue
        if w not in _WRAPPERS:
            break
        sudo = w if w in ("sudo", "doas") else sudo
        words.pop(0)
        while words and (words[0].startswith("-") or (w == "env" and _ASSIGN.match(words[0]))):
            opt = words.pop(0)
            if len(opt) == 2 and opt[1] in _WRAPPERS[w] and words:
                words.pop(0)
        if w == "timeout" and words:
            words.pop(0)  # the duration
    return words, sudo


_GIT_GLOBAL_VALUE = {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path"}


def normalized(seg: str) -> str:
    """A sub-command as deny/ask rules should see it: quotes removed, wrappers (env, sudo,
    command, timeout, VAR=x ...) stripped, the program's path and a leading backslash dropped,
    git's global options (-C dir, -c k=v, --no-pager ...) removed: `env /usr/bin/curl x` and
    `git -C . push` become `curl x` and `git push`."""
    words, _ = _unwrap(_tokens(seg))
    if not words:
        return ""
    words[0] = os.path.basename(words[0].lstrip("\\"))
    if words[0] == "git":
        rest = words[1:]
        while rest and rest[0].startswith("-"):
            opt = rest.pop(0)
            if opt in _GIT_GLOBAL_VALUE and rest:
                rest.pop(0)
        words = ["git", *rest]
    return " ".join(words)


def _short(args) -> str:
    return "".join(a[1:] for a in args if a.startswith("-") and not a.startswith("--"))


def _git_reason(args: list[str]) -> str | None:
    while args and args[0].startswith("-"):
        args = args[2:] if args[0] in ("-C", "-c", "--git-dir", "--work-tree", "--namespace") else args[1:]
    if not args:
        return None
    sub, rest = args[0], args[1:]
    short, plain = _short(rest), [a for a in rest if not a.startswith("-")]
    if sub == "reset" and "--hard" in rest:
        return "git reset --hard discards uncommitted changes"
    if sub == "clean" and ("f" in short or "--force" in rest):
        return "git clean -f deletes untracked files"
    if sub == "push":
        if "f" in short or any(a.startswith("--force") for a in rest) or any(a[:1] == "+" for a in plain):
            return "git push --force rewrites remote history"
        if "d" in short or "--delete" in rest or any(a.startswith(":") for a in plain):
            return "git push --delete deletes a remote branch"
    if sub in ("checkout", "restore", "switch"):
        discard = "--" in rest or "." in plain or "f" in short or {"--force", "--discard-changes"} & set(rest)
        if sub == "restore":
            staged_only = ("S" in short or "--staged" in rest) and not ("W" in short or "--worktree" in rest)
            discard = bool(plain) and not staged_only
        if discard:
            return f"git {sub} discards uncommitted changes"
    force, delete = "f" in short or "--force" in rest, "d" in short or "--delete" in rest
    if sub == "branch" and ("D" in short or (delete and force)):
        return "git branch -D deletes an unmerged branch"
    if sub == "stash" and rest[:1] in (["drop"], ["clear"]):
        return f"git stash {rest[0]} loses stashed work"
    return None


def _words_reason(words: list[str], home, depth: int) -> str | None:
    cmd, args = os.path.basename(words[0]), words[1:]
    if cmd in ("bash", "sh", "zsh", "dash", "ksh", "su") and "-c" in args[:-1]:
        return destructive(args[args.index("-c") + 1], home, depth + 1)
    if cmd == "eval":
        return destructive(" ".join(args), home, depth + 1)
    opts = args[:args.index("--")] if "--" in args else args
    files = [a for a in args if not a.startswith("-")]
    if cmd == "rm":
        if "r" in _short(opts).lower() or "--recursive" in opts:
            return f"recursive delete ({' '.join(['rm'] + [a for a in opts if a.startswith('-')])})"
        return next((f"deletes a dot-file in $HOME ({a})" for a in files if _home_dotfile(a, home)), None)
    if cmd == "find":
        if "-delete" in args:
            return "find -delete deletes every match"
        for i, a in enumerate(args[:-1]):
            run = os.path.basename(args[i + 1])
            if a in ("-exec", "-execdir", "-ok", "-okdir") and run in ("rm", "shred"):
                return f"find -exec {run} deletes every match"
    if cmd == "git":
        return _git_reason(args)
    if cmd in ("chmod", "chown", "chgrp") and ("R" in _short(opts) or "--recursive" in opts):
        return f"recursive {cmd} ({cmd} -R)"
    if cmd == "dd":
        target = next((a[3:] for a in args if a.startswith("of=")), None)
        return f"dd writes raw data (of={target})" if target is not None else None
    if cmd.startswith("mkfs") or cmd in ("mke2fs", "wipefs", "mkswap", "fdisk", "sfdisk", "parted"):
        return f"formats or repartitions a disk ({cmd})"
    if cmd == "shred":
        return "shred destroys file contents"
    targets: list[str] = []
    in_place = "i" in _short(opts) or "--in-place" in opts
    if cmd in ("tee", "truncate") or (cmd in ("sed", "perl") and in_place):
        targets = files
    elif cmd in ("cp", "mv", "ln", "install", "rsync") and files:
        named = [args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-t", "--target-directory")]
        named += [a.split("=", 1)[1] for a in args if a.startswith("--target-directory=")]
        targets = named or files[-1:]
    return next((r for r in map(lambda t: _target_reason(t, home), targets) if r), None)


def _segment_reason(seg: str, home, depth: int) -> str | None:
    toks = _tokens(seg)
    for i, t in enumerate(toks[:-1]):  # redirections: > >> >| &> &>> >&
        if t in _REDIRECTS and t != "<" and not (t.endswith("&") and toks[i + 1].isdigit()):
            reason = _target_reason(toks[i + 1], home)
            if reason:
                return reason
    words, skip = [], False
    for t in toks:  # drop redirections with their targets, stray punctuation and keywords
        if not skip and t not in _KEYWORDS and not set(t) <= set("<>&|;()"):
            words.append(t)
        skip = t in _REDIRECTS
    words, sudo = _unwrap(words)
    reason = _words_reason(words, home, depth) if words else None
    return reason or (f"runs as root ({sudo})" if sudo else None)


def destructive(command: str, home=None, _depth: int = 0) -> str | None:
    """Why `command` (a shell command line) can lose work or harm the machine, or None.
    Every sub-command is judged; the first reason found is returned."""
    if not isinstance(command, str):
        return None
    if _depth > 5:
        return "command nested too deeply"
    home = Path.home() if home is None else home
    m = re.search(r"([\w:.-]+)\s*\(\)\s*\{(.*?)\}", command, re.S)
    if m and re.search(re.escape(m.group(1)) + r"\s*\|\s*" + re.escape(m.group(1)), m.group(2)):
        return "fork bomb"
    segs, _ = split_command(command)
    downloading = False
    for op, seg in segs:
        head = _unwrap([t for t in _tokens(seg) if t not in _KEYWORDS])[0][:1]
        name = os.path.basename(head[0]) if head else ""
        if op not in ("|", "sub"):
            downloading = False
        fetched = re.search(r"(?:[$<]\(|`)\s*(?:curl|wget)\b", seg)  # bash <(curl ..), sh -c "$(curl ..)"
        if _SHELLS.match(name) and (downloading and op == "|" or fetched):
            return f"download piped to a shell ({name})"
        downloading = downloading or name in _DOWNLOAD
        reason = _segment_reason(seg, home, _depth)
        if reason:
            return reason
    return None
