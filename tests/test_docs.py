"""The README reads top to bottom: no paragraph of it runs over MAX_WORDS words (fenced code,
tables and headings are not paragraphs; each item of a list is one). docs/BENCHMARKS.md holds
current figures only, under MAX_BENCHMARK_LINES lines (history goes to docs/LOG.md)."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_WORDS = 130  # the README aims at ~120; this is the line a change may not cross
MAX_BENCHMARK_LINES = 300


def paragraphs(text: str) -> list[str]:
    """The prose paragraphs of a markdown text: blank-line separated blocks outside ``` fences,
    less tables and headings, each list item on its own."""
    out, block, fenced = [], [], False
    for line in text.splitlines() + [""]:
        if line.startswith("```"):
            fenced = not fenced
            line = ""
        if fenced or line.startswith(("|", "#", "![")):
            line = ""
        if re.match(r"\s*([-*]|\d+\.) ", line) and block:  # a list item starts a new paragraph
            out.append(" ".join(block))
            block = []
        if line.strip():
            block.append(line.strip())
        elif block:
            out.append(" ".join(block))
            block = []
    return out


def test_paragraphs_are_split_at_fences_tables_and_list_items():
    text = "one two\nthree\n\n```\nfour five\n```\n| a | b |\n# head\n- six\n- seven eight\n"
    assert paragraphs(text) == ["one two three", "- six", "- seven eight"]


def test_no_readme_paragraph_is_a_wall():
    long = [(len(p.split()), p[:60]) for p in paragraphs((ROOT / "README.md").read_text())
            if len(p.split()) > MAX_WORDS]
    assert not long, f"README paragraphs over {MAX_WORDS} words (split them): {long}"


def test_benchmarks_hold_current_figures_only():
    lines = len((ROOT / "docs" / "BENCHMARKS.md").read_text().splitlines())
    assert lines < MAX_BENCHMARK_LINES, (f"docs/BENCHMARKS.md has {lines} lines: move superseded "
                                         "figures to docs/LOG.md (newest first)")
