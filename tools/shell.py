"""Shell command text: split a command line into sub-commands and words. Never runs anything.

Splitting is conservative: unquoted `&&` `||` `;` `|` `&`, newlines and parentheses cut
sub-commands; `$(...)`, backticks and `<(...)` are sub-commands too (also inside double quotes,
where the shell runs them); `\\<newline>` joins lines first, as the shell does. Quoted text is data
(`echo "rm -rf /"` is one harmless sub-command); a comment inside `$(...)` makes the text
unparsable (the shell and this scanner would disagree on where it ends).

`split_command(command)` gives the sub-commands; `tokens(seg)` the shell words of one (each
substitution masked as SUB, `$'...'` decoded); `braces(word)` a word's brace expansion;
`unwrap(words)` strips `VAR=x` and wrappers (sudo, env, timeout, setsid, flock, xargs ...);
`normalized(seg)` is a sub-command as deny/ask rules see it. Judging what a command does is
tools/destructive.py's job.
"""
from __future__ import annotations

import os
import re
import shlex


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


def _opens_sub(s: str, i: int, q) -> bool:
    c = s[i]
    return c == "`" or (c in "$<>" and s[i + 1:i + 2] == "(" and (q is None or c == "$"))


def _scan(s: str, out: list, op: str, in_sub: bool = False) -> bool:
    """Append (operator before it, sub-command text) pairs to `out`; False on an unclosed quote
    or a comment inside a substitution."""
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
        if _opens_sub(s, i, q):
            j = _close(s, i if c == "`" else i + 1)
            ok = _scan(s[(i + 1 if c == "`" else i + 2):j], out, "sub", True) and j < n and ok
            cur.append(s[i:j + 1]); i = j + 1; continue
        if c == '"' or (c == "'" and q is None):
            q = None if q == c else c
        elif q is None and c == "#" and (i == 0 or s[i - 1] in " \t\n;&|("):
            ok = ok and not in_sub
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


KEYWORDS = {"if", "then", "else", "elif", "do", "while", "until", "!", "{", "}", "fi", "done", "esac"}


def split_command(command: str) -> tuple[list[tuple[str, str]], bool]:
    """([(op, sub-command)], parsed_ok). op is "", ";", "&&", "||", "&", "\\n", "(", ")", "|", "sub"."""
    out: list = []
    ok = _scan(command.replace("\\\n", ""), out, "")
    segs = [(op, " ".join(_strip_keywords(text.split()))) for op, text in out]
    return [(op, text) for op, text in segs if text], ok


def _strip_keywords(words: list[str]) -> list[str]:
    while words and words[0] in KEYWORDS:
        words = words[1:]
    return words


SUB = "\ue000"  # stands for a substitution's output in a masked sub-command


def _masked(seg: str) -> str:
    """`seg` with every $(...), `...`, <(...) and >(...) replaced by SUB (they are judged as
    sub-commands of their own) and $'...' decoded to a plain quoted word, as the shell sees it."""
    out, q, i, n = [], None, 0, len(seg)
    while i < n:
        c = seg[i]
        if q != "'" and c == "\\":
            out.append(seg[i:i + 2]); i += 2; continue
        if q is None and seg.startswith("$'", i):
            m = re.match(r"\$'((?:[^'\\]|\\.)*)'", seg[i:], re.S)
            if m:
                try:
                    word = m.group(1).encode("latin-1", "backslashreplace").decode("unicode_escape")
                except UnicodeDecodeError:
                    word = m.group(1)
                out.append(shlex.quote(word)); i += m.end(); continue
        if q != "'" and _opens_sub(seg, i, q):
            i = _close(seg, i if c == "`" else i + 1) + 1
            out.append(SUB); continue
        if c == '"' or (c == "'" and q is None):
            q = None if q == c else c
        out.append(c); i += 1
    return "".join(out)


