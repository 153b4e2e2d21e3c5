"""Verified checkpoints and operational faults: checksums catch a flipped byte, a damaged or incomplete latest step
is reported by path and resume falls back to the newest intact one, stray directories are ignored, an unwritable
checkpoint directory stops the run at the failing save, metrics.jsonl never repeats a step, and the non-finite-loss
error says what is true when no checkpoint exists yet."""

import glob
import json
import os
import shutil
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mmjax.train.checkpoint import (CheckpointCorruptError, CheckpointError, Checkpointer, CheckpointWarning,
                                    CheckpointWriteError, tree_checksums)
from mmjax.train.logging import MetricWriter, read_metrics
from tests.train.helpers import SHARED_STEPS, kill_worker_cmd, run_python


def _state(seed):
    k = jax.random.PRNGKey(seed)
    return {"w": jax.random.normal(k, (64, 64)), "b": jnp.arange(7, dtype=jnp.int32) * seed,
            "step": jnp.int32(seed)}


def _abstract(state):
    return jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state)


def _saved(tmp_path, steps=(2, 4)):
    workdir = str(tmp_path / "w")
    ckpt = Checkpointer(workdir)
    for s in steps:
        ckpt.save(s, _state(s), {"position": [0, s]})
    ckpt.close()
    return workdir


def _assert_tree_equal(a, b):
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _flip_byte(path):
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x01
    open(path, "wb").write(bytes(data))


def _largest_data_file(step_dir):
    return max(glob.glob(os.path.join(step_dir, "state", "**", "d", "*"), recursive=True), key=os.path.getsize)


def test_checksums_are_crc32_of_each_leaf_and_tell_leaves_apart():
    state = _state(3)
    sums, unverified = tree_checksums(state)
    assert unverified == []
    w = np.asarray(state["w"])
    assert sums["['w']"] == f"float32[64, 64]:{zlib.crc32(w.tobytes()):08x}"  # plain numpy oracle
    half = jnp.asarray([1.5, -2.0], jnp.bfloat16)  # no Python buffer format: hashed through a uint8 view
    assert tree_checksums({"h": half})[0]["['h']"] == \
        f"bfloat16[2]:{zlib.crc32(np.asarray(half).tobytes()):08x}"
    one_ulp = jnp.nextafter(state["w"][5, 5], jnp.float32(jnp.inf))
    changed = dict(state, w=state["w"].at[5, 5].set(one_ulp))
    assert tree_checksums(changed)[0]["['w']"] != sums["['w']"]
    assert tree_checksums(changed)[0]["['b']"] == sums["['b']"]


def test_flipped_byte_in_array_data_is_detected_on_restore(tmp_path):
    workdir = _saved(tmp_path, steps=(2,))
    step_dir = os.path.join(workdir, "checkpoints", "2")
    _flip_byte(_largest_data_file(step_dir))
    ckpt = Checkpointer(workdir)
    with pytest.raises(CheckpointCorruptError, match=step_dir):
        ckpt.restore(_abstract(_state(2)), 2)
    ckpt.close()


def _damage(step_dir, how):
    if how == "flipped_byte":
        _flip_byte(_largest_data_file(step_dir))
    elif how == "deleted_data_file":
        os.remove(_largest_data_file(step_dir))
    elif how == "truncated_manifest":
        path = os.path.join(step_dir, "state", "manifest.ocdbt")
        open(path, "r+b").truncate(10)
    elif how == "truncated_meta_json":
        path = os.path.join(step_dir, "meta", "metadata")
        open(path, "r+b").truncate(5)
    elif how == "deleted_step_metadata":
        os.remove(os.path.join(step_dir, "_CHECKPOINT_METADATA"))
    else:
        raise ValueError(how)


@pytest.mark.parametrize("how", ["flipped_byte", "deleted_data_file", "truncated_manifest", "truncated_meta_json",
                                 "deleted_step_metadata"])
def test_damaged_latest_falls_back_to_newest_intact_step(tmp_path, how):
    workdir = _saved(tmp_path)
    bad = os.path.join(workdir, "checkpoints", "4")
    _damage(bad, how)
    ckpt = Checkpointer(workdir)
    with pytest.warns(CheckpointWarning, match=bad) as record:
        state, meta = ckpt.resume(_abstract(_state(4)))
    assert any("quarantine" in str(w.message) for w in record)
    _assert_tree_equal(state, _state(2))
    assert meta["position"] == [0, 2]
    assert not os.path.exists(bad) and os.listdir(os.path.join(workdir, "quarantine", "checkpoints")) == ["4"]
    # The replayed run saves step 4 again without colliding with the damaged one.
    ckpt.save(4, _state(4), {"position": [0, 4]})
    ckpt.wait()
    _assert_tree_equal(ckpt.restore(_abstract(_state(4)), 4)[0], _state(4))
    ckpt.close()


