"""One-line bugs for real functions (tasks/real_source.py's harvest keeps those its recorded
tests catch): `mutations` lists every edit of one line of a function's body that swaps an
operator for its OPPOSITE, moves an int constant by one, drops a `not`, swaps a call's first two
arguments or uses another parameter in place of one, each with a phrase saying what it does.
"""
from __future__ import annotations

import ast
import re

OPPOSITE = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "==", "+": "-", "-": "+",
            "*": "//", "//": "*", "/": "*", "%": "//", "and": "or", "or": "and", "+=": "-=",
            "-=": "+=", "in": "not in", "not in": "in", "is": "is not", "is not": "is"}
_OP_RE = re.compile(r"not in|is not|<=|>=|==|!=|//|\+=|-=|<|>|\+|-|\*|/|%|\band\b|\bor\b|\bin\b|\bis\b")


def _op_between(line: str, start: int, end: int) -> tuple[int, int, str] | None:
    """The one operator token in line[start:end] (its span and text), else None."""
    found = list(_OP_RE.finditer(line, start, end))
    if len(found) != 1:
        return None
    m = found[0]
    return m.start(), m.end(), m.group()


def mutations(fn: ast.FunctionDef, source_lines: list[str]) -> list[tuple[int, str, str]]:
    """(0-based line index in source_lines, bad line, what it does) for every one-line mutation of
    fn's body; source_lines is fn's dedented source (line 0 is the def)."""
    first = fn.lineno
    col0 = fn.col_offset
    params = [p.arg for p in fn.args.posonlyargs + fn.args.args]
    body = fn.body[1:] if isinstance(fn.body[0], ast.Expr) and isinstance(getattr(fn.body[0], "value", None), ast.Constant) else fn.body
    out = []

    def edit(lineno: int, start: int, end: int, new: str, desc: str):
        i = lineno - first
        line = source_lines[i]
        s, e = start - col0, end - col0
        if 0 <= s <= e <= len(line):
            out.append((i, line[:s] + new + line[e:], desc))

    def swap_op(node, left, right, lineno):
        if left.end_lineno != lineno or right.lineno != lineno:
            return
        line = source_lines[lineno - first]
        found = _op_between(line, left.end_col_offset - col0, right.col_offset - col0)
        if found and found[2] in OPPOSITE:
            s, e, op = found
            edit(lineno, s + col0, e + col0, OPPOSITE[op], f"used `{OPPOSITE[op]}` instead of {op}")

    for stmt in body:
        for node in ast.walk(stmt):
            ln = getattr(node, "lineno", None)
            if ln is None or node.end_lineno != ln:
                continue
            if isinstance(node, ast.Compare) and len(node.ops) == 1:
                swap_op(node, node.left, node.comparators[0], ln)
            elif isinstance(node, ast.BinOp):
                swap_op(node, node.left, node.right, ln)
            elif isinstance(node, ast.AugAssign):
                swap_op(node, node.target, node.value, ln)
            elif isinstance(node, ast.BoolOp) and len(node.values) == 2:
                swap_op(node, node.values[0], node.values[1], ln)
            elif isinstance(node, ast.Constant) and type(node.value) is int:
                text = source_lines[ln - first][node.col_offset - col0:node.end_col_offset - col0]
                if text == str(node.value):
                    for new in sorted({node.value + 1, node.value - 1} - {-1}):
                        edit(ln, node.col_offset, node.end_col_offset, str(new), f"used {new} instead of {node.value}")
            elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
                edit(ln, node.col_offset, node.operand.col_offset, "", "dropped a not")
            elif isinstance(node, ast.Call) and len(node.args) >= 2 and not node.keywords:
                a, b = node.args[0], node.args[1]
                if isinstance(a, (ast.Name, ast.Constant)) and isinstance(b, (ast.Name, ast.Constant)):
                    line = source_lines[ln - first]
                    ta = line[a.col_offset - col0:a.end_col_offset - col0]
                    tb = line[b.col_offset - col0:b.end_col_offset - col0]
                    if ta != tb:
                        edit(ln, a.col_offset, b.end_col_offset, f"{tb}, {ta}",
                             f"passed `{tb}, {ta}` instead of {ta}, {tb}")
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in params:
                others = [p for p in params if p != node.id]
                if others:
                    edit(ln, node.col_offset, node.end_col_offset, others[0],
                         f"used `{others[0]}` instead of `{node.id}`")
    return out
