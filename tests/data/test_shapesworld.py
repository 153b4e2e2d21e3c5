"""ShapesWorld generator tests (docs/design.md#testing), checked against the scene graph with an independent
text-parsing oracle (`shapesworld_oracle.py`) and pixel / feature checks."""

import collections
import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import shapesworld_oracle as oracle  # noqa: E402

from mmjax.data.shapesworld import ShapesWorld, ShapesWorldConfig, generate  # noqa: E402
from mmjax.data.shapesworld.regions import KIND_OBJECT  # noqa: E402
from mmjax.data.shapesworld.render import BASE_RGB  # noqa: E402

HELDOUT_TEXT = [f"{c} {s}" for c, s in ShapesWorldConfig().heldout_pairs]


@pytest.fixture(scope="module")
def tiny_train():
    return generate("train", preset="tiny", seed=0)


@pytest.fixture(scope="module")
def tiny_test():
    return generate("test", preset="tiny", seed=0)


def _digest(ex: dict) -> str:
    h = hashlib.sha256()
    for key in sorted(ex):
        v = ex[key]
        h.update(key.encode())
        h.update(("\x00".join(v)).encode() if isinstance(v, list) else np.ascontiguousarray(v).tobytes())
    return h.hexdigest()


@pytest.mark.parametrize("mode", ["regions", "pixels"])
def test_same_seed_same_bytes_different_seed_differs(mode):
    a = ShapesWorld(ShapesWorldConfig(mode=mode)).example("val", 7)
    b = ShapesWorld(ShapesWorldConfig(mode=mode)).example("val", 7)
    c = ShapesWorld(ShapesWorldConfig(mode=mode, seed=1)).example("val", 7)
    assert _digest(a) == _digest(b)
    assert _digest(a) != _digest(c)
    key = "regions" if mode == "regions" else "image"
    assert not np.array_equal(a[key], c[key])


