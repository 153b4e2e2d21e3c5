"""ShapesWorld evaluation suites (docs/design.md#shapesworld-suites, docs/design.md#testing): counts, gold indices,
chance and oracle scorers."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import shapesworld_oracle as oracle  # noqa: E402

from mmjax.data.shapesworld import ShapesWorld, ShapesWorldConfig  # noqa: E402
from mmjax.data.shapesworld.config import NEG_TYPE_ID  # noqa: E402
from mmjax.data.shapesworld.suites import PAIR_TASKS, semantic_positives  # noqa: E402


@pytest.fixture(scope="module")
def world_data_suites():
    world = ShapesWorld(ShapesWorldConfig.from_preset("tiny"))
    data = world.arrays("test")
    return world, data, world.suites("test", data=data)


def test_counts_and_gold(world_data_suites):
    _, data, suites = world_data_suites
    table = data["neg_table"]
    for task, neg in PAIR_TASKS:
        assert len(suites[task]) == int((table[..., NEG_TYPE_ID[neg]] >= 0).sum()) > 0, task
    assert len(suites["order"]) == int(np.all(table[..., 7:] >= 0, axis=-1).sum()) > 0
    for name, records in suites.items():
        if name == "retrieval":
            continue
        for rec in records:
            assert rec.correct == 0
            i, k = rec.meta["image_index"], rec.meta["caption_index"]
            assert rec.captions[0] == data["captions"][i][k]
            assert rec.image_id == str(int(data["image_ids"][i]))
            assert len(rec.captions) == (5 if name == "order" else 2)
    binding_types = {r.subgroup for r in suites["binding"]}
    assert binding_types == {"P", "R"}
    assert all(r.meta["caption_type"] == "R" for r in suites["relation"])


def _strict_accuracy(records, score):
    hits = 0
    for rec in records:
        s = np.array([score(rec, c) for c in rec.captions])
        hits += int(np.all(s[rec.correct] > np.delete(s, rec.correct)))
    return hits / len(records)


def test_random_scorer_at_chance(world_data_suites):
    _, _, suites = world_data_suites
    rng = np.random.default_rng(0)
    for name, chance in (("binding", 0.5), ("replace_att", 0.5), ("order", 0.2)):
        records = suites[name]
        acc = _strict_accuracy(records, lambda rec, c: rng.random())
        assert abs(acc - chance) < 4 * np.sqrt(chance * (1 - chance) / len(records)), (name, acc)


def test_truth_oracle_scorer_perfect(world_data_suites):
    _, data, suites = world_data_suites

    def score(rec, caption):
        return float(oracle.holds(caption, oracle.objects_of(data, rec.meta["image_index"])))

    for name in ("binding", "binding_swap_obj", "binding_swap_size", "relation", "relation_rel_swap",
                 "replace_att", "replace_obj"):
        assert _strict_accuracy(suites[name], score) == 1.0, name


def test_retrieval_ground_truths(world_data_suites):
    world, data, suites = world_data_suites
    ret = suites["retrieval"]
    n = len(data["captions"])
    assert ret["source"].shape == ret["semantic"].shape == (5 * n, n)
    assert np.all(ret["semantic"][ret["source"]])  # the source image is always a semantic positive
    rng = np.random.default_rng(1)
    for q in rng.choice(5 * n, 40, replace=False):
        for j in rng.choice(n, 16, replace=False):
            assert ret["semantic"][q, j] == oracle.holds(ret["captions"][q], oracle.objects_of(data, j))
    # negatives' meanings through the vectorised checker agree with the scalar truth
    meanings = data["neg_meaning"][data["neg_type"] < 7][:200]
    img = data["neg_image"][data["neg_type"] < 7][:200]
    sem = semantic_positives(meanings, data)
    assert not sem[np.arange(len(img)), img].any()
    for q in range(0, len(meanings), 20):
        for j in range(0, n, 7):
            assert sem[q, j] == world.truth(meanings[q], data["scenes"][j])
