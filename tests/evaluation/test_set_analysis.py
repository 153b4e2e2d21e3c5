"""Set diagnostics, plots, zero-shot and the evaluator registry."""

import json
import os

import jax
import numpy as np
import pytest

from mmjax.evaluation.embed import score_sets
from mmjax.evaluation.registry import EVALUATORS, run_evaluator
from mmjax.evaluation.retrieval import recall_at_k
from mmjax.evaluation.set_analysis import (circular_variance, circular_variance_summary, element_similarity_matrix,
                                           single_element_retrieval)
from mmjax.evaluation.zeroshot import load_image_folder, topk_accuracy, zeroshot_classify


def _unit_sets(rng, n, k, d):
    x = rng.standard_normal((n, k, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_circular_variance_extremes_and_mask():
    same = np.tile(np.array([[[1.0, 0.0, 0.0]]]), (2, 4, 1))
    opposite = np.array([[[1.0, 0, 0], [-1.0, 0, 0], [0, 1.0, 0], [0, -1.0, 0]]])
    np.testing.assert_allclose(circular_variance(same), 0.0, atol=1e-6)
    np.testing.assert_allclose(circular_variance(opposite), 1.0, atol=1e-6)
    # masking the two y elements leaves a zero-mean pair; masking one x and one y leaves an orthogonal pair
    np.testing.assert_allclose(circular_variance(opposite, np.array([[True, True, False, False]])), 1.0, atol=1e-6)
    np.testing.assert_allclose(circular_variance(opposite, np.array([[True, False, True, False]])),
                               1 - np.sqrt(0.5), atol=1e-6)
    s = circular_variance_summary({"set": opposite, "residual": opposite}, {"set": same})
    assert s["image"]["set"]["mean_cv"] == pytest.approx(1.0) and s["text"]["set"]["mean_log_cv"] < -20


def test_single_element_equals_exact_with_one_element_image_sets():
    rng = np.random.default_rng(0)
    img, txt = _unit_sets(rng, 12, 3, 8), _unit_sets(rng, 36, 3, 8)
    c2i = np.repeat(np.arange(12), 3)
    with jax.default_matmul_precision("float32"):
        res = single_element_retrieval({"set": img}, {"set": txt}, c2i, kind="maxmatch_topk")
        for k in range(3):
            ref = recall_at_k(score_sets(img[:, k:k + 1], txt, "maxmatch"), c2i)
            assert res["elements"][k] == ref
            # m = 1: S = f(max_j C_kj) for both kinds
            direct = np.expm1(np.max(np.einsum("id,njd->inj", img[:, k], txt), axis=-1))
            np.testing.assert_allclose(score_sets(img[:, k:k + 1], txt, "maxmatch_topk"), direct, atol=1e-5)
    assert len(res["rsum_per_element"]) == 3 and res["rsum_full"] == res["full"]["rsum"]


def test_element_similarity_matrix_is_index_aligned_mean_over_matched_pairs():
    rng = np.random.default_rng(1)
    img, txt = _unit_sets(rng, 4, 2, 5), _unit_sets(rng, 8, 3, 5)
    c2i = np.array([0, 0, 1, 1, 2, 2, 3, 3])
    got = element_similarity_matrix({"set": img}, {"set": txt}, c2i)
    ref = np.mean([img[c2i[n]] @ txt[n].T for n in range(8)], axis=0)
    np.testing.assert_allclose(got, ref, atol=1e-6)
    assert got.shape == (2, 3)


def test_plots_write_pngs(tmp_path):
    from mmjax.evaluation import plots
    rng = np.random.default_rng(2)
    img, txt = _unit_sets(rng, 20, 4, 6), _unit_sets(rng, 20, 4, 6)
    jsonl = tmp_path / "metrics.jsonl"
    jsonl.write_text("\n".join(json.dumps({"step": s, "loss": 1.0 / (s + 1), "rsum": s}) for s in range(5))
                     + "\n{\"note\": 1}\n")
    paths = [plots.plot_similarity_heatmap(np.eye(4), tmp_path / "h.png"),
             plots.plot_element_embeddings(img, txt, tmp_path / "p.png"),
             plots.plot_element_embeddings(img[:8], txt[:8], tmp_path / "t.png", method="tsne"),
             plots.plot_training_curves(jsonl, tmp_path / "c.png")]
    for p in paths:
        with open(p, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert len(plots.read_metrics_jsonl(jsonl)) == 5


def test_zeroshot_score_level_ensembling_and_folder(tmp_path):
    classes = ["cat", "dog", "red car"]
    labels = np.array([0, 1, 2, 2, 1])

    def score_matrix_fn(images, prompts):  # template 0 votes for the truth, template 1 for class 0 (weaker)
        out = np.zeros((len(images), len(prompts)))
        for b, y in enumerate(images):
            for p, text in enumerate(prompts):
                c, t = divmod(p, 2)
                out[b, p] = (2.0 if c == y else 0.0) if t == 0 else (1.0 if c == 0 else 0.0)
        return out

    res = zeroshot_classify(score_matrix_fn, labels, labels, classes, templates=("a {}.", "the {}."), batch_size=2)
    assert res["top1"] == 100.0 and res["chance_top1"] == pytest.approx(100 / 3) and "top5" not in res
    assert topk_accuracy(np.array([[0.0, 1.0], [1.0, 1.0]]), np.array([0, 0]), ks=(1,))["top1"] == 50.0
    for name in ("b_class", "a_class"):
        os.makedirs(tmp_path / name)
        (tmp_path / name / "x.png").write_bytes(b"")
    paths, ys, names = load_image_folder(tmp_path)
    assert names == ["a class", "b class"] and list(ys) == [0, 1] and paths[0].endswith("a_class/x.png")


def test_registry_runs_every_evaluator_and_results_are_json(tmp_path):
    from mmjax.data.records import CompositionalRecord
    assert set(EVALUATORS) == {"retrieval", "compositional", "zeroshot", "set_analysis", "local_probes"}
    rng = np.random.default_rng(3)
    n = 10
    img = _unit_sets(rng, n, 2, 8)
    txt = np.repeat(img, 2, axis=0)  # every caption set equals its image set: perfect retrieval
    context = {"embed_images": lambda x, m: {"set": x, "mask": m}, "images": img, "image_mask": np.ones((n, 2), bool),
               "embed_captions": lambda x, m: {"set": x}, "captions": txt, "caption_to_image": np.repeat(np.arange(n), 2)}
    ret = run_evaluator("retrieval", {"fold_counts": (1, 5), "batch_size": 4}, context)
    assert ret["maxmatch"]["all"]["rsum"] == 600.0 and ret["maxmatch_topk"]["folds5"]["rsum"] == 600.0
    sa = run_evaluator("set_analysis", {"kind": "maxmatch"}, context, plot_dir=str(tmp_path))
    assert os.path.exists(sa["figures"]["element_similarity"]) and len(sa["single_element"]["elements"]) == 2
    records = [CompositionalRecord(image=str(i), captions=(f"p{i}", f"n{i}"), correct=0, task="sugarcrepe",
                                   subgroup="swap_att") for i in range(6)]
    comp = run_evaluator("compositional", {}, {"records": {"toy": records},
                                               "score_fn": lambda im, c: np.asarray([x[0] == "p" for x in c], float)})
    assert comp["toy"]["conditions"]["real"]["tasks"]["sugarcrepe"]["accuracy"] == 100.0
    zs = run_evaluator("zeroshot", {"templates": ["{}"]}, {
        "images": np.arange(4), "labels": np.array([0, 1, 0, 1]), "class_names": ["a", "b"],
        "score_matrix_fn": lambda x, p: np.stack([np.asarray(x) % 2 == 0, np.asarray(x) % 2 == 1], 1).astype(float)})
    assert zs["top1"] == 100.0
    json.dumps([ret, sa, comp, zs])
    with pytest.raises(ValueError):
        run_evaluator("nope", {}, {})


def test_a_new_evaluator_is_one_module_and_one_registry_line(tmp_path):
    """An evaluator defined outside the package (a toy: the mean score of each image's own captions) runs through
    `run_evals` — options checked, skip rule, table in results.md — after one `register` call and nothing else."""
    import dataclasses

    from mmjax.evaluation import registry
    from mmjax.evaluation.evaluators.base import Evaluator, InvalidOption, markdown_table
    from mmjax.evaluation.run import run_evals, write_results

    @dataclasses.dataclass(frozen=True)
    class Options:
        scale: float = 1.0

        def __post_init__(self):
            if self.scale <= 0:
                raise InvalidOption("scale", "must be > 0")

    def run(options, context, env):
        sim, c2i = context["similarity"], context["caption_to_image"]
        return {"own_score": options.scale * float(np.mean(sim[c2i, np.arange(len(c2i))]))}

    toy = Evaluator(Options, run, applies=lambda o, c: "similarity" in c,
                    tables=lambda name, r: [f"### {name}", "", *markdown_table(["own"], [[f"{r['own_score']:.3f}"]])])
    registry.register("toy_own_score", toy)
    try:
        sim = np.array([[0.9, 0.1], [0.2, 0.7]])
        evals = {"own": {"type": "toy_own_score", "scale": 2.0}}
        results = run_evals(evals, {"similarity": sim, "caption_to_image": np.array([0, 1])})
        assert results["own"] == {"own_score": pytest.approx(1.6)} and results["evaluators"] == {"own": "toy_own_score"}
        write_results(results, str(tmp_path))
        assert "| 1.600 |" in (tmp_path / "results.md").read_text()
        assert "own" not in run_evals(evals, {"records": []})  # its skip rule: no similarity, not run
        with pytest.raises(ValueError, match="evals.own.scale"):
            run_evals({"own": {"type": "toy_own_score", "scale": -1.0}}, {"similarity": sim})
        from mmjax.config_validation import ConfigError, validate
        from mmjax.train.defaults import retrieval_config
        c = retrieval_config("smoke")
        c.evals = {"own": {"type": "toy_own_score", "scale": -1.0}}
        with pytest.raises(ConfigError, match="evals.own.scale"):  # config validation asks the evaluator too
            validate(c, check_paths=False)
    finally:
        registry.EVALUATORS.pop("toy_own_score")
