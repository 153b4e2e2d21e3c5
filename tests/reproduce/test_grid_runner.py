"""The grid (`reproduce.grid`: cells, budgets, knob cells), the per-cell numbers (`reproduce.metrics`) on hand-made
evaluation results, and the resumable runner (`reproduce.runner`) with training and evaluation replaced by stubs."""

import ast
import json
import os
import re
import statistics
import subprocess

import pytest

from mmjax.config_validation import validate
from mmjax.similarity import inference_kind
from reproduce import grid, metrics, runner
from tests.reproduce.helpers import REPO, results

ABLATION = [s.name for s in grid.SPECS if s.group == "ablation"]
RETRIEVAL = [s.name for s in grid.SPECS if s.group not in ("flowclip", "fcstudy")]


def _flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def _configs(names, budget, tmp_path):
    return {c.name: _flat(grid.build_config(c, budget, str(tmp_path)).to_dict()) for c in grid.make_grid(1, names)}


# ---------------------------------------------------------------- grid


@pytest.mark.parametrize("budget", [b for b in grid.BUDGETS if b not in grid.FLOWCLIP_STUDY_BUDGETS])
def test_ablation_cells_differ_only_in_their_loss_fields(budget, tmp_path):
    """Loss fields, and what each cell is scored with: its own similarity in the test evaluation (and set analysis
    at the quick budgets), its inference score in validation (the converged budgets)."""
    configs = _configs(ABLATION, budget, tmp_path)
    base = configs["sh_full"]
    allowed = {"loss.similarity", "loss.lambda_gd", "loss.lambda_isd", "evals.retrieval.kinds",
               "evals.set_analysis.kind", "val_evals.retrieval.kinds"}
    for name, cfg in configs.items():
        assert set(cfg) == set(base), name
        assert {k for k in cfg if cfg[k] != base[k]} <= allowed, name
        assert cfg["evals.retrieval.kinds"][0] == (inference_kind(grid.SPEC_BY_NAME[name].similarity)
                                                   if budget in grid.CONVERGED_EPOCHS else cfg["loss.similarity"])
    assert configs["sc_divmmd"]["loss.lambda_gd"] == 0.0 and configs["sc_full"]["loss.lambda_isd"] == 0.1
    assert base["loss.lambda_div"] > 0 and base["loss.lambda_mmd"] > 0 and base["loss.lambda_con"] > 0
    assert base["final_eval"] is False and base["loss.hard_negative_ramp_epochs"] == 1.0
    if budget == "smoke":
        assert base["train.num_steps"] == grid.SMOKE_STEPS and base["data.preset"] == "tiny"
    else:
        epochs = {"default": 2, "long": 2 * grid.LONG_FACTOR, **grid.CONVERGED_EPOCHS}[budget]
        assert base["train.num_epochs"] == epochs and base["train.eval_every_epoch"] is True


def _knob_fields(knob: str) -> dict:
    """'loss.a=0.8, loss.b='x'' -> {'loss.a': 0.8, 'loss.b': 'x'}."""
    return {f.strip(): ast.literal_eval(v.strip()) for f, v in (p.split("=") for p in knob.split(","))}


@pytest.mark.parametrize("budget", ["default", "converged"])
def test_knob_cells_differ_from_their_claim_cell_only_in_the_fields_their_knob_names(budget, tmp_path):
    knobs = [s for s in grid.SPECS if s.group == "knobs"]
    assert {s.name for s in knobs} >= {"sc_full_b", "sh_full_b", "sh_divmmd_cos", "sh_full_cos", "sc_full_d08",
                                       "sh_full_d08", "sc_full_hinge", "sh_full_hinge", "vse_fn", "setdiv_fn",
                                       "pvse_fn", "pvse_maxmatch_fn", "sh_full_fn", "pvse_maxmatch_con", "vse_con",
                                       "pvse_con"}
    for spec in knobs:
        fields = _knob_fields(spec.knob)
        cfg = _configs([spec.name, spec.variant_of], budget, tmp_path)
        knob, base = cfg[spec.name], cfg[spec.variant_of]
        assert set(knob) == set(base), spec.name
        assert {k for k in knob if knob[k] != base[k]} == set(fields), spec.name   # every named field changes
        assert {k: knob[k] for k in fields} == fields, spec.name
        assert spec.similarity == grid.SPEC_BY_NAME[spec.variant_of].similarity
    assert _knob_fields(grid.READING_B_KNOB) == {"loss.delta_gd": 0.8, "loss.delta_isd": 0.8, "loss.gd_isd_scale": 0.5}


