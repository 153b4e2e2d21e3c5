"""Run a config's evaluators on an evaluation context, and write what they found.

`config.evals` is {name: {"type": evaluator, ...options}} (big_vision style). `run_evals` resolves each entry's
options against the run's scoring function — the similarity kind and keyword options derived from `config.loss` /
`config.matching` (`mmjax.losses.similarity_options`) — then calls `mmjax.evaluation.registry.run_evaluator`. An
eval overrides a derived option only by setting it explicitly (`kinds`, `kind`, `similarity_kw`), so per-epoch
validation and the final test evaluation, which both come through here, score alike
(docs/design.md#evaluation).

This module knows nothing of training: the caller (`mmjax.experiment`) builds the context (embedding functions and
arrays of a split, see `registry`) and passes the scoring options.
"""

from __future__ import annotations

import json
import os

from mmjax.evaluation.registry import run_evaluator
from mmjax.similarity import reported_kinds

RETRIEVAL_KEYS = ("i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10", "rsum")


def resolve_evals(evals: dict, *, similarity: str | None = None, similarity_kw: dict | None = None) -> dict:
    """{name: (evaluator type, options)} with the run's scoring filled in where the eval does not set it."""
    out = {}
    for name, options in dict(evals).items():
        options = options.to_dict() if hasattr(options, "to_dict") else dict(options)
        kind = options.pop("type", name)
        if kind in ("retrieval", "set_analysis") and similarity is not None:
            options["similarity_kw"] = {**(similarity_kw or {}), **dict(options.get("similarity_kw") or {})}
            if kind == "retrieval":
                options.setdefault("kinds", reported_kinds(similarity))
            else:
                options.setdefault("kind", similarity)
        out[name] = (kind, options)
    return out


def run_evals(evals: dict, context: dict, *, similarity: str | None = None, similarity_kw: dict | None = None,
              plot_dir: str | None = None, metrics_jsonl: str | None = None) -> dict:
    """Runs every evaluator of `evals` that `context` can feed; returns {name: result, "figures": {name: path}}."""
    results, figures = {}, {}
    for name, (kind, options) in resolve_evals(evals, similarity=similarity, similarity_kw=similarity_kw).items():
        if kind == "set_analysis":
            options.setdefault("out_dir", plot_dir)
            if metrics_jsonl and os.path.exists(metrics_jsonl):
                options.setdefault("metrics_jsonl", metrics_jsonl)
        if kind == "compositional" and "records" not in context:
            continue
        if kind == "zeroshot":
            if not options.get("folder"):
                options.pop("folder", None)  # "" = no folder configured
            if not ({"folder", "tfds"} & set(options) or "labels" in context):
                continue  # no images to classify
        results[name] = run_evaluator(kind, options, context)
        figures.update(results[name].get("figures", {}) if isinstance(results[name], dict) else {})
    if plot_dir and metrics_jsonl and os.path.exists(metrics_jsonl) and "training_curves" not in figures:
        from mmjax.evaluation.plots import plot_training_curves
        figures["training_curves"] = plot_training_curves(metrics_jsonl,
                                                          os.path.join(plot_dir, "training_curves.png"))
    results["figures"] = figures
    return results


def flat_retrieval_metrics(result: dict, primary: str | None = None, protocol: str = "all") -> dict:
    """One retrieval result as flat scalars: the `primary` score's metrics unprefixed (it drives best-checkpoint
    selection through "rsum"), every other score's as "kind/metric"."""
    scores = [k for k, v in result.items() if isinstance(v, dict) and protocol in v]
    if not scores:
        raise ValueError(f"retrieval result has no {protocol!r} protocol: keys {sorted(result)}")
    primary = primary if primary in scores else scores[0]
    out = {}
    for kind in [primary] + [k for k in scores if k != primary]:
        prefix = "" if kind == primary else f"{kind}/"
        out.update({prefix + k: float(v) for k, v in result[kind][protocol].items()})
    return out


def to_json(x):
    if isinstance(x, dict):
        return {str(k): to_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_json(v) for v in x]
    if hasattr(x, "tolist"):
        return x.tolist()
    return x


def write_results(results: dict, workdir: str) -> dict:
    """`results.json` (every number) and `results.md` (the tables) in `workdir`; returns the JSON-able results."""
    results = to_json(results)
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(workdir, "results.md"), "w") as f:
        f.write(summary_markdown(results))
    return results


def _table(header, rows) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(r) + " |" for r in rows)]


def summary_markdown(results: dict) -> str:
    """Markdown tables: R@K per score and protocol, suites under the controls, zero-shot, and the set analysis
    (circular variance; single-element retrieval per element beside the full set)."""
    lines = []
    for name, res in results.items():
        if not isinstance(res, dict):
            continue
        rows = [[score_name, protocol] + [f"{m[k]:.2f}" for k in RETRIEVAL_KEYS]
                for score_name, by_protocol in res.items() if isinstance(by_protocol, dict)
                for protocol, m in by_protocol.items() if isinstance(m, dict) and "rsum" in m]
        if rows:
            lines += [f"### {name}", "", *_table(["score", "protocol", *RETRIEVAL_KEYS], rows), ""]
        for suite, r in res.items():
            if isinstance(r, dict) and "table" in r:
                lines += [f"### {name}: {suite}", "", r["table"], ""]
        tops = {k: v for k, v in res.items() if k.startswith(("top", "chance")) and isinstance(v, (int, float))}
        if tops:  # zero-shot classification
            lines += [f"### {name}", "", *_table(list(tops), [[f"{v:.2f}" for v in tops.values()]]), ""]
        if "circular_variance" in res:
            rows = [[side, key, f"{v['mean_cv']:.4f}", f"{v['mean_log_cv']:.3f}"]
                    for side, by_key in res["circular_variance"].items() for key, v in by_key.items()]
            if rows:
                lines += [f"### {name}: circular variance", "",
                          *_table(["modality", "vectors", "mean CV", "mean log CV"], rows), ""]
        single = res.get("single_element")
        if isinstance(single, dict) and "full" in single:
            rows = [["full set"] + [f"{single['full'][k]:.2f}" for k in RETRIEVAL_KEYS]]
            rows += [[f"element {i}"] + [f"{m[k]:.2f}" for k in RETRIEVAL_KEYS]
                     for i, m in enumerate(single.get("elements", []))]
            lines += [f"### {name}: single-element retrieval ({single.get('kind', '')})", "",
                      *_table(["image sets", *RETRIEVAL_KEYS], rows), ""]
    return "\n".join(lines)
