"""`train speedrun`: the stage plan of every preset, skipping done stages, resuming after a failure,
and --resume passed to a training stage that has a checkpoint. The real stages run (data and
tokenizer on a tiny source tree); the long ones are exercised by the cpu preset run itself."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from train import speedrun
from train.cli import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("preset", sorted(speedrun.PRESETS))
def test_dry_run_plans_every_stage(preset, tmp_path, capsys):
    assert main(["speedrun", "--preset", preset, "--run-dir", str(tmp_path / "r"), "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split(":")[0] for ln in lines][:1] == ["data"]
    planned = {s for s in speedrun.STAGES if s not in speedrun.OPTIONAL or s in speedrun.PRESETS[preset]}
    assert {ln.split(":")[0] for ln in lines} == planned
    assert not (tmp_path / "r").exists()  # a dry run writes nothing
    for stage in {"base", "sft", "dpo"} & planned:
        assert "--resume" not in next(ln for ln in lines if ln.startswith(stage + ":"))
    last = next(s for s in ("dpo", "rft", "sft") if s in planned)  # export takes the last one
    assert f"--from {tmp_path / 'r' / last} " in next(ln for ln in lines if ln.startswith("export:"))


def test_dry_run_imports_no_jax(tmp_path):
    code = ("import sys; from train.cli import main; "
            f"main(['speedrun', '--preset', 'cpu', '--run-dir', {str(tmp_path)!r}, '--dry-run']); "
            "assert 'jax' not in sys.modules and 'numpy' not in sys.modules, 'heavy import'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, capture_output=True)


def test_training_stage_resumes_from_its_checkpoint(tmp_path):
    p = speedrun.PRESETS["cpu"]
    (tmp_path / "sft" / "checkpoints" / "200").mkdir(parents=True)
    assert "--resume" in speedrun.stage_commands("sft", p, tmp_path)[0]
    assert "--resume" not in speedrun.stage_commands("base", p, tmp_path)[0]
    assert "--multihost" in speedrun.stage_commands("base", p, tmp_path, multihost=True)[0]
    # the cpu base ends with a phase at 2,048 tokens that continues the first; sft starts from it
    (tmp_path / "base_long" / "checkpoints" / "100").mkdir(parents=True)
    first, long = speedrun.stage_commands("base", p, tmp_path)
    assert "--resume" in long and "--resume" not in first
    assert long[long.index("--from") + 1] == f"{tmp_path}/base" and long[long.index("--seq-len") + 1] == "2048"
    sft = speedrun.stage_commands("sft", p, tmp_path)[0]
    assert sft[sft.index("--from") + 1] == f"{tmp_path}/base_long"
    # the on-policy round: rollouts of the sft model, rft from sft on them, dpo from rft with their pairs
    rollouts, = speedrun.stage_commands("rollouts", p, tmp_path)
    assert rollouts[rollouts.index("--model") + 1] == f"{tmp_path}/sft"
    rft, = speedrun.stage_commands("rft", p, tmp_path)
    assert f"{tmp_path}/rollouts/sft.jsonl*10" in rft and rft[rft.index("--from") + 1] == f"{tmp_path}/sft"
    dpo, = speedrun.stage_commands("dpo", p, tmp_path)
    assert f"{tmp_path}/rollouts/preference.jsonl*10" in dpo and dpo[dpo.index("--from") + 1] == f"{tmp_path}/rft"
    assert speedrun.stage_commands("rft", speedrun.PRESETS["d12"], tmp_path) == []


@pytest.mark.parametrize("preset", sorted(speedrun.PRESETS))
def test_preset_commands_parse_and_accelerator_presets_shard_every_training_stage(preset, tmp_path):
    from train.cli import build_parser
    p = speedrun.PRESETS[preset]
    for stage in ("data", "tokenizer", "base", "synth", "sft", "rollouts", "rft", "dpo"):
        for cmd in speedrun.stage_commands(stage, p, tmp_path):
            build_parser().parse_args(cmd[3:])  # every flag exists (argparse exits otherwise)
    if preset not in ("cpu", "v5e"):  # sized for a TPU v6e-8, or for one GPU
        assert (p["chip"], p["devices"]) in {("v6e", 8), ("gpu80", 1), ("gpu24", 1)}
        for stage in ("base", "sft", "dpo"):
            cmd = speedrun.stage_commands(stage, p, tmp_path)[0]
            assert cmd[cmd.index("--mesh") + 1] == "data=1,fsdp=-1"


@pytest.fixture
def tiny_preset(tmp_path, monkeypatch):
    """A preset whose data stage reads a small tree, so data + tokenizer run for real in seconds."""
    src = tmp_path / "src"
    src.mkdir()
    for i in range(40):
        (src / f"mod{i}.py").write_text(f'"""module {i}"""\n\ndef f{i}(x):\n    return x * {i} + len("abc")\n' * 5)
    for i in range(6):
        (src / f"notes{i}.md").write_text(f"note {i}: a tiny corpus for the speedrun test\n" * 50)
    p = dict(speedrun.PRESETS["cpu"], data=[["data", "local", "--src", str(src), "--docs-per-shard", "16"]],
             tokenizer=["--vocab-size", "300", "--max-chars", "20000"])
    monkeypatch.setitem(speedrun.PRESETS, "cpu", p)
    return p


def test_stages_skip_when_done_and_a_failed_stage_reruns_on_resume(tiny_preset, tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["speedrun", "--preset", "cpu", "--run-dir", str(run), "--only", "data,tokenizer"]
    assert main(argv) == 0
    assert (run / "data.done").exists() and (run / "tokenizer" / "tokenizer.json").exists()
    done = json.loads((run / "tokenizer.done").read_text())
    assert "tokenizer" in done["commands"][0] and done["seconds"] >= 0
    assert "--vocab-size 300" in (run / "logs" / "tokenizer.log").read_text()

    assert main(argv) == 2  # the run dir exists: refuse to mix runs without --resume
    assert "--resume" in capsys.readouterr().err

    stamp = (run / "tokenizer" / "tokenizer.json").stat().st_mtime_ns
    assert main(argv + ["--resume"]) == 0
    out = capsys.readouterr().out
    assert "data: done already" in out and "tokenizer: done already" in out
    assert (run / "tokenizer" / "tokenizer.json").stat().st_mtime_ns == stamp  # not redone

    # base fails (a total batch that does not divide): no .done, and --resume tries it again
    tiny_preset["base"] = ["--preset", "cpu-d2", "--steps", "1", "--device-batch", "2", "--total-batch", "5"]
    assert main(["speedrun", "--preset", "cpu", "--run-dir", str(run), "--only", "data,base", "--resume"]) != 0
    assert not (run / "base.done").exists()
    assert not list(run.glob("*.failed"))  # failure markers are for --multihost's waiters only
    assert "failed" in capsys.readouterr().err


def test_unknown_stage_is_a_clear_error(tmp_path, capsys):
    assert main(["speedrun", "--preset", "cpu", "--run-dir", str(tmp_path), "--only", "data,nope"]) == 2
    assert "unknown stage(s) nope" in capsys.readouterr().err


def test_eval_tables_read_what_the_evals_write(tmp_path):
    """The model card's tables come from real `evals` outputs (the two no-model baselines here)."""
    from evals.cli import main as evals_main
    from evals.model_card import eval_tables
    out = tmp_path / "evals"
    assert evals_main(["agent", "--policy", "oracle", "--families", "find_definition,run_command",
                       "--per-family", "1", "--workers", "1", "--quiet", "--out", str(out)]) == 0
    assert evals_main(["humaneval", "--canonical", "--limit", "3", "--quiet", "--out", str(out)]) == 0
    assert evals_main(["agent", "--policy", "oracle", "--split", "real", "--families", "find_callers",
                       "--per-family", "1", "--workers", "1", "--quiet", "--out", str(out)]) == 0
    assert (out / "agent_oracle.json").exists() and (out / "agent_real_oracle.json").exists()
    text = "\n".join(eval_tables(out))
    generated, real = text.index("on generated projects (`--split eval`)"), text.index("on real code (`--split real`)")
    assert generated < text.index("| find_definition |") < real < text.index("| find_callers | 1 |")
    assert "| find_definition | 1 | 1 | 1 | 1 | 1 | 1 | - |" in text
    assert "| trained families | 2 | 2 | 1 |" in text and "| all | 2 | 2 | 1 |" in text
    assert "| humaneval | pass@1 1.0000 | solved 3/3, mode canonical" in text


