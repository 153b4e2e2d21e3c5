import numpy as np
import pytest

from mmjax.evaluation import recall_at_k, recall_at_k_folds, retrieval_ranks


def brute_ranks(s, c2i):
    n_i, n_t = s.shape
    i2t = [sum(1 for n in range(n_t) if c2i[n] != i and s[i, n] >= max(s[i, c2i == i])) for i in range(n_i)]
    t2i = [sum(1 for i in range(n_i) if i != c2i[n] and s[i, n] >= s[c2i[n], n]) for n in range(n_t)]
    return np.array(i2t), np.array(t2i)


def test_hand_built_ranks_with_ties_and_multiple_captions():
    # 3 images, 2 captions each. Rows: images; columns: captions (caption n belongs to image n // 2).
    s = np.array([[0.9, 0.1, 0.8, 0.0, 0.2, 0.3],    # image 0: best GT 0.9, nothing above -> rank 0
                  [0.5, 0.4, 0.6, 0.7, 0.1, 0.0],    # image 1: best GT 0.7 (cap 3); cap 2? no: caps 2,3 are GT
                  [0.9, 0.2, 0.1, 0.3, 0.5, 0.5]],   # image 2: best GT 0.5; cap 0 (0.9) above -> rank 1
                 np.float32)
    c2i = np.array([0, 0, 1, 1, 2, 2])
    i2t, t2i = retrieval_ranks(s, c2i)
    np.testing.assert_array_equal(i2t, [0, 0, 1])
    # caption 0: image 2 ties at 0.9 -> strict -> 1; caption 1 (0.1): images 1 (0.4), 2 (0.2) -> 2;
    # caption 2 (img 1, 0.6): image 0 (0.8) -> 1; the rest are top.
    np.testing.assert_array_equal(t2i, [1, 2, 1, 0, 0, 0])
    m = recall_at_k(s, c2i)
    assert m["i2t_r1"] == pytest.approx(200 / 3) and m["t2i_r1"] == pytest.approx(50.0)
    assert m["i2t_r5"] == 100.0 and m["rsum"] == pytest.approx(200 / 3 + 100 + 100 + 50 + 100 + 100)
    assert m["i2t_medr"] == 1.0 and m["t2i_meanr"] == pytest.approx(1 + 4 / 6)


def test_random_matrices_match_brute_force():
    rng = np.random.default_rng(0)
    s = rng.integers(0, 4, size=(7, 21)).astype(np.float32)  # many ties
    c2i = np.repeat(np.arange(7), 3)
    for chunk in (1, 3, 256):
        i2t, t2i = retrieval_ranks(s, c2i, chunk=chunk)
        bi, bt = brute_ranks(s, c2i)
        np.testing.assert_array_equal(i2t, bi)
        np.testing.assert_array_equal(t2i, bt)


def test_perfect_and_random_embeddings():
    rng = np.random.default_rng(1)
    n = 200
    img = rng.normal(size=(n, 32)); img /= np.linalg.norm(img, axis=1, keepdims=True)
    caps = np.repeat(img, 5, axis=0)
    c2i = np.repeat(np.arange(n), 5)
    m = recall_at_k(img @ caps.T, c2i)
    for k in ("i2t_r1", "i2t_r5", "i2t_r10", "t2i_r1", "t2i_r5", "t2i_r10"):
        assert m[k] == 100.0
    rand = recall_at_k(rng.normal(size=(n, 5 * n)), c2i)
    assert abs(rand["t2i_r10"] - 100 * 10 / n) < 3.0       # chance 5%
    assert abs(rand["i2t_r1"] - 100 * (1 - (1 - 1 / n) ** 5)) < 3.5


def test_folds_average_independent_blocks():
    rng = np.random.default_rng(2)
    s = rng.normal(size=(10, 50)).astype(np.float32)
    c2i = np.repeat(np.arange(10), 5)
    m = recall_at_k_folds(s, c2i, n_folds=2)
    a = recall_at_k(s[:5, :25], c2i[:25]); b = recall_at_k(s[5:, 25:], c2i[25:] - 5)
    for k in m:
        assert m[k] == pytest.approx((a[k] + b[k]) / 2)
    assert m["rsum"] == pytest.approx(sum(m[k] for k in m if "_r" in k and "medr" not in k and "meanr" not in k))