@pytest.mark.parametrize("budget", ["default", "converged"])
def test_a_knob_alias_is_its_claim_cell_with_the_knob_field_for_field(budget, tmp_path):
    for knob, aliases in grid.KNOB_ALIASES.items():
        fields = _knob_fields(knob)
        for claim_cell, alias in aliases.items():
            cfg = _configs([claim_cell, alias], budget, tmp_path)
            assert {**cfg[claim_cell], **fields} == cfg[alias], (claim_cell, alias)


def test_knob_variants_are_the_protocols_knob_table():
    variants = grid.knob_variants()
    assert variants == {"loss.gd_isd_shape='hinge'": {"sc_full": "sc_full_hinge", "sh_full": "sh_full_hinge"},
                        grid.READING_B_KNOB: {"sc_full": "sc_full_b", "sh_full": "sh_full_b"},
                        "loss.score_units='cosine'": {"sh_divmmd": "sh_divmmd_cos", "sh_full": "sh_full_cos"},
                        "loss.delta_gd=0.8": {"sc_full": "sc_full_d08", "sh_full": "sh_full_d08"},
                        grid.FALSE_NEGATIVES_KNOB: {b: f"{b}_fn" for b in ("vse", "setdiv", "pvse", "pvse_maxmatch",
                                                                             "sh_full")},
                        grid.CON_KNOB: {"setdiv": "sc_divmmd", "pvse_maxmatch": "pvse_maxmatch_con",
                                        "vse": "vse_con", "pvse": "pvse_con"}}
    protocol = open(os.path.join(REPO, "docs", "reproduction", "protocol.md")).read()
    rows = [line for line in protocol.splitlines() if re.match(r"\| [a-z0-9_]+(, [a-z0-9_]+)* \| .*`loss\.", line)]
    named = {}
    for line in rows:
        cells, change = line.split(" | ")[0][2:], line.split(" | ")[1]
        for name in cells.split(", "):
            named[name] = change
    assert set(named) == {s.name for s in grid.SPECS if s.variant_of}
    for name, change in named.items():
        assert f"`{grid.SPEC_BY_NAME[name].knob}`" in change, name


@pytest.mark.parametrize("budget", ["converged", "converged_x2"])
def test_converged_budgets(budget, tmp_path):
    for cell in grid.make_grid(1, RETRIEVAL):
        c = grid.build_config(cell, budget, str(tmp_path))
        own = inference_kind(cell.spec.similarity)
        assert c.train.num_epochs == grid.CONVERGED_EPOCHS[budget] == {"converged": 10, "converged_x2": 20}[budget]
        assert c.train.evals_per_epoch == 2 and c.train.eval_every_epoch is True
        assert c.train.select_metric == "semantic/rsum"
        assert c.train.checkpoint_every_s == grid.CONVERGED_CHECKPOINT_S > 0  # a killed stream loses ≤ 5 min
        assert c.val_evals.to_dict() == {"retrieval": {"type": "retrieval", "kinds": (own,), "fold_counts": (1,)}}
        kinds = c.evals.retrieval.kinds
        assert kinds[0] == own and set(grid.COMMON_SCORES) <= set(kinds) and len(set(kinds)) == len(kinds)
        assert tuple(c.evals.retrieval.fold_counts) == (1,)
        assert ("set_analysis" in c.evals) == (c.model.set_head != "none") and "kind" not in c.evals.get(
            "set_analysis", {})
        validate(c, check_paths=False)
        summary = grid.budget_summary(c)
        assert summary["validation"] == "2 per epoch" and summary["select_metric"] == "semantic/rsum"
    with pytest.raises(ValueError, match="retrieval cells"):
        grid.build_config(grid.make_grid(1, ["clip"])[0], budget, str(tmp_path))
    assert "select_metric" not in grid.budget_summary(grid.build_config(grid.make_grid(1, ["vse"])[0], "default",
                                                                        str(tmp_path)))


