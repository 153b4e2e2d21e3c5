"""Means over suites and the flat scalars of a compositional result (`compositional.flat_metrics`), which a
validation logs and a Flow-CLIP head is selected on; which evaluators a validation runs (`validation_evals`)."""

import ml_collections
import numpy as np
import pytest

from mmjax.data.records import CompositionalRecord
from mmjax.evaluation.evaluators import compositional
from mmjax.evaluation.evaluators.base import EvalEnv
from mmjax.evaluation.registry import get
from mmjax.experiment import validation_evals


def _suite(task, n, correct_first):
    """n records of `task`; the scorer below prefers caption 0, so the first `correct_first` records are right."""
    return [CompositionalRecord(image=f"im{i}", captions=(f"{task} a{i}", f"{task} b{i}"),
                                correct=0 if i < correct_first else 1, task=task, image_id=f"id{i}")
            for i in range(n)]


def _score(images, captions):
    return np.array([1.0 if " a" in c else 0.0 for c in captions])


def _run(options=None, means=None):
    suites = {"s1": _suite("s1", 10, 10), "s2": _suite("s2", 10, 4), "s3": _suite("s3", 10, 7)}
    context = {"records": suites, "score_fn": _score}
    if means is not None:
        context["suite_means"] = means
    ev = get("compositional")
    return ev.run(ev.make_options(options or {"conditions": ["real"]}), context, EvalEnv())


def test_means_over_suites_are_the_mean_of_their_members_per_condition():
    out = _run(means={"m12": ("s1", "s2"), "all": ("s1", "s2", "s3"), "absent": ("s1", "s9")})
    assert out["means"]["m12"]["real"] == pytest.approx((100.0 + 40.0) / 2)
    assert out["means"]["all"]["real"] == pytest.approx((100.0 + 40.0 + 70.0) / 3)
    assert out["means"]["all"]["chance"] == pytest.approx(50.0)
    assert "absent" not in out["means"]   # a mean with a suite not evaluated is not reported
    assert "means" not in _run()           # no means asked for, none given
    lines = get("compositional").tables("suites", out)
    assert "### suites: means over suites" in lines and "| m12 | 70.00 | 50.00 |" in lines


def test_flat_metrics_name_suite_condition_and_mean():
    out = _run({"conditions": ["real", "fixed"]}, means={"m12": ("s1", "s2")})
    flat = compositional.flat_metrics(out)
    assert flat["s1/real"] == 100.0 and flat["s2/real"] == 40.0 and flat["s3/real"] == 70.0
    assert flat["m12/real"] == pytest.approx(70.0)
    # Fixed scores every record on one anchor image; this scorer ignores images, so the accuracies stay, less the
    # excluded anchor identity
    assert set(flat) == {f"{s}/{c}" for s in ("s1", "s2", "s3", "m12") for c in ("real", "fixed")}
    assert not any("chance" in k for k in flat)


def _config(**kw):
    c = ml_collections.ConfigDict()
    for k, v in kw.items():
        c[k] = v
    return c


def test_a_validation_runs_compositional_evaluators_only_when_val_evals_names_them():
    evals = {"suites": {"type": "compositional"}, "retrieval": {"type": "retrieval"}}
    assert list(validation_evals(_config(evals=evals))) == ["retrieval"]
    assert list(validation_evals(_config(evals=evals, val_evals=evals))) == ["retrieval", "suites"]
    with pytest.raises(ValueError, match="no 'retrieval' evaluator"):
        validation_evals(_config(val_evals={"suites": {"type": "compositional"}}))
