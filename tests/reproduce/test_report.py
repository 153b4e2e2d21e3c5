"""The reproduction runner: verdict rule, per-cell numbers, grid configs, resumable runner and report rendering on
hand-made cell results (fast), plus one slow end-to-end smoke run of `python -m reproduce`."""

import json
import math
import os
import re
import statistics
import subprocess
import sys

import numpy as np
import pytest

from reproduce import claims, grid, metrics, report, runner, summary

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ---------------------------------------------------------------- verdict rule


def _pooled_reference(a, b):
    """Pooled std as the root of the within-group sum of squares over its degrees of freedom."""
    ss = sum((x - np.mean(a)) ** 2 for x in a) + sum((x - np.mean(b)) ** 2 for x in b)
    return math.sqrt(ss / (len(a) + len(b) - 2))


@pytest.mark.parametrize("a,b", [([1.0, 2.0, 4.0], [3.0, 3.5]), ([0.3, 0.1, 0.9, 0.4], [5.0, 7.0, 6.5]),
                                 ([2.0, 2.0], [2.0, 2.0, 2.0])])
def test_pooled_std_matches_sum_of_squares(a, b):
    assert claims.pooled_std(a, b) == pytest.approx(_pooled_reference(a, b), abs=1e-12)


def test_verdicts_of_the_rule():
    lo, hi = [1.0, 2.0, 3.0], [10.0, 11.0, 12.0]  # s_p = 1, threshold 2, Δ = 9
    v = claims.verdict(lo, hi, "increase")
    assert v["verdict"] == "reproduced" and v["diff"] == pytest.approx(9.0) and v["threshold"] == pytest.approx(2.0)
    assert claims.verdict(lo, hi, "decrease")["verdict"] == "reversed"
    assert claims.verdict(hi, lo, "decrease")["verdict"] == "reproduced"
    assert claims.verdict(hi, lo, "increase")["verdict"] == "reversed"
    # Δ = 1.9 and 2.1 against a spread of 2: just inside is not reproduced, just outside is.
    assert claims.verdict(lo, [x + 1.9 for x in lo])["verdict"] == "not reproduced"
    assert claims.verdict(lo, [x + 2.1 for x in lo])["verdict"] == "reproduced"
    assert claims.verdict(lo, [x - 1.9 for x in lo])["verdict"] == "not reproduced"  # small and wrong way
    # no_loss: a drop inside the spread keeps the claim, a drop beyond it reverses it.
    assert claims.verdict(lo, [x - 1.5 for x in lo], "no_loss")["verdict"] == "reproduced"
    assert claims.verdict(lo, [x - 2.5 for x in lo], "no_loss")["verdict"] == "reversed"
    assert claims.verdict(lo, [x + 9.0 for x in lo], "no_loss")["verdict"] == "reproduced"


def test_a_difference_under_a_tenth_of_the_papers_is_direction_only():
    lo = [1.0, 2.0, 3.0]                          # s_p = 1, threshold 2
    hi = [x + 3.0 for x in lo]                    # Δ = +3, beyond the spread
    assert claims.verdict(lo, hi, paper_diff=29.0)["verdict"] == "reproduced"       # 10.3 % of the paper's
    assert claims.verdict(lo, hi, paper_diff=31.0)["verdict"] == "direction only"   # 9.7 %
    assert claims.verdict(lo, hi)["verdict"] == "reproduced"                          # no paper number: no floor
    assert claims.verdict(hi, lo, paper_diff=31.0)["verdict"] == "reversed"          # the floor is for the right sign
    assert claims.verdict(lo, [x - 1.0 for x in lo], "no_loss", paper_diff=50.0)["verdict"] == "reproduced"


def test_one_seed_missing_and_failed_runs():
    v = claims.verdict([1.0], [5.0])
    assert v["verdict"] == "inconclusive (1 seed)" and v["diff"] == pytest.approx(4.0) and v["threshold"] is None
    assert claims.verdict([1.0, 2.0], [5.0])["verdict"] == "inconclusive (1 seed)"
    assert claims.verdict([], [1.0, 2.0])["verdict"] == "missing"
    assert claims.verdict(None, [1.0])["verdict"] == "missing"
    # A failed seed (NaN) is not a number: it drops out and leaves one seed.
    assert claims.verdict([1.0, float("nan")], [5.0, 6.0])["n"] == [1, 2]
    with pytest.raises(ValueError, match="kind"):
        claims.verdict([1.0], [2.0], "bigger")


def test_paired_verdict_uses_the_spread_of_per_seed_differences():
    base = [70.0, 74.0, 66.0]                        # a shared base that moves both cells per seed (the CLIP)
    a, b = base, [x + 1.0 + e for x, e in zip(base, (0.1, -0.1, 0.0))]
    pooled, paired = claims.verdict(a, b), claims.verdict(a, b, paired=True)
    assert pooled["verdict"] == "not reproduced"     # 2·s_p ≈ 8: the base's spread swamps the +1 difference
    d = np.subtract(b, a)
    assert paired["threshold"] == pytest.approx(math.sqrt(2) * np.std(d, ddof=1))  # √2·s_d ≈ 0.14
    assert paired["verdict"] == "reproduced" and paired["diff"] == pytest.approx(1.0) and paired["paired"]
    # independent noise: the paired threshold is the pooled one in expectation (s_d = √2 s)
    rng = np.random.default_rng(0)
    x, y = rng.normal(0, 1, 20000), rng.normal(0, 1, 20000)
    assert claims.verdict(x, y, paired=True)["threshold"] == pytest.approx(claims.verdict(x, y)["threshold"],
                                                                         rel=0.03)
    # a seed missing on one side drops the pair; unequal lists are refused
    v = claims.verdict([1.0, None, 3.0, 4.0], [2.0, 5.0, float("nan"), 5.5], paired=True)
    assert v["n"] == [2, 2] and v["diff"] == pytest.approx(1.25)
    with pytest.raises(ValueError, match="one entry per seed"):
        claims.verdict([1.0, 2.0], [1.0], paired=True)


def test_check_pairs_the_seeds_two_cells_share(tmp_path):
    records = [_record(n, s, RSUM[n] + 10 * s) for n in ("globalm_hnb", "flowclip_hnb") for s in range(3)
               if (n, s) != ("flowclip_hnb", 1)]
    agg = report.aggregate(records)
    claim = next(c for c in claims.CLAIMS if c.id == "binding_hnb")
    assert claim.paired and not next(c for c in claims.CLAIMS if c.id == "ablation_2").paired
    assert all(c.paired == (c.setting == "Flow-CLIP") for c in claims.CLAIMS)
    assert claims.cell_values(agg, "flowclip_hnb", "best", "rsum", [0, 1, 2]) == [112.0, None, 132.0]
    v = claims.check(agg, claim)
    assert v["n"] == [2, 2] and v["paired"]


