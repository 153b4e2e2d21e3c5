"""Frozen bases archived beside their records (`reproduce.base_exports`): the export round-trips bitwise into a fresh
output directory, an unchanged export is not rewritten, a damaged archive is refused naming the file before anything
is written, and heads whose finished base has no export are refused before the grid runs."""

import json
import os

import numpy as np
import pytest

from reproduce import __main__ as cli
from reproduce import archive, base_exports, grid, runner
from tests.reproduce.helpers import record

BUDGET = "flowclip"
BASE = "fcs_base_R"


def _params(seed=0):
    rng = np.random.default_rng(seed)
    return {"params": {"text": {"layer_0": {"kernel": rng.normal(size=(3, 4)).astype(np.float32),
                                            "bias": rng.normal(size=(4,)).astype(np.float32)}},
                       "image": {"embed": rng.normal(size=(5, 2)).astype(np.float32)}},
            "step_count": np.array([7], dtype=np.int32)}


def _finished_base(out, params):
    """A finished base cell in `out`: its record and a real export (Orbax params + export.json)."""
    from mmjax.train.export import export_params
    cell = grid.make_grid(1, [BASE])[0]
    os.makedirs(cell.workdir(out), exist_ok=True)
    runner._write_json(os.path.join(cell.workdir(out), "cell.json"), record(BASE, 0, {}, budget=BUDGET))
    export_params(cell.workdir(out), params, {"task": "clip", "step": 312, "full_config": {"seed": 0},
                                              "environment": {"python": "3.11"}, "command": "x", "code_version": {}})
    return cell


def _files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def test_flatten_unflatten_round_trip_and_bad_keys():
    flat = base_exports.flatten(_params())
    assert sorted(flat) == ["params/image/embed", "params/text/layer_0/bias", "params/text/layer_0/kernel",
                            "step_count"]
    back = base_exports.unflatten(flat)
    assert np.array_equal(back["params"]["text"]["layer_0"]["kernel"], _params()["params"]["text"]["layer_0"]["kernel"])
    with pytest.raises(ValueError, match="'a/b'"):
        base_exports.flatten({"a/b": np.zeros(1)})


def test_save_then_restore_rebuilds_the_export_bitwise_in_a_fresh_directory(tmp_path):
    from mmjax.train.export import load_exported
    store, out, fresh = str(tmp_path / "records"), str(tmp_path / "out"), str(tmp_path / "fresh")
    cell = _finished_base(out, _params())
    archive.save([cell], out, store, BUDGET)
    assert base_exports.save([cell], out, store, BUDGET) == [os.path.join(store, BUDGET, BASE, "seed0.export.npz")]
    assert _files(store) == [os.path.join(BUDGET, BASE, n) for n in ("seed0.export.json", "seed0.export.npz",
                                                                      "seed0.json")]
    assert base_exports.save([cell], out, store, BUDGET) == []          # unchanged: not rewritten
    assert [r["name"] for r in archive.load_all(store)] == [BASE]       # the export files are not records

    assert archive.restore([cell], fresh, store, BUDGET) == [f"{BASE}/seed0"]
    assert base_exports.restore([cell], fresh, store, BUDGET) == [f"{BASE}/seed0"]
    params, info = load_exported(cell.workdir(fresh))
    _, want_info = load_exported(cell.workdir(out))
    got, want = base_exports.flatten(params), base_exports.flatten(_params())
    assert got.keys() == want.keys()
    assert all(got[k].dtype == want[k].dtype and np.array_equal(got[k], want[k]) for k in want)
    assert info == want_info
    assert base_exports.restore([cell], fresh, store, BUDGET) == []     # already there


def test_a_changed_export_is_saved_again(tmp_path):
    store, out = str(tmp_path / "records"), str(tmp_path / "out")
    cell = _finished_base(out, _params(0))
    base_exports.save([cell], out, store, BUDGET)
    _finished_base(out, _params(1))                                     # the base retrained with other weights
    assert len(base_exports.save([cell], out, store, BUDGET)) == 1


def test_a_damaged_archived_export_is_refused_naming_the_file_and_nothing_is_written(tmp_path):
    store, out, fresh = str(tmp_path / "records"), str(tmp_path / "out"), str(tmp_path / "fresh")
    cell = _finished_base(out, _params())
    archive.save([cell], out, store, BUDGET)
    base_exports.save([cell], out, store, BUDGET)
    archive.restore([cell], fresh, store, BUDGET)
    npz, info = base_exports.archive_paths(store, BUDGET, BASE, 0)
    with open(npz, "wb") as f:
        f.write(b"not a zip")
    with pytest.raises(ValueError, match="seed0.export.npz: unreadable archived export"):
        base_exports.restore([cell], fresh, store, BUDGET)
    os.remove(npz)
    with pytest.raises(ValueError, match="seed0.export.npz not found"):
        base_exports.restore([cell], fresh, store, BUDGET)
    np.savez(npz, w=np.zeros(2, np.float32))
    with open(info, "w") as f:
        json.dump({"task": "clip"}, f)
    with pytest.raises(ValueError, match="seed0.export.json: not an export's export.json"):
        base_exports.restore([cell], fresh, store, BUDGET)
    assert not os.path.exists(os.path.join(cell.workdir(fresh), "export"))


def test_heads_on_a_finished_base_without_export_are_refused_before_the_grid_runs(tmp_path, monkeypatch, capsys):
    """The base's record is archived but its export is not (it was lost): the command line says so and trains
    nothing; with the export archived, the heads run on the restored export."""
    store, out = str(tmp_path / "records"), str(tmp_path / "out")
    base = _finished_base(str(tmp_path / "first"), _params())
    archive.save([base], str(tmp_path / "first"), store, BUDGET)
    ran = []

    def fake_run_cell(cell, out_, budget, clip_out="", launch_code=None, config_dir=None):
        assert os.path.exists(os.path.join(base.workdir(out_), "export", "export.json"))
        ran.append(cell.name)
        raise RuntimeError("stop here")  # a failed cell: the grid records it and goes on

    monkeypatch.setattr(runner, "run_cell", fake_run_cell)
    monkeypatch.setattr(runner, "code_version", lambda: {})
    argv = ["--budget", BUDGET, "--seeds", "1", "--out", out, "--cells", "fcs_R_flowclip_hnb", "--archive", store]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert f"{BASE} seed 0 is finished in {out} but has no export" in err and "seed0.export.npz" in err
    assert ran == []

    base_exports.save([base], str(tmp_path / "first"), store, BUDGET)
    cli.main(argv)
    assert "restored 1 base export(s)" in capsys.readouterr().out
    assert ran == ["fcs_R_flowclip_hnb"]
