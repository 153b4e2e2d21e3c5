"""`score_pairs` with no images or no captions returns the empty [Bi, Bt] result (it used to raise
ZeroDivisionError for Bi = 0), eagerly and under jit, for every all-pairs method and chunking."""

import jax
import numpy as np
import pytest

from mmjax.flowclip.all_pairs import score_pairs
from tests.flowclip.test_scorer import make_inputs, random_params


@pytest.mark.parametrize("bi,bt", [(0, 3), (3, 0), (0, 0)])
@pytest.mark.parametrize("method", ["gram", "direct", "reference"])
@pytest.mark.parametrize("chunk_size", [None, 0, 2])
def test_no_images_or_no_captions_give_the_empty_result(bi, bt, method, chunk_size):
    params = random_params(0, 8)
    image, text = make_inputs(0, bi, bt, 4, 5, 8)
    full_image, full_text = make_inputs(0, 3, 3, 4, 5, 8)
    ref = np.asarray(score_pairs(params, full_image, full_text, method=method, chunk_size=chunk_size))
    for fn in (score_pairs, jax.jit(score_pairs, static_argnames=("method", "chunk_size", "return_local"))):
        got, local = fn(params, image, text, method=method, chunk_size=chunk_size, return_local=True)
        assert got.shape == (bi, bt) and local.shape == (bi, bt)
        assert got.dtype == ref.dtype == np.float32
