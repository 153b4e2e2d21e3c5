"""ShapesWorld suites through the compositional evaluator and the controls (docs/design.md#shapesworld-suites)."""

import numpy as np
import pytest

from mmjax.data.shapesworld import ShapesWorld, ShapesWorldConfig
from mmjax.evaluation.controls import evaluate_with_controls, replacement_indices


@pytest.fixture(scope="module")
def suites():
    world = ShapesWorld(ShapesWorldConfig.from_preset("tiny"))
    return world.suites("test", data=world.arrays("test"))


def test_random_scorer_at_chance_with_seen_unseen_and_controls(suites):
    records = [r for name in ("binding", "order") for r in suites[name]]
    rng = np.random.default_rng(0)
    res = evaluate_with_controls(records, lambda im, c: rng.random(len(c)), seed=0)
    for cond in ("real", "shuffle", "fixed"):
        tasks = res["conditions"][cond]["tasks"]
        for task, chance in (("binding", 50.0), ("order", 20.0)):
            m = tasks[task]
            p = chance / 100
            assert abs(m["accuracy"] - chance) < 100 * 4 * np.sqrt(p * (1 - p) / m["n"]) + 1
            assert "seen" in m and "unseen" in m and m["tie_policy"] == "strict"
    t = replacement_indices(records, "shuffle", seed=0)
    assert all(records[s].image_id != r.image_id for r, s in zip(records, t) if s >= 0)
