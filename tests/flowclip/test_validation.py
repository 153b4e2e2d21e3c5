"""Bad inputs raise clear errors naming the argument, field and shape (static checks and `validate_inputs`)."""

import jax
import numpy as np
import pytest

import mmjax.flowclip as fc


def inputs(bi=2, bt=3, l_tok=4, n=5, d=6, d_text=None):
    rng = np.random.default_rng(0)
    d_text = d if d_text is None else d_text
    image = {"global": rng.normal(size=(bi, d)).astype(np.float32),
             "patches": rng.normal(size=(bi, n, d)).astype(np.float32)}
    text = {"global": rng.normal(size=(bt, d_text)).astype(np.float32),
            "tokens": rng.normal(size=(bt, l_tok, d_text)).astype(np.float32), "valid": np.ones((bt, l_tok), bool)}
    return fc.init_params(d), image, text


def test_mismatched_d_between_towers():
    params, image, text = inputs(d=6, d_text=8)
    with pytest.raises(ValueError, match=r"image\['global'\] has d=6, text\['global'\] has d=8"):
        fc.score_pairs(params, image, text)
    with pytest.raises(ValueError, match="differs between towers"):
        fc.validate_inputs(params, image, text)


def test_valid_mask_wrong_shape_or_dtype():
    params, image, text = inputs()
    with pytest.raises(ValueError, match=r"text\['valid'\] has shape \(3, 5\); expected \(3, 4\)"):
        fc.score_pairs(params, image, dict(text, valid=np.ones((3, 5), bool)))
    with pytest.raises(TypeError, match=r"text\['valid'\] must be a bool array"):
        fc.score_pairs(params, image, dict(text, valid=np.ones((3, 4), np.int32)))
    with pytest.raises(ValueError, match=r"text\['valid'\] has shape"):
        jax.jit(fc.score_pairs)(params, image, dict(text, valid=np.ones((4, 4), bool)))  # also under jit


def test_other_shape_errors():
    params, image, text = inputs()
    with pytest.raises(ValueError, match=r"image\['patches'\] has shape \(2, 5, 7\)"):
        fc.score_pairs(params, dict(image, patches=np.zeros((2, 5, 7), np.float32)), text)
    with pytest.raises(ValueError, match=r"text\['tokens'\] must have shape \[Bt, L, d\]"):
        fc.score_pairs(params, image, dict(text, tokens=np.zeros((3, 6), np.float32)))
    with pytest.raises(ValueError, match=r"params\['W'\] has shape \(5, 5\); expected \(6, 6\)"):
        fc.score_pairs(dict(params, W=np.zeros((5, 5), np.float32)), image, text)
    with pytest.raises(KeyError, match="missing key"):
        fc.score_pairs(params, {"global": image["global"]}, text)
    with pytest.raises(ValueError, match="method must be one of"):
        fc.score_pairs(params, image, text, method="fast")
    with pytest.raises(ValueError, match="pool must be one of"):
        fc.score_pairs(params, image, text, pool="mean")


def test_non_finite_features_are_named():
    params, image, text = inputs()
    fc.validate_inputs(params, image, text)  # clean inputs pass
    bad = dict(image, patches=image["patches"].copy())
    bad["patches"][1, 3, 2] = np.nan
    with pytest.raises(ValueError, match=r"image\['patches'\] \(shape \(2, 5, 6\)\) has 1 non-finite.*\(1, 3, 2\)"):
        fc.validate_inputs(params, bad, text)
    bad_text = dict(text, tokens=text["tokens"].copy())
    bad_text["tokens"][0, 0, 0] = np.inf
    with pytest.raises(ValueError, match=r"text\['tokens'\]"):
        fc.validate_inputs(None, image, bad_text)
    with pytest.raises(ValueError, match=r"params\['M'\]"):
        fc.validate_inputs(dict(params, M=np.full((6, 6), np.nan, np.float32)), image, text)
