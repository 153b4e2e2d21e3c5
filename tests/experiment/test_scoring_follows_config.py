"""Validation and the final evaluation are one code path that scores as `config.loss` / `config.matching` say.

A smoke run trains with a non-default S_H scale and solver; the validation metrics logged at the last step must equal
what `mmjax.experiment.evaluate` reports on the same split from the exported parameters, and both must equal an
independent recomputation with the configured options (and differ from the defaults' numbers).
"""

import numpy as np
import pytest

from mmjax import experiment
from mmjax.evaluation.retrieval import recall_at_k
from mmjax.similarity import pairwise_set_similarity
from mmjax.train.defaults import retrieval_config


def test_scoring_options_come_from_loss_and_matching():
    c = retrieval_config("smoke")
    c.loss.s_h, c.loss.solver, c.loss.alpha = 2.0, "hungarian", 8.0
    c.matching.pad_penalty = "auto"
    score = experiment.scoring(c)
    assert score["similarity"] == "maxmatch"
    kw = score["similarity_kw"]
    assert (kw["s_h"], kw["solver"], kw["alpha"]) == (2.0, "hungarian", 8.0)
    assert kw["solver_options"]["auction"] == c.matching.auction.to_dict()
    assert kw["sinkhorn_tau"] == c.matching.sinkhorn.tau
    from mmjax.evaluation.run import resolve_evals
    resolved = resolve_evals(c.evals, **score)
    kind, opts = resolved["retrieval"]
    assert opts.kinds == ("maxmatch_topk", "maxmatch") and opts.similarity_kw["s_h"] == 2.0
    assert resolved["set_analysis"][1].kind == "maxmatch_topk"  # the inference score of an S_H run
    # An eval's own setting wins over the derived one.
    c.evals.retrieval.similarity_kw = {"s_h": 0.5}
    assert resolve_evals(c.evals, **score)["retrieval"][1].similarity_kw["s_h"] == 0.5


@pytest.mark.slow
def test_validation_and_final_evaluation_agree_under_a_non_default_config(tmp_path):
    c = retrieval_config("smoke")
    c.loss.s_h = 2.0
    c.loss.solver = "hungarian"  # K = 4 would pick 'enumerate' under 'auto'
    c.train.num_steps = 4
    c.train.eval_every = 4
    c.train.checkpoint_every = 4
    c.evals = {"retrieval": {"type": "retrieval", "fold_counts": (1,)}}
    workdir = str(tmp_path / "run")
    result = experiment.run(c, workdir)
    val = result["final_val"]

    results = experiment.evaluate(c, workdir, split="val", verbose=False)
    final = results["retrieval"]
    assert set(final) >= {"maxmatch", "maxmatch_topk"}
    # Validation's unprefixed metrics are the inference score's (top-k for an S_H run), the others prefixed.
    for k in ("i2t_r1", "i2t_r5", "t2i_r1", "t2i_r10", "rsum"):
        assert val[k] == pytest.approx(final["maxmatch_topk"]["all"][k], abs=1e-9), k
        assert val[f"maxmatch/{k}"] == pytest.approx(final["maxmatch"]["all"][k], abs=1e-9), k
        assert val[f"semantic/{k}"] == pytest.approx(final["maxmatch_topk"]["semantic"][k], abs=1e-9), k

    # Independent recomputation from the exported model with the configured options, and with the defaults.
    from mmjax.tasks import build_task
    from mmjax.train.export import load_exported
    variables, _ = load_exported(workdir)
    task = build_task(c, workdir)
    ctx = task.eval_context(variables, "val", suites=False)
    img = ctx["embed_images"](ctx["images"], ctx["image_mask"])
    txt = ctx["embed_captions"](ctx["captions"], ctx["caption_mask"])

    def rsum(**kw):
        sim = np.asarray(pairwise_set_similarity(img["set"], txt["set"], "maxmatch", img.get("mask"),
                                                 txt.get("mask"), **kw))
        return recall_at_k(sim, ctx["caption_to_image"])["rsum"]

    assert val["maxmatch/rsum"] == pytest.approx(rsum(s_h=2.0, solver="hungarian"), abs=1e-6)
    # The scale changes the scores' spread; on a barely trained model the ranking can coincide, so compare scores.
    s2 = np.asarray(pairwise_set_similarity(img["set"][:8], txt["set"][:8], "maxmatch", s_h=2.0))
    s1 = np.asarray(pairwise_set_similarity(img["set"][:8], txt["set"][:8], "maxmatch", s_h=1.0))
    assert not np.allclose(s1, s2)