def test_claims_match_the_paper_numbers_and_the_grid():
    by_id = {c.id: c for c in claims.CLAIMS}
    ablation = [by_id[f"ablation_{i}"] for i in (1, 2, 3)]
    assert [ablation[0].paper_a] + [c.paper_b for c in ablation] == [439.57, 441.23, 444.10, 446.53]
    assert [c.b for c in ablation[:-1]] == [c.a for c in ablation[1:]]  # one chain: the full order
    assert (by_id["cv_1"].paper_a, by_id["cv_1"].paper_b, by_id["cv_2"].paper_b) == (-7.35, -2.13, -1.68)
    recipes = (by_id["cv_1_recipes"], by_id["cv_2_recipes"])
    assert [(c.a, c.b, c.paper_a, c.paper_b) for c in recipes] == [("pvse", "setdiv", -7.35, -2.13),
                                                                   ("setdiv", "sh_full", -2.13, -1.68)]
    assert (by_id["pvse_plugin"].paper_a, by_id["pvse_plugin"].paper_b) == (432.6, 450.6)
    assert by_id["binding_cimr"].paper_delta == 2.91
    assert (by_id["cimr_shuffle"].paper_a, by_id["cimr_shuffle"].paper_b, by_id["cimr_shuffle"].paper_delta) == (
        48.75, 35.66, -13.08)
    assert (by_id["cimr_fixed"].paper_a, by_id["cimr_fixed"].paper_b) == (50.17, 37.21)
    assert (by_id["cimr_real"].paper_a, by_id["cimr_real"].paper_b, by_id["cimr_real"].kind) == (85.75, 85.91,
                                                                                                  "no_loss")
    for c in claims.CLAIMS:
        assert c.a in grid.SPEC_BY_NAME and c.b in grid.SPEC_BY_NAME, c.id
        assert not re.search(r"\w\.md\b", c.source), c.source  # cite the papers, not a document
        if c.paper_a is not None and c.paper_b is not None:
            assert c.paper_delta == pytest.approx(c.paper_b - c.paper_a, abs=0.011), c.id
        if c.paper_delta is not None and c.kind != "no_loss":
            assert (c.paper_delta > 0) == (c.kind == "increase"), c.id


# ---------------------------------------------------------------- per-cell numbers


def _retrieval(rsum):
    keys = metrics.RETRIEVAL_KEYS[:-1]
    return {"all": {**{k: rsum / 6 for k in keys}, "rsum": rsum, "i2t_medr": 3.0}, "score_seconds": 0.1}


def _suite(task, acc):
    return {"conditions": {cond: {"tasks": {task: {"n": 10, "accuracy": a, "chance": 50.0 if task != "order" else
                                                   20.0}}, "groups": {}} for cond, a in zip(metrics.CONDITIONS, acc)},
            "table": "|...|"}


def fake_results(rsum=400.0, *, set_analysis=True, suites=False, score="maxmatch", offset=0.0):
    res = {"split": "test", "retrieval": {score: _retrieval(rsum)}}
    if score == "maxmatch":
        res["retrieval"]["maxmatch_topk"] = _retrieval(rsum + 1.0)
    if set_analysis:
        res["set_analysis"] = {
            "circular_variance": {side: {"set": {"mean_cv": 0.2, "mean_log_cv": -2.0 + offset},
                                         "residual": {"mean_cv": 0.3, "mean_log_cv": -1.5}}
                                  for side in ("image", "text")},
            "single_element": {"kind": score, "full": {"rsum": rsum},
                               "elements": [{"rsum": rsum - d} for d in (5.0, 30.0 + offset, 1.0, 2.0)]},
            "element_similarity": [[0.5, 0.1], [0.2, 0.6]]}
    if suites:
        res["shapesworld_suites"] = {t: _suite(t, (60.0 + offset, 55.0 - offset, 52.0 - offset))
                                     for t in ("binding", "binding_swap_obj", "binding_swap_size", "relation",
                                               "order")}
    return res


def test_cell_metrics_on_hand_made_results():
    m = metrics.cell_metrics(fake_results(400.0, suites=True), "maxmatch")
    assert m["rsum"] == 401.0  # top-k: the paper's inference mode for S_H-trained cells
    assert m["retrieval/maxmatch/rsum"] == 400.0 and m["retrieval/maxmatch_topk/i2t_r1"] == pytest.approx(401 / 6)
    assert m["cv_log_image"] == -2.0 and m["cv/text/residual/mean_cv"] == 0.3
    assert m["single/full"] == 400.0 and m["single/element1"] == 370.0 and m["single_gap"] == 30.0
    assert m["suite/order/shuffle"] == 55.0 and m["suite/order/chance"] == 20.0
    assert m["binding_real"] == 60.0 and m["aro_chance"] == pytest.approx((50 + 50 + 20) / 3)
    own = metrics.cell_metrics(fake_results(300.0, score="smooth_chamfer", set_analysis=False), "smooth_chamfer")
    assert own["rsum"] == 300.0 and "single_gap" not in own and "binding_real" not in own
    whole = metrics.cell_metrics({"retrieval": {"flowclip": _retrieval(120.0)}}, None)
    assert whole["rsum"] == 120.0
    with pytest.raises(ValueError, match="retrieval"):
        metrics.cell_metrics({"set_analysis": {}}, "maxmatch")


def test_summarize_uses_sample_std_and_drops_failed_seeds():
    s = metrics.summarize([1.0, 2.0, 4.0, float("nan"), None])
    assert s["n"] == 3 and s["dropped"] == 2 and s["mean"] == pytest.approx(7 / 3)
    assert s["std"] == pytest.approx(statistics.stdev([1.0, 2.0, 4.0]))
    assert metrics.summarize([5.0])["std"] == 0.0 and metrics.summarize([])["mean"] is None


# ---------------------------------------------------------------- grid


def _flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


@pytest.mark.parametrize("budget", grid.BUDGETS)
def test_ablation_cells_differ_only_in_their_loss_fields(budget, tmp_path):
    configs = {c.name: _flat(grid.build_config(c, budget, str(tmp_path)).to_dict())
               for c in grid.make_grid(1, [s.name for s in grid.SPECS if s.group == "ablation"])}
    base = configs["sh_full"]
    allowed = {"loss.similarity", "loss.lambda_gd", "loss.lambda_isd", "evals.retrieval.kinds"}
    for name, cfg in configs.items():
        assert set(cfg) == set(base), name
        assert {k for k in cfg if cfg[k] != base[k]} <= allowed, name
    assert configs["sc_divmmd"]["loss.lambda_gd"] == 0.0 and configs["sc_full"]["loss.lambda_isd"] == 0.1
    assert base["loss.lambda_div"] > 0 and base["loss.lambda_mmd"] > 0 and base["loss.lambda_con"] > 0
    assert base["final_eval"] is False
    if budget == "smoke":
        assert base["train.num_steps"] == grid.SMOKE_STEPS and base["data.preset"] == "tiny"
    else:
        epochs = 2 * (grid.LONG_FACTOR if budget == "long" else 1)
        assert base["train.num_epochs"] == epochs and base["train.eval_every_epoch"] is True


