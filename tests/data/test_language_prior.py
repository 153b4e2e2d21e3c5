"""The ShapesWorld language priors (`config.LANGUAGE_PRIORS`): their statistics on generated data, and that the
default world is untouched."""

import numpy as np
import pytest

from mmjax.data import shapesworld
from mmjax.data.shapesworld.config import (COLOURS, DEFAULT_HELDOUT, NEG_TYPES, SHAPES, TYPICAL_COLOUR,
                                           language_prior)


def _gen(prior, split="train", limit=400):
    return shapesworld.generate(split, preset="tiny", seed=3, limit=limit, **language_prior(prior))


def _typical_share(data):
    typical = {(COLOURS.index(c), SHAPES.index(s)) for s, c in TYPICAL_COLOUR.items()}
    pairs = [(int(c), int(s)) for cs, ss in zip(data["obj_colour"], data["obj_shape"])
             for c, s in zip(cs, ss) if c >= 0]
    return np.mean([p in typical for p in pairs]), pairs


def _neg_types(data):
    idx = data["train_neg_index"][data["train_neg_index"] >= 0]
    return [NEG_TYPES[t] for t in data["neg_type"][idx]]


def test_no_prior_is_the_default_world_bit_for_bit():
    a, b = _gen("none"), shapesworld.generate("train", preset="tiny", seed=3, limit=400)
    assert a["captions"] == b["captions"] and a["neg_text"] == b["neg_text"]
    for key in ("regions", "obj_colour", "obj_shape", "train_neg_index", "neg_type"):
        np.testing.assert_array_equal(a[key], b[key])


def test_typical_prior_skews_colour_shape_co_occurrence_and_keeps_held_out_pairs_out_of_training():
    share_none, _ = _typical_share(_gen("none"))
    share, pairs = _typical_share(_gen("typical"))
    # uniform: 6 typical of 8 × 6 pairs = 1/8; the prior draws a typical pair with p = 0.8 (a repeat in a scene falls
    # back to a uniform pair), so the share is near 0.8 + 0.2 / 8
    assert abs(share_none - 1 / len(COLOURS)) < 0.05, share_none
    assert 0.70 < share < 0.85, share
    heldout = {(COLOURS.index(c), SHAPES.index(s)) for c, s in DEFAULT_HELDOUT}
    assert not heldout & {(COLOURS.index(c), SHAPES.index(s)) for s, c in TYPICAL_COLOUR.items()}
    train_has_unseen = _gen("typical")["has_unseen"]
    assert not train_has_unseen.any()
    # the test split keeps its held-out scenes under the prior too
    assert _gen("typical", split="test", limit=None)["has_unseen"].any()


def test_order_prior_gives_order_negatives_their_declared_share_of_training_negatives():
    none, order = _neg_types(_gen("none")), _neg_types(_gen("order"))
    assert not any(t.startswith("order") for t in none)
    share = np.mean([t.startswith("order") for t in order])
    # declared weight 0.4 of 1.4 (≈ 0.29) among captions that have a negative of the drawn type; the draw falls back
    # to the types a caption has, so allow a broad band around it
    assert 0.18 < share < 0.40, share
    kinds = {t for t in order if t.startswith("order")}
    assert len(kinds) >= 3, kinds


def test_unknown_prior_is_refused_by_name():
    with pytest.raises(ValueError, match="language prior must be one of"):
        language_prior("skewed")
