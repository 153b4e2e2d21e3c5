"""Flat per-cell numbers from an evaluation's results (`mmjax.experiment.evaluate`), and their seed statistics.

`cell_metrics(results, similarity)` → {name: float}:

    retrieval/<score>/<k>     R@1/5/10 and RSUM (k in RETRIEVAL_KEYS) of every score, protocol 'all' (the test split,
                              source ground truth: a caption's only positive is the image it was written for)
    retrieval/<score>/semantic/<k>   the same against the semantic ground truth (every image the caption is true of;
                              ShapesWorld evaluations that have it)
    rsum, rsum_sem            the RSUM the claims compare (source, semantic): the paper's inference mode — top-k
                              (`maxmatch_topk`) for S_H-trained cells, otherwise the cell's own score (its training
                              similarity, CLIP cosine, the Flow-CLIP / Global-M head score)
    cv/<modality>/<vectors>/{mean_cv, mean_log_cv}, cv_log_image (= cv/image/set/mean_log_cv)
    single/full, single/element<i>   single-element RSUM (the set-analysis score: the training similarity at the quick
                              budgets, the inference score at the converged ones); single_gap = full − min_i;
    single_sem/full, single_sem/element<i>   the same against the semantic ground truth
    suite/<task>/<condition>  compositional accuracy (%) under Real / Shuffle / Fixed; suite/<task>/chance;
                              suite/<task>/blind, the text-only baseline's (`mmjax.evaluation.blind`), with
                              blind/{train,holdout}_pair_accuracy of its fit
    probe/<label>/{accuracy, majority, shuffled}, grounding/{accuracy, chance_uniform, chance_area}   a base's
                              local probes (`mmjax.evaluation.local_probes`)
    binding_<condition>       mean accuracy over BINDING_SUITES (ShapesWorld's attribute-binding swaps: the stand-in
                              for the Flow-CLIP paper's five-task binding mean)
    aro_<condition>           mean accuracy over ARO_SUITES (relation, attribute binding, order — the stand-ins for
                              ARO's VG-Relation, VG-Attribution and the two order tasks); binding_chance, aro_chance

`cell_arrays(results)` → the non-scalar results the report shows (element-similarity matrix).
`summarize(values)` → mean, sample std (ddof = 1; 0 for one seed), n and the values.
"""

from __future__ import annotations

import math

import numpy as np

from mmjax.data.shapesworld.suites import SUITE_MEANS
from mmjax.similarity import inference_kind

RETRIEVAL_KEYS = ("i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10", "rsum")
CONDITIONS = ("real", "shuffle", "fixed")
BINDING_SUITES = SUITE_MEANS["binding_mean"]
ARO_SUITES = SUITE_MEANS["aro_mean"]
PROTOCOL = "all"
SEMANTIC = "semantic"


def paper_score(scores, similarity: str | None) -> str | None:
    """The retrieval score whose RSUM the claims compare (module docstring), among the evaluated `scores`: the
    inference score of the training similarity (`mmjax.similarity.inference_kind`), else the only score."""
    scores = list(scores)
    if similarity is not None and inference_kind(similarity) in scores:
        return inference_kind(similarity)
    return scores[0] if len(scores) == 1 else None


def _retrieval(res: dict, similarity: str | None) -> dict:
    out = {}
    for score, by_protocol in res.items():
        if not isinstance(by_protocol, dict):
            continue
        for protocol, prefix in ((PROTOCOL, f"retrieval/{score}"), (SEMANTIC, f"retrieval/{score}/{SEMANTIC}")):
            m = by_protocol.get(protocol)
            if isinstance(m, dict):
                out.update({f"{prefix}/{k}": float(m[k]) for k in RETRIEVAL_KEYS if k in m})
    chosen = paper_score([s for s in res if f"retrieval/{s}/rsum" in out], similarity)
    if chosen is not None:
        out["rsum"] = out[f"retrieval/{chosen}/rsum"]
        if f"retrieval/{chosen}/{SEMANTIC}/rsum" in out:
            out["rsum_sem"] = out[f"retrieval/{chosen}/{SEMANTIC}/rsum"]
    return out