def test_knob_cells_differ_from_their_claim_cell_only_in_the_knob(tmp_path):
    knobs = [s for s in grid.SPECS if s.group == "knobs"]
    assert knobs and all(s.variant_of in grid.SPEC_BY_NAME and s.knob for s in knobs)
    for spec in knobs:
        field, value = spec.knob.split("=")
        cells = grid.make_grid(1, [spec.name, spec.variant_of])
        cfg = {c.name: _flat(grid.build_config(c, "default", str(tmp_path)).to_dict()) for c in cells}
        knob, base = cfg[spec.name], cfg[spec.variant_of]
        assert set(knob) == set(base) and {k for k in knob if knob[k] != base[k]} == {field}, spec.name
        assert repr(knob[field]) == value and spec.similarity == grid.SPEC_BY_NAME[spec.variant_of].similarity
    assert grid.knob_variants() == {"loss.gd_isd_shape='hinge'": {"sc_full": "sc_full_hinge",
                                                                   "sh_full": "sh_full_hinge"}}


def test_grid_order_seeds_and_clip_dependency(tmp_path):
    cells = grid.make_grid(2, ["flowclip_hnb", "vse"])
    assert [(c.name, c.seed) for c in cells] == [("vse", 0), ("clip", 0), ("flowclip_hnb", 0), ("vse", 1),
                                                ("clip", 1), ("flowclip_hnb", 1)]
    head = grid.build_config(cells[-1], "smoke", str(tmp_path))
    assert head.data.clip_workdir == os.path.abspath(cells[-2].workdir(str(tmp_path))) and head.seed == 1
    with pytest.raises(ValueError, match="unknown cell"):
        grid.make_grid(1, ["nope"])
    later = grid.make_grid(1, ["flowclip_hnb"], with_clip=False, first_seed=2)  # one seed, not seed 0
    assert [(c.name, c.seed) for c in later] == [("flowclip_hnb", 2)]
    assert grid.build_config(later[0], "long", str(tmp_path)).seed == 2
    with pytest.raises(ValueError, match="first-seed"):
        grid.make_grid(1, first_seed=-1)
    with pytest.raises(ValueError, match="budget"):
        grid.build_config(cells[0], "huge", str(tmp_path))


# ---------------------------------------------------------------- runner (training replaced by a stub)


def test_runner_skips_finished_cells_and_records_failures(tmp_path, monkeypatch):
    out = str(tmp_path)
    calls = []

    def fake_run_cell(cell, out_, budget, clip_out="", launch_code=None, config_dir=None):
        calls.append(cell.name)
        if cell.name == "clip":
            raise RuntimeError("boom")
        record = {"name": cell.name, "wall_s": {"total": 1.0, "train": 0.5, "eval": 0.5}}
        os.makedirs(cell.workdir(out_), exist_ok=True)
        runner._write_json(os.path.join(cell.workdir(out_), "cell.json"), record)
        return record

    monkeypatch.setattr(runner, "run_cell", fake_run_cell)
    cells = grid.make_grid(1, ["vse", "globalm_hnb"])
    status = runner.run_grid(cells, out, "smoke", log=lambda s: None)
    assert calls == ["vse", "clip"]  # the head is not attempted without its CLIP
    assert status["done"] == ["vse/seed0"] and status["failed"] == ["clip/seed0", "globalm_hnb/seed0"]
    error = json.load(open(os.path.join(cells[1].workdir(out), "cell_error.json")))
    assert "RuntimeError: boom" in error["error"]
    calls.clear()
    status = runner.run_grid(cells, out, "smoke", log=lambda s: None)
    assert calls == ["clip"] and status["skipped"] == ["vse/seed0"]


def test_runner_waits_between_cells_while_a_pause_file_exists(tmp_path, monkeypatch):
    out, events = str(tmp_path), []
    open(os.path.join(out, runner.PAUSE_FILE), "w").close()

    def fake_sleep(seconds):  # the pause is lifted while the runner waits
        events.append("sleep")
        os.remove(os.path.join(out, runner.PAUSE_FILE))

    def fake_run_cell(cell, out_, budget, clip_out="", launch_code=None, config_dir=None):
        events.append(cell.name)
        return {"wall_s": {"total": 1.0, "train": 0.5, "eval": 0.5}}

    monkeypatch.setattr(runner.time, "sleep", fake_sleep)  # time.sleep itself: keep subprocess (git) out of it
    monkeypatch.setattr(runner, "code_version", lambda: {})
    monkeypatch.setattr(runner, "run_cell", fake_run_cell)
    logged = []
    status = runner.run_grid(grid.make_grid(1, ["vse", "setdiv"]), out, "smoke", log=logged.append)
    assert events == ["sleep", "setdiv", "vse"] and status["done"] == ["setdiv/seed0", "vse/seed0"]
    assert "paused" in logged[0] and "PAUSE" in logged[0] and logged[1].startswith("[reproduce] resumed")


def test_heads_on_another_grids_clip(tmp_path, monkeypatch):
    """--clip-from: a head grid without CLIP cells of its own sits on the finished CLIP of another grid directory,
    which must have the CLIP's record and export; the head's record says where its CLIP came from."""
    from mmjax import experiment
    base, out = str(tmp_path / "default"), str(tmp_path / "long")
    cells = grid.make_grid(1, ["globalm_hnb"], with_clip=False)
    assert [c.name for c in cells] == ["globalm_hnb"]
    assert [c.name for c in grid.make_grid(1, ["globalm_hnb"])] == ["clip", "globalm_hnb"]
    with pytest.raises(ValueError, match=r"cells/clip/seed0/cell\.json not found"):
        runner.check_clip_source(cells, base)
    clip_dir = grid.Cell(grid.SPEC_BY_NAME["clip"], 0).workdir(base)
    os.makedirs(os.path.join(clip_dir, "export"))
    runner._write_json(os.path.join(clip_dir, "cell.json"), {"name": "clip"})
    with pytest.raises(ValueError, match=r"export\.json not found"):  # a restored record has no export
        runner.check_clip_source(cells, base)
    runner._write_json(os.path.join(clip_dir, "export", "export.json"), {"step": 1})
    runner.check_clip_source(cells, base)
    config = grid.build_config(cells[0], "long", out, clip_out=base)
    assert config.data.clip_workdir == os.path.abspath(clip_dir) and config.data.cache_dir.startswith(clip_dir)
    assert config.train.num_steps == 300 * grid.LONG_FACTOR

    seen = {}
    monkeypatch.setattr(experiment, "run", lambda config, workdir: {
        "start_step": 0, "clip": seen.setdefault("clip", config.data.clip_workdir)})
    monkeypatch.setattr(experiment, "evaluate", lambda config, workdir, **kw: {
        "retrieval": {"global_m": _retrieval(100.0)}})
    record = runner.run_cell(cells[0], out, "long", clip_out=base)
    assert seen["clip"] == os.path.abspath(clip_dir)
    assert record["clip_from"] == base and f"frozen CLIP of {base} (--clip-from)" in record["notes"]