def test_grid_order_seeds_and_clip_dependency(tmp_path):
    cells = grid.make_grid(2, ["flowclip_hnb", "vse"])
    assert [(c.name, c.seed) for c in cells] == [("vse", 0), ("clip", 0), ("flowclip_hnb", 0), ("vse", 1),
                                                ("clip", 1), ("flowclip_hnb", 1)]
    head = grid.build_config(cells[-1], "smoke", str(tmp_path))
    assert head.data.clip_workdir == os.path.abspath(cells[-2].workdir(str(tmp_path))) and head.seed == 1
    later = grid.make_grid(1, ["flowclip_hnb"], with_clip=False, first_seed=2)
    assert [(c.name, c.seed) for c in later] == [("flowclip_hnb", 2)]
    for bad, match in ((dict(names=["nope"]), "unknown cell"), (dict(first_seed=-1), "first-seed"),
                       (dict(seeds=0), "seeds")):
        with pytest.raises(ValueError, match=match):
            grid.make_grid(**{"seeds": 1, **bad})
    with pytest.raises(ValueError, match="budget"):
        grid.build_config(cells[0], "huge", str(tmp_path))


def test_each_base_runs_once_just_before_the_first_head_that_needs_it():
    heads = ["fcs_G_flowclip_hnb", "fcs_P_globalm_hnb", "flowclip_hnb"]   # two fixed-seed bases, one per-seed base
    for first in (0, 2):
        cells = [(c.name, c.seed) for c in grid.make_grid(2, heads, first_seed=first)]
        k, j = first, first + 1
        assert cells == [("clip", k), ("flowclip_hnb", k), ("fcs_base_P", 0), ("fcs_P_globalm_hnb", k),
                         ("fcs_base_G", 0), ("fcs_G_flowclip_hnb", k),
                         ("clip", j), ("flowclip_hnb", j), ("fcs_P_globalm_hnb", j), ("fcs_G_flowclip_hnb", j)]
    named = [(c.name, c.seed) for c in grid.make_grid(1, ["fcs_base_G", "fcs_G_globalm_hnb"])]
    assert named == [("fcs_base_G", 0), ("fcs_G_globalm_hnb", 0)]


def test_default_and_long_budget_sizes(tmp_path):
    for cell in grid.make_grid(1):
        c = grid.build_config(cell, "default", str(tmp_path))
        if cell.name == "clip":
            assert (c.model.width, c.model.vision_layers, c.data.batch_size, c.train.num_epochs) == (128, 2, 256, 4)
        elif cell.spec.needs_clip:
            assert (c.data.batch_size, c.train.num_steps, c.train.eval_every) == (64, 300, 150)
            assert c.train.eval_every_epoch is False
        else:
            assert c.loss.hard_negative_ramp_epochs == 1.0 and c.train.eval_every_epoch is True
    long = {c.name: grid.build_config(c, "long", str(tmp_path)) for c in grid.make_grid(1, ["clip", "flowclip_cimr",
                                                                                          "sh_full"])}
    f = grid.LONG_FACTOR
    assert long["clip"].train.num_epochs == 4 * f and long["sh_full"].train.num_epochs == 2 * f
    assert (long["flowclip_cimr"].train.num_steps, long["flowclip_cimr"].train.eval_every) == (300 * f, 150 * f)


# ---------------------------------------------------------------- per-cell numbers


