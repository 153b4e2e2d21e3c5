"""`type: compositional` — compositional suites under the image-replacement controls Real / Shuffle / Fixed
(docs/design.md#image-replacement-controls), one result per suite.

Context: "records" (a list of `CompositionalRecord`, or {suite name: list}) and "score_fn" (a pair scorer,
`mmjax.evaluation.scorers`). With "blind_pairs" (max_pairs -> (positive, negative) text features [n, d] of the
training pairs) and "blind_encode_texts" (captions -> [n, d]), the blind baseline (`mmjax.evaluation.blind`) is
fitted once and reported as every table's blind column, its fit summary as "blind_model". With "suite_means"
({name: suite names}), "means" holds each mean's accuracy per condition (and blind, chance) where every member
suite was evaluated. Skipped when the context has no records (e.g. a validation that lists no compositional
evaluator). `flat_metrics(result)`: the scalars a validation logs and selects on (`train.select_metric`).

Options (None: the default of `mmjax.evaluation.controls.evaluate_with_controls`, `compositional.summarize` and
`blind.fit_blind_on`): conditions, seed, tie_policy {task: policy}, batch_size, keep_scores, vga_min_count,
train_identities; blind (False: no blind column), blind_l2, blind_holdout, blind_max_pairs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from mmjax.evaluation import blind as blind_baseline
from mmjax.evaluation import controls
from mmjax.evaluation.evaluators.base import (Evaluator, InvalidOption, as_tuple, check_choices, check_int, check_type,
                                              given, markdown_table)


@dataclasses.dataclass(frozen=True)
class Options:
    conditions: tuple[str, ...] | None = None
    seed: int | None = None
    tie_policy: Mapping[str, str] | None = None
    batch_size: int | None = None
    keep_scores: bool | None = None
    vga_min_count: int | None = None
    train_identities: Any = None
    blind: bool | None = None
    blind_l2: float | None = None
    blind_holdout: float | None = None
    blind_max_pairs: int | None = None

    def __post_init__(self):
        as_tuple(self, "conditions")
        check_choices("conditions", self.conditions, controls.CONDITIONS)
        check_int("seed", self.seed, ge=0)
        check_type("tie_policy", self.tie_policy, Mapping, "a mapping {task: policy}")
        check_int("batch_size", self.batch_size)
        check_type("keep_scores", self.keep_scores, bool, "True or False")
        check_int("vga_min_count", self.vga_min_count)
        check_type("blind", self.blind, bool, "True or False")
        check_int("blind_max_pairs", self.blind_max_pairs, ge=2)
        if self.blind_l2 is not None and not (isinstance(self.blind_l2, (int, float)) and self.blind_l2 > 0):
            raise InvalidOption("blind_l2", f"must be a number > 0, got {self.blind_l2!r}")
        if self.blind_holdout is not None and not (isinstance(self.blind_holdout, (int, float))
                                                   and 0 <= self.blind_holdout < 1):
            raise InvalidOption("blind_holdout", f"must be a number in [0, 1), got {self.blind_holdout!r}")

    def controls_options(self) -> dict:
        return {k: v for k, v in given(self).items() if not k.startswith("blind")}

    def blind_options(self) -> dict:
        names = {"blind_l2": "l2", "blind_holdout": "holdout", "blind_max_pairs": "max_pairs"}
        return {names[k]: v for k, v in given(self).items() if k in names}


def applies(options: Options, context: dict) -> bool:
    return "records" in context


def run(options: Options, context: dict, env) -> dict:
    suites = context["records"]
    if not isinstance(suites, dict):
        suites = {"records": suites}
    blind_fn = model = None
    if options.blind is not False and "blind_pairs" in context:
        model = blind_baseline.fit_blind_on(context["blind_pairs"], **options.blind_options())
        blind_fn = blind_baseline.BlindScorer(model, context["blind_encode_texts"])
    out = {}
    for name, records in suites.items():
        result = controls.evaluate_with_controls(list(records), context["score_fn"], blind_score_fn=blind_fn,
                                                 **options.controls_options())
        if model is not None:
            result["blind_model"] = model.summary()
        print(f"== {name}: accuracy (%) under image-replacement controls ==\n{result['table']}")
        out[name] = result
    means = _means(out, context.get("suite_means") or {})
    if means:
        print("== means over suites (accuracy %) ==\n" + "\n".join(
            f"  {m}: " + "  ".join(f"{c} {v:.2f}" for c, v in by.items()) for m, by in means.items()))
        out["means"] = means
    return out


def _columns(result: dict) -> dict:
    """{column: {task: accuracy}}: every condition, the blind column and chance of one suite's result."""
    cols = {c: {t: m["accuracy"] for t, m in r["tasks"].items()} for c, r in result["conditions"].items()}
    if result.get("blind"):
        cols["blind"] = {t: m["accuracy"] for t, m in result["blind"]["tasks"].items()}
    cols["chance"] = dict(result.get("chance") or {})
    return cols


def _means(out: dict, suite_means: Mapping[str, tuple]) -> dict:
    means = {}
    for mean, members in suite_means.items():
        if not all(s in out for s in members):
            continue
        cols = [_columns(out[s]) for s in members]
        means[mean] = {c: float(sum(col[c][s] for col, s in zip(cols, members)) / len(members))
                       for c in cols[0] if all(s in col.get(c, {}) for col, s in zip(cols, members))}
    return means


def flat_metrics(result: dict) -> dict:
    """{"<suite>/<condition>": accuracy} for each suite whose task is its name ("<suite>/<task>/<condition>" for
    the other tasks of a suite), with "blind" as a condition, and "<mean>/<condition>" for the means."""
    flat = {}
    for suite, r in result.items():
        if suite == "means" or not isinstance(r, dict) or "conditions" not in r:
            continue
        for column, tasks in _columns(r).items():
            if column == "chance":
                continue
            for task, acc in tasks.items():
                flat[f"{suite}/{column}" if task == suite else f"{suite}/{task}/{column}"] = float(acc)
    for mean, by in (result.get("means") or {}).items():
        flat.update({f"{mean}/{c}": float(v) for c, v in by.items() if c != "chance"})
    return flat


def tables(name: str, result: dict) -> list[str]:
    lines = []
    for suite, r in result.items():
        if isinstance(r, dict) and "table" in r:
            lines += [f"### {name}: {suite}", "", r["table"], ""]
            if r.get("blind_model"):
                b = r["blind_model"]
                lines += [f"Blind baseline (text only): pair accuracy {b['train_pair_accuracy']:.2f} % on "
                          f"{b['n_train']} training pairs, {b['holdout_pair_accuracy']:.2f} % on {b['n_holdout']} "
                          "held out.", ""]
    if result.get("means"):
        conds = list(next(iter(result["means"].values())))
        lines += [f"### {name}: means over suites", "",
                  *markdown_table(["mean", *conds], [[m, *(f"{by.get(c, float('nan')):.2f}" for c in conds)]
                                                     for m, by in result["means"].items()]), ""]
    return lines


EVALUATOR = Evaluator(Options, run, applies, tables)