@pytest.mark.parametrize("best_step", [None, 4, 2])
def test_run_cell_evaluates_best_and_final_exports(tmp_path, monkeypatch, best_step):
    """Training and evaluation replaced by fakes: the best export is evaluated only when it differs from the final
    one, and the best columns come from it."""
    from mmjax import experiment
    evaluated = []

    def fake_run(config, workdir):
        for name, step in (("export", 4), ("export_best", best_step)):
            if step is not None:
                os.makedirs(os.path.join(workdir, name), exist_ok=True)
                runner._write_json(os.path.join(workdir, name, "export.json"), {"task": config.task, "step": step})
        rows = [{"step": 2, "loss/total": 1.5}, {"step": 4, "loss/total": float("nan")}, {"step": 4, "val/rsum": 3}]
        with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        return {"start_step": 0}

    def fake_evaluate(config, workdir, *, params, out_dir, verbose):
        evaluated.append(params)
        return fake_results(400.0 if params == "final" else 420.0)

    monkeypatch.setattr(experiment, "run", fake_run)
    monkeypatch.setattr(experiment, "evaluate", fake_evaluate)
    cell = grid.make_grid(1, ["sh_full"])[0]
    record = runner.run_cell(cell, str(tmp_path), "smoke")
    assert evaluated == (["final", "best"] if best_step == 2 else ["final"])
    assert record["metrics"]["final"]["retrieval/maxmatch/rsum"] == 400.0
    assert record["metrics"]["best"]["retrieval/maxmatch/rsum"] == (420.0 if best_step == 2 else 400.0)
    assert record["best_params"] == (best_step is not None) and record["steps"] == {"final": 4, "best": best_step}
    assert record["stability"]["nonfinite_losses"] == 1 and record["stability"]["steps_logged"] == 2
    assert json.load(open(os.path.join(cell.workdir(str(tmp_path)), "cell.json")))["name"] == "sh_full"


def test_a_cell_records_the_code_its_process_launched_on(tmp_path, monkeypatch):
    """A grid process keeps the code it imported: a commit made while it runs must not relabel its later cells.
    The record names the launch version and, when the checkout moved on, the version at the cell's end as well."""
    from mmjax import experiment
    launch, later = {"commit": "a" * 40, "dirty": False}, {"commit": "b" * 40, "dirty": True}
    monkeypatch.setattr(experiment, "run", lambda config, workdir: {"start_step": 0})
    monkeypatch.setattr(experiment, "evaluate", lambda config, workdir, **kw: fake_results(400.0))
    cell = grid.make_grid(1, ["sh_full"])[0]
    monkeypatch.setattr(runner, "code_version", lambda: later)
    record = runner.run_cell(cell, str(tmp_path), "smoke", launch_code=launch)
    assert record["code"] == {**launch, "at": "launch"} and record["code_at_end"] == later
    assert "ran the code of aaaaaaaaaa (the grid's launch); the checkout was at bbbbbbbbbb+dirty" in record["notes"][-1]
    record = runner.run_cell(cell, str(tmp_path / "same"), "smoke", launch_code=later)
    assert record["code"] == {**later, "at": "launch"} and "code_at_end" not in record and not record["notes"][1:]

    # A cell that resumed from a checkpoint says its training wall time covers only the steps after it.
    monkeypatch.setattr(experiment, "run", lambda config, workdir: {"start_step": 2})
    record = runner.run_cell(cell, str(tmp_path / "resumed"), "smoke", launch_code=later)
    assert "resumed from step 2: the training wall time counts only steps 2–" in " ".join(record["notes"])

    versions = iter([launch, later])  # run_grid reads the version once, before its first cell
    monkeypatch.setattr(runner, "code_version", lambda: next(versions))
    seen = []
    monkeypatch.setattr(runner, "run_cell", lambda cell, out, budget, clip_out="", launch_code=None, config_dir=None:
                        seen.append(launch_code) or {"wall_s": {"total": 1.0, "train": 0.5, "eval": 0.5}})
    runner.run_grid(grid.make_grid(1, ["vse", "setdiv"]), str(tmp_path / "grid"), "smoke", log=lambda s: None)
    assert seen == [launch, launch]


def test_an_output_directory_keeps_its_budget(tmp_path):
    runner.check_budget(str(tmp_path), "smoke", 1)
    runner.check_budget(str(tmp_path), "smoke", 2)
    assert json.load(open(tmp_path / "grid.json")) == {"budget": "smoke", "seeds": 2}
    with pytest.raises(ValueError, match="smoke"):
        runner.check_budget(str(tmp_path), "default", 3)


# ---------------------------------------------------------------- report on hand-made cells


def _record(name, seed, rsum, *, offset=0.0):
    spec = grid.SPEC_BY_NAME[name]
    sets = spec.group != "flowclip" and name != "vse"
    score = spec.similarity or {"clip": "cosine"}.get(name, "global_m")
    res = fake_results(rsum, set_analysis=sets, suites=spec.group == "flowclip", score=score, offset=offset)
    m = metrics.cell_metrics(res, spec.similarity)
    return {"name": name, "group": spec.group, "label": spec.label, "seed": seed, "budget": "default",
            "budget_detail": {"num_epochs": 2, "num_steps": 0, "batch_size": 128, "preset": "default",
                              "validation": "every epoch"},
            "steps": {"final": 100, "best": 50}, "best_params": True, "notes": [],
            "wall_s": {"train": 1.0, "eval": 1.0, "total": 2.0},
            "stability": {"steps_logged": 10, "nonfinite_losses": 0, "final_loss": 1.0, "best_val_rsum": rsum},
            "metrics": {"best": m, "final": m}, "arrays": {}, "figures": {"best": {}, "final": {}}}


