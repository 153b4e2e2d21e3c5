"""Committed cell records (`reproduce.archive`): save, restore into a fresh output directory, the checks on a
misplaced record, and `python -m reproduce --report-only --archive` rebuilding a report from records alone."""

import json
import os

import pytest

from reproduce import __main__ as cli
from reproduce import archive, grid, runner
from tests.module_loader import load

_report_tests = load("tests/reproduce/test_report.py", "_reproduce_report_tests")

PNG = b"\x89PNG\r\n\x1a\n"


def _finished(out, records, cells):
    by_key = {(r["name"], r["seed"]): r for r in records}
    for cell in cells:
        os.makedirs(cell.workdir(out), exist_ok=True)
        runner._write_json(os.path.join(cell.workdir(out), "cell.json"), by_key[(cell.name, cell.seed)])


def _with_heatmap(records, scratch):
    for r in records:
        if r["name"] == "sh_full":
            r["arrays"] = {"best": {"element_similarity": [[0.9, 0.1], [0.2, 0.8]]}, "final": {}}
            r["figures"]["best"]["element_similarity"] = os.path.join(scratch, "gone.png")  # scratch path
    return records


def test_save_then_restore_into_a_fresh_directory(tmp_path):
    cells = grid.make_grid(2, ["sh_full", "vse"])
    records = _with_heatmap([r for r in _report_tests._records(2) if r["name"] in ("sh_full", "vse")],
                            str(tmp_path / "scratch"))
    out, store = str(tmp_path / "out"), str(tmp_path / "records")
    _finished(out, records, cells)
    written = archive.save(cells, out, store, "default")
    assert sorted(os.path.relpath(p, store) for p in written) == sorted(
        os.path.join("default", c.name, f"seed{c.seed}.json") for c in cells)
    saved = json.load(open(archive.record_path(store, "default", "sh_full", 0)))
    assert saved["figures"] == {"best": {}, "final": {}}  # no scratch paths in the committed copy
    assert saved["metrics"] == next(r for r in records if (r["name"], r["seed"]) == ("sh_full", 0))["metrics"]
    assert archive.save(cells, out, store, "default") == []  # unchanged records are not rewritten

    fresh = str(tmp_path / "fresh")
    restored = archive.restore(cells, fresh, store, "default")
    assert sorted(restored) == sorted(f"{c.name}/seed{c.seed}" for c in cells)
    back = runner.load_cell(cells[0], fresh)
    assert back["metrics"] == saved["metrics"] and back["restored_from"].endswith("seed0.json")
    heat = back["figures"]["best"]["element_similarity"]
    assert heat.startswith(fresh) and open(heat, "rb").read(8) == PNG  # re-drawn from the stored matrix
    assert archive.restore(cells, fresh, store, "default") == []  # cells the directory has are left alone
    assert archive.archived_seeds(store, "default") == 2 and archive.archived_seeds(store, "long") == 0
    # a restored cell is skipped by the runner, and saving it again changes nothing in the archive
    assert runner.run_grid(cells, fresh, "default", log=lambda s: None)["skipped"] == restored
    assert archive.save(cells, fresh, store, "default") == []


@pytest.mark.parametrize("field,value", [("name", "sc_full"), ("seed", 1), ("budget", "long")])
def test_a_misplaced_record_is_refused_naming_the_file(tmp_path, field, value):
    cells = grid.make_grid(1, ["sh_full", "vse"])
    store = str(tmp_path / "records")
    good = [r for r in _report_tests._records(1) if r["name"] in ("sh_full", "vse")]
    for r in good:
        path = archive.record_path(store, "default", r["name"], 0)
        if r["name"] == "sh_full":
            r[field] = value
        archive._write_json(path, r)
    out = str(tmp_path / "out")
    with pytest.raises(ValueError, match=rf"sh_full.seed0\.json: field '{field}'"):
        archive.restore(cells, out, store, "default")
    assert not os.path.exists(out)  # nothing is written before every record has been checked


def test_an_unreadable_record_is_refused(tmp_path):
    cells = grid.make_grid(1, ["vse"])
    path = archive.record_path(str(tmp_path), "default", "vse", 0)
    os.makedirs(os.path.dirname(path))
    open(path, "w").write("{not json")
    with pytest.raises(ValueError, match="unreadable cell record"):
        archive.restore(cells, str(tmp_path / "out"), str(tmp_path), "default")
    archive._write_json(path, {"name": "vse", "seed": 0, "budget": "default"})
    with pytest.raises(ValueError, match="not a cell record"):
        archive.restore(cells, str(tmp_path / "out"), str(tmp_path), "default")


def test_report_only_rebuilds_the_published_report_from_records(tmp_path, capsys):
    """A fresh checkout: no output directories, only the committed records (default and long budget)."""
    store = tmp_path / "docs" / "reproduction" / "records"  # the project's layout: records beside the figures
    for r in _report_tests._records(3):
        archive._write_json(archive.record_path(str(store), "default", r["name"], r["seed"]), r)
    for name in ("sh_divmmd", "sc_full"):
        r = _report_tests._record(name, 0, _report_tests.RSUM[name] + 5)
        r["budget"] = "long"
        archive._write_json(archive.record_path(str(store), "long", name, 0), r)
    out, long_out, md = tmp_path / "repro", tmp_path / "repro_long", tmp_path / "docs" / "reproduction.md"
    argv = ["--budget", "default", "--seeds", "3", "--out", str(out), "--report-only", "--long-out", str(long_out),
            "--archive", str(store), "--publish", str(md)]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    n = 3 * len(grid.SPECS)
    assert f"restored {n + 2} cell record(s)" in printed and "0 cell record(s) saved" in printed
    text = md.read_text()
    assert f"{n + 2} of the {n}" not in text
    assert f"All {n} cell runs come from the committed cell records" in text
    assert "Partial grid" not in text and "## Longer budget" in text
    assert f"--archive {store}" in text  # the regenerate command says so
    assert len(list((store / "default").rglob("*.json"))) == n  # publishing the figures leaves the records alone
    # a second run restores nothing and gives the same report
    assert cli.main(argv) == 0 and "restored" not in capsys.readouterr().out
    assert md.read_text() == text


def test_each_record_is_archived_as_soon_as_its_cell_finishes(tmp_path, monkeypatch):
    """A grid stopped mid-way (here: the second cell, vse, raises KeyboardInterrupt, as a killed session would) keeps
    the first cell's record in the archive."""
    store, out = str(tmp_path / "records"), str(tmp_path / "out")
    seen_in_archive = []
    by_name = {r["name"]: r for r in _report_tests._records(1)}

    def fake_run_cell(cell, out_, budget, clip_out="", launch_code=None, config_dir=None):
        seen_in_archive.append(sorted(os.path.relpath(p, store) for p in _json_files(store)))
        if cell.name == "vse":
            raise KeyboardInterrupt  # not an Exception: the grid stops here, as a stopped session would
        _finished(out_, [by_name[cell.name]], [cell])
        return by_name[cell.name]

    monkeypatch.setattr(runner, "run_cell", fake_run_cell)
    argv = ["--budget", "default", "--seeds", "1", "--out", out, "--cells", "vse,sh_full", "--archive", store]
    with pytest.raises(KeyboardInterrupt):
        cli.main(argv)
    assert seen_in_archive == [[], [os.path.join("default", "sh_full", "seed0.json")]]


def _json_files(root):
    return [os.path.join(d, f) for d, _, files in os.walk(root) for f in files if f.endswith(".json")]
