"""The all-pairs set score sharded by image rows and chunked over captions (issue #28 item 2,
`mmjax.sharded_similarity`): on 8 simulated devices its values and gradients — and those of the whole MaxMatch
objective in the warm-up, ramp and hardest-negative phases, the MMD through `sharded_pair_mean` and the warm-up's
hinge sum streamed by `sharded_anchor_hinge_sum` — equal one device's; the compiled per-device memory falls
as the mesh grows at a fixed global batch and is below the block-tensor form's; training with
`sharding.all_pairs=rows` follows the default layout's losses. In-process checks on one device: the layout's errors."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mmjax.sharded_similarity import AllPairsLayout, sharded_pairwise_set_similarity
from mmjax.similarity import pairwise_set_similarity
from mmjax.train.sharding import make_mesh
from tests.train.helpers import run_python


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    # Compiled with jax's default fusion emitters (tests/conftest.py turns them off to compile faster): the memory
    # bounds below are XLA's buffer assignment for what users run. With the elemental emitter the streamed hinge
    # holds 2.8x less than the rows at once instead of more than 3x.
    proc = run_python(["tests/train/all_pairs_worker.py", str(tmp_path_factory.mktemp("all_pairs"))], devices=8,
                      timeout=1800, drop_flags=("xla_cpu_use_fusion_emitters",))
    return json.loads(proc.stdout.split("RESULT ", 1)[1].splitlines()[0])


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["maxmatch", "maxmatch_topk", "smooth_chamfer", "mil"])
def test_sharded_score_and_gradients_equal_one_device(result, kind):
    r = result["score"][kind]
    assert abs(r["value"][0] - r["value"][1]) < 1e-4 * max(1.0, abs(r["value"][0])), r
    assert r["grad_diff"] < 1e-5, r
    assert r["score_spec"] in ("P('data',)", "P('data', None)"), r   # rows split over the data axis ...
    assert r["score_shard"] == [2, 80], r                             # ... 16/8 image rows × all 80 captions each


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["warmup", "ramp", "hardest"])
def test_objective_on_the_sharded_score_equals_one_device(result, phase):
    r = result["objective"][phase]
    assert abs(r["value"][0] - r["value"][1]) < 1e-5 * max(1.0, abs(r["value"][0])), r
    assert r["grad_diff"] < 1e-5, r


@pytest.mark.slow
def test_sharded_mmd_equals_the_whole_kernel(result):
    r = result["mmd"]
    assert abs(r["value"][0] - r["value"][1]) < 1e-5, r
    assert r["grad_diff"] < 1e-5, r


@pytest.mark.slow
def test_streamed_warmup_hinge_equals_the_rows_at_once_and_holds_less(result):
    r = result["hinge"]
    assert abs(r["value"][0] - r["value"][1]) < 1e-5 * max(1.0, abs(r["value"][0])), r
    assert r["grad_diff"] < 1e-5, r
    # at once: the [640, 640] gathered rows and their hinges; streamed: S's own rows and [40, 640] at a time
    assert r["memory"]["streamed"] < r["memory"]["at_once"] / 3, r["memory"]


@pytest.mark.slow
def test_per_device_memory_falls_as_the_mesh_grows(result):
    m = result["memory"]
    rows = [m[f"rows_{n}"] for n in (1, 2, 4, 8)]
    assert all(b < a for a, b in zip(rows, rows[1:])), m
    assert rows[0] < m["xla_1"], m         # chunking alone (one device) already holds less than the block tensor


@pytest.mark.slow
def test_training_with_rows_layout_follows_the_default(result):
    xla, rows = result["training"]["xla"], result["training"]["rows"]
    assert len(xla) == len(rows) == 3
    np.testing.assert_allclose(rows, xla, rtol=1e-5, atol=1e-6)


def _sets(rng, n, k=3, d=8):
    x = rng.normal(size=(n, k, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_one_device_mesh_equals_the_plain_score():
    rng = np.random.default_rng(0)
    a, b = _sets(rng, 4), _sets(rng, 12)
    mesh = make_mesh((("data", 1),), jax.devices()[:1])
    with jax.default_matmul_precision("float32"):
        want = pairwise_set_similarity(a, b, "maxmatch")
        got = sharded_pairwise_set_similarity(a, b, "S_H", mesh=mesh, chunk=4)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-6)


def test_layout_errors_name_the_field_and_the_fix():
    rng = np.random.default_rng(0)
    a, b = _sets(rng, 4), _sets(rng, 12)
    mesh = make_mesh((("data", 1),), jax.devices()[:1])
    with pytest.raises(ValueError, match=r"all_pairs_chunk=5 does not divide the 12 gathered captions; the largest "
                                         r"chunk that does is 4"):
        sharded_pairwise_set_similarity(a, b, "maxmatch", mesh=mesh, chunk=5)
    with pytest.raises(ValueError, match=r"needs a mesh: pass mesh=, or call it under `with jax.set_mesh"):
        sharded_pairwise_set_similarity(a, b, "maxmatch")
    with pytest.raises(ValueError, match=r"axes \['model'\] are not axes of the mesh"):
        sharded_pairwise_set_similarity(a, b, "maxmatch", mesh=mesh, axes=("model",))
    with pytest.raises(ValueError, match=r"not unit-norm"):
        sharded_pairwise_set_similarity(2 * a, b, "maxmatch", mesh=mesh)
    with pytest.raises(ValueError, match=r"sharding.all_pairs must be one of \('xla', 'rows'\), got 'ring'"):
        AllPairsLayout("ring")
    with pytest.raises(ValueError, match=r"'xla' layout gathers the rows at once"):
        AllPairsLayout("xla").anchor_hinge_sum(None, None, None, None, None, 0.2)
    with pytest.raises(ValueError, match=r"all_pairs_chunk must be >= 0"):
        AllPairsLayout("rows", chunk=-1)


def test_layout_from_config_reads_the_sharding_fields():
    from mmjax.train.defaults import sharding_config
    c = sharding_config()
    assert AllPairsLayout.from_config(c) == AllPairsLayout("xla", ("data",), 0)
    c.update(all_pairs="rows", all_pairs_chunk=40, batch_axes=("data", "fsdp"))
    assert AllPairsLayout.from_config(c) == AllPairsLayout("rows", ("data", "fsdp"), 40)