# Per-cell RSUM base and per-seed jitter (±1): the ablation climbs as the paper says, the plug-in is reversed,
# the Set Div → MaxMatch CV step is within noise.
RSUM = {"mil_divmmd": 380, "sc_divmmd": 400, "sh_divmmd": 410, "sc_full": 420, "sh_full": 430, "pvse": 450,
        "setdiv": 390, "vse": 395, "pvse_maxmatch": 440, "clip": 100, "globalm_hnb": 110, "globalm_cimr": 111,
        "flowclip_hnb": 112, "flowclip_cimr": 113, "sc_full_hinge": 425, "sh_full_hinge": 436}
OFFSET = {"mil_divmmd": -5.0, "sc_divmmd": 0.0, "sh_full": 0.5, "flowclip_cimr": 10.0}


def _records(seeds=3):
    return [_record(n, s, RSUM[n] + (s - 1), offset=OFFSET.get(n, 0.0) + 0.3 * (s - 1))
            for s in range(seeds) for n in RSUM]


def test_report_renders_every_section_claim_and_figure(tmp_path):
    rep = report.write_report(_records(), str(tmp_path), budget="default", seeds=3, command="python -m x")
    md = (tmp_path / "reproduction.md").read_text()
    for section in report.SECTIONS:
        assert f"## {section}" in md, section
    verdicts = {r["id"]: r["verdict"] for r in rep["claims"]}
    assert set(verdicts) == {c.id for c in claims.CLAIMS}
    assert verdicts["ablation_1"] == verdicts["ablation_2"] == verdicts["ablation_3"] == "reproduced"
    assert verdicts["pvse_plugin"] == "reversed"            # 450 → 440, spread 2
    assert verdicts["cv_1"] == "reproduced"                 # −7 → −2
    assert verdicts["cv_2"] == "not reproduced"             # −2.0 → −1.5 with seed jitter 0.3: within 2·s_p
    assert verdicts["cimr_shuffle"] == "reproduced"         # Shuffle 55 → 45 (offset 10)
    assert verdicts["cimr_real"] == "reproduced"            # Real rises
    for row in rep["claims"]:
        assert f"**{row['verdict']}**" in md and row["source"] in md
        if row["verdict"] != "reproduced":
            assert row["evidence"], row["id"]
    assert "within the seed spread" in next(r["evidence"] for r in rep["claims"] if r["id"] == "cv_2")
    evidence = {r["id"]: r["evidence"] for r in rep["claims"]}
    assert "within 2 points of the frozen CLIP alone (60.0%)" in evidence["binding_hnb"]  # heads ≈ CLIP: 60 ± 0.3
    assert "no loss beyond the seed spread (n = 3/3, paired by seed)" in evidence["cimr_real"]  # not 'beyond'
    assert "% of the paper's" not in evidence["cimr_real"]
    assert "frozen CLIP alone" not in evidence["cimr_shuffle"]                           # CIMR cell moved by 10
    assert "no image-independent preference left" not in evidence["cimr_shuffle"]       # 55 / 45: not at chance
    # a miss cites the same comparison in the other recipe; a reproduced row does not
    assert "the same comparison in the other recipe (smooth-Chamfer's elements spread more than MIL's (ablation " \
        "recipe); mil_divmmd → sc_divmmd): Δ = +5.00, reproduced" in evidence["cv_1_recipes"]
    assert "other recipe" not in evidence["cv_1"] and "other recipe" in evidence["cv_2"]
    why = {r["id"]: r["why"] for r in rep["claims"]}  # the Summary's short form of the same facts
    assert why["cv_1_recipes"] == "within the seed spread; other recipe (mil_divmmd → sc_divmmd): reproduced"
    assert why["binding_hnb"] == "within the seed spread; heads within 2 points of the frozen CLIP"
    assert why["ablation_1"] == "–"
    # the size of our difference against the paper's, in the Summary and a reproduced row's evidence
    assert "| +1.66 | +11.00 (2·s_p 2.00) | 663% | **reproduced** |" in md
    assert evidence["ablation_1"].endswith("; 663% of the paper's +1.66")
    # the settings are listed once; a missed claim names its key
    assert all(f"- **{key}**: {text}" in md for key, text in claims.SETTINGS.items())
    assert "setting: MaxMatch CV (see Settings" in evidence["cv_2"] and "setting:" not in evidence["cv_1"]
    data = json.load(open(tmp_path / "reproduction.json"))
    assert {"budget", "seeds", "command", "protocol", "verdict_rule", "cells", "claims", "figures",
            "records"} <= set(data)
    assert data["cells"]["sh_full"]["metrics"]["best"]["rsum"]["values"] == [430.0, 431.0, 432.0]
    assert data["cells"]["sh_full"]["metrics"]["best"]["rsum"]["std"] == pytest.approx(1.0)
    assert set(rep["figures"]) == {"ablation_rsum", "flowclip_binding", "flowclip_controls"}
    for path in rep["figures"].values():
        with open(tmp_path / path, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
        assert f"]({path})" in md
    ablation = md.split("## MaxMatch ablation")[1].split("## Baselines")[0]
    row = next(line for line in ablation.splitlines() if line.startswith("| S_H, Div+MMD+GD+ISD"))
    assert "| 431.00 ± 1.00 |" in row and "| 430.00 ± 1.00 |" in row  # top-k and exact S_H: mean ± std
    assert "best-on-validation" in md
    _assert_tables_are_rectangular(md)


def test_knob_cells_re_check_the_claims_they_stand_in_for(tmp_path):
    """sc_full_hinge / sh_full_hinge (paper inference RSUM 425 / 437: top-k = exact + 1 for S_H) replace sc_full /
    sh_full (420 / 431) in every claim that has either; the others get no knob row. A report without knob cells
    says how to get them."""
    rep = report.write_report(_records(), str(tmp_path), budget="default", seeds=3, command="python -m x")
    rows = {r["id"]: r for r in rep["knob_claims"]}
    uses = {c.id for c in claims.CLAIMS if {c.a, c.b} & {"sc_full", "sh_full"}}
    assert set(rows) == uses and {"ablation_2", "ablation_3", "single_1"} <= uses
    assert (rows["ablation_2"]["a"], rows["ablation_2"]["b"]) == ("sh_divmmd", "sc_full_hinge")
    assert (rows["ablation_3"]["a"], rows["ablation_3"]["b"]) == ("sc_full_hinge", "sh_full_hinge")
    assert rows["ablation_2"]["diff"] == pytest.approx(14.0) and rows["ablation_3"]["diff"] == pytest.approx(12.0)
    assert rows["ablation_3"]["verdict"] == "reproduced"
    claim = next(r for r in rep["claims"] if r["id"] == "ablation_3")
    assert claim["knobs"][0]["knob"] == "loss.gd_isd_shape='hinge'" and "(sc_full_hinge → sh_full_hinge" in \
        claim["evidence"]
    assert "knobs" not in next(r for r in rep["claims"] if r["id"] == "ablation_1")
    md = (tmp_path / "reproduction.md").read_text()
    other = md.split("## Other defaults")[1].split("## Figures")[0]
    assert "| S_H, Div+MMD+GD+ISD (MaxMatch, hinge) | `loss.gd_isd_shape='hinge'` | 3 / 3 | 431.00 ± 1.00 | " \
        "437.00 ± 1.00 |" in other  # the paper inference score (top-k) of the default cell and of the knob cell
    summary_md = md.split("## Summary")[1].split("## Grid")[0]
    assert "| why, in short |" in summary_md and "hinge" not in summary_md  # the knob agrees with the default here
    # a knob or a longer budget that changes the verdict is named in the row's 'why'
    row = {"verdict": "reversed", "ours": {"diff": -5.0},
           "knobs": [{"knob": "k", "diff": 1.0, "verdict": "not reproduced"},
                     {"knob": "same", "diff": -6.0, "verdict": "reversed"}],
           "long": {"diff": -2.0, "verdict": "inconclusive (1 seed)", "length": "10 epochs"}}
    assert summary.short_why(row, claims.CLAIMS[1], {}, {}) == (
        "opposite sign, beyond the seed spread; with `k`: Δ +1.00, not reproduced; 10 epochs: Δ -2.00, "
        "inconclusive (1 seed)")
    _assert_tables_are_rectangular(md)
    plain = report.write_report([r for r in _records() if r["group"] != "knobs"], str(tmp_path / "plain"),
                                budget="default", seeds=3, command="python -m x")
    assert plain["knob_claims"] == [] and "no knob cells in this report" in (tmp_path / "plain" /
                                                                             "reproduction.md").read_text()


def _assert_tables_are_rectangular(md):
    """Every markdown table row has its header's number of cells (an unescaped | in a cell would add one)."""
    width = None
    for line in md.splitlines():
        if not line.startswith("|"):
            width = None
            continue
        cells = len(re.findall(r"(?<!\\)\|", line)) - 1
        width = width or cells
        assert cells == width, line


def test_report_with_one_seed_is_inconclusive_and_says_so(tmp_path):
    rep = report.write_report(_records(1), str(tmp_path), budget="smoke", seeds=1, command="python -m x")
    assert {r["verdict"] for r in rep["claims"]} == {"inconclusive (1 seed)"}
    assert all("one seed" in r["evidence"] for r in rep["claims"])
    assert "Smoke budget" in (tmp_path / "reproduction.md").read_text()


# ---------------------------------------------------------------- end to end (smoke budget)


def check_smoke_output(out):
    """Structure of a finished one-seed smoke grid in `out` (a pathlib.Path): sections, every claim row with a
    verdict and a finite difference, every cell with finite numbers and no non-finite loss, the figures."""
    md = (out / "reproduction.md").read_text()
    for section in report.SECTIONS:
        assert f"## {section}" in md, section
    _assert_tables_are_rectangular(md)
    data = json.load(open(out / "reproduction.json"))
    assert set(data["cells"]) == {s.name for s in grid.SPECS}
    assert [r["id"] for r in data["claims"]] == [c.id for c in claims.CLAIMS]
    assert {r["verdict"] for r in data["claims"]} == {"inconclusive (1 seed)"}  # one seed: never a verdict
    for row in data["claims"]:
        assert row["ours"]["diff"] is not None and math.isfinite(row["ours"]["diff"]), row["id"]
        assert f"**{row['verdict']}**" in md and row["evidence"]
    for name, cell in data["cells"].items():
        assert cell["stability"]["nonfinite_losses"] == 0, name
        assert math.isfinite(cell["metrics"]["best"]["rsum"]["mean"]), name
        assert math.isfinite(cell["metrics"]["final"]["rsum"]["mean"]), name
    for name in ("sh_full", "sc_divmmd", "mil_divmmd"):
        best = data["cells"][name]["metrics"]["best"]
        assert {"cv_log_image", "single_gap", "retrieval/maxmatch/rsum", "retrieval/maxmatch_topk/rsum"} <= set(best)
    for name in ("globalm_hnb", "flowclip_cimr"):
        best = data["cells"][name]["metrics"]["best"]
        assert {f"{g}_{c}" for g in ("binding", "aro") for c in metrics.CONDITIONS} <= set(best)
    assert set(data["figures"]) == {"ablation_rsum", "flowclip_binding", "flowclip_controls", "training_curves"}
    for name, cell in data["cells"].items():  # every cell carries its curves: losses, and a validation at the end
        curves = cell["curves"][0]
        assert curves["train"]["step"] and curves["val"]["step"][-1] == grid.SMOKE_STEPS, name
        assert cell["val_drop"]["mean"] is not None and cell["val_drop"]["mean"] >= 0.0, name
    for path in data["figures"].values():
        assert (out / path).stat().st_size > 1000


@pytest.mark.slow
def test_smoke_grid_end_to_end_and_resume(tmp_path):
    out = tmp_path / "repro"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "reproduce", "--budget", "smoke", "--seeds", "1", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    check_smoke_output(out)
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("cells/*/seed0/cell.json")}
    assert len(stamps) == len(grid.SPECS)
    again = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"0 cell(s) run, {len(grid.SPECS)} skipped, 0 failed" in again.stdout
    assert {p: p.stat().st_mtime_ns for p in out.glob("cells/*/seed0/cell.json")} == stamps


