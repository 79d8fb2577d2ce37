"""`train rollouts --base-url`: a server as the teacher on training tasks, against real servers
on loopback. A scripted teacher (tests/test_evals_base_url.Teacher) replays the oracle on one
task (resolved: its SFT row), gives up on another and cheats on a third by editing the failing
test (both failures: the rejected side of a pair, the cheat never a row), and fails with a 500
on a fourth (no verdict: not recorded, retried by a rerun). `nanocode serve` on a tiny random
checkpoint runs the same path from the CLI's flags. The rows and pairs are what `train sft` /
`train dpo` accept."""
import json

import pytest

from tasks import ROLLOUT_SEED0, TRAIN_FAMILIES, build_task, pattern_symbol
from test_evals_base_url import GIVE_UP, TEACHER, oracle_script, serve, teacher, tiny_ckpt  # noqa: F401
from train import rollouts
from train.conversations import keep_valid


def rollouts_cli(*argv) -> int:
    from train.cli import build_parser
    return rollouts.main(build_parser().parse_args(["rollouts", *map(str, argv)]))


def cheat_script(task) -> list[dict]:
    """Edit the test of the function the fix_bug task's bug is in so that it returns first, then
    claim the fix: the tests pass, the change is tampered."""
    name = pattern_symbol(next(m for m in oracle_script(task) if m.get("tool_call", {}).get("name") == "Grep")
                          ["tool_call"]["args"]["pattern"])
    head = f"def test_{name}():\n"
    path = next(rel for rel in task.project.test_files if head in open(f"{task.root}/{rel}").read())
    return [{"content": "making the test pass.", "tool_call": {"name": "Edit", "args": {
                "file_path": path, "old_string": head, "new_string": head + "    return\n"}}},
            {"content": "done: the tests pass now."}], path


def test_a_teacher_server_makes_rows_from_resolved_rollouts_and_pairs_from_failures(tmp_path, capsys):
    jobs = [(TRAIN_FAMILIES[i], ROLLOUT_SEED0 + i) for i in range(4)]
    assert [f for f, _ in jobs] == ["find_definition", "explain", "fix_bug", "implement_stub"]
    tasks = [build_task(f, s, False, str(tmp_path / "built"), "generated") for f, s in jobs]
    cheat, test_file = cheat_script(tasks[2])
    scripts = {tasks[0].prompt: oracle_script(tasks[0]),  # resolved
               tasks[2].prompt: cheat,  # tampered; explain (tasks[1]) gets GIVE_UP
               tasks[3].prompt: [(500, {"error": {"message": "out of memory"}})]}
    out = tmp_path / "r"
    with teacher(scripts) as url:
        assert rollouts_cli("--base-url", url, "--out", out, "--n", 4, "--workers", 2, "--max-steps", 6,
                            "--workdir", tmp_path / "work") == 0  # two spawned workers, a sampler each
        err = capsys.readouterr().err
        assert "1 task(s) not recorded: the model server failed" in err, err
        s = json.loads((out / "summary.json").read_text())
        assert (s["model"], s["base_url"]) == (f"{url} {TEACHER}", url)
        assert (s["tasks"], s["resolved"], s["sft_rows"], s["pairs"], s["errors"], s["tampered_samples"]) == \
            (3, 1, 1, 2, 0, 1)
        records = {r["family"]: r for r in (json.loads(p.read_text()) for p in (out / "tasks").glob("*.json"))}
        assert set(records) == {"find_definition", "explain", "fix_bug"}  # implement_stub: retried next time
        assert all(r["model"] == s["model"] for r in records.values())
        cheated = records["fix_bug"]
        assert cheated["samples"][0]["tampered"] == [test_file] and not cheated["resolved"]

        [row] = [json.loads(x) for x in (out / "sft.jsonl").read_text().splitlines()]
        assert row["id"] == f"rollout-find_definition-{jobs[0][1]}-0"
        assert row["messages"][0]["role"] == "system" and row["messages"][1]["content"] == tasks[0].prompt
        said = [m for m in row["messages"] if m["role"] == "assistant"]
        assert [(m["content"], m.get("tool_call")) for m in said] == \
            [(m["content"], m.get("tool_call")) for m in scripts[tasks[0].prompt]]
        pairs = {p["family"]: p for p in map(json.loads, (out / "preference.jsonl").read_text().splitlines())}
        assert set(pairs) == {"explain", "fix_bug"}
        for family, rejected in (("explain", {"role": "assistant", "content": GIVE_UP}),
                                 ("fix_bug", {"role": "assistant", **cheat[0]})):
            pair = pairs[family]
            chosen, got = pair["chosen"]["messages"], pair["rejected"]["messages"]
            assert pair["flaw"] == "on_policy" and got[-1] == rejected and chosen[:-1] == got[:-1]
            oracle = oracle_script(tasks[[f for f, _ in jobs].index(family)])
            assert chosen[-1]["tool_call"] == oracle[0]["tool_call"]  # both departed at the first step
        assert len(keep_valid([row])[0]) == 1 and keep_valid(list(pairs.values())) == (list(pairs.values()), {})

        # a rerun retries the task the server failed (now answered: given up on, a third pair)
        scripts.pop(tasks[3].prompt)
        capsys.readouterr()
        assert rollouts_cli("--base-url", url, "--out", out, "--n", 4, "--workers", 1, "--max-steps", 6,
                            "--workdir", tmp_path / "work") == 0
        assert "3 of 4 tasks done already" in capsys.readouterr().out
        s = json.loads((out / "summary.json").read_text())
        assert (s["tasks"], s["sft_rows"], s["pairs"]) == (4, 1, 3)
    # another model's rollouts do not go into the same --out
    assert rollouts_cli("--model", "default", "--out", out, "--n", 4) == 2
    assert f"holds rollouts of {url} {TEACHER}, not default" in capsys.readouterr().err