def test_stray_numeric_directories_are_ignored_with_a_warning(tmp_path):
    workdir = _saved(tmp_path)
    for d in ("checkpoints/6", "best/9"):
        os.makedirs(os.path.join(workdir, d))
    ckpt = Checkpointer(workdir)
    with pytest.warns(CheckpointWarning, match="not a finished checkpoint"):
        state, meta = ckpt.resume(_abstract(_state(4)))
    _assert_tree_equal(state, _state(4))
    assert sorted(os.listdir(os.path.join(workdir, "quarantine"))) == ["best", "checkpoints"]
    ckpt.save(6, _state(6), {"position": [0, 6]})
    ckpt.close()


def test_best_saved_after_the_resumed_step_is_replayed_not_duplicated(tmp_path):
    workdir = _saved(tmp_path, steps=(2,))
    ckpt = Checkpointer(workdir)
    ckpt.save_best(3, _state(3), {"position": [0, 3]}, rsum=50.0)
    ckpt.close()  # a kill here used to make every restart fail with StepAlreadyExistsError
    ckpt = Checkpointer(workdir)
    state, _ = ckpt.resume(_abstract(_state(2)))
    _assert_tree_equal(state, _state(2))
    ckpt.save_best(3, _state(3), {"position": [0, 3]}, rsum=50.0)
    ckpt.wait()
    _assert_tree_equal(ckpt.restore(_abstract(_state(3)), best=True)[0], _state(3))
    ckpt.close()


def test_every_step_damaged_raises_listing_them_and_moves_nothing(tmp_path):
    workdir = _saved(tmp_path)
    for s in ("2", "4"):
        _flip_byte(_largest_data_file(os.path.join(workdir, "checkpoints", s)))
    ckpt = Checkpointer(workdir)
    with pytest.warns(CheckpointWarning), pytest.raises(CheckpointError, match="no intact checkpoint") as err:
        ckpt.resume(_abstract(_state(4)))
    for s in ("2", "4"):
        assert os.path.join(workdir, "checkpoints", s) in str(err.value)
        assert os.path.isdir(os.path.join(workdir, "checkpoints", s))
    ckpt.close()


def test_meta_check_errors_are_not_taken_for_damage(tmp_path):
    workdir = _saved(tmp_path)

    def refuse(meta):
        raise ValueError("config changed")

    ckpt = Checkpointer(workdir)
    with pytest.raises(ValueError, match="config changed"):
        ckpt.resume(_abstract(_state(4)), check_meta=refuse)
    assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["2", "4"]
    ckpt.close()


def test_unwritable_checkpoint_directory_fails_the_save_naming_it(tmp_path):
    workdir = _saved(tmp_path, steps=(2,))
    ckpt = Checkpointer(workdir)
    shutil.rmtree(ckpt.directory)
    open(ckpt.directory, "w").close()  # as root, permission bits would not stop the write; a file does
    with pytest.raises(CheckpointWriteError, match=f"step 4 to {ckpt.directory}"):
        ckpt.save(4, _state(4), {"position": [0, 4]})


def test_metric_writer_drops_rows_after_the_resumed_step(tmp_path):
    workdir = str(tmp_path)
    writer = MetricWriter(workdir)
    for step in range(1, 7):
        writer.write(step, {"loss": float(step)})
    writer.close()
    with open(os.path.join(workdir, "metrics.jsonl"), "a") as f:
        f.write('{"step": 7, "lo')  # a kill mid-write
    writer = MetricWriter(workdir, resume_step=4)
    for step in range(5, 9):
        writer.write(step, {"loss": float(step)})
    writer.close()
    rows = read_metrics(os.path.join(workdir, "metrics.jsonl"))
    assert [r["step"] for r in rows] == list(range(1, 9))
    assert [r["loss"] for r in rows] == [float(s) for s in range(1, 9)]


def _tensorboard_scalars(directory):
    """{(tag, step): value} of the event files in `directory`: TFRecord frames (length, its CRC, an Event proto, its
    CRC) decoded with tensorboardX's own protos."""
    from tensorboardX.proto.event_pb2 import Event
    out = {}
    for path in glob.glob(os.path.join(directory, "events.out.tfevents.*")):
        data, at = open(path, "rb").read(), 0
        while at < len(data):
            n = int.from_bytes(data[at:at + 8], "little")
            event = Event.FromString(data[at + 12:at + 12 + n])
            at += 12 + n + 4
            out.update({(v.tag, event.step): v.simple_value for v in event.summary.value})
    return out