def test_default_budget_sizes_and_stability_choice(tmp_path):
    """Default budget: the Flow-CLIP grid trains the configs' `cpu` variants (step budget validated twice for the
    heads), every retrieval cell ramps hardest negatives in over one epoch; the smoke budget keeps its own size."""
    for cell in grid.make_grid(1):
        c = grid.build_config(cell, "default", str(tmp_path))
        if cell.name == "clip":
            assert (c.model.width, c.model.vision_layers, c.data.batch_size, c.train.num_epochs) == (128, 2, 256, 4)
        elif cell.spec.needs_clip:
            assert (c.data.batch_size, c.train.num_steps, c.train.eval_every) == (64, 300, 150)
            assert c.train.eval_every_epoch is False
        else:
            assert c.loss.hard_negative_ramp_epochs == grid.HARD_NEGATIVE_RAMP_EPOCHS == 1.0
            assert c.train.eval_every_epoch is True
    smoke = grid.build_config(grid.Cell(grid.SPEC_BY_NAME["flowclip_cimr"], 0), "smoke", str(tmp_path))
    assert smoke.train.num_steps == grid.SMOKE_STEPS and smoke.data.batch_size == 32
    long = {c.name: grid.build_config(c, "long", str(tmp_path)) for c in grid.make_grid(1, ["clip", "flowclip_cimr",
                                                                                          "sh_full"])}
    f = grid.LONG_FACTOR
    assert long["clip"].train.num_epochs == 4 * f and long["sh_full"].train.num_epochs == 2 * f
    assert (long["flowclip_cimr"].train.num_steps, long["flowclip_cimr"].train.eval_every) == (300 * f, 150 * f)


