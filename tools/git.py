"""The one way the harness runs git: nothing a repository's config names is ever executed.

Every git process nanocode starts (Grep's file list, closest-name hints, grounding's file list,
best-of copies, undo snapshots) goes through `git()` here, or gets `safe_env()` as its whole
environment. The threat: a repository's own config (.git/config, config.worktree, anything they
include) names programs git runs: core.fsmonitor on nearly every command that reads the index,
hooks, clean/smudge/process filters for paths a .gitattributes assigns them, diff textconv and
external diff drivers, gpg for signed commits, a pager, editors, ssh and askpass helpers. Such a
config comes with a downloaded project, or is written by a model (an Edit of
`vendor/lib/.git/config`, a nested repo made by Bash) and then read when the harness runs git in
that directory. So every call gets, as command-line config (GIT_CONFIG_COUNT/KEY_n/VALUE_n, after
any the user's environment already sets; command-line config beats every file):

* FIXED below: fsmonitor off, hooks from /dev/null, pager `cat` (and GIT_PAGER=cat), editors `:`
  (git's "no editor"), ssh/gpg programs `false`, askpass and credential helpers empty, no external
  diff, no signing or signature display, diffs show submodules as one line (a `--submodule=diff`
  would run git, and the nested repo's config, inside them), bare repositories only when named
  explicitly (safe.bareRepository=explicit: a model-made bare repo inside the project is not found
  by discovery).
* for every filter driver that a non-user scope (local, worktree, or their includes) defines
  (`git config --list --show-scope --name-only` in the same directory and environment):
  `filter.<name>.clean/smudge/process` empty and `.required` false; git treats an empty driver
  as none and passes content through unchanged (checked in tests/test_security_git.py; with
  `required` left true an empty driver would make git fail). Likewise `diff.<name>.command` and
  `.textconv` and `merge.<name>.driver` are emptied; callers of `git diff` also pass
  `--no-ext-diff --no-textconv` (an emptied textconv would otherwise show the file as empty).

Environment: GIT_CONFIG_NOSYSTEM=1 (the system config is not the user's and not needed),
GIT_TERMINAL_PROMPT=0, GIT_NO_REPLACE_OBJECTS=1 (a repo's refs/replace cannot swap the blobs
undo restores), and the inherited variables that would point git at another repository or
program (GIT_DIR, GIT_WORK_TREE, GIT_INDEX_FILE, GIT_EXTERNAL_DIFF, GIT_SSH_COMMAND, ...) are
dropped; callers that want GIT_DIR etc. pass them in `extra`.

Trade-offs. The global config (~/.gitconfig, GIT_CONFIG_GLOBAL) is kept: it is the user's own, it
carries core.excludesFile (what counts as ignored) and
trusted filters such as git-lfs; a repo-local definition of the same driver name disables it
(content then goes through unfiltered). Aliases need no handling: git never lets an alias shadow a
builtin, and only builtins are run. safe.directory is left to git: a repository owned by another
user is refused by discovery, so Grep, closest names, grounding and best-of treat the directory as
not a git work tree (they walk it); undo then uses its private shadow repository. Each `git()`
call costs one extra `git config` process to find the drivers; a caller making several
calls in a row computes `safe_env()` once and passes it (the drivers are read when it is made).
Not neutralised because the harness never fetches, pushes, merges or checks out: remote
helpers, uploadpack/receivepack, core.gitProxy, core.alternateRefsCommand, protocol settings. A
repo-local core.worktree is honoured by discovery (callers naming GIT_WORK_TREE override it).
"""
from __future__ import annotations

import os
import subprocess

GIT_TIMEOUT = 60.0  # seconds a git command may run before TimeoutExpired

