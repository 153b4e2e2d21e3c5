"""The Flow-CLIP mechanism oracle (reproduce/flowclip_oracle.py): the planted world's statistics, the controls
against a numpy reference, a short training run that must show the planted binding gain, and the report lines."""

import dataclasses
import json

import jax
import numpy as np
import pytest

from reproduce import flowclip_oracle as fo
from reproduce import flowclip_report, report, stats
from reproduce.tables import markdown_table

SMALL = fo.PlantedWorld(n_train=600, n_test=400)


def _bag(objects_tokens):
    return objects_tokens.sum(1)


def test_planted_world_negatives_and_prior():
    world = dataclasses.replace(SMALL, noise=0.0, n_train=3000, n_test=1000)
    w = fo.planted_world(world, 3)
    kind, pos, neg = w["kind"], w["pos_text"], w["neg_text"]
    swap, replace = kind == 0, kind == 1
    assert 0.45 < swap.mean() < 0.55
    # Without noise a token is exactly e_c + e_s, and the global is the bag of the tokens.
    np.testing.assert_allclose(pos["global"], _bag(pos["tokens"]), atol=1e-5)
    np.testing.assert_allclose(w["image"]["global"], _bag(w["image"]["patches"][:, :2]), atol=1e-5)
    np.testing.assert_allclose(w["image"]["patches"][:, :2], pos["tokens"], atol=1e-6)
    assert np.all(w["image"]["patches"][:, 2:] == 0)  # background tokens carry only noise
    # Swap negatives keep the bag (Global-M cannot tell them apart) but change the bound tokens.
    np.testing.assert_allclose(neg["global"][swap], pos["global"][swap], atol=1e-5)
    assert np.all(np.abs(neg["tokens"][swap] - pos["tokens"][swap]).max(axis=(1, 2)) > 0.1)
    # Replace negatives change the first object's colour to one the image does not hold, rare at the prior's rate.
    rng = np.random.default_rng(3)
    colours = fo._unit(rng.standard_normal((world.n_colours, world.dim)))
    shapes = fo._unit(rng.standard_normal((world.n_shapes, world.dim)))
    first_colour = neg["tokens"][replace, 0] - shapes[np.argmax(neg["tokens"][replace, 0] @ shapes.T, axis=1)]
    new = np.argmax(first_colour @ colours.T, axis=1)
    own = np.argmax((pos["tokens"][replace] - shapes[np.argmax(pos["tokens"][replace] @ shapes.T, -1)]) @ colours.T,
                    axis=-1)
    assert np.all(new[:, None] != own)
    rare = new >= world.n_colours - world.n_rare
    assert abs(rare.mean() - world.prior) < 0.04
    # Colours: the rare ones at rare_weight of a common one's rate.
    all_colours = own.reshape(-1)
    assert np.mean(all_colours >= world.n_colours - world.n_rare) < 0.06


def test_replacement_images():
    test = np.arange(100, 140)
    imgs = fo.replacement_images(test, 0)
    np.testing.assert_array_equal(imgs["real"], test)
    assert np.all(imgs["shuffle"] != test) and sorted(imgs["shuffle"]) == list(test)
    assert len(set(imgs["fixed"])) == 1
    np.testing.assert_array_equal(fo.replacement_images(test, 0)["shuffle"], imgs["shuffle"])


def test_controls_of_the_initial_head_equal_the_cosine_reference():
    """At init (M = M_tok = I, W = 0) the head's score is cos(v_I, t_T): the controls must equal numpy's count."""
    w = fo.planted_world(SMALL, 1)
    head = fo.FlowCLIPHead(dim=SMALL.dim, options=fo.FlowCLIPOptions())
    params = head.init(jax.random.PRNGKey(0), fo._take(w["image"], [0]), fo._take(w["pos_text"], [0]))["params"]
    with jax.default_matmul_precision("float32"):
        got = fo.controls(w, head, params, seed=5)
    test = np.arange(SMALL.n_train, SMALL.n_train + SMALL.n_test)
    unit = fo._unit
    for cond, rows in fo.replacement_images(test, 5).items():
        v = unit(w["image"]["global"][rows].astype(np.float64))
        m = (np.sum(v * unit(w["pos_text"]["global"][test].astype(np.float64)), -1)
             - np.sum(v * unit(w["neg_text"]["global"][test].astype(np.float64)), -1))
        keep = rows != test if cond == "fixed" else np.ones(len(test), bool)
        for t, name in enumerate(fo.TYPES):
            sel = keep & (w["kind"][test] == t)
            ref = 100.0 * np.mean(m[sel] > 0)
            assert got[name][cond] == pytest.approx(ref, abs=100.0 / sel.sum() + 1e-9), (name, cond)