def test_bitwise_identical_in_subprocess():
    code = ("import hashlib, numpy as np; from mmjax.data.shapesworld import ShapesWorld, ShapesWorldConfig;"
            "ex = ShapesWorld(ShapesWorldConfig(mode='{m}')).example('train', 3);"
            "h = hashlib.sha256();"
            "[ (h.update(k.encode()), h.update(('\\x00'.join(ex[k])).encode() if isinstance(ex[k], list) "
            "else np.ascontiguousarray(ex[k]).tobytes())) for k in sorted(ex)];"
            "print(h.hexdigest())")
    for mode in ("regions", "pixels"):
        out = subprocess.run([sys.executable, "-c", code.format(m=mode)], capture_output=True, text=True,
                             check=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
        assert out.stdout.strip() == _digest(ShapesWorld(ShapesWorldConfig(mode=mode)).example("train", 3))


def test_random_access_equals_sequential(tiny_train):
    world = ShapesWorld(ShapesWorldConfig.from_preset("tiny"))
    ex = world.example("train", 100)
    np.testing.assert_array_equal(ex["regions"], tiny_train["regions"][100])
    assert ex["captions"] == tiny_train["captions"][100]


def test_image_ids_disjoint_across_splits(tiny_train, tiny_test):
    val = generate("val", preset="tiny", seed=0)
    ids = [set(d["image_ids"].tolist()) for d in (tiny_train, val, tiny_test)]
    assert sum(map(len, ids)) == len(set.union(*ids)) == 512 + 64 + 64


def test_heldout_pairs_absent_from_train(tiny_train):
    d = tiny_train
    for i in range(len(d["captions"])):
        for o in oracle.objects_of(d, i):
            assert (oracle.COLOURS[o["colour"]], oracle.SHAPES[o["shape"]]) not in ShapesWorldConfig().heldout_pairs
    texts = [c for caps in d["captions"] for c in caps] + list(d["neg_text"])
    assert not [t for t in texts if any(h in t for h in HELDOUT_TEXT)]
    assert not d["has_unseen"].any() and not d["caption_unseen"].any()


def test_unseen_fraction_and_unseen_scene_contents():
    world = ShapesWorld(ShapesWorldConfig())
    n = 400
    heldout = ShapesWorldConfig().heldout_ids
    flags = []
    for i in range(n):
        scene = world.scene("test", i)
        has = any((c, s) in heldout for c, s in zip(scene.colour, scene.shape))
        assert has == scene.has_unseen
        flags.append(has)
    frac = np.mean(flags)
    assert abs(frac - 0.5) < 4 * np.sqrt(0.25 / n), frac  # binomial, 4 sigma


def _caption_checks(d):
    for i, caps in enumerate(d["captions"]):
        objects = oracle.objects_of(d, i)
        assert len(caps) == 5 and len(set(caps)) == 5
        types = {oracle.parse(c)[0] for c in caps}
        assert types == {"O", "P", "R"}, caps
        for c in caps:
            assert oracle.holds(c, objects), (c, objects)
            assert oracle.articles_ok(c), c
            assert len(c.split()) <= 14


def test_captions_distinct_typed_true_on_scene(tiny_train, tiny_test):
    _caption_checks(tiny_train)
    _caption_checks(tiny_test)


def test_caption_unseen_flag_matches_text(tiny_test):
    for i, caps in enumerate(tiny_test["captions"]):
        for k, c in enumerate(caps):
            assert tiny_test["caption_unseen"][i, k] == any(h in c for h in HELDOUT_TEXT)


def _negative_checks(d):
    counts = collections.Counter()
    for j, text in enumerate(d["neg_text"]):
        i, k, t = int(d["neg_image"][j]), int(d["neg_caption"][j]), int(d["neg_type"][j])
        counts[t] += 1
        pos = d["captions"][i][k]
        if t >= 7:
            assert np.all(d["neg_meaning"][j] == -1)
            assert sorted(text.split()) == sorted(pos.split()) and text != pos
        else:
            assert not oracle.holds(text, oracle.objects_of(d, i)), (pos, text)
            assert oracle.articles_ok(text), text
    for i in range(len(d["captions"])):
        for k in range(5):
            order = [d["neg_text"][j] for j in d["neg_table"][i, k, 7:] if j >= 0]
            assert len(order) in (0, 4)
            assert len(set(order)) == len(order)
    return counts


def test_hard_negatives_false_and_typed(tiny_train, tiny_test):
    counts = _negative_checks(tiny_train) + _negative_checks(tiny_test)
    assert all(counts[t] > 0 for t in range(11)), counts  # every type occurs on a few hundred images


def test_negative_types_follow_their_edit(tiny_test):
    d = tiny_test
    for j, text in enumerate(d["neg_text"]):
        i, k, t = int(d["neg_image"][j]), int(d["neg_caption"][j]), int(d["neg_type"][j])
        pos = oracle.parse(d["captions"][i][k])
        if t >= 7:
            continue
        neg = oracle.parse(text)
        if t == 0:  # swap_att: colours exchanged
            assert (neg[1][0], neg[-1][0]) == (pos[-1][0], pos[1][0])
        elif t == 3:
            assert neg[2] != pos[2] and neg[1] == pos[1] and neg[3] == pos[3]
        elif t == 4:
            assert (neg[1], neg[3]) == (pos[3], pos[1])


def test_training_negative_pick(tiny_train):
    d = tiny_train
    idx = d["train_neg_index"]
    assert (idx >= 0).mean() > 0.9
    picked = d["neg_type"][idx[idx >= 0]]
    assert set(np.unique(picked)) <= {0, 2, 3, 5, 6}  # train_negative_types only, never order or size/rel_swap
    assert np.all(d["neg_image"][idx[idx >= 0]] == np.nonzero(idx >= 0)[0])


def test_vocabulary_closure_and_bert_equivalence(tiny_train, tmp_path):
    from transformers import BertTokenizerFast
    tok = ShapesWorld().tokenizer()
    texts = [c for caps in tiny_train["captions"] for c in caps] + list(tiny_train["neg_text"])
    batch = tok.encode(texts)
    assert not (batch.ids == tok.unk_id).any()
    assert batch.attention_mask.sum(1).max() <= 20
    bert = BertTokenizerFast.from_pretrained(tok.export(str(tmp_path / "vocab")))
    sample = texts[::50]
    enc = bert(sample, padding="max_length", max_length=20)
    np.testing.assert_array_equal(np.asarray(enc["input_ids"]), tok.encode(sample).ids)


@pytest.fixture(scope="module")
def pixel_data():
    return generate("val", preset="tiny", seed=0, mode="pixels")


def test_pixels_objects_at_scene_graph_positions(pixel_data):
    d = pixel_data
    images = d["images"]
    assert images.shape == (64, 64, 64, 3) and images.dtype == np.uint8
    size = images.shape[1]
    tol = 12 + 12  # colour jitter + 4 sigma of pixel noise
    for i in range(len(images)):
        for k in range(d["obj_count"][i]):
            x0, y0, x1, y1 = d["obj_box"][i, k]
            # the box is centred on the cell (row, col) of the scene graph, up to the centre jitter
            assert abs((x0 + x1) / 2 * 3 - (d["obj_col"][i, k] + 0.5)) <= 0.08 + 1e-6
            assert abs((y0 + y1) / 2 * 3 - (d["obj_row"][i, k] + 0.5)) <= 0.08 + 1e-6
            px = images[i, int((y0 + y1) / 2 * size), int((x0 + x1) / 2 * size)].astype(int)
            assert np.all(np.abs(px - BASE_RGB[d["obj_colour"][i, k]]) <= tol), (i, k, px)


def test_pixels_background_never_gray(pixel_data):
    d = pixel_data
    size = d["images"].shape[1]
    yy, xx = np.mgrid[0:size, 0:size] + 0.5
    for i in range(len(d["images"])):
        covered = np.zeros((size, size), bool)
        for k in range(d["obj_count"][i]):
            x0, y0, x1, y1 = d["obj_box"][i, k] * size
            covered |= (xx >= x0 - 1) & (xx <= x1 + 1) & (yy >= y0 - 1) & (yy <= y1 + 1)
        bg = d["images"][i][~covered].astype(int)
        assert covered.mean() < 0.6 and len(bg) > 0
        assert not np.any(np.all(np.abs(bg - 128) <= 24, axis=1))


def test_regions_layout_and_kinds(tiny_train):
    d = tiny_train
    n, r, f = d["regions"].shape
    assert (r, f) == (10, 256) and d["regions"].dtype == np.float32
    assert d["region_mask"].all()
    for i in range(n):
        kinds, owner = d["region_kind"][i], d["region_object"][i]
        obj = kinds == KIND_OBJECT
        assert obj.sum() == d["obj_count"][i]
        assert sorted(owner[obj].tolist()) == list(range(d["obj_count"][i]))
        np.testing.assert_allclose(d["region_boxes"][i][obj], d["obj_box"][i, owner[obj]], atol=1e-6)
        assert np.all((owner >= 0) == (kinds != 2))


def test_regions_attributes_decodable(tiny_train):
    d = tiny_train
    consts = ShapesWorld(ShapesWorldConfig.from_preset("tiny")).constants
    obj = d["region_kind"] == KIND_OBJECT
    x = d["regions"][obj].astype(np.float64)
    owner = d["region_object"][obj]
    img = np.nonzero(obj)[0]
    colour = d["obj_colour"][img, owner]
    shape = d["obj_shape"][img, owner]
    acc_c = np.mean(np.argmax(x @ consts.e_colour.T, axis=1) == colour)
    acc_s = np.mean(np.argmax(x @ consts.e_shape.T, axis=1) == shape)
    assert acc_c >= 0.99 and acc_s >= 0.99, (acc_c, acc_s)


def test_variable_regions_masks():
    d = generate("train", preset="tiny", seed=0, variable_regions=True, limit=64)
    mask = d["region_mask"]
    nvalid = mask.sum(1)
    assert np.all(nvalid >= d["obj_count"]) and nvalid.min() < 10
    for i in range(len(mask)):
        assert mask[i, :nvalid[i]].all() and not mask[i, nvalid[i]:].any()  # padding at the end
        assert np.all(d["regions"][i, nvalid[i]:] == 0) and np.all(d["region_kind"][i, nvalid[i]:] == -1)


def test_bad_config_raises():
    with pytest.raises(ValueError, match="mode"):
        ShapesWorldConfig(mode="voxels")
    with pytest.raises(ValueError, match="split"):
        ShapesWorld().example("dev", 0)
    with pytest.raises(ValueError, match="preset"):
        generate("train", preset="huge")
