"""bench/shape_sweep.py at its tiny shapes on the CPU: every shape measured with the real train step,
its counts those of nanocode.config, and a bad knob named."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import shape_sweep  # noqa: E402


@pytest.mark.slow  # the suite's time (docs/LOG.md, sixth session)
def test_tiny_sweep_measures_each_shape(tmp_path):
    out = tmp_path / "sweep.json"
    subprocess.run([sys.executable, str(ROOT / "bench" / "shape_sweep.py"), "--tiny", "--steps", "2",
                    "--out", str(out)], check=True, capture_output=True, timeout=300)
    record = json.loads(out.read_text())
    from nanocode.config import param_counts, preset
    assert set(record["shapes"]) == {"a", "b"}
    for name, r in record["shapes"].items():
        assert r["status"] == "ok", r
        k = r["knobs"]
        cfg = preset(f"d{k['depth']}", head_dim=k["head_dim"], vocab_size=k["vocab"], sequence_len=k["seq"],
                     value_embeds=bool(k["ve"]))
        assert r["params_total"] == param_counts(cfg)["total"]
        assert r["tokens_per_s"] > 0 and 0 < r["mfu"] and r["loss"] > 0
    assert record["shapes"]["a"]["params_total"] > record["shapes"]["b"]["params_total"]  # b: no value embeddings


def test_a_bad_knob_is_named():
    with pytest.raises(ValueError, match="unknown knob 'width'"):
        shape_sweep.parse("x:width=512")
    assert shape_sweep.parse("x:depth=8,ve=0")[1]["depth"] == 8