def test_v5e_preset_makes_synth_beside_base_and_reads_the_given_sources(tmp_path):
    p = {**speedrun.PRESETS["v5e"], "src": ["/wheels", "/stdlib"]}
    assert (p["chip"], p["devices"]) == ("v5e", 1) and p["beside"] == {"base": "synth"}
    for cmd in speedrun.stage_commands("data", p, tmp_path):
        assert cmd[cmd.index("--src"):cmd.index("--src") + 3] == ["--src", "/wheels", "/stdlib"]
        assert "json/*" in cmd  # the real-code eval split's packages stay out
    synth, = speedrun.stage_commands("synth", p, tmp_path)
    assert "--minutes" in synth  # writes what it made when the chip's stage is done


def test_training_stages_read_the_synth_sets_made_ahead_beside_the_hosts(tmp_path):
    """Sets made on other machines (their own seeds and package roots, so synth would not resume
    them) are carried as synth-*/ and sft, rft and dpo train on them with the host's synth/."""
    for name in ("synth-s11", "synth-s12"):
        (tmp_path / name).mkdir()
        for f in ("train.jsonl", "preference_train.jsonl"):
            (tmp_path / name / f).write_text("{}\n")
    (tmp_path / "synth-empty").mkdir()  # no files: nothing read from it
    p = {**speedrun.PRESETS["cpu"]}
    sft, = speedrun.stage_commands("sft", p, tmp_path)
    data = sft[sft.index("--data") + 1:sft.index("--val")]
    assert data == [str(tmp_path / d / "train.jsonl") for d in ("synth", "synth-s11", "synth-s12")]
    assert sft[sft.index("--val") + 1] == str(tmp_path / "synth" / "val.jsonl")  # the host's val only
    rft, = speedrun.stage_commands("rft", p, tmp_path)
    assert all(f in rft for f in data) and any(a.startswith(str(tmp_path / "rollouts")) for a in rft)
    dpo, = speedrun.stage_commands("dpo", p, tmp_path)
    assert [a for a in dpo if a.endswith("preference_train.jsonl")] == [
        str(tmp_path / d / "preference_train.jsonl") for d in ("synth", "synth-s11", "synth-s12")]