def test_publish_copies_report_figures_and_heat_maps(tmp_path):
    import matplotlib.pyplot as plt
    heat = tmp_path / "cells" / "element_similarity.png"
    heat.parent.mkdir()
    fig = plt.figure(figsize=(1, 1))
    fig.savefig(heat)
    plt.close(fig)
    records = _records(2)
    for r in records:
        if r["name"] == "sh_full":
            r["figures"]["best"]["element_similarity"] = str(heat)
    out = tmp_path / "out"
    out.mkdir()
    report.write_report(records, str(out), budget="default", seeds=2, command="python -m x")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "reproduction").mkdir()
    (docs / "reproduction" / "stale.png").write_bytes(b"old")  # a figure of an earlier report must not linger
    fig_dir = report.publish(str(out), str(docs / "reproduction.md"))
    md = (docs / "reproduction.md").read_text()
    links = re.findall(r"\]\(([^)]+\.png)\)", md)
    assert "reproduction/heatmap_sh_full.png" in links and "reproduction/ablation_rsum.png" in links
    for link in links:
        assert (docs / link).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", link
    assert not os.path.exists(os.path.join(fig_dir, "stale.png"))
    with pytest.raises(ValueError, match=r"\.md"):
        report.publish(str(out), str(docs / "reproduction.txt"))


