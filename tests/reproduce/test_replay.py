"""A replay retrains a committed cell at the current checkout and compares every logged value with its record."""

import copy
import json
import os
import subprocess
import sys

import pytest

from reproduce import grid, replay

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _curves(loss, rsum, steps=(20, 40, 60), val_steps=(40,)):
    return {"train": {"step": list(steps), "loss/total": list(loss), "loss/gd": [0.5] * len(steps)},
            "val": {"step": list(val_steps), "val/rsum": list(rsum)}}


def test_equal_curves_are_equal_at_every_shared_step():
    a = _curves([3.0, 2.0, 1.0], [300.0])
    b = _curves([3.0, 2.0], [300.0], steps=(20, 40), val_steps=(40,))  # a replay stopped at step 40
    out = replay.compare_curves(a, b)
    assert out["equal"] and out["values"] == 5 and out["steps"] == [20, 40] and out["first_difference"] is None
    assert out["max_abs_diff"] == {"loss/total": 0.0, "loss/gd": 0.0, "val/rsum": 0.0}


def test_the_first_difference_is_named_with_both_values():
    a = _curves([3.0, 2.0, 1.0], [300.0])
    b = _curves([3.0, 2.0 + 1e-7, 0.9], [301.0])
    out = replay.compare_curves(a, b)
    assert not out["equal"]
    assert out["first_difference"] == {"step": 40, "key": "loss/total", "recorded": 2.0, "replayed": 2.0 + 1e-7}
    assert out["max_abs_diff"]["loss/total"] == pytest.approx(0.1) and out["max_abs_diff"]["val/rsum"] == 1.0
    assert not replay.compare_curves(a, b, max_step=20)["first_difference"]  # steps beyond the replay are ignored
    nothing = replay.compare_curves(a, _curves([1.0], [1.0], steps=(10,), val_steps=(10,)))
    assert nothing["values"] == 0 and not nothing["equal"]  # no shared step: never called equal


def test_the_sentence_says_equal_or_names_the_difference():
    env = {"packages": {"jax": "0.10.2"}}
    base = {"cell": "sh_full", "seed": 0, "budget": "converged", "recorded_code": {"commit": "a" * 40, "dirty": True},
            "replay_code": {"commit": "b" * 40, "dirty": False}, "recorded_environment": env,
            "replay_environment": env}
    same = {**base, "comparison": replay.compare_curves(_curves([3.0, 2.0, 1.0], [300.0]),
                                                         _curves([3.0, 2.0, 1.0], [300.0]))}
    line = replay.sentence(same)
    assert line.startswith(f"sh_full seed 0 (converged; recorded at {'a' * 10}+dirty) replayed at {'b' * 10} for 60")
    assert line.endswith("all 7 logged loss and validation values at 3 steps are bitwise equal.")
    other = {**base, "replay_environment": {"packages": {"jax": "0.11.0"}},
             "comparison": replay.compare_curves(_curves([3.0, 2.0, 1.0], [300.0]), _curves([3.0, 2.5, 1.0], [300.0]))}
    line = replay.sentence(other)
    assert "values differ from step 40 on (loss/total: 2 recorded, 2.5 replayed; largest |Δ| 0.5)" in line
    assert "package versions differ" in line


@pytest.mark.slow
def test_a_smoke_cell_replays_bitwise_at_the_same_commit(tmp_path):
    """End to end: a smoke cell's record, then `python -m reproduce.replay` of it in a fresh directory — same code,
    same machine, so every logged value must be equal; a record tampered at one step is caught at that step."""
    store = tmp_path / "records"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg",
           "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    first = subprocess.run([sys.executable, "-m", "reproduce", "--budget", "smoke", "--seeds", "1", "--cells",
                            "sh_full", "--out", str(tmp_path / "run"), "--archive", str(store), "--no-report"],
                           cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    record_path = store / "smoke" / "sh_full" / "seed0.json"
    saved = tmp_path / "replays"
    proc = subprocess.run([sys.executable, "-m", "reproduce.replay", "--record", str(record_path), "--steps",
                           str(grid.SMOKE_STEPS), "--out", str(tmp_path / "replay"), "--save", str(saved)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads((saved / "smoke_sh_full_seed0.json").read_text())
    cmp = result["comparison"]
    assert cmp["equal"] and cmp["values"] >= 2 * grid.SMOKE_STEPS and max(cmp["steps"]) == grid.SMOKE_STEPS
    assert "bitwise equal" in proc.stdout and replay.load(str(saved))[0]["cell"] == "sh_full"
    recorded = json.loads(record_path.read_text())["curves"]
    tampered = copy.deepcopy(recorded)
    tampered["train"]["loss/total"][1] += 1e-9
    replayed = replay.training_curves(str(tmp_path / "replay" / "cells" / "sh_full" / "seed0"))
    caught = replay.compare_curves(tampered, replayed)
    assert caught["first_difference"]["step"] == recorded["train"]["step"][1]
    again = subprocess.run([sys.executable, "-m", "reproduce.replay", "--record", str(record_path), "--steps", "2",
                            "--out", str(tmp_path / "replay")], cwd=REPO, env=env, capture_output=True, text=True)
    assert again.returncode == 2 and "exists: a replay starts from step 0" in again.stderr