def test_cell_metrics_on_hand_made_results():
    res = results({"maxmatch_topk": 401.0, "maxmatch": 400.0}, semantic={"maxmatch_topk": 451.0, "maxmatch": 450.0},
                  single=(400.0, [395.0, 370.0, 399.0, 398.0]), single_sem=(450.0, [440.0, 430.0, 445.0, 452.0]),
                  cv_log=-2.0, suites=(60.0, 55.0, 52.0))
    m = metrics.cell_metrics(res, "maxmatch")
    assert m["rsum"] == 401.0 and m["rsum_sem"] == 451.0       # top-k: the inference score of S_H cells
    assert m["retrieval/maxmatch/rsum"] == 400.0 and m["retrieval/maxmatch/semantic/rsum"] == 450.0
    assert m["retrieval/maxmatch_topk/semantic/i2t_r1"] == pytest.approx(451 / 6)
    assert m["single/full"] == 400.0 and m["single/element1"] == 370.0 and m["single_gap"] == 30.0
    assert m["single_sem/full"] == 450.0 and [m[f"single_sem/element{i}"] for i in range(4)] == [440, 430, 445, 452]
    assert m["cv_log_image"] == -2.0 and m["cv/text/residual/mean_log_cv"] == -1.5
    assert m["suite/order/shuffle"] == 55.0 and m["suite/order/chance"] == 20.0
    assert m["binding_real"] == 60.0 and m["aro_chance"] == pytest.approx((50 + 50 + 20) / 3)
    plain = metrics.cell_metrics(results({"smooth_chamfer": 300.0, "maxmatch": 310.0}, single=(300.0, [290.0])),
                                 "smooth_chamfer")
    assert plain["rsum"] == 300.0 and "rsum_sem" not in plain and "binding_real" not in plain
    assert not any(k.startswith("single_sem/") or "/semantic/" in k for k in plain)
    # the chosen score without semantic numbers gives no rsum_sem, even when another score has them
    mixed = metrics.cell_metrics(results({"mil": 300.0, "maxmatch": 310.0}, semantic={"maxmatch": 320.0}), "mil")
    assert mixed["rsum"] == 300.0 and "rsum_sem" not in mixed and mixed["retrieval/maxmatch/semantic/rsum"] == 320.0
    whole = metrics.cell_metrics(results({"flowclip": 120.0}, semantic={"flowclip": 130.0}), None)
    assert (whole["rsum"], whole["rsum_sem"]) == (120.0, 130.0)
    assert "rsum" not in metrics.cell_metrics(results({"a": 1.0, "b": 2.0}), None)   # no single score to pick
    with pytest.raises(ValueError, match="retrieval"):
        metrics.cell_metrics({"set_analysis": {}}, "maxmatch")


def test_summarize_uses_sample_std_and_drops_failed_seeds():
    s = metrics.summarize([1.0, 2.0, 4.0, float("nan"), None])
    assert s["n"] == 3 and s["dropped"] == 2 and s["mean"] == pytest.approx(7 / 3)
    assert s["std"] == pytest.approx(statistics.stdev([1.0, 2.0, 4.0]))
    assert metrics.summarize([5.0])["std"] == 0.0 and metrics.summarize([])["mean"] is None


# ---------------------------------------------------------------- runner (training replaced by a stub)


def _stub_cell(calls, fail=()):
    def fake_run_cell(cell, out_, budget, clip_out="", launch_code=None, config_dir=None):
        calls.append(cell.name)
        if cell.name in fail:
            raise RuntimeError("boom")
        record = {"name": cell.name, "wall_s": {"total": 1.0, "train": 0.5, "eval": 0.5}}
        os.makedirs(cell.workdir(out_), exist_ok=True)
        runner._write_json(os.path.join(cell.workdir(out_), "cell.json"), record)
        return record
    return fake_run_cell


def test_runner_skips_finished_cells_and_records_failures(tmp_path, monkeypatch):
    out, calls = str(tmp_path), []
    monkeypatch.setattr(runner, "code_version", lambda: {})
    monkeypatch.setattr(runner, "run_cell", _stub_cell(calls, fail=("clip",)))
    cells = grid.make_grid(1, ["vse", "globalm_hnb"])
    status = runner.run_grid(cells, out, "smoke", log=lambda s: None)
    assert calls == ["vse", "clip"]  # the head is not attempted without its CLIP
    assert status["done"] == ["vse/seed0"] and status["failed"] == ["clip/seed0", "globalm_hnb/seed0"]
    assert "RuntimeError: boom" in json.load(open(os.path.join(cells[1].workdir(out), "cell_error.json")))["error"]
    calls.clear()
    monkeypatch.setattr(runner, "run_cell", _stub_cell(calls))
    status = runner.run_grid(cells, out, "smoke", log=lambda s: None)
    assert calls == ["clip", "globalm_hnb"] and status["skipped"] == ["vse/seed0"] and not status["failed"]


