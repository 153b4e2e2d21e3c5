"""Local-feature probes: the ridge probe against a numpy least-squares reference, planted features (a token that
carries its label is probed above 95 %, a shuffled one at the majority rate), grounding on planted tokens, and the
ShapesWorld token→object maps against the scene boxes."""

import numpy as np
import pytest

from mmjax.data import shapesworld
from mmjax.data.shapesworld.local_labels import named_objects, object_attributes, patch_objects, token_labels
from mmjax.evaluation.local_probes import shapesworld_local_probes
from mmjax.evaluation.probes import fit_linear_probe, grounding_accuracy, linear_probe, predict


def test_probe_equals_numpy_least_squares():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(60, 5)), rng.integers(0, 3, 60)
    probe = fit_linear_probe(x, y, ridge=0.0)
    z = (x - x.mean(0)) / (x.std(0) + 1e-8)
    a = np.concatenate([z, np.ones((60, 1))], 1)
    w, *_ = np.linalg.lstsq(a, np.eye(3)[y], rcond=None)  # the unregularised least-squares solution
    np.testing.assert_allclose(probe["W"], w, atol=1e-8)
    np.testing.assert_array_equal(predict(probe, x), np.argmax(a @ w, 1))


def test_planted_label_is_probed_and_a_shuffled_one_is_at_chance():
    rng = np.random.default_rng(1)
    classes, d = 6, 32
    means = rng.normal(size=(classes, d))
    y_tr, y_te = rng.integers(0, classes, 3000), rng.integers(0, classes, 1000)
    x_tr, x_te = means[y_tr] + 0.5 * rng.normal(size=(3000, d)), means[y_te] + 0.5 * rng.normal(size=(1000, d))
    carried = linear_probe(x_tr, y_tr, x_te, y_te)
    assert carried["accuracy"] > 95 and carried["majority"] < 25
    noise = linear_probe(rng.normal(size=(3000, d)), y_tr, rng.normal(size=(1000, d)), y_te)
    assert abs(noise["accuracy"] - 100 / classes) < 5  # nothing in the token: a guess
    shuffled = linear_probe(x_tr, rng.permutation(y_tr), x_te, y_te)
    assert shuffled["accuracy"] < 25


def test_grounding_on_planted_tokens():
    rng = np.random.default_rng(2)
    m, n, d = 200, 16, 8
    tokens = rng.normal(size=(m, n, d))
    target = rng.integers(0, n, m)
    on_target = np.zeros((m, n), bool)
    on_target[np.arange(m), target] = True
    words = tokens[np.arange(m), target] + 0.01 * rng.normal(size=(m, d))  # each word looks like its object token
    g = grounding_accuracy(words, tokens, on_target)
    assert g["accuracy"] == 100.0 and g["chance_uniform"] == pytest.approx(100 / n)
    assert g["chance_area"] == pytest.approx(100 / n)
    blind = grounding_accuracy(rng.normal(size=(m, d)), tokens, on_target)
    assert blind["accuracy"] < 20
    valid = np.ones((m, n), bool)
    valid[np.arange(m), target] = False  # the object's token is padding: that word cannot be grounded
    assert grounding_accuracy(words, tokens, on_target, valid)["n"] == 0


@pytest.fixture(scope="module")
def split():
    return shapesworld.generate("val", preset="tiny", limit=24, mode="regions")


def test_patch_objects_follow_the_boxes(split):
    grid = 8
    objects = patch_objects(split, grid)
    assert objects.shape == (24, grid * grid)
    for i in range(24):
        for p in range(grid * grid):
            cx, cy = (p % grid + 0.5) / grid, (p // grid + 0.5) / grid
            inside = [o for o in range(split["obj_count"][i])
                      if split["obj_box"][i, o, 0] <= cx < split["obj_box"][i, o, 2]
                      and split["obj_box"][i, o, 1] <= cy < split["obj_box"][i, o, 3]]
            assert objects[i, p] == (inside[0] if inside else -1)
    assert (objects >= 0).any() and (objects == -1).any()
    labels = token_labels(split, objects)
    attrs = object_attributes(split)
    i, p = np.argwhere(objects >= 0)[0]
    assert labels["colour"][i, p] == attrs["colour"][i, objects[i, p]] and labels["cell"][i, p] >= 0


def test_named_objects_are_the_objects_the_words_describe(split):
    words = named_objects(split)
    assert words
    for i, k, pos, objs in words:
        word = split["captions"][i][k].split()[pos - 1]
        attr = "colour" if word in shapesworld.COLOURS else "shape"
        names = shapesworld.COLOURS if attr == "colour" else shapesworld.SHAPES
        assert all(names[object_attributes(split)[attr][i, o]] == word for o in objs), (i, k, word)


def test_probes_of_a_base_whose_tokens_carry_the_object(split):
    """A fake base whose region token is its object's colour one-hot (plus noise): colour is probed perfectly, the
    shuffled control is not; grounding finds the named colour's region."""
    rng = np.random.default_rng(3)
    colours = len(shapesworld.COLOURS)

    def encode_images(data, idx):
        obj = data["region_object"][idx]
        colour = np.where(obj >= 0, np.take_along_axis(data["obj_colour"][idx], np.maximum(obj, 0), 1), -1)
        feats = np.where((colour >= 0)[..., None], np.eye(colours)[np.maximum(colour, 0)], 0.0)
        return {"patches": feats + 0.05 * rng.normal(size=feats.shape)}

    def encode_texts(strings):
        out = np.zeros((len(strings), 16, colours))
        for j, s in enumerate(strings):
            for w, word in enumerate(s.split()):
                if word in shapesworld.COLOURS:
                    out[j, w + 1, shapesworld.COLOURS.index(word)] = 1.0
        return {"tokens": out, "valid": np.ones(out.shape[:2], bool)}

    train = shapesworld.generate("train", preset="tiny", limit=200, mode="regions")
    res = shapesworld_local_probes(encode_images, encode_texts, train, split,
                                   lambda data: data["region_object"], max_train_images=200)
    assert res["probes"]["colour"]["accuracy"] > 95
    assert res["probes"]["colour"]["shuffled"] < 40
    assert res["grounding"]["n"] > 0 and res["grounding"]["accuracy"] > res["grounding"]["chance_area"] + 20
