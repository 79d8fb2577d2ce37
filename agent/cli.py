"""`nanocode`: the terminal coding agent. Only argparse at import time, so --help is instant."""

from __future__ import annotations

import argparse


def build_parser() -> argparse.ArgumentParser:
    from nanocode import __version__

    p = argparse.ArgumentParser(
        prog="nanocode",
        description="nanocode: a coding agent in your terminal, running a small model trained "
        "end to end in pure JAX. With no options it opens the full-screen interface on the "
        "current directory.",
    )
    p.add_argument("--version", action="version", version=f"nanocode {__version__}")
    p.add_argument(
        "--model",
        metavar="PATH",
        help="checkpoint directory to run (default: the embedded default model)",
    )
    face = p.add_mutually_exclusive_group()
    face.add_argument(
        "-p", "--print", metavar="PROMPT", dest="prompt",
        help="headless: run one prompt to completion, print the answer and exit",
    )
    face.add_argument(
        "--plain", action="store_true",
        help="line-based prompt-toolkit interface instead of the full-screen one",
    )
    perm = p.add_mutually_exclusive_group()
    perm.add_argument(
        "--mode", choices=["ask", "edits", "yolo"],
        help="permission mode: ask before edits and commands (ask, the default), apply edits "
        "without asking but ask before commands (edits), never ask (yolo)",
    )
    perm.add_argument(
        "-y", "--yes", dest="mode", action="store_const", const="yolo",
        help="same as --mode yolo",
    )
    p.add_argument(
        "--cwd", metavar="DIR", default=".",
        help="project directory to work in (default: the current directory)",
    )
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    # The default is applied here, not in argparse, so that `--yes --mode ask` is still a conflict.
    args.mode = args.mode or "ask"
    return args


def main(argv: list[str] | None = None) -> int:
    parse_args(argv)
    from nanocode.common import not_yet

    return not_yet("the agent", "nanocode --help")


if __name__ == "__main__":
    raise SystemExit(main())
