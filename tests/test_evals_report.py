"""evals report on a fake run tree in the real on-disk formats: base -> sft -> dpo runs linked by
their checkpoints' run_metadata, metrics.jsonl as train/loop.py writes it (a resumed stretch and a
torn last line included) and eval JSONs as evals bpb/humaneval/core write them. Checks the stage
and eval tables, the PNGs, the no-matplotlib fallback and the missing-run error."""

import json
import sys

import pytest

from evals import cli, report


def _checkpoint(run, step, meta):
    d = run / "checkpoints" / str(step)
    (d / "run_metadata").mkdir(parents=True)
    (d / "run_metadata" / "metadata").write_text(json.dumps({"step": step, **meta}))
    (d / "commit_success.txt").write_text("ok")


def _metrics(run, steps, val, start_eval=False):
    """Rows like train/loop.py: per-step loss, a summary row every 5 steps, evals every 10."""
    rows = [{"step": 0, **val(0)}] if start_eval else []
    for s in range(1, steps + 1):
        rows.append({"step": s, "loss": 5.0 / s})
        if s % 5 == 0:
            rows.append({"step": s, "loss": 5.0 / s, "tok_per_s": 1000.0 + s, "mfu": 0.01, "eta_s": 3.0})
        if s % 10 == 0:
            rows.append({"step": s, **val(s)})
    rows.append({"step": steps, "loss": 0.125})  # a resumed run logs the last step again
    text = "\n".join(json.dumps(r) for r in rows) + '\n{"step": 9, "lo'  # torn by a crash
    run.mkdir(parents=True, exist_ok=True)
    (run / "metrics.jsonl").write_text(text)


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("NANOCODE_HOME", str(tmp_path))
    runs = tmp_path / "runs"
    base, sft, dpo, other = runs / "d1", runs / "d1-sft", runs / "d1-sft-dpo", runs / "other"
    _metrics(base, 20, lambda s: {"val_bpb_code": 2.0 - s / 100, "val_bpb_text": 2.5 - s / 100})
    _metrics(sft, 10, lambda s: {"val_loss": 1.5 - s / 100}, start_eval=True)
    _metrics(dpo, 10, lambda s: {"val_loss": 0.9, "val_acc": 0.5 + s / 100}, start_eval=True)
    _metrics(other, 10, lambda s: {"val_loss": 3.0})
    _checkpoint(base, 20, {"stage": "base", "preset": "cpu-d2"})
    _checkpoint(sft, 10, {"stage": "sft", "from": str(base / "checkpoints")})
    _checkpoint(dpo, 10, {"stage": "dpo", "from": str(sft / "checkpoints"), "beta": 0.1})
    _checkpoint(other, 10, {"stage": "base"})
    ev = tmp_path / "evals"
    for tag, name, data in [
        ("d1", "bpb_step20", {"eval": "bpb", "model": "d1", "step": 20, "bpb_code": 1.2345,
                              "bpb_text": 1.5, "rows": 8, "seq_len": 512, "seconds": 3.1}),
        ("d1", "core_step20", {"eval": "core", "model": "d1", "step": 20,
                               "metric": "CORE-subset (6/22 tasks)", "core_subset": 0.0421,
                               "tasks": {"copa": {"type": "multiple_choice", "num_fewshot": 0,
                                                  "examples": 10, "accuracy": 0.6, "centered": 0.2}},
                               "limit": None, "seconds": 9.0}),
        ("d1-sft", "humaneval_step10", {"eval": "humaneval", "model": "d1-sft", "step": 10,
                                        "mode": "chat", "n": 1, "problems": 164, "solved": 3,
                                        "pass@1": 0.0183, "k": [1], "seconds": 60.0}),
        ("d1-sft", "notes", {"something": "else"}),  # not an eval result
        ("other", "bpb_step10", {"eval": "bpb", "model": "other", "step": 10, "bpb_code": 9.0}),
    ]:
        (ev / tag).mkdir(parents=True, exist_ok=True)
        (ev / tag / f"{name}.json").write_text(json.dumps(data))
    (ev / "d1-sft" / "humaneval_step10.jsonl").write_text('{"task_id": "HumanEval/0"}\n')
    (dpo / "evals").mkdir()
    fam = {"tasks": 4, "resolved": 1, "resolve_rate": 0.25, "valid_tool_call_rate": 0.9,
           "first_call_correct_rate": 0.5, "mean_steps": 4.5, "edits_applied_rate": None,
           "tool_calls": 18, "edit_calls": 0}
    (dpo / "evals" / "agent_step10.json").write_text(json.dumps(
        {"eval": "agent", "model": "d1-sft-dpo", "step": 10, "overall": fam, "trained_families": fam,
         "families": {"locate": fam}, "errors": 0, "limit": 4, "seed": 0, "seconds": 30.0}))
    return tmp_path


def test_read_metrics_keeps_last_value_and_skips_torn_lines(home):
    series = report.read_metrics(home / "runs" / "d1")
    assert series["loss"][20] == 0.125 and series["loss"][4] == 1.25
    assert sorted(series["val_bpb_code"]) == [10, 20] and sorted(series["tok_per_s"]) == [5, 10, 15, 20]


def test_report_links_stages_tables_and_plots(home, capsys):
    pytest.importorskip("matplotlib")
    assert cli.main(["report", "--model", "d1-sft"]) == 0, capsys.readouterr().err
    out = home / "runs" / "d1-sft" / "report"
    md = (out / "report.md").read_text()
    table = md.split("## Stages")[1].split("## Training curves")[0]
    rows = [line.split("|")[1:3] for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert [(a.strip(), b.strip()) for a, b in rows[1:]] == [("base", "d1"), ("sft", "d1-sft"),
                                                             ("dpo", "d1-sft-dpo")]  # not `other`
    for run in ("d1", "d1-sft", "d1-sft-dpo"):
        png = out / f"curves_{run}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"]({png.name})" in md
    assert "bpb_code 1.2345, bpb_text 1.5000" in md
    assert "CORE-subset (6/22 tasks) 0.0421" in md and "| copa | multiple_choice | 0 | 10 |" in md
    assert "pass@1 0.0183" in md and "solved 3/164" in md
    assert "resolve_rate 0.2500, valid_tool_call_rate 0.9000" in md  # beside the run, not under evals/
    assert "| locate | 4 | 1 | 0.25 | 0.9 | 0.5 | 4.5 | - |" in md
    assert "| trained families | 4 | 1 | 0.25 |" in md and "eval-only families" not in md
    assert "9.0000" not in md and "notes" not in md
    assert "| base | d1 | 20 | 0.1250 | val_bpb_code 1.8000, val_bpb_text 2.3000 | 1,012 | 20 |" in md
    assert "wrote" in capsys.readouterr().out


def test_report_without_matplotlib_still_writes_tables(home, tmp_path, monkeypatch, capsys):
    for name in ("matplotlib", "matplotlib.figure"):  # importing them raises ImportError
        monkeypatch.setitem(sys.modules, name, None)
    assert report.load_figure() is None
    out = tmp_path / "rep"
    assert cli.main(["report", "--model", str(home / "runs" / "d1"), "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "pip install 'nanocode[report]'" in md and not list(out.glob("*.png"))
    assert "bpb_code 1.2345" in md and "| dpo | d1-sft-dpo |" in md
    assert "nanocode[report]" in capsys.readouterr().err


def test_missing_run_is_one_line(home, capsys):
    assert cli.main(["report", "--model", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "nope" in err and "d1-sft" in err and len(err.splitlines()) == 1
