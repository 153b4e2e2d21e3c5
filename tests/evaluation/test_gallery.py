"""`mmjax.evaluation.gallery`: top-k rankings against a brute-force oracle, and the drawn frames.

Oracle: a plain Python sort of (−score, index) pairs and a direct count for the strict ground-truth rank; the
ranks must agree with `mmjax.evaluation.retrieval.retrieval_ranks` (the R@K code).
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from mmjax.evaluation.gallery import (ALSO_TRUE_RGB, CORRECT_RGB, OTHER_RGB, frame, plot_gallery,  # noqa: E402
                                      rank_captions, rank_images)
from mmjax.evaluation.retrieval import retrieval_ranks  # noqa: E402

N_IMG, C = 7, 3


def scores(seed=0):
    rng = np.random.default_rng(seed)
    s = rng.normal(size=(N_IMG, N_IMG * C)).round(1)  # rounding makes ties
    return s.astype(np.float32), np.repeat(np.arange(N_IMG), C)


def oracle_order(values):
    return [i for _, i in sorted((-float(v), i) for i, v in enumerate(values))]


def test_rankings_match_brute_force_and_retrieval_ranks():
    s, c2i = scores()
    i2t, t2i = retrieval_ranks(s, c2i)
    for q in range(N_IMG * C):
        r = rank_images(s, q, c2i, k=5)
        assert r.ranked.tolist() == oracle_order(s[:, q])[:5]
        np.testing.assert_array_equal(r.scores, s[r.ranked, q])
        assert r.correct.tolist() == [int(i) == c2i[q] for i in r.ranked]
        assert r.gt_rank == t2i[q]
    for q in range(N_IMG):
        r = rank_captions(s, q, c2i, k=4)
        assert r.ranked.tolist() == oracle_order(s[q])[:4]
        assert r.correct.tolist() == [c2i[n] == q for n in r.ranked]
        assert r.gt_rank == i2t[q]


def test_semantic_positives_mark_other_true_candidates():
    s, c2i = scores(1)
    positives = np.zeros((N_IMG * C, N_IMG), bool)
    positives[np.arange(N_IMG * C), c2i] = True
    positives[4, :] = True  # caption 4 is true on every image
    r = rank_images(s, 4, c2i, k=N_IMG, positives=positives)
    assert r.also_true.tolist() == [int(i) != c2i[4] for i in r.ranked]
    assert not (r.also_true & r.correct).any()
    with pytest.raises(ValueError, match="positives must be"):
        rank_images(s, 0, c2i, positives=positives.T)


def test_errors_name_the_problem():
    s, c2i = scores()
    with pytest.raises(ValueError, match="caption_to_image must have shape"):
        rank_images(s, 0, c2i[:-1])
    with pytest.raises(IndexError, match="out of range"):
        rank_captions(s, N_IMG, c2i)
    bad = s.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        rank_images(bad, 0, c2i)


def test_frame_keeps_the_picture():
    img = np.random.default_rng(0).integers(0, 255, (5, 6, 3), dtype=np.uint8)
    out = frame(img, (1, 2, 3), width=2)
    assert out.shape == (9, 10, 3)
    np.testing.assert_array_equal(out[2:7, 2:8], img)
    border = np.concatenate([out[:2].reshape(-1, 3), out[-2:].reshape(-1, 3), out[:, :2].reshape(-1, 3)])
    assert (border == [1, 2, 3]).all()


def test_gallery_outlines_exactly_the_ground_truth():
    s, c2i = scores(2)
    pictures = np.random.default_rng(3).integers(0, 255, (N_IMG, 8, 8, 3), dtype=np.uint8)
    captions = [f"caption {n}" for n in range(N_IMG * C)]
    positives = np.zeros((N_IMG * C, N_IMG), bool)
    positives[np.arange(N_IMG * C), c2i] = True
    positives[0, :] = True
    fig, rankings = plot_gallery(s, c2i, captions, lambda i: pictures[i], caption_queries=[0, 5],
                                 image_queries=[2], k=5, positives=positives)
    axes = np.array(fig.axes).reshape(3, 6)
    for row, r in zip(axes[:2], rankings[:2]):
        for ax, cand in zip(row[1:], r.ranked):
            arr = np.asarray(ax.images[0].get_array())
            np.testing.assert_array_equal(arr[3:-3, 3:-3], pictures[cand])  # the candidate's own picture
            expected = CORRECT_RGB if cand == c2i[r.query] else ALSO_TRUE_RGB if positives[r.query, cand] else OTHER_RGB
            assert tuple(arr[0, 0]) == expected
    r = rankings[2]
    for ax, cand in zip(axes[2, 1:], r.ranked):
        assert ax.texts[0].get_text() == captions[cand]
        edge = tuple(np.round(np.asarray(ax.spines["top"].get_edgecolor()[:3]) * 255).astype(int))
        assert edge == (CORRECT_RGB if c2i[cand] == 2 else ALSO_TRUE_RGB if positives[cand, 2] else OTHER_RGB)
    # Some row must actually show a green frame, or the test above could pass on an all-gray gallery.
    assert any(r.correct.any() for r in rankings)
    plt.close(fig)