def test_nanocode_serve_as_the_teacher(tiny_ckpt, tmp_path, monkeypatch):  # noqa: F811
    """The CLI's flags end to end on `nanocode serve` (a random tiny model: the plumbing)."""
    out = tmp_path / "r"
    with serve(tiny_ckpt) as (url, name, key):
        monkeypatch.setenv("NANOCODE_API_KEY", key)
        assert rollouts_cli("--base-url", url, "--model", name, "--out", out, "--n", 2, "--workers", 1,
                            "--max-steps", 2, "--max-tokens", 12, "--workdir", tmp_path / "work") == 0
    s = json.loads((out / "summary.json").read_text())
    assert (s["model"], s["base_url"], s["tasks"], s["errors"]) == (f"{url} {name}", url, 2, 0)
    records = [json.loads(p.read_text()) for p in (out / "tasks").glob("*.json")]
    assert all("model_error" not in x["stops"] for r in records for x in r["samples"])
    rows = [json.loads(x) for x in (out / "sft.jsonl").read_text().splitlines()]
    pairs = [json.loads(x) for x in (out / "preference.jsonl").read_text().splitlines()]
    assert len(keep_valid(rows)[0]) == len(rows) and keep_valid(pairs) == (pairs, {})


@pytest.mark.parametrize("argv,code,says", [
    (["--base-url", "http://127.0.0.1:9/v1"], 6, "cannot reach the model server at http://127.0.0.1:9/v1"),
    (["--base-url", "ftp://x"], 2, "is not an http(s) URL"),
    ([], 2, "needs --model"),
    (["--model", "default", "--context", "4096"], 2, "--context goes with --base-url"),
])
def test_bad_teacher_flags_are_one_line_errors(tmp_path, capsys, argv, code, says):
    assert rollouts_cli(*argv, "--out", tmp_path / "o", "--n", 1) == code
    err = capsys.readouterr().err
    assert err.startswith("error: ") and says in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o").exists()

