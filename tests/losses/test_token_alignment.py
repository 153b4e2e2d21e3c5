"""Late-interaction token alignment (mmjax.losses.token_alignment) against a plain numpy loop, its masks and
invariances, and the CLIP task's loss with and without it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mmjax.losses.token_alignment import late_interaction_scores


def _numpy_reference(img, txt, txt_valid, img_valid):
    """(T1) by loops: for each (image, caption), the mean over valid words of the best cosine over valid tokens."""
    out = np.zeros((len(img), len(txt)))
    for i in range(len(img)):
        toks = [p / np.linalg.norm(p) for p, ok in zip(img[i], img_valid[i]) if ok]
        for t in range(len(txt)):
            words = [h / np.linalg.norm(h) for h, ok in zip(txt[t], txt_valid[t]) if ok]
            out[i, t] = np.mean([max(float(h @ p) for p in toks) for h in words]) if words else 0.0
    return out


def _inputs(seed=0, bi=3, bt=4, n=5, l_tok=6, d=7):
    rng = np.random.default_rng(seed)
    img = rng.normal(size=(bi, n, d)).astype(np.float32)
    txt = rng.normal(size=(bt, l_tok, d)).astype(np.float32)
    txt_valid = rng.random((bt, l_tok)) < 0.7
    txt_valid[0] = False                       # a caption with no valid word scores 0
    img_valid = rng.random((bi, n)) < 0.6
    img_valid[:, 0] = True                     # every image keeps a token
    return img, txt, txt_valid, img_valid


def test_late_interaction_matches_a_numpy_loop_with_masks():
    img, txt, tv, iv = _inputs()
    with jax.default_matmul_precision("float32"):
        got = np.asarray(late_interaction_scores(img, txt, jnp.asarray(tv), jnp.asarray(iv)))
        all_valid = np.asarray(late_interaction_scores(img, txt, jnp.asarray(tv)))
    np.testing.assert_allclose(got, _numpy_reference(img, txt, tv, iv), atol=1e-5)
    np.testing.assert_allclose(all_valid, _numpy_reference(img, txt, tv, np.ones(iv.shape, bool)), atol=1e-5)
    assert np.all(got[:, 0] == 0.0)


def test_invariances_token_order_scale_and_masked_content():
    img, txt, tv, iv = _inputs(1)
    base = np.asarray(late_interaction_scores(img, txt, jnp.asarray(tv), jnp.asarray(iv)))
    perm_n, perm_l = np.random.default_rng(2).permutation(img.shape[1]), np.random.default_rng(3).permutation(
        txt.shape[1])
    permuted = late_interaction_scores(img[:, perm_n] * 3.0, txt[:, perm_l] * 0.5, jnp.asarray(tv[:, perm_l]),
                                       jnp.asarray(iv[:, perm_n]))
    np.testing.assert_allclose(np.asarray(permuted), base, atol=1e-5)
    # what sits under a mask changes nothing, even a zero row (finite value and gradient)
    img2, txt2 = img.copy(), txt.copy()
    img2[~iv], txt2[~tv] = 0.0, 1e3
    np.testing.assert_allclose(np.asarray(late_interaction_scores(img2, txt2, jnp.asarray(tv), jnp.asarray(iv))),
                               base, atol=1e-5)
    grad = jax.grad(lambda x: late_interaction_scores(x, txt2, jnp.asarray(tv), jnp.asarray(iv)).sum())(img2)
    assert np.isfinite(np.asarray(grad)).all() and np.all(np.asarray(grad)[~iv] == 0.0)


def test_a_word_finds_the_token_of_its_object():
    """A caption whose words each equal one token of image 0 scores 1 there and less against an image without them."""
    rng = np.random.default_rng(4)
    img = rng.normal(size=(2, 4, 8)).astype(np.float32)
    txt = img[0, [2, 0]][None]                 # two words: tokens 2 and 0 of image 0
    s = np.asarray(late_interaction_scores(img, txt, jnp.ones((1, 2), bool)))
    assert s[0, 0] == pytest.approx(1.0, abs=1e-6) and s[1, 0] < 0.99


def test_bad_shapes_are_named():
    img, txt, tv, iv = _inputs()
    with pytest.raises(ValueError, match="text_valid must be"):
        late_interaction_scores(img, txt, jnp.asarray(tv[:, :2]))
    with pytest.raises(ValueError, match="image_valid must be"):
        late_interaction_scores(img, txt, jnp.asarray(tv), jnp.asarray(iv[:2]))
    with pytest.raises(ValueError, match=r"image_tokens must be \[Bi, N, d\]"):
        late_interaction_scores(img[..., :3], txt, jnp.asarray(tv))


def test_clip_task_loss_adds_the_term_only_when_asked():
    """`loss.token_align` = 0 is the plain CLIP objective bit for bit; λ > 0 adds λ × the alignment InfoNCE."""
    from configs.clip_shapes import get_config
    from mmjax.tasks.clip_pretrain import CLIPPretrainTask

    plain_cfg, aligned_cfg = get_config("regions,smoke"), get_config("regions,token_align,smoke")
    assert plain_cfg.loss.token_align == 0.0 and aligned_cfg.loss.token_align == 1.0
    plain, aligned = CLIPPretrainTask(plain_cfg), CLIPPretrainTask(aligned_cfg)
    batch = plain.prepare_batch(next(iter(plain.make_iterator())))
    batch = {k: jnp.asarray(v) for k, v in batch.items()}
    params = plain.init_variables(jax.random.PRNGKey(0), batch)["params"]
    with jax.default_matmul_precision("float32"):
        lp, (mp, _) = plain.loss(params, {}, batch, None, None)
        la, (ma, _) = aligned.loss(params, {}, batch, None, None)
    assert "loss/token_align" not in mp and float(ma["loss/global"]) == float(lp)
    assert float(la) == pytest.approx(float(lp) + float(ma["loss/token_align"]), rel=1e-6)
    assert float(ma["loss/token_align"]) > 0