def test_a_preempted_cell_stops_the_grid_and_is_not_a_failure(tmp_path, monkeypatch):
    """TrainingPreempted (the machine is being taken; the cell saved its checkpoint) propagates: no cell_error.json,
    no later cell attempted; the rerun resumes with that cell."""
    from mmjax.train import TrainingPreempted
    out, calls, logged = str(tmp_path), [], []
    stub = _stub_cell(calls)

    def preempt_setdiv(cell, out_, budget, **kw):
        if cell.name == "setdiv":
            calls.append("setdiv")
            raise TrainingPreempted("stopped at step 7, checkpoint saved", step=7)
        return stub(cell, out_, budget, **kw)

    monkeypatch.setattr(runner, "code_version", lambda: {})
    monkeypatch.setattr(runner, "run_cell", preempt_setdiv)
    cells = grid.make_grid(1, ["pvse", "setdiv", "vse"])
    with pytest.raises(TrainingPreempted):
        runner.run_grid(cells, out, "smoke", log=logged.append)
    assert calls == ["pvse", "setdiv"] and "preempted" in logged[-1]
    assert not os.path.exists(os.path.join(cells[1].workdir(out), "cell_error.json"))
    calls.clear()
    monkeypatch.setattr(runner, "run_cell", stub)
    status = runner.run_grid(cells, out, "smoke", log=lambda s: None)
    assert calls == ["setdiv", "vse"] and status["skipped"] == ["pvse/seed0"]


def test_runner_waits_between_cells_while_a_pause_file_exists(tmp_path, monkeypatch):
    out, events = str(tmp_path), []
    open(os.path.join(out, runner.PAUSE_FILE), "w").close()

    def fake_sleep(seconds):  # the pause is lifted while the runner waits
        events.append("sleep")
        os.remove(os.path.join(out, runner.PAUSE_FILE))

    monkeypatch.setattr(runner.time, "sleep", fake_sleep)
    monkeypatch.setattr(runner, "code_version", lambda: {})
    monkeypatch.setattr(runner, "run_cell", _stub_cell(events))
    logged = []
    status = runner.run_grid(grid.make_grid(1, ["vse", "setdiv"]), out, "smoke", log=logged.append)
    assert events == ["sleep", "setdiv", "vse"] and status["done"] == ["setdiv/seed0", "vse/seed0"]
    assert "paused" in logged[0] and "PAUSE" in logged[0] and logged[1].startswith("[reproduce] resumed")


def _fake_training(monkeypatch, best_step=4, start_step=0, evaluated=None):
    from mmjax import experiment

    def fake_run(config, workdir):
        for name, step in (("export", 4), ("export_best", best_step)):
            if step is not None:
                os.makedirs(os.path.join(workdir, name), exist_ok=True)
                runner._write_json(os.path.join(workdir, name, "export.json"), {"task": config.task, "step": step})
        rows = [{"step": 2, "loss/total": 1.5}, {"step": 4, "loss/total": float("nan")},
                {"step": 4, "val/rsum": 3.0, "val/semantic/rsum": 5.0}]
        with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        return {"start_step": start_step}

    def fake_evaluate(config, workdir, *, params, out_dir, verbose):
        (evaluated if evaluated is not None else []).append(params)
        rsum = 400.0 if params == "final" else 420.0
        return results({"maxmatch_topk": rsum + 1, "maxmatch": rsum}, semantic={"maxmatch_topk": rsum + 50})

    monkeypatch.setattr(experiment, "run", fake_run)
    monkeypatch.setattr(experiment, "evaluate", fake_evaluate)


@pytest.mark.parametrize("best_step", [None, 4, 2])
def test_run_cell_evaluates_best_and_final_exports(tmp_path, monkeypatch, best_step):
    """The best export is evaluated only when it differs from the final one, and the best columns come from it."""
    evaluated = []
    _fake_training(monkeypatch, best_step, evaluated=evaluated)
    monkeypatch.setattr(runner, "code_version", lambda: {})
    cell = grid.make_grid(1, ["sh_full"])[0]
    record = runner.run_cell(cell, str(tmp_path), "converged")
    assert evaluated == (["final", "best"] if best_step == 2 else ["final"])
    assert record["metrics"]["final"]["rsum_sem"] == 450.0 and record["metrics"]["final"]["rsum"] == 401.0
    assert record["metrics"]["best"]["rsum_sem"] == (470.0 if best_step == 2 else 450.0)
    assert record["best_params"] == (best_step is not None) and record["steps"] == {"final": 4, "best": best_step}
    assert record["stability"]["nonfinite_losses"] == 1 and record["stability"]["steps_logged"] == 2
    assert record["curves"]["val"] == {"step": [4], "val/rsum": [3.0], "val/semantic/rsum": [5.0]}
    assert record["machine"] == runner.machine_description() and "CPU core" in record["machine"]
    assert record["budget"] == "converged" and record["budget_detail"]["validation"] == "2 per epoch"
    assert json.load(open(os.path.join(cell.workdir(str(tmp_path)), "cell.json")))["name"] == "sh_full"


