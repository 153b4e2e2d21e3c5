"""Errors that say what to do (issue #27 item 3), for a notebook user of the library:

- similarity kinds accept the papers' names (`'S_H'` → `'maxmatch'`, ...) and an unknown kind answers with the closest
  known one ("did you mean ...?") and the list of kinds, at every entry point that takes a kind;
- a single set [K, D] where a batch of sets [B, K, D] is expected is named as such, with the fix (`a[None]`);
- sets that are not unit-norm are refused eagerly with the measured norm range (`normalize=True` normalises them,
  `normalize=None` trusts the caller); traced calls under jit are not checked and compile to the same program;
- `matching.solve` refuses 'sinkhorn' (a soft plan is not an assignment) and points to `sinkhorn_plan`, which still
  works, as does the `sinkhorn_soft` similarity;
- progress bars can be silenced per call (`progress=False`) and library-wide (`mmjax.batching.set_progress(False)`).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mmjax import batching, matching
from mmjax.evaluation import embed
from mmjax.similarity import (KINDS, block_similarity, element_major, f_s, inference_kind, pairwise_set_similarity,
                              reported_kinds, resolve_kind, slab_cosines, slab_similarity, slab_supported)


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _sets(seed=0, ba=3, bb=4, k=3, d=8):
    rng = np.random.default_rng(seed)
    return (_unit(rng.normal(size=(ba, k, d))).astype(np.float32),
            _unit(rng.normal(size=(bb, k, d))).astype(np.float32))


# ---- 1. kind names ------------------------------------------------------------------------------------------------

ALIASES = [("S_H", "maxmatch"), ("s_h", "maxmatch"), ("MaxMatch", "maxmatch"), ("S_topk", "maxmatch_topk"),
           ("maxmatch-topk", "maxmatch_topk"), ("smooth-Chamfer", "smooth_chamfer"), ("Set-Div", "smooth_chamfer"),
           ("MIL", "mil"), ("PVSE", "mil"), ("mean", "average"), ("mp", "average_sigmoid"),
           ("Chamfer", "chamfer"), ("sinkhorn", "sinkhorn_soft"), ("S_soft", "sinkhorn_soft")]


@pytest.mark.parametrize("alias,kind", ALIASES)
def test_aliases_score_exactly_as_their_kind(alias, kind):
    a, b = _sets(1)
    assert resolve_kind(alias) == kind
    np.testing.assert_array_equal(np.asarray(pairwise_set_similarity(a, b, alias)),
                                  np.asarray(pairwise_set_similarity(a, b, kind)))
    c = np.einsum("ikd,jld->ijkl", a, b)
    np.testing.assert_array_equal(np.asarray(block_similarity(c, alias)), np.asarray(block_similarity(c, kind)))


def test_aliases_at_every_entry_point():
    a, b = _sets(2)
    assert inference_kind("S_H") == "maxmatch_topk" and reported_kinds("S_H") == ("maxmatch_topk", "maxmatch")
    assert slab_supported("S_H", 3, 3) and slab_supported("S_topk", 3, 3)
    c4 = slab_cosines(a, element_major(b))
    np.testing.assert_array_equal(np.asarray(slab_similarity(c4, "S_H")), np.asarray(slab_similarity(c4, "maxmatch")))
    np.testing.assert_allclose(embed.score_sets(a, b, "S_H", progress=False),
                               embed.score_sets(a, b, "maxmatch", progress=False), rtol=0, atol=0)
    res = embed.evaluate_retrieval({"set": a}, {"set": b[:3]}, np.arange(3), kinds=("S_H",), fold_counts=(1,),
                                   progress=False)
    assert set(res) == {"S_H"}  # reported under the name given


@pytest.mark.parametrize("call", ["pairwise_set_similarity", "block_similarity", "slab_similarity",
                                  "slab_supported", "inference_kind", "score_sets"])
def test_unknown_kind_says_did_you_mean_and_lists_the_kinds(call):
    a, b = _sets(3)
    calls = {
        "pairwise_set_similarity": lambda kind: pairwise_set_similarity(a, b, kind),
        "block_similarity": lambda kind: block_similarity(np.zeros((2, 3, 3), np.float32), kind),
        "slab_similarity": lambda kind: slab_similarity(slab_cosines(a, element_major(b)), kind),
        "slab_supported": lambda kind: slab_supported(kind, 3, 3),
        "inference_kind": inference_kind,
        "score_sets": lambda kind: embed.score_sets(a, b, kind, progress=False),
    }
    with pytest.raises(ValueError, match=r"unknown similarity kind 'maxmach'; did you mean 'maxmatch'\? "
                                         r"known kinds: mil, average, average_sigmoid, chamfer, smooth_chamfer, "
                                         r"maxmatch, maxmatch_topk, sinkhorn_soft \(also accepted.*'S_H' = 'maxmatch'"):
        calls[call]("maxmach")
    with pytest.raises(ValueError, match="did you mean 'smooth_chamfer'"):
        calls[call]("smooth_chamfr")
    with pytest.raises(ValueError, match=r"unknown similarity kind 'hausdorff'; known kinds: mil,"):
        calls[call]("hausdorff")  # nothing close: no guess


def test_kind_list_and_config_names_are_unchanged():
    """Aliases are a library convenience: `KINDS` (what configs accept) holds the canonical names only."""
    assert KINDS == ("mil", "average", "average_sigmoid", "chamfer", "smooth_chamfer", "maxmatch", "maxmatch_topk",
                     "sinkhorn_soft")
    from mmjax.config_validation import schema
    rule = schema.SCHEMA["retrieval"]["loss.similarity"]
    assert rule("maxmatch") is None and rule("S_H") is not None  # configs name kinds canonically


# ---- 2. a single set ----------------------------------------------------------------------------------------------

def test_single_set_is_named_with_the_fix():
    a, b = _sets(4)
    with pytest.raises(ValueError, match=r"a must be \[Ba, K, D\] \(a batch of sets\), got shape \(3, 8\): a single "
                                         r"set; add a batch axis \(a\[None\]\)"):
        pairwise_set_similarity(a[0], b, "maxmatch")
    with pytest.raises(ValueError, match=r"got shape \(3, 8\): a single set; add a batch axis \(b\[None\]\)"):
        pairwise_set_similarity(a, b[0], "mil")
    with pytest.raises(ValueError, match=r"score_sets: a must be .*got shape \(3, 8\): a single set; add a batch "
                                         r"axis \(a\[None\]\)"):
        embed.score_sets(a[0], b, "maxmatch", progress=False)
    np.testing.assert_array_equal(np.asarray(pairwise_set_similarity(a[0][None], b, "mil")),
                                  np.asarray(pairwise_set_similarity(a, b, "mil"))[:1])


# ---- 3. unit norm -------------------------------------------------------------------------------------------------

def _scaled(seed=5):
    """(unit sets, the same sets with element norms from 0.5 to 3 exactly)."""
    a, b = _sets(seed)
    scale = np.linspace(0.5, 3.0, a.shape[0] * a.shape[1]).reshape(a.shape[:2] + (1,)).astype(np.float32)
    return a, b, a * scale


@pytest.mark.parametrize("device", [False, True])
def test_non_unit_sets_are_refused_with_the_measured_norms(device):
    a, b, raw = _scaled()
    raw = jnp.asarray(raw) if device else raw
    with pytest.raises(ValueError, match=r"pairwise_set_similarity: the valid elements of a are not unit-norm: their "
                                         r"L2 norms range over \[0\.5, 3\] \(largest \|norm - 1\| = 2 at a\[2, 2\] "
                                         r"> 1e-03\).*pass normalize=True.*or normalise them first"):
        pairwise_set_similarity(raw, b, "maxmatch")
    with pytest.raises(ValueError, match="valid elements of b are not unit-norm"):
        pairwise_set_similarity(b, raw, "mil")


@pytest.mark.parametrize("kind", ["maxmatch", "smooth_chamfer", "mil"])
def test_normalize_true_gives_the_scores_of_prenormalised_sets(kind):
    a, b, raw = _scaled()
    want = np.asarray(pairwise_set_similarity(a, b, kind))
    np.testing.assert_allclose(np.asarray(pairwise_set_similarity(raw, b, kind, normalize=True)), want,
                               rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(pairwise_set_similarity(raw, 7.0 * b, kind, normalize=True)), want,
                               rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(embed.score_sets(raw, b, kind, normalize=True, progress=False), want,
                               rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match=r"score_sets: the valid elements of a are not unit-norm.*\[0\.5, 3\]"):
        embed.score_sets(raw, b, kind, normalize=False, progress=False)


def test_masked_zero_and_non_finite_elements_are_not_checked():
    a, b, raw = _scaled()
    mask = np.ones(a.shape[:2], bool)
    padded = a.copy()
    padded[0, 2], mask[0, 2] = 100.0, False       # masked padding: anything goes
    padded[1, 1] = 0.0                            # a zero element has no direction to normalise
    padded[2, 0] = np.nan                         # non-finite: the NaN rules of mmjax.similarity apply
    out = np.asarray(pairwise_set_similarity(padded, b, "maxmatch", mask))
    assert np.all(np.isnan(out[2])) and np.all(np.isfinite(out[:2]))
    with pytest.raises(ValueError, match="not unit-norm"):
        pairwise_set_similarity(padded, b, "maxmatch")  # the same row unmasked is checked
    # normalize=None trusts the caller (raw dot products on purpose), bfloat16 unit rows pass at their precision.
    np.testing.assert_allclose(np.asarray(pairwise_set_similarity(raw, b, "average", normalize=None)),
                               np.einsum("ikd,jld->ij", raw, b) / 9, rtol=1e-5)
    pairwise_set_similarity(jnp.asarray(a, jnp.bfloat16), jnp.asarray(b, jnp.bfloat16), "mil")
    with pytest.raises(ValueError, match="normalize must be True, False or None"):
        pairwise_set_similarity(a, b, "mil", normalize="yes")


def test_traced_calls_are_not_checked_and_compile_to_the_same_program():
    _, b, raw = _scaled()
    checked = jax.jit(lambda x, y: pairwise_set_similarity(x, y, "maxmatch"))
    trusted = jax.jit(lambda x, y: pairwise_set_similarity(x, y, "maxmatch", normalize=None))
    np.testing.assert_array_equal(np.asarray(checked(raw, b)), np.asarray(trusted(raw, b)))
    assert str(jax.make_jaxpr(checked)(raw, b)) == str(jax.make_jaxpr(trusted)(raw, b))  # no cost under jit
    grad = jax.grad(lambda x: jnp.sum(pairwise_set_similarity(x, b, "smooth_chamfer")))(jnp.asarray(raw))
    assert np.all(np.isfinite(np.asarray(grad)))  # traced under grad as well: no check, no host sync


# ---- 4. sinkhorn ---------------------------------------------------------------------------------------------------

def test_solve_refuses_sinkhorn_and_sinkhorn_plan_still_works():
    scores = np.random.default_rng(6).uniform(-1, 1, size=(5, 4, 4)).astype(np.float32)
    for fn in (matching.solve, matching.solve_with_aux):
        with pytest.raises(ValueError, match=r"method='sinkhorn' gives a soft plan .*not an assignment.*int32 "
                                             r"columns; call mmjax\.matching\.sinkhorn_plan\(scores, tau=0\.1, "
                                             r"iters=30\)"):
            fn(scores, "sinkhorn", sinkhorn=dict(tau=0.1, iters=30))
    assert "sinkhorn" not in matching.SOLVERS and matching.SOFT_PLANS == ("sinkhorn",)
    for method in ("enumerate", "hungarian", "auto"):
        assert np.asarray(matching.solve(scores, method)).dtype == np.int32
    plan = np.asarray(matching.sinkhorn_plan(scores, 0.1, 30))
    assert plan.shape == (5, 4, 4) and plan.dtype == np.float32
    np.testing.assert_allclose(plan.sum(-2), 1.0, atol=1e-5)
    np.testing.assert_allclose(plan[2], np.asarray(matching.sinkhorn_plan(scores[2], 0.1, 30)), rtol=1e-6)
    with pytest.raises(ValueError, match="kind='sinkhorn_soft'"):
        pairwise_set_similarity(*_sets(7), "maxmatch", solver="sinkhorn")


def test_sinkhorn_soft_similarity_goes_through_sinkhorn_plan():
    a, b = _sets(8)
    got = np.asarray(pairwise_set_similarity(a, b, "sinkhorn_soft", sinkhorn_tau=0.1, sinkhorn_iters=15))
    c = np.einsum("ikd,jld->ijkl", a, b)
    plan = np.asarray(matching.sinkhorn_plan(c, 0.1, 15))
    np.testing.assert_allclose(got, np.sum(plan * np.asarray(f_s(c, 1.0)), axis=(-2, -1)) / 3, rtol=1e-5)


# ---- 5. progress --------------------------------------------------------------------------------------------------

def _eval_calls():
    a, b = _sets(9)
    embed.score_sets(a, b, "mil", progress=False)
    embed.evaluate_retrieval({"set": a}, {"set": b[:3]}, np.arange(3), kinds=("mil",), fold_counts=(1,),
                             progress=False)
    batching.batched_apply(lambda x: x * 2, (np.arange(5.0),), batch_size=2, name="[test] rows", progress=False)
    embed.context_sets({"embed_images": lambda x, m: {"set": x}, "images": a, "embed_captions": lambda x, m: {"set": x},
                        "captions": b}, batch_size=2, progress=False)


def _quiet_start(capfd):
    jnp.zeros(1).block_until_ready()  # the backend's first-use notices are not the library's output
    capfd.readouterr()


def test_progress_false_prints_nothing(capfd):
    _quiet_start(capfd)
    a, b = _sets(9)
    embed.score_sets(a, b, "mil")  # the default shows the bar (a control: the capture would see it)
    out, err = capfd.readouterr()
    assert "[eval] score mil" in out + err
    _eval_calls()
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_set_progress_false_silences_every_bar(capfd):
    _quiet_start(capfd)
    a, b = _sets(10)
    previous = batching.set_progress(False)
    try:
        assert previous is True and not batching.progress_enabled()
        embed.score_sets(a, b, "mil")
        batching.batched_apply(lambda x: x * 2, (np.arange(5.0),), batch_size=2, name="[test] rows")
        with batching.progress(3, "[test] bar") as bar:
            bar.update(3)
        out, err = capfd.readouterr()
        assert out == "" and err == ""
    finally:
        batching.set_progress(previous)
    assert batching.progress_enabled()
    with pytest.raises(TypeError, match="True or False"):
        batching.set_progress("off")
