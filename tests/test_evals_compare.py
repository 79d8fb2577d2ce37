"""`evals compare`: two agent runs paired per task, McNemar's exact test, from real result files."""
import json

from evals.cli import main
from evals.compare import mcnemar


def write_run(d, resolved, missing, **summary):
    d.mkdir()
    (d / "agent_step1_transcripts").mkdir()
    recs = []
    for i, (ok, miss) in enumerate(zip(resolved, missing)):
        tid = f"eval-fix_bug-{i}"
        recs.append({"id": tid, "family": "fix_bug", "resolved": ok, "steps": 2, "edit_calls": 1,
                     "edits_applied": int(ok), "stop_reasons": ["done"]})
        msgs = [{"role": "user", "content": "fix it"}]
        for _ in range(miss):
            msgs += [{"role": "assistant", "content": "", "tool_call": {"name": "Read", "args": {"file_path": "x.py"}}},
                     {"role": "tool_result", "content": "error: file not found: x.py (closest: src/x.py)"}]
        (d / "agent_step1_transcripts" / f"{tid}.jsonl").write_text(json.dumps({"messages": msgs}) + "\n")
    (d / "agent_step1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (d / "agent_step1.json").write_text(json.dumps({"eval": "agent", "task_families": ["fix_bug"], **summary}))
    return d / "agent_step1.json"


def test_mcnemar_exact():
    assert mcnemar(0, 0) == 1.0
    assert abs(mcnemar(0, 6) - 2 / 64) < 1e-12  # all six discordant pairs one way
    assert mcnemar(3, 3) == 1.0


def test_compare_pairs_runs(tmp_path, capsys):
    a = write_run(tmp_path / "a", [True, False, False, False, False, False, False, False], [1, 2, 0, 0, 0, 0, 0, 0])
    b = write_run(tmp_path / "b", [True, True, True, True, True, True, True, False], [0] * 8)
    out = tmp_path / "cmp.json"
    assert main(["compare", str(a), str(tmp_path / "b"), "--out", str(out)]) == 0
    row = json.loads(out.read_text())["rows"]["all"]
    assert (row["resolved_a"], row["resolved_b"], row["only_a"], row["only_b"]) == (1, 7, 0, 6)
    assert row["p"] == round(2 / 64, 4) and (row["missing_a"], row["missing_b"]) == (3, 0)
    assert row["edits_a"] == "1/8" and "fix_bug" in capsys.readouterr().out


def test_compare_names_a_bad_file(tmp_path, capsys):
    assert main(["compare", str(tmp_path / "nope.json"), str(tmp_path / "nope.json")]) == 2
    assert "not an `evals agent` result" in capsys.readouterr().err


def test_compare_warns_when_the_runs_had_different_sandboxes(tmp_path, capsys):
    a = write_run(tmp_path / "a", [True, False], [0, 0], sandbox_found="namespaces")
    b = write_run(tmp_path / "b", [False, False], [0, 0], sandbox_found="none")
    assert main(["compare", str(a), str(b)]) == 0
    assert "sandbox 'namespaces', B with 'none'" in capsys.readouterr().err
    c = write_run(tmp_path / "c", [False, True], [0, 0], sandbox_found="namespaces")
    assert main(["compare", str(a), str(c)]) == 0
    assert "warning" not in capsys.readouterr().err
