"""The blind (text-only) baseline (`mmjax.evaluation.blind`): the pairwise logistic fit against scipy's optimiser on
the same objective, planted cues found and absent ones not, the scorer blind to images, and its column in the
control tables and the compositional evaluator."""

import numpy as np
import pytest
from scipy import optimize

from mmjax.data import shapesworld
from mmjax.data.records import CompositionalRecord
from mmjax.evaluation import blind
from mmjax.evaluation.controls import evaluate_with_controls
from mmjax.evaluation.evaluators.base import EvalEnv, InvalidOption
from mmjax.evaluation.registry import get


def _planted(n, d=6, cue=1.5, rate=1.0, seed=0):
    """Positive and negative text features; with prob. `rate` a pair carries the cue (the positive is larger on
    feature 0 by `cue`); features 1.. are noise shared by nothing."""
    rng = np.random.default_rng(seed)
    pos, neg = rng.normal(size=(n, d)), rng.normal(size=(n, d))
    carries = rng.random(n) < rate
    pos[carries, 0] += cue
    return pos, neg


def test_fit_is_the_optimum_of_the_stated_objective():
    pos, neg = _planted(400, cue=0.7)
    model = blind.fit_blind(pos, neg, l2=0.05, holdout=0.0)
    # the module docstring's objective, on features scaled by the differences' per-dimension RMS, solved by L-BFGS
    x = pos - neg
    scale = np.sqrt(np.mean(x ** 2, axis=0))
    xs = x / scale

    def objective(v):
        z = xs @ v
        return np.mean(np.logaddexp(0.0, -z)) + 0.5 * 0.05 * v @ v
    ref = optimize.minimize(objective, np.zeros(x.shape[1]), method="L-BFGS-B", options={"gtol": 1e-12}).x / scale
    np.testing.assert_allclose(model.w, ref, rtol=1e-4, atol=1e-6)
    assert model.n_train == 400 and model.n_holdout == 0 and np.isnan(model.holdout_accuracy)


def test_a_planted_cue_is_found_and_held_out_pairs_confirm_it():
    pos, neg = _planted(2000, cue=3.0)
    model = blind.fit_blind(pos, neg, holdout=0.25, seed=1)
    assert model.n_holdout == 500
    assert model.holdout_accuracy > 90.0 and model.train_accuracy > 90.0
    assert np.argmax(np.abs(model.w)) == 0 and model.w[0] > 0


def test_without_a_cue_the_held_out_accuracy_is_chance():
    pos, neg = _planted(2000, cue=0.0)
    model = blind.fit_blind(pos, neg, holdout=0.5, seed=2)
    # 1000 held-out pairs at p = 0.5: a 4.5-sigma band is ±7 points
    assert abs(model.holdout_accuracy - 50.0) < 7.0


@pytest.mark.parametrize("bad,match", [((np.zeros((3, 2)), np.zeros((3, 3))), r"\[n, d\]"),
                                       ((np.full((3, 2), np.nan), np.zeros((3, 2))), "non-finite"),
                                       ((np.zeros((1, 2)), np.zeros((1, 2))), "at least 2")])
def test_bad_features_are_refused_with_the_reason(bad, match):
    with pytest.raises(ValueError, match=match):
        blind.fit_blind(*bad, holdout=0.0)


def test_the_scorer_never_looks_at_the_image_and_encodes_each_caption_once():
    model = blind.BlindModel(w=np.array([1.0, -2.0]), l2=1.0, n_train=2, n_holdout=0, train_accuracy=100.0,
                             holdout_accuracy=float("nan"))
    table = {"a": [1.0, 0.0], "b": [0.0, 1.0], "c": [2.0, 1.0]}
    calls = []

    def encode(captions):
        calls.append(list(captions))
        return np.array([table[c] for c in captions])
    scorer = blind.BlindScorer(model, encode)
    np.testing.assert_allclose(scorer(["img1", "img2", "img3"], ["a", "b", "a"]), [1.0, -2.0, 1.0])
    np.testing.assert_allclose(scorer([None, object()], ["c", "b"]), [0.0, -2.0])
    assert calls == [["a", "b"], ["c"]]