def test_bad_input():
    with pytest.raises(ValueError, match="caption_to_image must have shape"):
        recall_at_k(np.zeros((2, 4)), np.zeros(3, int))
    with pytest.raises(ValueError, match="have no caption"):
        recall_at_k(np.zeros((3, 4)), np.array([0, 0, 1, 1]))
    with pytest.raises(ValueError, match="equal folds"):
        recall_at_k_folds(np.zeros((3, 3)), np.arange(3), n_folds=2)


def brute_semantic_ranks(s, pos):
    """Ranks against a positive relation by plain loops: the best positive's score against every non-positive."""
    n_i, n_t = s.shape
    i2t = [sum(1 for n in range(n_t) if not pos[i, n] and s[i, n] >= max(s[i, m] for m in range(n_t) if pos[i, m]))
           for i in range(n_i)]
    t2i = [sum(1 for i in range(n_i) if not pos[i, n] and s[i, n] >= max(s[j, n] for j in range(n_i) if pos[j, n]))
           for n in range(n_t)]
    return np.array(i2t), np.array(t2i)


def test_semantic_ground_truth_matches_brute_force_with_duplicated_captions():
    """A tiny split where captions repeat across images (as "a small gray triangle" does on ShapesWorld): every
    image a caption is true of counts as a hit, both ways, against a numpy loop; with P = the source relation it is
    the ordinary R@K; ranks can only fall when positives are added; folds keep each fold's own positives."""
    rng = np.random.default_rng(11)
    n_i, c = 10, 3
    c2i = np.repeat(np.arange(n_i), c)
    meaning = rng.integers(0, 6, size=n_i * c)  # 6 distinct caption meanings over 30 captions: many duplicates
    true_of = rng.random((6, n_i)) < 0.3
    pos = true_of[meaning].T.copy()
    pos[c2i, np.arange(n_i * c)] = True          # a caption is always true of its own image
    s = np.round(rng.normal(size=(n_i, n_i * c)), 1).astype(np.float32)  # rounding makes ties
    i2t, t2i = retrieval_ranks(s, c2i, positives=pos)
    ref_i2t, ref_t2i = brute_semantic_ranks(s, pos)
    np.testing.assert_array_equal(i2t, ref_i2t)
    np.testing.assert_array_equal(t2i, ref_t2i)
    src_i2t, src_t2i = retrieval_ranks(s, c2i)
    assert np.all(i2t <= src_i2t) and np.all(t2i <= src_t2i) and (i2t < src_i2t).any()
    source = np.zeros_like(pos)
    source[c2i, np.arange(n_i * c)] = True
    assert recall_at_k(s, c2i, positives=source) == recall_at_k(s, c2i)
    folds = recall_at_k_folds(s, c2i, 2, positives=pos)
    halves = [recall_at_k(s[:5, :15], c2i[:15], positives=pos[:5, :15]),
              recall_at_k(s[5:, 15:], c2i[15:] - 5, positives=pos[5:, 15:])]
    assert folds["rsum"] == pytest.approx(np.mean([h["rsum"] for h in halves]))
    with pytest.raises(ValueError, match="source image"):
        recall_at_k(s, c2i, positives=np.zeros_like(pos))


def test_shapesworld_semantic_positives_are_the_truth_of_each_caption_on_each_scene():
    """`retrieval_positives` of a generated split equals `truth(meaning, scene)` evaluated pair by pair."""
    from mmjax.data import shapesworld
    from mmjax.data.shapesworld.suites import retrieval_positives
    data = shapesworld.generate("val", preset="tiny", limit=12)
    pos = retrieval_positives(data)
    meanings = data["caption_meaning"].reshape(-1, data["caption_meaning"].shape[-1])
    ref = np.array([[shapesworld.truth(m, scene) for m in meanings] for scene in data["scenes"]])
    np.testing.assert_array_equal(pos, ref)
    assert pos[np.repeat(np.arange(12), 5), np.arange(60)].all() and pos.sum() > 60  # own image, and others too
