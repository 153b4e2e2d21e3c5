"""`type: compositional` — compositional suites under the image-replacement controls Real / Shuffle / Fixed
(docs/design.md#image-replacement-controls), one result per suite.

Context: "records" (a list of `CompositionalRecord`, or {suite name: list}) and "score_fn" (a pair scorer,
`mmjax.evaluation.scorers`). Skipped when the context has no records (e.g. validation).

Options (None: the default of `mmjax.evaluation.controls.evaluate_with_controls` and `compositional.summarize`):
conditions, seed, tie_policy {task: policy}, batch_size, keep_scores, vga_min_count, train_identities.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from mmjax.evaluation import controls
from mmjax.evaluation.evaluators.base import (Evaluator, as_tuple, check_choices, check_int, check_type, given)


@dataclasses.dataclass(frozen=True)
class Options:
    conditions: tuple[str, ...] | None = None
    seed: int | None = None
    tie_policy: Mapping[str, str] | None = None
    batch_size: int | None = None
    keep_scores: bool | None = None
    vga_min_count: int | None = None
    train_identities: Any = None

    def __post_init__(self):
        as_tuple(self, "conditions")
        check_choices("conditions", self.conditions, controls.CONDITIONS)
        check_int("seed", self.seed, ge=0)
        check_type("tie_policy", self.tie_policy, Mapping, "a mapping {task: policy}")
        check_int("batch_size", self.batch_size)
        check_type("keep_scores", self.keep_scores, bool, "True or False")
        check_int("vga_min_count", self.vga_min_count)


def applies(options: Options, context: dict) -> bool:
    return "records" in context


def run(options: Options, context: dict, env) -> dict:
    suites = context["records"]
    if not isinstance(suites, dict):
        suites = {"records": suites}
    out = {}
    for name, records in suites.items():
        result = controls.evaluate_with_controls(list(records), context["score_fn"], **given(options))
        print(f"== {name}: accuracy (%) under image-replacement controls ==\n{result['table']}")
        out[name] = result
    return out


def tables(name: str, result: dict) -> list[str]:
    lines = []
    for suite, r in result.items():
        if isinstance(r, dict) and "table" in r:
            lines += [f"### {name}: {suite}", "", r["table"], ""]
    return lines


EVALUATOR = Evaluator(Options, run, applies, tables)