def _records(n=20):
    # task "cued": the true caption ends in "!" (a text-only cue); task "blind": nothing tells the captions apart
    out = []
    for i in range(n):
        out.append(CompositionalRecord(image=f"im{i}", captions=(f"x{i}!", f"y{i}"), correct=0, task="cued",
                                       image_id=f"id{i}"))
        out.append(CompositionalRecord(image=f"im{i}", captions=(f"p{i}", f"q{i}"), correct=i % 2, task="uncued",
                                       image_id=f"id{i}"))
    return out


def _encode(captions):
    return np.array([[float(c.endswith("!")), float(c.startswith(("p", "x")))] for c in captions])


def test_the_control_table_gets_a_blind_column_equal_to_a_hand_count():
    records = _records()
    pos = _encode([f"x{i}!" for i in range(50)])
    model = blind.fit_blind(pos, np.zeros_like(pos), holdout=0.0)   # prefers "!" and a leading p/x
    scorer = blind.BlindScorer(model, _encode)
    result = evaluate_with_controls(records, lambda imgs, caps: np.zeros(len(caps)), blind_score_fn=scorer)
    by_hand = {}
    for task in ("cued", "uncued"):
        rs = [r for r in records if r.task == task]
        by_hand[task] = 100.0 * np.mean([int(np.argmax(scorer([None] * 2, list(r.captions)))) == r.correct
                                         for r in rs])
    assert result["blind"]["tasks"]["cued"]["accuracy"] == pytest.approx(by_hand["cued"]) == 100.0
    assert result["blind"]["tasks"]["uncued"]["accuracy"] == pytest.approx(by_hand["uncued"])
    header = result["table"].splitlines()[0]
    assert header == "| task | real | shuffle | fixed | blind (text only) | chance |"
    assert "| cued | " in result["table"] and "| 100.00 | 50.00 |" in result["table"]
    assert "blind" not in evaluate_with_controls(records, lambda imgs, caps: np.zeros(len(caps)))["table"]


def test_the_compositional_evaluator_fits_the_blind_model_from_its_context():
    records = _records()
    pos, neg = _encode([f"x{i}!" for i in range(40)]), _encode([f"y{i}" for i in range(40)])
    asked = []

    def pairs(max_pairs):
        asked.append(max_pairs)
        idx = blind.subsample(len(pos), max_pairs)
        return pos[idx], neg[idx]
    ev = get("compositional")
    context = {"records": {"toy": records}, "score_fn": lambda imgs, caps: np.zeros(len(caps)),
               "blind_pairs": pairs, "blind_encode_texts": _encode}
    out = ev.run(ev.make_options({"blind_max_pairs": 30, "blind_holdout": 0.0}), context, EvalEnv())
    assert asked == [30]
    assert out["toy"]["blind_model"]["n_train"] == 30 and out["toy"]["blind_model"]["train_pair_accuracy"] == 100.0
    assert out["toy"]["blind"]["tasks"]["cued"]["accuracy"] == 100.0
    off = ev.run(ev.make_options({"blind": False}), context, EvalEnv())
    assert "blind" not in off["toy"] and "blind_model" not in off["toy"]
    for bad in ({"blind_l2": 0.0}, {"blind_holdout": 1.0}, {"blind_max_pairs": 1}, {"blind": "yes"}):
        with pytest.raises(InvalidOption, match=next(iter(bad))):
            ev.make_options(bad)


def test_subsample_keeps_everything_when_small_and_is_seeded_when_large():
    np.testing.assert_array_equal(blind.subsample(5, 10), np.arange(5))
    a = blind.subsample(100, 10, seed=3)
    assert len(a) == 10 and len(set(a)) == 10 and np.all(np.diff(a) > 0)
    np.testing.assert_array_equal(a, blind.subsample(100, 10, seed=3))


def test_shapesworld_training_pairs_are_each_caption_with_its_training_negative():
    data = shapesworld.generate("train", preset="tiny", seed=0, limit=30)
    pos, neg = blind.shapesworld_training_pairs(data)
    idx = data["train_neg_index"]
    assert len(pos) == len(neg) == int((idx >= 0).sum()) > 0
    i, j = np.argwhere(idx >= 0)[0]
    assert (pos[0], neg[0]) == (data["captions"][i][j], data["neg_text"][idx[i, j]])
    assert all(p != n for p, n in zip(pos, neg))
