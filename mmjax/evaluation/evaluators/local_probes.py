"""`type: local_probes` — what a frozen base's local tokens carry on ShapesWorld (docs/design.md#local-probes):
linear probes for the colour, shape, size and grid cell of the object under each token (and whether a token lies on
an object at all), with their majority rates and a shuffled-label control, and word→token grounding.

Context: "local_probe_inputs" = {"encode_images"(data, indices) -> {"patches"}, "encode_texts"(strings) ->
{"tokens", "valid"}, "train", "test" (generated splits), "token_objects"(data) -> int [N, T]}
(`mmjax.evaluation.local_probes`). Skipped when the context has none (validation, non-ShapesWorld data).

Options (None: the default of `shapesworld_local_probes`): max_train_images, max_test_images, ridge.
"""

from __future__ import annotations

import dataclasses

from mmjax.evaluation.evaluators.base import Evaluator, check_int, check_type, given, markdown_table
from mmjax.evaluation.local_probes import shapesworld_local_probes


@dataclasses.dataclass(frozen=True)
class Options:
    max_train_images: int | None = None
    max_test_images: int | None = None
    ridge: float | None = None

    def __post_init__(self):
        check_int("max_train_images", self.max_train_images)
        check_int("max_test_images", self.max_test_images)
        check_type("ridge", self.ridge, (int, float), "a number >= 0")


def applies(options: Options, context: dict) -> bool:
    return "local_probe_inputs" in context


def run(options: Options, context: dict, env) -> dict:
    inputs = context["local_probe_inputs"]
    return shapesworld_local_probes(inputs["encode_images"], inputs["encode_texts"], inputs["train"],
                                    inputs["test"], inputs["token_objects"], **given(options))


def tables(name: str, result: dict) -> list[str]:
    rows = [[attr, f"{p['accuracy']:.1f}", f"{p['majority']:.1f}", f"{p['shuffled']:.1f}", p["num_classes"],
             p["n_test"]] for attr, p in result["probes"].items()]
    g = result["grounding"]
    lines = [f"### {name}: linear probes of the local tokens ({result['tokens_per_image']} per image)", "",
             *markdown_table(["label of the token's object", "probe accuracy (%)", "majority (%)",
                              "shuffled-label probe (%)", "classes", "test tokens"], rows), "",
             f"### {name}: word → token grounding", "",
             *markdown_table(["accuracy (%)", "chance 1/N (%)", "chance by area (%)", "words"],
                             [[f"{g['accuracy']:.1f}", f"{g['chance_uniform']:.1f}", f"{g['chance_area']:.1f}",
                               g["n"]]]), ""]
    return lines


EVALUATOR = Evaluator(Options, run, applies, tables)
