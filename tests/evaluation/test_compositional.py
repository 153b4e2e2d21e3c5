"""Compositional benchmark conventions on hand-made records (`mmjax.evaluation.compositional`)."""

import numpy as np
import pytest

from mmjax.data.records import CompositionalRecord
from mmjax.evaluation.compositional import (VGR_EXCLUDE, evaluate_records, is_correct, summarize)


def lookup_scorer(table, default=0.0):
    """Scores by caption text, or by (image, caption) when that key is present."""
    def score_fn(images, captions):
        return np.asarray([table.get((im.image, c), table.get(c, default)) for im, c in zip(images, captions)])
    return score_fn


def rec(task, captions, correct, subgroup=None, image="img", **meta):
    return CompositionalRecord(image=image, captions=captions, correct=correct, task=task, subgroup=subgroup,
                               meta=meta)


def test_tie_policies():
    assert is_correct([1.0, 1.0], 0, "argmax_first") and not is_correct([1.0, 1.0], 1, "argmax_first")
    assert not is_correct([1.0, 1.0], 0, "strict") and is_correct([1.0, 1.0], 0, "geq")
    assert is_correct([0.0, 2.0, 1.0], 1, "strict")
    with pytest.raises(ValueError):
        is_correct([1.0], 0, "nope")


def _pair(task, ok, i, subgroup=None, gold=0, tie=False):
    good, bad = f"good {task} {subgroup} {i}", f"bad {task} {subgroup} {i}"
    if tie:
        bad = f"tie {task} {subgroup} {i}"
    caps = (good, bad) if gold == 0 else (bad, good)
    return rec(task, caps, gold, subgroup), ({good: 1.0, bad: 0.0} if ok else {good: 0.0, bad: 1.0}) if not tie \
        else {good: 0.5, bad: 0.5}


def _build(specs):
    records, table = [], {}
    for args in specs:
        r, t = _pair(*args)
        records.append(r)
        table.update(t)
    return records, lookup_scorer(table)


def test_vg_relation_macro_excludes_symmetric_relations_and_differs_from_micro():
    assert "next to" in VGR_EXCLUDE and "on" not in VGR_EXCLUDE
    specs = [("vg_relation", True, i, "on", 1) for i in range(10)]            # 100%
    specs += [("vg_relation", i < 1, i, "under", 1) for i in range(4)]        # 25%
    specs += [("vg_relation", False, i, "next to", 1) for i in range(6)]      # 0%, excluded
    specs += [("vg_relation", True, 99, "above", 1, True)]                    # tie → index 0 = false → wrong
    records, score_fn = _build(specs)
    m = evaluate_records(records, score_fn)["tasks"]["vg_relation"]
    assert m["macro"] == pytest.approx((100 + 25 + 0) / 3)  # on, under, above
    assert m["macro_all"] == pytest.approx((100 + 25 + 0 + 0) / 4)
    assert m["micro"] == pytest.approx(100 * 11 / 21)
    assert m["accuracy"] == m["macro"] and m["tie_policy"] == "argmax_first" and m["chance"] == 50.0


def test_vg_attribution_macro_keeps_groups_of_25():
    specs = [("vg_attribution", True, i, "red_blue", 1) for i in range(25)]
    specs += [("vg_attribution", i < 5, i, "big_small", 1) for i in range(25)]     # 20%
    specs += [("vg_attribution", False, i, "rare_pair", 1) for i in range(24)]     # dropped from macro
    records, score_fn = _build(specs)
    m = evaluate_records(records, score_fn)["tasks"]["vg_attribution"]
    assert m["macro"] == pytest.approx(60.0) and m["macro_groups"] == 2
    assert m["micro"] == pytest.approx(100 * 30 / 74)


def test_order_tie_counts_correct_and_sugarcrepe_strict_per_subset_mean():
    records = [rec("coco_order", ("a b", "b a", "x", "y", "z"), 0)]
    table = {"a b": 1.0, "b a": 1.0}
    specs = [("sugarcrepe", True, i, "swap_obj") for i in range(3)] + [("sugarcrepe", False, 3, "swap_obj")]
    specs += [("sugarcrepe", True, 0, "add_att"), ("sugarcrepe", True, 1, "add_att", 0, True)]  # tie wrong
    for args in specs:
        r, t = _pair(*args)
        records.append(r)
        table.update(t)
    res = evaluate_records(records, lookup_scorer(table))
    assert res["tasks"]["coco_order"]["accuracy"] == 100.0 and res["tasks"]["coco_order"]["chance"] == 20.0
    sc = res["tasks"]["sugarcrepe"]
    assert sc["by_subgroup"]["swap_obj"]["accuracy"] == 75.0 and sc["by_subgroup"]["add_att"]["accuracy"] == 50.0
    assert sc["accuracy"] == pytest.approx(62.5) and sc["micro"] == pytest.approx(100 * 4 / 6)
    assert res["tasks"]["sugarcrepe/swap_obj"]["accuracy"] == 75.0
    assert len(res["per_record"]) == len(records) and res["per_record"][0]["scores"][0] == 1.0