def test_cells_record_the_code_they_ran_on(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if not os.path.exists(os.path.join(root, ".git")):
        pytest.skip("not a git checkout")
    version = runner.code_version()
    assert re.fullmatch(r"[0-9a-f]{40}", version["commit"]) and isinstance(version["dirty"], bool)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
    assert version["commit"] == head
    records = _records(2)
    for r in records:
        r["code"] = {"commit": "a" * 40, "dirty": r["seed"] == 1}
    report.write_report(records, str(tmp_path), budget="default", seeds=2, command="python -m x")
    md = (tmp_path / "reproduction.md").read_text()
    assert "aaaaaaaaaa, aaaaaaaaaa+dirty" in md


def test_a_partial_grid_says_what_is_missing(tmp_path):
    records = [r for r in _records(2) if not (r["name"] == "vse" and r["seed"] == 1)]
    records = [r for r in records if r["name"] != "clip"]
    report.write_report(records, str(tmp_path), budget="default", seeds=2, command="python -m x")
    md = (tmp_path / "reproduction.md").read_text()
    assert f"**Partial grid: {2 * len(grid.SPECS) - 3} of {2 * len(grid.SPECS)} cell runs finished**" in md
    assert "VSE∞ (K = 1) (1)" in md and "frozen CLIP (cosine) (2)" in md
    report.write_report(_records(2), str(tmp_path), budget="default", seeds=2, command="python -m x")
    assert "Partial grid" not in (tmp_path / "reproduction.md").read_text()


# ---------------------------------------------------------------- longer budget


def _long_records(tmp_path=None):
    recs = []
    for seed in range(2):
        for name, rsum in (("sh_divmmd", 400.0), ("sc_full", 425.0)):  # the default grid has 410 → 420
            r = _record(name, seed, rsum + 2 * seed)
            r["budget"] = "long"
            r["budget_detail"] = {**r["budget_detail"], "num_epochs": 10}
            recs.append(r)
            if tmp_path is not None:
                d = tmp_path / "cells" / name / f"seed{seed}"
                d.mkdir(parents=True)
                (d / "cell.json").write_text(json.dumps(r))
    return recs


def test_longer_budget_section_and_claim_evidence(tmp_path):
    out = tmp_path / "default"
    out.mkdir()
    rep = report.write_report(_records(), str(out), budget="default", seeds=3, command="python -m x",
                              long_records=_long_records(), long_out="DIR_LONG")
    md = (out / "reproduction.md").read_text()
    section = md.split("## Longer budget")[1].split("## Figures")[0]
    assert "--budget long --seeds 2 --cells sh_divmmd,sc_full --out DIR_LONG" in section
    rows = [line for line in section.splitlines() if line.startswith("| S_H, Div+MMD |")]
    assert len(rows) == 1 and "| 2 epochs (3) | 10 epochs (2) |" in rows[0] and "| 401.00 ± 1.41 |" in rows[0]
    assert [r["id"] for r in rep["long"]["claims"]] == ["ablation_2"]   # the only claim with both cells long
    long_row = rep["long"]["claims"][0]
    assert long_row["diff"] == pytest.approx(24.0) and long_row["verdict"] == "reproduced"  # S_H cells: top-k = +1
    by_id = {r["id"]: r for r in rep["claims"]}
    assert by_id["ablation_2"]["evidence"].endswith("long budget (10 epochs): Δ = +24.00 (n = 2/2), reproduced")
    assert "long budget" not in by_id["ablation_3"]["evidence"]
    summary_md = md.split("## Summary")[1].split("## Grid")[0]
    assert "| **reproduced** | 10 epochs: Δ +24.00, reproduced |" in summary_md
    _assert_tables_are_rectangular(md)
    # Without long cells the section says how to get them.
    report.write_report(_records(), str(out), budget="default", seeds=3, command="python -m x")
    assert "--long-out DIR" in (out / "reproduction.md").read_text().split("## Longer budget")[1]


def test_a_knob_cell_at_the_long_budget_re_checks_its_claim(tmp_path):
    """sc_full_hinge at the long budget beside sh_divmmd and sc_full: the decisive row is re-checked with the knob
    there too (its own table, the claim's evidence and the Summary's 'why'); rows whose other cell did not run long
    are left out."""
    longs = _long_records()
    for seed in range(2):
        r = _record("sc_full_hinge", seed, 430.0 + 2 * seed)
        r["budget"], r["budget_detail"] = "long", {**r["budget_detail"], "num_epochs": 10}
        longs.append(r)
    out = tmp_path / "default"
    out.mkdir()
    rep = report.write_report(_records(), str(out), budget="default", seeds=3, command="python -m x",
                              long_records=longs, long_out="DIR_LONG")
    knob_rows = rep["long"]["knob_claims"]
    assert [(r["id"], r["a"], r["b"]) for r in knob_rows] == [("ablation_2", "sh_divmmd", "sc_full_hinge")]
    assert knob_rows[0]["diff"] == pytest.approx(29.0) and knob_rows[0]["verdict"] == "reproduced"  # 431 → 430
    claim = next(r for r in rep["claims"] if r["id"] == "ablation_2")
    assert claim["evidence"].endswith("long budget (10 epochs) with loss.gd_isd_shape='hinge' (sh_divmmd → "
                                      "sc_full_hinge): Δ = +29.00 (n = 2/2), reproduced")
    assert "10 epochs with `loss.gd_isd_shape='hinge'`: Δ +29.00, reproduced" in claim["why"]
    md = (out / "reproduction.md").read_text()
    section = md.split("## Longer budget")[1].split("## Other defaults")[0]
    assert "Claims re-checked with a knob cell at the long budget" in section
    assert "| `loss.gd_isd_shape='hinge'` | sh_divmmd → sc_full_hinge | +2.87 |" in section
    _assert_tables_are_rectangular(md)


def test_long_heads_on_the_default_clip_name_it_in_the_regenerate_command(tmp_path, capsys):
    from reproduce import __main__ as cli
    longs = []
    for name in ("globalm_hnb", "flowclip_hnb"):
        for seed in range(2):
            r = _record(name, seed, RSUM[name] + seed)
            r.update(budget="long", clip_from="workdir/repro", budget_detail={
                **r["budget_detail"], "num_epochs": 0, "num_steps": 1500})
            # Global-M logs |s_L| = 0: it has no local branch, and the table must say so rather than print 0.000
            r["curves"] = {"train": {"step": [1500], "mean_abs_s_local": [0.0 if name == "globalm_hnb" else 0.03]}}
            if name == "flowclip_hnb" and seed == 1:  # an interrupted run times only the steps after its checkpoint
                r["notes"] = ["resumed from step 600: the training wall time counts only steps 600–1500"]
            longs.append(r)
    out = tmp_path / "default"
    out.mkdir()
    rep = report.write_report(_records(), str(out), budget="default", seeds=3, command="python -m x",
                              long_records=longs, long_out="DIR_LONG")
    assert rep["long"]["command"].endswith("--cells globalm_hnb,flowclip_hnb --out DIR_LONG --clip-from workdir/repro")
    assert [r["id"] for r in rep["long"]["claims"]] == ["binding_hnb"]
    section = (out / "reproduction.md").read_text().split("## Longer budget")[1].split("## Other defaults")[0]
    head_rows = [line for line in section.splitlines() if line.startswith("| Flow-CLIP, HNB |")]
    # the fake default cells say 2 epochs
    assert len(head_rows) == 1 and "| 2 epochs (3) | 1500 steps (2) | 60.0 ± 0.3 |" in head_rows[0]
    assert "| – | 0.030 ± 0.000 |" in head_rows[0]  # no curves in the fake default cells
    assert head_rows[0].endswith(" (resumed) |")
    globalm_rows = [line for line in section.splitlines() if line.startswith("| Global-M, HNB |")]
    assert len(globalm_rows) == 1 and "| – | none |" in globalm_rows[0] and "no local branch" in section
    assert "(resumed)" not in globalm_rows[0]
    assert "| head | default (seeds) |" in section and "| RSUM default |" not in section  # no retrieval cells
    _assert_tables_are_rectangular((out / "reproduction.md").read_text())
    # retrieval cells on seed 0 and heads on seed 2 of the default CLIP: one regenerate command per group
    mixed = [r for r in _long_records() if r["seed"] == 0] + [dict(r, seed=2) for r in longs if r["seed"] == 0]
    rep = report.write_report(_records(), str(out), budget="default", seeds=3, command="python -m x",
                              long_records=mixed, long_out="DIR_LONG")
    assert rep["long"]["command"] == (
        "python -m reproduce --budget long --seeds 1 --cells sh_divmmd,sc_full --out DIR_LONG; "
        "python -m reproduce --budget long --seeds 1 --first-seed 2 --cells globalm_hnb,flowclip_hnb "
        "--out DIR_LONG --clip-from workdir/repro")
    assert "`, then `" in (out / "reproduction.md").read_text().split("## Longer budget")[1]
    # the CLI refuses a --clip-from directory without the CLIP it needs, naming the file
    argv = ["--budget", "long", "--seeds", "1", "--cells", "globalm_hnb", "--out", str(tmp_path / "long"),
            "--clip-from", str(tmp_path / "nothing")]
    assert cli.main(argv) == 2
    assert "cells/clip/seed0/cell.json not found" in capsys.readouterr().err
    assert cli.main(argv[:-2] + ["--first-seed", "2", "--clip-from", str(tmp_path / "nothing")]) == 2
    assert "cells/clip/seed2/cell.json not found" in capsys.readouterr().err


def test_long_out_directory_is_checked(tmp_path):
    from reproduce import longer_budget
    with pytest.raises(ValueError, match="grid.json"):
        longer_budget.load_records(str(tmp_path))
    runner.check_budget(str(tmp_path), "default", 1)
    with pytest.raises(ValueError, match="'default' budget grid"):
        longer_budget.load_records(str(tmp_path))
    long_dir = tmp_path / "long"
    runner.check_budget(str(long_dir), "long", 2)
    written = _long_records(long_dir)
    got = longer_budget.load_records(str(long_dir))
    assert sorted((r["name"], r["seed"]) for r in got) == sorted((r["name"], r["seed"]) for r in written)


def test_controls_at_chance_say_cimr_has_nothing_to_remove(tmp_path):
    recs = [r for r in _records() if r["name"] not in ("flowclip_hnb", "flowclip_cimr")]
    # Shuffle 55 − offset ≈ chance 40; opposite seed jitter, so the paired differences (−0.8, −0.2, +0.4) spread
    recs += [_record(n, s, RSUM[n], offset=off + jitter * s) for s in range(3)
             for n, off, jitter in (("flowclip_hnb", 14.0, 0.3), ("flowclip_cimr", 14.8, -0.3))]
    rep = report.write_report(recs, str(tmp_path), budget="default", seeds=3, command="python -m x")
    evidence = {r["id"]: r["evidence"] for r in rep["claims"]}
    for claim in ("cimr_shuffle", "cimr_fixed"):
        assert "within 5 points of chance (40%)" in evidence[claim]
        assert "no image-independent preference left for it to remove" in evidence[claim]
    assert "no image-independent preference" not in evidence["cimr_real"]


def test_grid_notes_say_how_many_seeds_share_them():
    """A note only some seeds have is marked '(k of n seeds)'; the code-moved note is left to the Code line."""
    rs = _records(3)
    for r in rs:
        if r["name"] == "pvse":
            r["notes"] = ["same step"] + (["best evaluated"] if r["seed"] == 2 else []) + [
                f"{runner.CODE_MOVED_NOTE} abc (the grid's launch); the checkout was at def when the cell ended"]
    notes = report.aggregate(rs)["pvse"]["notes"]
    assert notes == ["best evaluated (1 of 3 seeds)", "same step"]
