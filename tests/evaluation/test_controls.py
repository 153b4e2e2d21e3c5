"""Image-replacement controls Real / Shuffle / Fixed (`mmjax.evaluation.controls`)."""

import json

import numpy as np
import pytest

from mmjax.data.records import CompositionalRecord
from mmjax.evaluation.controls import evaluate_with_controls, replacement_indices


def _records(n_images=12, per_image=3, tasks=("a", "b"), m_way=2):
    out = []
    for task in tasks:
        for i in range(n_images):
            for j in range(per_image):
                out.append(CompositionalRecord(image=f"im{i}", captions=tuple(f"{task} {i} {j} {k}"
                                                                              for k in range(m_way)),
                                               correct=0, task=task, image_id=f"id{i}"))
    return out


def test_shuffle_is_seeded_derangement_with_different_identities():
    records = _records()
    t = replacement_indices(records, "shuffle", seed=3)
    assert np.all(t >= 0)
    for r, s in enumerate(t):
        assert s != r and records[s].identity != records[r].identity and records[s].task == records[r].task
    np.testing.assert_array_equal(t, replacement_indices(records, "shuffle", seed=3))
    assert not np.array_equal(t, replacement_indices(records, "shuffle", seed=4))
    # a task's permutation does not depend on the other tasks in the list
    only_b = [r for r in records if r.task == "b"]
    t_b = replacement_indices(only_b, "shuffle", seed=3)
    offset = len(records) - len(only_b)
    np.testing.assert_array_equal(t[offset:] - offset, t_b)


def test_shuffle_excludes_records_without_a_different_identity():
    records = _records(n_images=1, per_image=3, tasks=("a",))
    assert np.all(replacement_indices(records, "shuffle") == -1)


def test_fixed_uses_one_image_per_task_and_excludes_anchor_identity():
    records = _records()
    t = replacement_indices(records, "fixed", seed=0)
    for task in ("a", "b"):
        idx = [i for i, r in enumerate(records) if r.task == task]
        used = {int(t[i]) for i in idx if t[i] >= 0}
        assert len(used) == 1
        anchor = records[used.pop()]
        for i in idx:
            assert (t[i] < 0) == (records[i].identity == anchor.identity)
    assert np.sum(t < 0) == 2 * 3  # the anchor image's 3 records, per task


def test_every_candidate_of_a_record_sees_one_replacement_image():
    records = _records(m_way=4)
    seen = {}

    def score_fn(images, captions):
        for im, c in zip(images, captions):
            seen.setdefault(c.rsplit(" ", 1)[0], set()).add(im.identity)
        return np.zeros(len(captions))

    evaluate_with_controls(records, score_fn, conditions=("shuffle",))
    assert all(len(v) == 1 for v in seen.values())


def test_image_grounded_scorer_drops_to_chance_under_controls():
    records = _records(n_images=40, per_image=5, tasks=("coco_order",), m_way=5)

    def score_fn(images, captions):  # prefers the gold caption only when it sees the record's own image
        return np.asarray([1.0 if c.endswith(" 0") and im.image == f"im{c.split()[1]}" else 0.0
                           for im, c in zip(images, captions)])

    res = evaluate_with_controls(records, score_fn, seed=1, keep_scores=True)
    acc = {c: res["conditions"][c]["tasks"]["coco_order"]["accuracy"] for c in ("real", "shuffle", "fixed")}
    # argmax_first with gold 0: all-equal scores count as correct, so use strict to see chance
    res = evaluate_with_controls(records, score_fn, seed=1, tie_policy={"coco_order": "strict"})
    strict = {c: res["conditions"][c]["tasks"]["coco_order"]["accuracy"] for c in ("real", "shuffle", "fixed")}
    assert acc["real"] == 100.0 and strict["real"] == 100.0
    assert strict["shuffle"] == 0.0 and strict["fixed"] == 0.0
    assert res["chance"]["coco_order"] == pytest.approx(20.0)
    assert res["conditions"]["fixed"]["excluded"] == {"coco_order": 5}
    assert "| coco_order |" in res["table"] and "20.00" in res["table"]
    json.dumps(res)


def test_aro_group_chance_is_35():
    recs = []
    for task, m in (("vg_relation", 2), ("vg_attribution", 2), ("coco_order", 5), ("flickr30k_order", 5)):
        for i in range(4):
            recs.append(CompositionalRecord(image=f"{i}", captions=tuple(f"{task}{i}{k}" for k in range(m)),
                                            correct=0, task=task, subgroup="g" if task.startswith("vg") else None))
    res = evaluate_with_controls(recs, lambda im, c: np.zeros(len(c)), conditions=("real", "shuffle"))
    assert res["chance"]["aro4"] == pytest.approx(35.0)