FIXED = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", os.devnull),
    ("core.pager", "cat"),
    ("core.editor", ":"),
    ("sequence.editor", ":"),
    ("core.sshCommand", "false"),
    ("core.askPass", ""),
    ("credential.helper", ""),
    ("diff.external", ""),
    ("diff.submodule", "short"),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("log.showSignature", "false"),
    ("gpg.program", "false"),
    ("gpg.openpgp.program", "false"),
    ("gpg.x509.program", "false"),
    ("gpg.ssh.program", "false"),
    ("safe.bareRepository", "explicit"),
)
# per driver name: the keys that name a program, and the value that turns each off
DRIVER_KEYS = {
    "filter": (("clean", ""), ("smudge", ""), ("process", ""), ("required", "false")),
    "diff": (("command", ""), ("textconv", "")),
    "merge": (("driver", ""),),
}
TRUSTED_SCOPES = ("global", "command")  # the user's own config; everything else is the repo's
DROPPED_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR",
               "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE", "GIT_CONFIG", "GIT_EXTERNAL_DIFF",
               "GIT_DIFF_OPTS", "GIT_EDITOR", "GIT_SEQUENCE_EDITOR", "GIT_SSH", "GIT_SSH_COMMAND",
               "GIT_ASKPASS", "SSH_ASKPASS", "GIT_PROXY_COMMAND", "GIT_ATTR_SOURCE")
FIXED_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0",
             "GIT_NO_REPLACE_OBJECTS": "1"}


def _with_config(env: dict, pairs) -> dict:
    """env plus `pairs` as command-line config, appended after any it already carries."""
    env = dict(env)
    try:
        start = max(0, int(env.get("GIT_CONFIG_COUNT", "0")))
    except ValueError:
        start = 0
    for i, (key, value) in enumerate(pairs, start):
        env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"] = key, value
    env["GIT_CONFIG_COUNT"] = str(start + len(pairs))
    return env


def repo_drivers(cwd, env: dict) -> list[tuple[str, str]]:
    """(kind, name) of every filter/diff/merge driver a repository scope configures for git
    run in `cwd` with `env` (user scopes excluded); [] when git cannot list the config."""
    try:
        r = subprocess.run(["git", "config", "-z", "--list", "--show-scope", "--name-only"], cwd=cwd,
                           env=env, capture_output=True, timeout=GIT_TIMEOUT)
    except (OSError, subprocess.SubprocessError):
        return []
    words = os.fsdecode(r.stdout).split("\0")
    found = []
    for scope, key in zip(words[0::2], words[1::2]):
        kind, _, rest = key.partition(".")
        name, _, var = rest.rpartition(".")
        if (scope not in TRUSTED_SCOPES and kind in DRIVER_KEYS and name
                and var in dict(DRIVER_KEYS[kind]) and (kind, name) not in found):
            found.append((kind, name))
    return found


def safe_env(cwd, extra: dict | None = None) -> dict[str, str]:
    """The whole environment for a git process run in `cwd`: os.environ without DROPPED_ENV,
    plus FIXED_ENV, `extra` (e.g. GIT_DIR, GIT_INDEX_FILE, identities) and the config overrides
    the module docstring lists, drivers read now from the config git sees there."""
    env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
    env.update(FIXED_ENV)
    env.update(extra or {})
    env = _with_config(env, FIXED)
    drivers = repo_drivers(cwd, env)
    return _with_config(env, [(f"{kind}.{name}.{var}", off) for kind, name in drivers
                              for var, off in DRIVER_KEYS[kind]])


def git(cwd, *args: str, env: dict | None = None, input: bytes | None = None,
        timeout: float | None = GIT_TIMEOUT) -> subprocess.CompletedProcess:
    """Run `git <args>` in `cwd` (bytes out, never raises on a non-zero exit; OSError when git
    or `cwd` is missing, subprocess.TimeoutExpired past `timeout`). env: a safe_env() to reuse, else
    safe_env(cwd) is computed for this call."""
    return subprocess.run(["git", *args], cwd=cwd, env=env if env is not None else safe_env(cwd),
                          input=input, capture_output=True, timeout=timeout)
