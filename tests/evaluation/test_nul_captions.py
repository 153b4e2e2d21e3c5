"""The evaluation scorers' text entry refuses a caption holding a NUL character, naming the caption's index."""

import numpy as np
import pytest

from mmjax.evaluation.scorers import EmbeddingScorer


def test_embedding_scorer_refuses_nul_naming_the_caption_index():
    encoded = []

    def encode_texts(strings):
        encoded.extend(strings)
        return {"global": np.ones((len(strings), 2), np.float32)}

    scorer = EmbeddingScorer(lambda recs: {"global": np.ones((len(recs), 2), np.float32)}, encode_texts,
                             lambda img, txt: np.sum(img["global"] * txt["global"], -1), image_key=str)
    np.testing.assert_allclose(scorer(["i0", "i1"], ["a red circle", "a blue square"]), [2.0, 2.0])
    with pytest.raises(ValueError, match=r"caption 1 contains a NUL character"):
        scorer(["i0", "i1"], ["a red circle", "a blue\x00 square"])
    assert all("\x00" not in s for s in encoded)   # refused before anything is encoded