def test_metric_writer_writes_tensorboard_events_without_importing_torch(tmp_path):
    # tensorboardX imports torch whenever it is installed (2.5 s of every train.py start); torch stays importable.
    code = ("import importlib.util, sys\n"
            "from mmjax.train.logging import MetricWriter\n"
            "writer = MetricWriter(sys.argv[1])\n"
            "writer.write(3, {'loss': 0.5})\n"
            "writer.close()\n"
            "print('TORCH IMPORTED', 'torch' in sys.modules)\n"
            "if importlib.util.find_spec('torch') is not None:\n"
            "    import torch\n"
            "    print('TORCH AFTERWARDS', torch.ones(2).sum().item())\n")
    proc = run_python(["-c", code, str(tmp_path)])
    assert "TORCH IMPORTED False" in proc.stdout, proc.stdout
    import importlib.util
    if importlib.util.find_spec("torch") is not None:
        assert "TORCH AFTERWARDS 2.0" in proc.stdout, proc.stdout
    assert _tensorboard_scalars(os.path.join(tmp_path, "tensorboard")) == {("loss", 3): 0.5}


# ------------------------------------------------------------------------------------------ through the loop

CONFIG = "configs/maxmatch_shapes.py:smoke"


@pytest.mark.slow
def test_unwritable_checkpoint_directory_mid_run_stops_at_the_next_save(tmp_path):
    workdir = str(tmp_path / "run")
    proc = run_python(kill_worker_cmd(CONFIG, workdir, "unwritable@checkpoint_committed", 2,
                                      SHARED_STEPS, "--config.train.checkpoint_every=2",
                                      "--config.train.eval_every=0", "--config.train.log_every=1"),
                      check=False, timeout=300)
    assert proc.returncode != 0
    assert "CheckpointWriteError" in proc.stderr and os.path.join(workdir, "checkpoints") in proc.stderr, \
        proc.stderr[-3000:]
    steps = [int(line.split()[3]) for line in proc.stdout.splitlines() if line.startswith("[kill_worker] event step")]
    assert max(steps) == 3, steps  # the save at step 4 raised before step 4 was reported done: the run stopped there
    assert not os.path.exists(os.path.join(workdir, "export"))


@pytest.mark.slow
def test_non_finite_loss_before_any_checkpoint_says_so(tmp_path):
    workdir = str(tmp_path / "nan")
    proc = run_python(kill_worker_cmd(CONFIG, workdir, "none", 0, "--config.optim.name=sgd",
                                      "--config.optim.lr=1e30", "--config.optim.clip_norm=0",
                                      "--config.train.log_every=1", "--config.train.num_steps=6",
                                      "--config.train.checkpoint_every=100", "--config.train.eval_every=0"),
                      check=False)
    assert proc.returncode != 0 and "NonFiniteLossError" in proc.stderr, proc.stderr[-3000:]
    message = proc.stderr[proc.stderr.index("NonFiniteLossError"):]
    assert "None" not in message.splitlines()[0] and "no checkpoint has been written yet" in message
    rows = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))] \
        if os.path.exists(os.path.join(workdir, "metrics.jsonl")) else []
    assert all(np.isfinite(r["loss/total"]) for r in rows if "loss/total" in r)


def test_a_broken_metrics_line_is_skipped_with_a_warning_naming_file_and_line(tmp_path):
    """The state a killed run leaves (its last line cut short) or a broken line in the middle: readers keep every
    good row and warn with file:line; a resumed run's writer drops the line with the same warning."""
    import warnings

    from mmjax.jsonl import JSONLWarning, read_jsonl
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "loss/total": 2.0}\n[1, 2]\n{"step": 2, "loss/total": 1.5}\n{"step": 3, "lo')
    with pytest.warns(JSONLWarning) as caught:
        rows = read_metrics(str(path))
    assert [r["step"] for r in rows] == [1, 2]
    assert [str(w.message).split(": not")[0] for w in caught] == [f"{path}:2", f"{path}:4"]
    with pytest.raises(ValueError, match=rf"{path}:2: not a JSON object"):
        read_jsonl(str(path), strict=True)
    with warnings.catch_warnings(record=True) as resumed:
        warnings.simplefilter("always")
        MetricWriter(str(tmp_path), resume_step=1).close()
    assert any(f"{path}:4" in str(w.message) for w in resumed)
    assert [r["step"] for r in read_metrics(str(path))] == [1]
