"""The oracle audit (train/oracle_audit.py): every path, old_string, Read offset and Grep name an
oracle writes is in what the model has seen before that step, and the audit is not vacuous."""
from tasks import EVAL_ONLY_FAMILIES, FAMILIES, make_task


def test_oracle_arguments_are_grounded(tmp_path, capsys):
    """Every path, old_string, Read offset and Grep name the oracle writes is in what the model has
    seen before that step (3 tasks per family); the shares are printed for the log."""
    from train.oracle_audit import audit, shares_line
    convs = []
    for family in FAMILIES:
        for seed in range(3):
            task = make_task(family, 900 + seed, heldout=family in EVAL_ONLY_FAMILIES, base=str(tmp_path))
            convs.append({**task.rollout(), "family": family})
    result = audit(convs, examples=10)
    with capsys.disabled():
        print("\n" + shares_line(result))
    for kind in ("path", "old_string", "offset", "pattern"):
        ok, total = result["counts"][kind]
        assert total and ok == total, (kind, result["misses"])
    ok, total = result["counts"]["prose"]
    assert ok >= 0.9 * total, result["misses"]


def test_audit_catches_a_guessed_path_and_offset():
    """The audit is not vacuous: a path only the assistant said, or an offset no Grep showed, is a miss."""
    from train.oracle_audit import audit
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "fix `area`"},
            {"role": "assistant", "content": "it is in `geo/shapes.py`.", "tool_call": {"name": "Read", "args": {"file_path": "geo/shapes.py"}}},
            {"role": "tool_result", "content": "    1→def area(r):\n    2→    return r * r"},
            {"role": "assistant", "content": "", "tool_call": {"name": "Read", "args": {"file_path": "geo/shapes.py", "offset": 1}}},
            {"role": "tool_result", "content": "    2→    return r * r"},
            {"role": "assistant", "content": "", "tool_call": {"name": "Edit", "args": {"file_path": "geo/shapes.py", "old_string": "def area(r):\n    return r * r", "new_string": "x"}}}]
    counts = audit([{"messages": msgs}])["counts"]
    assert counts["path"] == [0, 3]  # the tool results never print the path
    assert counts["offset"] == [0, 1]
    assert counts["old_string"] == [1, 1]  # Read's line prefixes are taken off
    assert counts["prose"] == [0, 1]