def tokens(seg: str) -> list[str]:
    lex = shlex.shlex(_masked(seg), posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    try:
        return list(lex)
    except ValueError:
        return seg.split()


def braces(word: str, budget: int = 64) -> list[str]:
    """Bash brace expansion of one word (`-{r,f}` -> -r -f, `f{,.bak}` -> f f.bak); sequences
    (`{1..3}`) and braces without a top-level comma stay as they are."""
    for i, c in enumerate(word):
        if c != "{":
            continue
        depth, parts, last = 0, [], i + 1
        for j in range(i, len(word)):
            depth += {"{": 1, "}": -1}.get(word[j], 0)
            if depth == 1 and word[j] == ",":
                parts.append(word[last:j]); last = j + 1
            if depth == 0:
                if not parts:
                    break
                parts.append(word[last:j])
                out = []
                for alt in parts:
                    out += braces(word[:i] + alt + word[j + 1:], budget)
                return out[:budget]
    return [word]



# ------------------------------------------------------------------ command words

_ASSIGN = re.compile(r"^[A-Za-z_]\w*=")
# wrapper -> its options that take a separate value, and how many positionals precede the command
_WRAPPERS = {"sudo": ("ugCDhprtU", 0), "doas": ("uC", 0), "env": ("uC", 0), "nice": ("n", 0),
             "nohup": ("", 0), "time": ("", 0), "timeout": ("sk", 1), "command": ("", 0), "exec": ("a", 0),
             "builtin": ("", 0), "stdbuf": ("ioe", 0), "ionice": ("cnp", 0), "xargs": ("IdEenLlPsa", 0),
             "setsid": ("", 0), "flock": ("wE", 1), "taskset": ("", 1), "chrt": ("", 1), "unbuffer": ("", 0),
             "busybox": ("", 0), "watch": ("nq", 0), "caffeinate": ("", 0)}
GIT_GLOBAL_VALUE = {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path", "--config-env"}


def unwrap(words: list[str]) -> tuple[list[str], list[str]]:
    """Strip `VAR=x`, sudo, env, timeout, setsid, flock, xargs, ... (with their options and the
    positionals before the command); `env -S` strings and `flock -c`/`watch` commands are split
    into words. Returns (words, the wrappers stripped)."""
    seen, words = [], list(words)
    while words:
        w = os.path.basename(words[0])
        if _ASSIGN.match(words[0]):
            words.pop(0); continue
        if w not in _WRAPPERS:
            break
        seen.append(w)
        words.pop(0)
        takes, positionals = _WRAPPERS[w]
        while words and (words[0].startswith("-") or (w == "env" and _ASSIGN.match(words[0]))):
            opt = words.pop(0)
            if w == "env" and (opt.startswith("-S") or opt.startswith("--split-string")):
                value = opt.split("=", 1)[1] if "=" in opt else (opt[2:] or (words.pop(0) if words else ""))
                words = tokens(value) + words
                break
            if len(opt) == 2 and opt[1] in takes and words:
                words.pop(0)
        del words[:min(positionals, max(0, len(words) - 1))]
        if w == "flock" and words[:1] in (["-c"], ["--command"]) and len(words) > 1:
            words = ["sh", "-c", words[1]]
        if w == "watch":
            words = tokens(" ".join(words))
    return words, seen


def normalized(seg: str) -> str:
    """A sub-command as deny/ask rules should see it: quotes removed, wrappers (env, sudo,
    command, timeout, VAR=x ...) stripped, the program's path and a leading backslash dropped,
    git's global options (-C dir, -c k=v, --no-pager ...) removed: `env /usr/bin/curl x` and
    `git -C . push` become `curl x` and `git push`."""
    words, _ = unwrap(tokens(seg))
    if not words:
        return ""
    words[0] = os.path.basename(words[0].lstrip("\\"))
    if words[0] == "git":
        rest = words[1:]
        while rest and rest[0].startswith("-"):
            opt = rest.pop(0)
            if opt in GIT_GLOBAL_VALUE and rest:
                rest.pop(0)
        words = ["git", *rest]
    return " ".join(words)
