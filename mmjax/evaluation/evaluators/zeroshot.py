"""`type: zeroshot` — zero-shot classification with class-name prompts (docs/design.md#zero-shot).

Context: "score_matrix_fn"(images batch, prompts) -> [B, P], and the images either from the options ("folder":
`root/<class>/*.png`; "tfds": {name, split, data_dir}) or from the context ("images", "labels", "class_names").
Skipped when neither gives images.

Options (None: the default of `mmjax.evaluation.zeroshot.zeroshot_classify`): templates, batch_size, folder
('' = none), tfds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from mmjax.evaluation import zeroshot
from mmjax.evaluation.evaluators.base import (Evaluator, InvalidOption, as_tuple, check_int, check_type,
                                              markdown_table)


@dataclasses.dataclass(frozen=True)
class Options:
    templates: tuple[str, ...] | None = None
    batch_size: int | None = None
    folder: str = ""
    tfds: Mapping[str, Any] | None = None

    def __post_init__(self):
        as_tuple(self, "templates")
        if self.templates is not None and (not self.templates or
                                           not all(isinstance(t, str) and "{}" in t for t in self.templates)):
            raise InvalidOption("templates", f"must be a non-empty list of strings with '{{}}', got {self.templates!r}")
        check_int("batch_size", self.batch_size)
        check_type("folder", self.folder, str, "a directory path ('' = none)")
        check_type("tfds", self.tfds, Mapping, "a mapping {name, split, data_dir}")
        if self.tfds is not None and "name" not in self.tfds:
            raise InvalidOption("tfds", "needs a 'name'")


def applies(options: Options, context: dict) -> bool:
    return bool(options.folder) or options.tfds is not None or "labels" in context


def run(options: Options, context: dict, env) -> dict:
    if options.folder:
        images, labels, names = zeroshot.load_image_folder(options.folder)
    elif options.tfds is not None:
        t = options.tfds
        images, labels, names = zeroshot.load_tfds(t["name"], t.get("split", "test"), data_dir=t.get("data_dir"))
    else:
        images, labels, names = context["images"], context["labels"], context["class_names"]
    kw = {k: v for k, v in (("templates", options.templates), ("batch_size", options.batch_size)) if v is not None}
    return zeroshot.zeroshot_classify(context["score_matrix_fn"], images, labels, names, **kw)


def tables(name: str, result: dict) -> list[str]:
    tops = {k: v for k, v in result.items() if k.startswith(("top", "chance")) and isinstance(v, (int, float))}
    return [f"### {name}", "", *markdown_table(list(tops), [[f"{v:.2f}" for v in tops.values()]]), ""] if tops else []


EVALUATOR = Evaluator(Options, run, applies, tables)