def test_a_cell_records_the_code_its_process_launched_on(tmp_path, monkeypatch):
    """A commit made while a grid runs must not relabel its later cells: the record names the launch version and,
    when the checkout moved on, the version at the cell's end as well; a resumed cell says its wall time is partial."""
    launch, later = {"commit": "a" * 40, "dirty": False}, {"commit": "b" * 40, "dirty": True}
    _fake_training(monkeypatch)
    cell = grid.make_grid(1, ["sh_full"])[0]
    monkeypatch.setattr(runner, "code_version", lambda: later)
    record = runner.run_cell(cell, str(tmp_path), "smoke", launch_code=launch)
    assert record["code"] == {**launch, "at": "launch"} and record["code_at_end"] == later
    assert "ran the code of aaaaaaaaaa (the grid's launch); the checkout was at bbbbbbbbbb+dirty" in record["notes"][-1]
    record = runner.run_cell(cell, str(tmp_path / "same"), "smoke", launch_code=later)
    assert record["code"] == {**later, "at": "launch"} and "code_at_end" not in record
    assert not any(runner.CODE_MOVED_NOTE in n for n in record["notes"])
    _fake_training(monkeypatch, start_step=2)
    record = runner.run_cell(cell, str(tmp_path / "resumed"), "smoke", launch_code=later)
    assert "resumed from step 2: the training wall time counts only steps 2–4" in " ".join(record["notes"])

    versions = iter([launch, later])  # run_grid reads the version once, before its first cell
    monkeypatch.setattr(runner, "code_version", lambda: next(versions))
    seen = []
    monkeypatch.setattr(runner, "run_cell", lambda cell, out, budget, clip_out="", launch_code=None, config_dir=None:
                        seen.append(launch_code) or {"wall_s": {"total": 1.0, "train": 0.5, "eval": 0.5}})
    runner.run_grid(grid.make_grid(1, ["vse", "setdiv"]), str(tmp_path / "grid"), "smoke", log=lambda s: None)
    assert seen == [launch, launch]


def test_code_version_is_the_checkouts_head():
    if not os.path.exists(os.path.join(REPO, ".git")):
        pytest.skip("not a git checkout")
    version = runner.code_version()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    assert version["commit"] == head and isinstance(version["dirty"], bool)


def test_heads_on_another_grids_clip(tmp_path, monkeypatch):
    """--clip-from: the heads sit on another grid's finished, exported CLIP; the record says where it came from."""
    from mmjax import experiment
    base, out = str(tmp_path / "default"), str(tmp_path / "long")
    cells = grid.make_grid(1, ["globalm_hnb"], with_clip=False)
    with pytest.raises(ValueError, match=r"cells/clip/seed0/cell\.json not found"):
        runner.check_clip_source(cells, base)
    clip_dir = grid.Cell(grid.SPEC_BY_NAME["clip"], 0).workdir(base)
    os.makedirs(os.path.join(clip_dir, "export"))
    runner._write_json(os.path.join(clip_dir, "cell.json"), {"name": "clip"})
    with pytest.raises(ValueError, match=r"export\.json not found"):  # a restored record has no export
        runner.check_clip_source(cells, base)
    runner._write_json(os.path.join(clip_dir, "export", "export.json"), {"step": 1})
    runner.check_clip_source(cells, base)
    seen = {}
    monkeypatch.setattr(runner, "code_version", lambda: {})
    monkeypatch.setattr(experiment, "run", lambda config, workdir: {
        "start_step": 0, "clip": seen.setdefault("clip", config.data.clip_workdir)})
    monkeypatch.setattr(experiment, "evaluate", lambda config, workdir, **kw: results({"global_m": 100.0}))
    record = runner.run_cell(cells[0], out, "long", clip_out=base)
    assert seen["clip"] == os.path.abspath(clip_dir) and record["metrics"]["best"]["rsum"] == 100.0
    assert record["clip_from"] == base and f"frozen CLIP of {base} (--clip-from)" in record["notes"]