CHILD = """
import signal, sys, time
seen = []
signal.signal(signal.SIGTERM, lambda *a: seen.append(1))
print('re' + 'ady', flush=True)  # (the log's command line must not say it)
while not seen:
    time.sleep(0.05)
time.sleep(1.0)  # the save a training stage makes before it exits
open(sys.argv[1], 'w').write(str(len(seen)))
sys.exit(3)
"""
DRIVER = """
import signal, sys
from pathlib import Path
from train import speedrun
for s in (signal.SIGTERM, signal.SIGINT):
    signal.signal(s, speedrun._pass_signal)
run = Path(sys.argv[1])
rc = speedrun.run_stage("base", [[sys.executable, "-c", sys.argv[2], str(run / "seen")]], run, {})
(run / "driver_rc").write_text(str(rc))
"""


def test_a_signal_to_the_driver_group_reaches_the_stage_once_and_the_driver_waits(tmp_path):
    """As `timeout` does at the end of a chunk of chip time: SIGTERM to the driver's whole process
    group. The stage (its own session) gets it once, from the driver, and ends its save; the
    driver waits for it and reports its exit. Without the driver passing it on, the stage would
    never hear it; delivered twice, a training stage stops without saving."""
    import os
    import signal
    import subprocess
    import sys
    import time
    root = Path(__file__).resolve().parents[1]
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path), CHILD], start_new_session=True,
                              env={**os.environ, "PYTHONPATH": str(root)}, stdout=subprocess.DEVNULL)
    log = tmp_path / "logs" / "base.log"
    deadline = time.time() + 60
    try:
        while not (log.exists() and "ready" in log.read_text()):
            assert time.time() < deadline and driver.poll() is None, "the stage never started"
            time.sleep(0.05)
        os.killpg(driver.pid, signal.SIGTERM)
        assert driver.wait(timeout=60) == 0
    finally:
        try:
            os.killpg(driver.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert (tmp_path / "seen").read_text() == "1"  # once, and it finished its work
    assert (tmp_path / "driver_rc").read_text() == "3"
    assert not (tmp_path / "base.done").exists()


def test_a_command_after_the_signal_is_not_started(tmp_path, monkeypatch):
    """A signal that came between two commands (or two stages) stops the driver before the next."""
    import signal
    monkeypatch.setattr(speedrun, "STOP", [signal.SIGTERM])
    marker = tmp_path / "ran"
    rc = speedrun.run_stage("sft", [[sys.executable, "-c", f"open({str(marker)!r}, 'w')"]], tmp_path, {})
    assert rc == 128 + signal.SIGTERM and not marker.exists() and not (tmp_path / "sft.done").exists()


def test_v5e_script_seeds_the_run_from_work_made_elsewhere_and_keeps_the_machines_own(tmp_path):
    """train/v5e.sh run: a seed archive (a base, synth made on another machine, their .done marks)
    fills the run directory, files the machine already has are kept, and stages marked done in
    the seed are not run again."""
    import os
    import tarfile

    made = tmp_path / "made"
    (made / "synth").mkdir(parents=True)
    (made / "synth" / "train.jsonl").write_text("{}\n")
    (made / "sft").mkdir()
    (made / "sft" / "notes.txt").write_text("from the seed\n")
    (made / "sft.done").write_text("{}\n")
    seed = tmp_path / "run.tgz"
    with tarfile.open(seed, "w:gz") as tar:
        for p in sorted(made.rglob("*")):
            tar.add(p, arcname=str(p.relative_to(made)), recursive=False)
    run = tmp_path / "run"
    (run / "sft").mkdir(parents=True)
    (run / "sft" / "notes.txt").write_text("the machine's own\n")
    env = {**os.environ, "RUN": str(run), "SEED": str(seed), "SRC": str(tmp_path),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    proc = subprocess.run(["bash", "train/v5e.sh", "run", "1", "sft"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "sft: done already" in proc.stdout
    assert (run / "synth" / "train.jsonl").read_text() == "{}\n"
    assert (run / "sft" / "notes.txt").read_text() == "the machine's own\n"


def test_extra_arguments_override_the_presets(tmp_path, capsys):
    run = ["speedrun", "--preset", "v5e", "--run-dir", str(tmp_path / "r"), "--dry-run"]
    assert main(run + ["--extra", "base=--steps 8600", "--extra", "synth=--minutes 12"]) == 0
    lines = capsys.readouterr().out.splitlines()
    base = next(ln for ln in lines if ln.startswith("base:")).split()
    assert base[-2:] == ["--steps", "8600"] and "4300" in base  # the preset's, overridden by the last
    assert next(ln for ln in lines if ln.startswith("synth:")).endswith("--minutes 12")
    for bad in ("base", "evals=--n 3", "nosuch=--x 1"):
        assert main(run + ["--extra", bad]) == 2
        assert "expected STAGE=ARGS with STAGE one of base, " in capsys.readouterr().err


def test_v5e_script_adds_carried_english_to_the_sources_and_passes_speedrun_flags(tmp_path):
    """train/v5e.sh run: an eng/ folder in the seed (train/english.sh's output) joins the data
    stage's --src, and the flags after STAGES reach speedrun (here --dry-run and --extra)."""
    import os
    import tarfile

    (tmp_path / "made" / "eng").mkdir(parents=True)
    (tmp_path / "made" / "eng" / "git-log.1.txt").write_text("git-log - Show commit logs\n")
    seed = tmp_path / "run.tgz"
    with tarfile.open(seed, "w:gz") as tar:
        tar.add(tmp_path / "made" / "eng", arcname="eng")
    run = tmp_path / "run"
    env = {**os.environ, "RUN": str(run), "SEED": str(seed), "SRC": str(tmp_path / "wheels"),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    proc = subprocess.run(["bash", "train/v5e.sh", "run", "1", "data,base", "--dry-run", "--extra",
                           "base=--steps 7"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = [ln for ln in proc.stdout.splitlines() if ln.startswith("data:")]
    assert data and all(f"--src {tmp_path / 'wheels'} {run / 'eng'} " in ln for ln in data), proc.stdout
    assert next(ln for ln in proc.stdout.splitlines() if ln.startswith("base:")).endswith("--steps 7")
    assert (run / "eng" / "git-log.1.txt").exists()