def test_whatsup_mean_of_one_and_two_objects():
    specs = [("coco_spatial", True, i, "one_obj") for i in range(8)]
    specs += [("coco_spatial", i < 1, i, "two_obj") for i in range(2)]
    specs += [("coco_spatial", True, 50, "two_obj", 0, True)]  # argmax_first, gold 0: tie correct
    records, score_fn = _build(specs)
    m = evaluate_records(records, score_fn)["tasks"]["coco_spatial"]
    assert m["accuracy"] == pytest.approx((100 + 200 / 3) / 2)
    assert m["micro"] == pytest.approx(100 * 10 / 11)


def test_clevr_ties_correct_pug_and_abc_strict():
    specs = [("clevr", True, 0), ("clevr", True, 1, None, 0, True), ("pug", True, 0), ("pug", True, 1, None, 0, True),
             ("abc6k", True, 0), ("abc6k", True, 1, None, 0, True)]
    records, score_fn = _build(specs)
    tasks = evaluate_records(records, score_fn, train_identities=set())["tasks"]
    assert tasks["clevr"]["accuracy"] == 100.0 and tasks["pug"]["accuracy"] == 50.0
    assert tasks["abc6k"]["accuracy"] == 50.0 and tasks["abc6k"]["train_disjoint_n"] == 2


def test_winoground_text_image_group():
    def wino(ex, table):
        caps = (f"c0 {ex}", f"c1 {ex}")
        recs = [CompositionalRecord(image=f"i{k} {ex}", captions=caps, correct=k, task="winoground",
                                    meta={"example_id": ex, "position": k}) for k in (0, 1)]
        scores = {(f"i{k} {ex}", caps[j]): v for (k, j), v in table.items()}
        return recs, scores

    records, table = [], {}
    # ex 0: text and image right.  ex 1: text right, image wrong (c0 prefers i1).  ex 2: all wrong.
    for ex, t in enumerate([{(0, 0): .9, (0, 1): .1, (1, 0): .2, (1, 1): .8},
                            {(0, 0): .5, (0, 1): .1, (1, 0): .6, (1, 1): .8},
                            {(0, 0): .1, (0, 1): .9, (1, 0): .9, (1, 1): .1}]):
        r, s = wino(ex, t)
        records += r
        table.update(s)
    m = evaluate_records(records, lookup_scorer(table))["tasks"]["winoground"]
    assert m["n"] == 3 and m["text"] == pytest.approx(200 / 3) and m["image"] == pytest.approx(100 / 3)
    assert m["group"] == pytest.approx(100 / 3)


@pytest.mark.parametrize("m_way,chance", [(2, 50.0), (5, 20.0)])
def test_random_scorer_reaches_chance(m_way, chance):
    rng = np.random.default_rng(m_way)
    n = 2000
    records = [rec("negclip", tuple(f"r{i} c{k}" for k in range(m_way)), int(rng.integers(m_way))) for i in range(n)]

    def score_fn(images, captions):
        return rng.random(len(captions))

    m = evaluate_records(records, score_fn, keep_scores=False)["tasks"]["negclip"]
    p = chance / 100
    assert abs(m["accuracy"] - chance) < 100 * 4 * np.sqrt(p * (1 - p) / n)
    assert m["chance"] == pytest.approx(chance)


def test_groups_seen_unseen_and_recompute_from_scores():
    specs = [(t, True, 0, "on" if t.startswith("vg") else None, 1 if t.startswith("vg") else 0)
             for t in ("vg_relation", "vg_attribution", "coco_order", "flickr30k_order")]
    records, score_fn = _build(specs)
    records.append(rec("binding", ("pos", "neg"), 0, unseen=True))
    records.append(rec("binding", ("pos2", "neg2"), 0, unseen=False))
    res = evaluate_records(records, lambda im, c: np.asarray([1.0 if x.startswith(("good", "pos")) and x != "pos2"
                                                              else 0.0 for x in c]), vga_min_count=1)
    assert res["groups"]["aro4"] == 100.0
    assert res["tasks"]["binding"]["unseen"] == 100.0 and res["tasks"]["binding"]["seen"] == 0.0
    again = summarize(records, [np.asarray(p["scores"]) for p in res["per_record"]], vga_min_count=1)
    assert again["tasks"] == res["tasks"]