def test_an_output_directory_keeps_its_budget(tmp_path, capsys):
    from reproduce import __main__ as cli
    runner.check_budget(str(tmp_path), "smoke", 1)
    runner.check_budget(str(tmp_path), "smoke", 3)
    runner.check_budget(str(tmp_path), "smoke", 2)
    assert json.load(open(tmp_path / "grid.json")) == {"budget": "smoke", "seeds": 3}
    with pytest.raises(ValueError, match="'smoke' budget grid; --budget converged needs another --out"):
        runner.check_budget(str(tmp_path), "converged", 3)
    # the command line refuses it before running anything, and a --clip-from without its CLIP, naming the file
    assert cli.main(["--budget", "converged", "--seeds", "1", "--cells", "vse", "--out", str(tmp_path)]) == 2
    assert "'smoke' budget grid" in capsys.readouterr().err
    argv = ["--budget", "long", "--seeds", "1", "--first-seed", "2", "--cells", "globalm_hnb", "--out",
            str(tmp_path / "long"), "--clip-from", str(tmp_path / "nothing")]
    assert cli.main(argv) == 2 and "cells/clip/seed2/cell.json not found" in capsys.readouterr().err


def test_the_machine_line_names_the_accelerator_jax_computes_on(monkeypatch):
    """Wall times measured on a lent GPU say so; on the CPU backend the line stays cores + platform + Python."""
    monkeypatch.setattr(runner, "environment", lambda: {"jax": {"backend": "gpu", "device_count": 1,
                                                                 "device_kind": "NVIDIA H200"}})
    assert runner.machine_description().endswith(", 1 × NVIDIA H200 (gpu)")
    monkeypatch.setattr(runner, "environment", lambda: {"jax": {"backend": "cpu", "device_count": 1,
                                                                 "device_kind": "cpu"}})
    assert "×" not in runner.machine_description() and "CPU core" in runner.machine_description()


def test_a_grid_holds_the_code_and_configs_of_its_launch(tmp_path, monkeypatch):
    """The record names the launch commit, so the process must run it: every mmjax module is imported and every
    config file its cells need is loaded at launch; a config file edited afterwards does not reach later cells."""
    import pkgutil
    import shutil
    import sys

    import mmjax

    monkeypatch.setattr(grid, "_HELD_CONFIGS", {})
    held, fresh = tmp_path / "held", tmp_path / "fresh"
    cells = grid.make_grid(1, ["sh_full", "pvse"])
    names = {c.spec.config_file for c in cells}
    for d in (held, fresh):
        d.mkdir()
        for name in names:
            shutil.copy(os.path.join(grid.CONFIG_DIR, f"{name}.py"), d / f"{name}.py")
    assert runner.hold_launch_code(cells, str(held)) == {}
    assert {m.name for m in pkgutil.walk_packages(mmjax.__path__, "mmjax.")} <= set(sys.modules)
    before = grid.build_config(cells[0], "converged", str(tmp_path / "out"), config_dir=str(held))
    for d in (held, fresh):
        for name in names:
            (d / f"{name}.py").write_text("raise RuntimeError('edited after the launch')\n")
    after = grid.build_config(cells[0], "converged", str(tmp_path / "out"), config_dir=str(held))
    assert after.to_dict() == before.to_dict()
    with pytest.raises(RuntimeError, match="edited after the launch"):  # a directory nobody held: read now
        grid.build_config(cells[0], "converged", str(tmp_path / "out"), config_dir=str(fresh))
    errors = runner.hold_launch_code(cells, str(fresh))  # a broken config is reported, not raised: its cells fail
    assert sorted(errors) == sorted(str(fresh / f"{n}.py") for n in names)
    assert all("edited after the launch" in e for e in errors.values())
