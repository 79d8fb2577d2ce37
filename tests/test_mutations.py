"""tasks/mutations.py's contract, tested directly: mutations() of a small function gives one-line
bugs; each operator mutant swaps exactly one operator on one line for its OPPOSITE, nothing inside
a string or a comment changes, and every mutant function still parses."""

import ast
import io
import textwrap
import tokenize

from tasks.mutations import OPPOSITE, mutations

SOURCE = textwrap.dedent('''\
    def clip(x, lo, hi):
        """Clamp x into [lo, hi]: a < b + c in the docstring is no code."""
        label = "a < b + c and d"  # 1 + 2 < 3 or 4 in a comment
        if x < lo and not x == hi:
            return lo
        total = x * 2 - lo
        total += 1
        if x in (lo, hi) or x is None:
            return max(total, hi)
        return total % 3, f"{label} <= {hi}"
    ''')
OPERATOR_LINES = {  # every operator in the code, by line: what its mutants must be
    3: {("<", "<="), ("and", "or"), ("==", "!=")},
    5: {("*", "//"), ("-", "+")},
    6: {("+=", "-=")},
    7: {("in", "not in"), ("or", "and"), ("is", "is not")},
    9: {("%", "//")},
}
# a string, a comment, the f-string's literal text (its {fields} are code, mutated like any)
STRING_AND_COMMENT = ('"a < b + c and d"', "# 1 + 2 < 3 or 4 in a comment", '} <= {')


def all_mutants():
    lines = SOURCE.split("\n")
    fn = ast.parse(SOURCE).body[0]
    return lines, mutations(fn, lines)


def tokens(line: str) -> list[str]:
    """The line's tokens (strings and comments whole), `not in` and `is not` as one."""
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(line.strip() + "\n").readline):
        if tok.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
            continue
        if out and (out[-1], tok.string) in (("not", "in"), ("is", "not")):
            out[-1] += " " + tok.string
        else:
            out.append(tok.string)
    return out


def operator_swap(desc: str) -> tuple[str, str] | None:
    """(old, new) from a `used `new` instead of old` description naming two operators (the code
    as it is in backticks, the operator it replaced plain: it is nowhere in the file to cite)."""
    if not desc.startswith("used `"):
        return None
    new, old = desc[len("used `"):].split("` instead of ")
    return (old, new) if old in OPPOSITE else None


def test_every_mutant_changes_one_body_line_and_the_function_still_parses():
    lines, muts = all_mutants()
    assert muts
    for i, bad, desc in muts:
        assert 2 <= i < len(lines) and bad != lines[i], (i, desc)  # a body line, not def/docstring
        mutant = lines[:i] + [bad] + lines[i + 1:]
        assert ast.parse("\n".join(mutant)).body[0].name == "clip", desc
        assert sum(a != b for a, b in zip(lines, mutant)) == 1


def test_each_operator_mutant_swaps_exactly_one_operator_for_its_opposite():
    lines, muts = all_mutants()
    found = {}
    for i, bad, desc in muts:
        swap = operator_swap(desc)
        if swap is None:
            continue
        old, new = swap
        assert OPPOSITE[old] == new, desc
        good_tokens, bad_tokens = tokens(lines[i]), tokens(bad)
        assert any(good_tokens[:k] + [new] + good_tokens[k + 1:] == bad_tokens
                   for k, t in enumerate(good_tokens) if t == old), (lines[i], bad)
        found.setdefault(i, set()).add(swap)
    assert found == OPERATOR_LINES


def test_nothing_inside_strings_or_comments_is_mutated():
    lines, muts = all_mutants()
    for i, bad, desc in muts:
        for literal in STRING_AND_COMMENT:
            assert bad.count(literal) == lines[i].count(literal), (literal, bad, desc)
    assert not any(i == 1 for i, _, _ in muts)  # the docstring's line
    assert (9, 'used `x` instead of `hi`') in {(i, d) for i, _, d in muts}  # an f-string's field


def test_the_other_one_line_bugs_constants_not_arguments_and_parameters():
    lines, muts = all_mutants()
    descs = {(i, desc) for i, _, desc in muts}
    assert {(6, "used 2 instead of 1"), (6, "used 0 instead of 1"), (5, "used 3 instead of 2"),
            (5, "used 1 instead of 2"), (9, "used 4 instead of 3"), (9, "used 2 instead of 3")} <= descs
    assert (3, "dropped a not") in descs
    assert (8, "passed `hi, total` instead of total, hi") in descs
    assert (3, "used `lo` instead of `x`") in descs and (3, "used `x` instead of `lo`") in descs
    bad = dict(((i, d), b) for i, b, d in muts)
    assert bad[(3, "dropped a not")].strip() == "if x < lo and x == hi:"
    assert bad[(8, "passed `hi, total` instead of total, hi")].strip() == "return max(hi, total)"


def test_a_constant_zero_never_becomes_minus_one_and_a_one_param_function_swaps_no_params():
    src = "def f(n):\n    return n + 0\n"
    fn = ast.parse(src).body[0]
    descs = sorted(d for _, _, d in mutations(fn, src.split("\n")))
    assert descs == ["used 1 instead of 0", "used `-` instead of +"]


def test_an_indented_method_is_mutated_at_its_own_columns():
    src = "class A:\n    def f(self, a):\n        return a - 1\n"
    method = ast.parse(src).body[0].body[0]
    lines = textwrap.dedent("\n".join(src.split("\n")[1:])).split("\n")  # dedented: line 0 is the def
    bad = {d: b for _, b, d in mutations(method, lines)}
    assert bad["used `+` instead of -"] == "    return a + 1"
    assert bad["used `self` instead of `a`"] == "    return self - 1"