def test_short_training_shows_the_planted_binding_gain_and_trains_cimr():
    w = fo.planted_world(dataclasses.replace(SMALL, noise=0.05), 0)
    acc, metrics = {}, {}
    for key in fo.HEADS:
        head, params, metrics[key] = fo.train_head(w, key, 0, 150)
        acc[key] = fo.controls(w, head, params)
    assert acc["globalm_hnb"]["swap"]["real"] < 65      # the bag cannot bind
    assert acc["flowclip_hnb"]["swap"]["real"] > acc["globalm_hnb"]["swap"]["real"] + 20
    assert "cimr" in metrics["flowclip_cimr"] and metrics["flowclip_cimr"]["eligible_frac"] == 1.0
    assert "cimr" not in metrics["flowclip_hnb"]
    blind = fo.blind_accuracy(w)
    assert blind["replace"] > 80 and abs(blind["swap"] - 50) < 15


def _fake_record():
    rng = np.random.default_rng(0)
    runs = []
    for noise in (0.1, 0.3):
        for seed in range(5):
            def ctl(swap_real, shuffle, fixed, real):
                return {"swap": {"real": swap_real, "shuffle": 50.0, "fixed": 50.0},
                        "replace": {"real": real, "shuffle": shuffle, "fixed": fixed}}
            e = rng.normal(0, 1, 4)
            runs.append({"noise": noise, "seed": seed, "blind": {"swap": 50.0, "replace": 95.0},
                         "heads": {"globalm_hnb": {"controls": ctl(50 + e[0], 60, 60, 99)},
                                   "flowclip_hnb": {"controls": ctl(90 + e[1], 64 + e[2], 66, 99 + 0.1 * e[3])},
                                   "flowclip_cimr": {"controls": ctl(90, 58 - e[2], 55, 99)}}})
    return {"noises": [0.1, 0.3], "seeds": list(range(5)), "steps": 600, "batch_size": 64, "runs": runs,
            "heads": {k: {"use_local": u, "lambda_cimr": lam} for k, (u, lam) in fo.HEADS.items()}}


def test_summarise_uses_the_study_quantities():
    record = _fake_record()
    rows = fo.summarise(record)
    assert [r["noise"] for r in rows] == [0.1, 0.3]
    runs = [r for r in record["runs"] if r["noise"] == 0.1]
    a = np.array([r["heads"]["flowclip_hnb"]["controls"]["replace"]["shuffle"] for r in runs])
    b = np.array([r["heads"]["flowclip_cimr"]["controls"]["replace"]["shuffle"] for r in runs])
    d = (a - b) - 0.5 * (a - 50)
    assert rows[0]["shuffle"]["test"].delta == pytest.approx(d.mean())
    ref = stats.one_sample_test(list(d))
    assert rows[0]["shuffle"]["test"].p == pytest.approx(ref.p)
    g = [r["heads"]["flowclip_hnb"]["controls"]["swap"]["real"] - r["heads"]["globalm_hnb"]["controls"]["swap"]["real"]
         for r in runs]
    assert rows[0]["binding"]["test"].delta == pytest.approx(np.mean(g))
    assert rows[0]["real"]["verdict"] == "reproduced"   # Real moves by ~0.1 with tiny spread: inside ±1


def test_section_and_report(tmp_path):
    assert flowclip_report.oracle_section(None, markdown_table) == []
    lines = flowclip_report.oracle_section(_fake_record(), markdown_table)
    text = "\n".join(lines)
    assert "λ_CIMR = 0.1," in text
    assert "Mechanism oracle" in text and "| 0.1 |" in text and "| 0.3 |" in text and "decides no row" in text
    path = tmp_path / "oracle.json"
    path.write_text(json.dumps(_fake_record()))
    md = report.render_markdown(report.build_report([], command="c", oracle_path=str(path)))
    assert "Mechanism oracle" in md
    md = report.render_markdown(report.build_report([], command="c", oracle_path=str(tmp_path / "none.json")))
    assert "Mechanism oracle" not in md


def test_oracle_figure(tmp_path):
    from reproduce import flowclip_figures
    assert flowclip_figures.oracle_figure(None, str(tmp_path / "none.png")) is None
    path = flowclip_figures.oracle_figure(_fake_record(), str(tmp_path / "oracle.png"))
    assert path and (tmp_path / "oracle.png").stat().st_size > 10_000


def test_the_report_draws_the_oracle_figure_only_with_a_record(tmp_path):
    path = tmp_path / "oracle.json"
    path.write_text(json.dumps(_fake_record()))
    rep = report.write_report([], str(tmp_path / "with"), command="c", oracle_path=str(path))
    assert "flowclip_oracle" in rep["figures"]
    rep = report.write_report([], str(tmp_path / "without"), command="c", oracle_path=str(tmp_path / "none.json"))
    assert "flowclip_oracle" not in rep["figures"]
