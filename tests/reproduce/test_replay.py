"""A replay retrains a committed cell at the current checkout and compares every logged value with its record."""

import copy
import json
import os
import subprocess
import sys

import pytest

from reproduce import grid, replay
from tests.subprocess_env import subprocess_env

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


def test_the_sentence_says_equal_or_names_the_difference_and_attributes_it():
    env = {"platform": "Linux-a", "packages": {"jax": "0.10.2", "torch": None}}
    base = {"cell": "sh_full", "seed": 0, "budget": "converged", "recorded_code": {"commit": "a" * 40, "dirty": True},
            "replay_code": {"commit": "b" * 40, "dirty": False}, "recorded_environment": env,
            "replay_environment": env}
    same, other = _curves([3.0, 2.0, 1.0], [300.0]), _curves([3.0, 2.5, 1.0], [300.0])
    line = replay.sentence({**base, "comparison": replay.compare_curves(same, same)})
    assert line.startswith(f"sh_full seed 0 (converged; recorded at {'a' * 10}+dirty) replayed at {'b' * 10} for 60")
    assert line.endswith("all 7 logged loss and validation values are bitwise equal (same environment).")
    moved = {"platform": "Linux-b", "packages": {"jax": "0.10.2", "torch": "2.13.0"}}
    assert replay.environment_changes(env, moved) == ["platform Linux-a → Linux-b", "torch – → 2.13.0"]
    cpu_a, cpu_b = {"model": "X", "simd": ["avx2", "avx512f"]}, {"model": "X", "simd": ["amx_tile", "avx2"]}
    assert replay.environment_changes({**env, "cpu": cpu_a}, {**env, "cpu": cpu_b}) == \
        ["CPU X → X, SIMD flags −avx512f +amx_tile"]
    assert replay.environment_changes(env, {**env, "cpu": cpu_b}) == \
        ["the record names no CPU features (recorded since 2026-12-06)"]
    line = replay.sentence({**base, "replay_environment": moved, "comparison": replay.compare_curves(same, other)})
    assert "values differ from step 40 (loss/total: 2 vs 2.5; largest |Δ| 0.5)" in line
    assert line.endswith("(environment since the record: platform Linux-a → Linux-b; torch – → 2.13.0).")
    # With the record's own commit replayed too: code equal, record not -> the machine (or the dirty edits) did it.
    split = {**base, "comparison": replay.compare_curves(same, other),
             "at_record_commit": {"vs_record": replay.compare_curves(same, other),
                                  "vs_current": replay.compare_curves(other, other)}}
    line = replay.sentence(split)
    assert "and at its own commit: the two replays are bitwise equal, so the code changes since did not reach" in line
    assert "differs from the record from step 40" in line and "the machine or environment and the record's " \
        "uncommitted edits did" in line
    code = {**split, "at_record_commit": {"vs_record": replay.compare_curves(same, same),
                                          "vs_current": replay.compare_curves(same, other)}}
    line = replay.sentence(code)
    assert "the two replays differ from step 40" in line and "so the code changes since did;" in line
    assert "the replay at its own commit equals the record" in line


def test_the_summary_counts_equal_records_and_attributes_the_rest():
    same, other = _curves([3.0, 2.0, 1.0], [300.0]), _curves([3.0, 2.5, 1.0], [300.0])
    eq, ne = replay.compare_curves(same, same), replay.compare_curves(same, other)
    replays = [{"comparison": eq}, {"comparison": ne, "at_record_commit": {"vs_record": ne, "vs_current": eq}},
               {"comparison": ne, "at_record_commit": {"vs_record": eq, "vs_current": ne}}, {"comparison": ne}]
    assert replay.summary(replays) == (
        "1 of 4 replays equal their records bitwise; of the 3 that differ, 2 were also replayed at their own commit: "
        "in 1 the code changes since did not reach the compared steps (the difference is the machine's or "
        "environment's), in 1 they did; 1 differing replay(s) were not run at their own commit, so their difference "
        "is not attributed.")
    assert replay.summary([]) == ""


@pytest.mark.slow
def test_a_smoke_cell_replays_bitwise_at_the_same_commit(tmp_path):
    """End to end: a smoke cell's record, then `python -m reproduce.replay` of it in a fresh directory — same code,
    same machine, so every logged value must be equal; a record tampered at one step is caught at that step."""
    store = tmp_path / "records"
    env = subprocess_env(env_extra={"MPLBACKEND": "Agg"})
    first = subprocess.run([sys.executable, "-m", "reproduce", "--budget", "smoke", "--seeds", "1", "--cells",
                            "sh_full", "--out", str(tmp_path / "run"), "--archive", str(store), "--no-report"],
                           cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    record_path = store / "smoke" / "sh_full" / "seed0.json"
    saved = tmp_path / "replays"
    from reproduce.runner import code_version
    in_git = bool(code_version())  # a copy without .git has no commit to replay at
    proc = subprocess.run([sys.executable, "-m", "reproduce.replay", "--record", str(record_path), "--steps",
                           str(grid.SMOKE_STEPS), *(["--at-record-commit"] if in_git else []),
                           "--out", "replay", "--save", str(saved)],  # --out relative to its cwd
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads((saved / f"smoke_sh_full_seed0_{grid.SMOKE_STEPS}steps.json").read_text())
    cmp = result["comparison"]
    assert cmp["equal"] and cmp["values"] >= 2 * grid.SMOKE_STEPS and max(cmp["steps"]) == grid.SMOKE_STEPS
    if in_git:
        own = result["at_record_commit"]  # the record's commit in a worktree: same code, same machine
        assert own["vs_record"]["equal"] and own["vs_current"]["equal"]
        assert "the replay at its own commit equals the record" in proc.stdout
    assert replay.load(str(saved))[0]["cell"] == "sh_full"
    assert not (tmp_path / "replay" / "record_commit_tree").exists()  # the worktree is removed
    recorded = json.loads(record_path.read_text())["curves"]
    tampered = copy.deepcopy(recorded)
    tampered["train"]["loss/total"][1] += 1e-9
    replayed = replay.training_curves(str(tmp_path / "replay" / "current" / "cells" / "sh_full" / "seed0"))
    caught = replay.compare_curves(tampered, replayed)
    assert caught["first_difference"]["step"] == recorded["train"]["step"][1]
    again = subprocess.run([sys.executable, "-m", "reproduce.replay", "--record", str(record_path), "--steps", "2",
                            "--out", str(tmp_path / "replay")], cwd=REPO, env=env, capture_output=True, text=True)
    assert again.returncode == 2 and "exists: a replay starts from step 0" in again.stderr