def _set_analysis(res: dict) -> dict:
    out = {}
    for side, by_vectors in (res.get("circular_variance") or {}).items():
        for vectors, v in by_vectors.items():
            out.update({f"cv/{side}/{vectors}/{k}": float(v[k]) for k in ("mean_cv", "mean_log_cv") if k in v})
    if "cv/image/set/mean_log_cv" in out:
        out["cv_log_image"] = out["cv/image/set/mean_log_cv"]
    single = res.get("single_element")
    if isinstance(single, dict) and "full" in single:
        out["single/full"] = float(single["full"]["rsum"])
        elements = [float(m["rsum"]) for m in single.get("elements", [])]
        out.update({f"single/element{i}": v for i, v in enumerate(elements)})
        if elements:
            out["single_gap"] = out["single/full"] - min(elements)
        sem = single.get(SEMANTIC)
        if isinstance(sem, dict) and "full" in sem:
            out["single_sem/full"] = float(sem["full"]["rsum"])
            out.update({f"single_sem/element{i}": float(m["rsum"]) for i, m in enumerate(sem.get("elements", []))})
    return out


def _suites(res: dict) -> dict:
    out = {}
    for suite in res.values():
        if not isinstance(suite, dict):
            continue
        for condition, r in (suite.get("conditions") or {}).items():
            for task, m in (r.get("tasks") or {}).items():
                out[f"suite/{task}/{condition}"] = float(m["accuracy"])
                if "chance" in m:
                    out[f"suite/{task}/chance"] = float(m["chance"])
        for task, m in ((suite.get("blind") or {}).get("tasks") or {}).items():  # the text-only baseline
            out[f"suite/{task}/blind"] = float(m["accuracy"])
        if suite.get("blind_model"):
            out["blind/holdout_pair_accuracy"] = float(suite["blind_model"]["holdout_pair_accuracy"])
            out["blind/train_pair_accuracy"] = float(suite["blind_model"]["train_pair_accuracy"])
    for name, members in (("binding", BINDING_SUITES), ("aro", ARO_SUITES)):
        for condition in CONDITIONS + ("blind", "chance"):
            values = [out.get(f"suite/{t}/{condition}") for t in members]
            if all(v is not None for v in values):
                out[f"{name}_{condition}"] = float(np.mean(values))
    return out


def cell_metrics(results: dict, similarity: str | None) -> dict:
    """{name: float} of one evaluation (module docstring); `similarity` = the cell's training similarity (None for
    models scored as a whole)."""
    if not isinstance(results, dict) or "retrieval" not in results:
        raise ValueError(f"evaluation results without a 'retrieval' entry: keys {sorted(results or {})}")
    out = _retrieval(results["retrieval"], similarity)
    out.update(_set_analysis(results.get("set_analysis") or {}))
    out.update(_suites(results.get("shapesworld_suites") or {}))
    out.update(_probes(results.get("local_probes") or {}))
    return out


def _probes(res: dict) -> dict:
    """probe/<label>/{accuracy, majority, shuffled} and grounding/{accuracy, chance_uniform, chance_area} of a
    base's local probes (`mmjax.evaluation.local_probes`)."""
    out = {f"probe/{label}/{k}": float(v) for label, m in (res.get("probes") or {}).items()
           for k, v in m.items() if k in ("accuracy", "majority", "shuffled") and v is not None}
    out.update({f"grounding/{k}": float(v) for k, v in (res.get("grounding") or {}).items()
                if k in ("accuracy", "chance_uniform", "chance_area") and v is not None})
    return out


def cell_arrays(results: dict) -> dict:
    sa = results.get("set_analysis") or {}
    return {"element_similarity": sa["element_similarity"]} if "element_similarity" in sa else {}


def summarize(values) -> dict:
    """{"mean", "std" (ddof = 1; 0.0 for one value), "n", "values"} over seeds; non-finite values are dropped
    (a failed seed must not look like a number) and counted in "dropped"."""
    values = list(values)
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    dropped = len(values) - len(vals)
    if not vals:
        return {"mean": None, "std": None, "n": 0, "values": [], "dropped": dropped}
    std = float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0
    return {"mean": float(np.mean(vals)), "std": std, "n": len(vals), "values": vals, "dropped": dropped}
