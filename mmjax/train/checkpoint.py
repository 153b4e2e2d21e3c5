"""Orbax checkpoints: latest-N for resuming plus the best by validation RSUM, each verified on restore.

Layout in the workdir:
    checkpoints/<step>/   state (params, extra, optimiser state, step, rng) + meta (data position, best RSUM, config,
                          one checksum per state array)
    best/<step>/          the same for the best validation RSUM so far (max_to_keep=1, `best_fn`)
    quarantine/<dir>/<step>[.N]   steps moved aside on resume (damaged, or directories that are not checkpoints)

Saves are asynchronous (training continues while arrays are written). Orbax writes each step into a temporary
directory and renames it on completion, so a process killed mid-save leaves no finished step; `resume` reads only
finished ones. Restoring takes an abstract target with shardings, so a checkpoint written on one mesh restores onto
another.

Verification: at save time each state leaf's bytes are hashed on the host,

    checksum(leaf) = f"{dtype}{shape}:{crc32(bytes(leaf)):08x}"

(taken from a `device_get` of the very arrays handed to Orbax — jax arrays are immutable, so both describe the same
values even though the write finishes later) and stored in the step's JSON meta; `restore` recomputes them on the
restored arrays and raises `CheckpointCorruptError` naming the step directory and the leaf on any difference.
Leaves that no single process holds whole (sharded across processes) are not hashed — they are listed in
meta["unverified"]. See docs/design.md#checkpoint-verification.

Resume (`resume`): the newest finished step that restores and verifies wins. Newer steps that fail (a truncated or
deleted file, broken JSON, a checksum mismatch) are reported with their path, moved to `quarantine/`, and the run
falls back (a `CheckpointWarning`); numeric directories that are not finished checkpoints (no
`_CHECKPOINT_METADATA`, e.g. an empty `checkpoints/12/`) are moved aside the same way — left in place, a later save
of that step would collide with them. `best/` steps newer than the resumed step are deleted: the resumed run replays
those validations bit for bit and saves the same steps again. When every finished step fails, nothing is moved and
`CheckpointError` lists them all (a systematic failure — e.g. a changed model — must not silently restart training).
"""

from __future__ import annotations

import os
import shutil
import warnings
import zlib

import jax
import numpy as np
import orbax.checkpoint as ocp

STEP_METADATA = "_CHECKPOINT_METADATA"  # written by Orbax just before a step's final rename


class CheckpointError(RuntimeError):
    """A checkpoint directory that cannot be used; the message names the path."""


class CheckpointCorruptError(CheckpointError):
    pass


class CheckpointWriteError(CheckpointError):
    pass


class CheckpointWarning(UserWarning):
    pass


def _whole_leaf(x):
    """The leaf as an array this process holds entirely (a replica of a replicated one), or None if it does not."""
    if isinstance(x, jax.Array):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        if not x.is_fully_addressable:
            return x.addressable_data(0) if x.is_fully_replicated else None
    return x


def tree_checksums(tree) -> tuple[dict[str, str], list[str]]:
    """({leaf path: "dtype[shape]:crc32"}, [paths of leaves not held whole by this process])."""
    keyed = [(jax.tree_util.keystr(p), _whole_leaf(x)) for p, x in jax.tree_util.tree_leaves_with_path(tree)]
    unverified = [k for k, x in keyed if x is None]
    keyed = [(k, x) for k, x in keyed if x is not None]
    hosts = jax.device_get([x for _, x in keyed])  # one batched transfer, not one per leaf
    sums = {}
    for (key, _), host in zip(keyed, hosts):
        host = np.ascontiguousarray(np.asarray(host))
        # crc32 of the raw bytes, viewed without a copy (also for bfloat16 etc., which have no buffer format);
        # dtype and shape are part of the record so a reinterpreted leaf differs.
        raw = host.reshape(-1).view(np.uint8)
        sums[key] = f"{host.dtype}{list(host.shape)}:{zlib.crc32(raw):08x}"
    return sums, unverified


def verify_checksums(tree, expected: dict, where: str):
    actual, _ = tree_checksums(tree)
    missing = sorted(set(expected) - set(actual))
    bad = [k for k in sorted(expected) if k in actual and actual[k] != expected[k]]
    if missing or bad:
        detail = "; ".join([f"{k}: saved {expected[k]}, read {actual[k]}" for k in bad[:5]] +
                           [f"{k}: not restored" for k in missing[:5]])
        raise CheckpointCorruptError(f"checkpoint {where} is corrupt: {len(bad) + len(missing)} array(s) differ from "
                                     f"their save-time checksum ({detail})")


def _warn(message: str):
    warnings.warn(message, CheckpointWarning, stacklevel=3)


def barrier_prefix(name: str) -> "ocp.options.MultiprocessingOptions":
    """Multi-process options whose barrier keys start with `mmjax_<name>`. Orbax names its barriers by operation
    only ("ThreadSaveMultiHostValueHolder:set_value_start", "async_write_complete.<step>"), so two writers with the
    default options share keys: a best save finalising in its background thread while the regular save of the same
    step starts on the main thread fails with "Barrier ... is already ongoing" on one process, or pairs one
    process's barrier with the other writer's on the other and hangs (tests/train/test_multiprocess.py). Each writer
    (the two managers, each export) gets its own prefix."""
    return ocp.options.MultiprocessingOptions(barrier_sync_key_prefix=f"mmjax_{name}")


def _barrier(name: str):
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils
        multihost_utils.sync_global_devices(name)


class Checkpointer:

    def __init__(self, workdir: str, *, keep: int = 2, async_save: bool = True):
        self.workdir = os.path.abspath(workdir)
        self.directory = os.path.join(self.workdir, "checkpoints")
        self.best_directory = os.path.join(self.workdir, "best")
        # cleanup_tmp_directories: a killed save leaves `<step>.orbax-checkpoint-tmp`; the replayed save of that
        # step must not trip over it.
        opts = dict(enable_async_checkpointing=async_save, create=True, cleanup_tmp_directories=True)
        self.manager = ocp.CheckpointManager(
            self.directory, options=ocp.CheckpointManagerOptions(
                max_to_keep=keep, multiprocessing_options=barrier_prefix("checkpoints"), **opts))
        self.best = ocp.CheckpointManager(
            self.best_directory, options=ocp.CheckpointManagerOptions(
                max_to_keep=1, best_fn=lambda m: m["rsum"], best_mode="max",
                multiprocessing_options=barrier_prefix("best"), **opts))
        self._issued = []  # (manager, step) of saves whose completion has not been checked yet

    # ------------------------------------------------------------------------------------------------ saving

    def _args(self, state, meta):
        sums, unverified = tree_checksums(state)
        meta = dict(meta, checksums=sums, unverified=unverified)
        return ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta))

    def _save(self, manager, step: int, state, meta: dict, **kw):
        path = os.path.join(str(manager.directory), str(step))
        self._check_issued(manager)
        # Probe first: an unwritable directory fails here, synchronously and by name, instead of in Orbax's
        # background thread while training goes on.
        probe = os.path.join(str(manager.directory), f".write-probe-{jax.process_index()}")
        try:
            with open(probe, "w") as f:
                f.write("ok")
            os.remove(probe)
            issued = manager.save(step, args=self._args(state, meta), **kw)
        except Exception as e:
            raise CheckpointWriteError(f"could not save checkpoint step {step} to {path}: {e}; training "
                                       f"stopped") from e
        if issued:  # False: Orbax's save policy skipped the step (nothing to check for)
            self._issued.append((manager, step))

    def _check_issued(self, manager=None):
        """Waits for the issued saves (of `manager`; None = all) and raises if one did not produce its step."""
        issued = [(m, s) for m, s in self._issued if manager is None or m is manager]
        self._issued = [(m, s) for m, s in self._issued if not (manager is None or m is manager)]
        for manager in {id(m): m for m, _ in issued}.values():
            try:
                manager.wait_until_finished()
            except Exception as e:
                steps = [s for m, s in issued if m is manager]
                raise CheckpointWriteError(f"checkpoint step(s) {steps} in {manager.directory} failed to write: "
                                           f"{e}; training stopped") from e
        for manager, step in issued:
            path = os.path.join(str(manager.directory), str(step))
            if not os.path.exists(os.path.join(path, STEP_METADATA)):
                raise CheckpointWriteError(f"checkpoint step {step} was not written to {path} (see the errors "
                                           f"logged above); training stopped")

    def save(self, step: int, state, meta: dict, *, force: bool = False):
        self._save(self.manager, step, state, meta, force=force)

    def save_best(self, step: int, state, meta: dict, rsum: float):
        self._save(self.best, step, state, meta, metrics={"rsum": float(rsum)}, force=True)

    # ------------------------------------------------------------------------------------------------ reading

    def latest_step(self):
        return self.manager.latest_step()

    def restore(self, abstract_state, step=None, *, best: bool = False, check_meta=None):
        """(state, meta) from `step` (default latest finished) onto the shardings in `abstract_state`, verified
        against the save-time checksums. `check_meta(meta)` runs before the arrays are read (e.g. a config check)."""
        manager = self.best if best else self.manager
        step = (manager.best_step() if best else manager.latest_step()) if step is None else step
        if step is None:
            raise FileNotFoundError(f"no finished checkpoint in {manager.directory}")
        where = os.path.join(str(manager.directory), str(step))
        try:
            meta = manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
        except Exception as e:
            raise CheckpointCorruptError(f"checkpoint {where}: cannot read its meta item: {e}") from e
        if not isinstance(meta, dict):
            raise CheckpointCorruptError(f"checkpoint {where}: its meta item is not a JSON object")
        if check_meta is not None:
            check_meta(meta)
        target = jax.tree_util.tree_map(
            lambda x: ocp.utils.to_shape_dtype_struct(x) if hasattr(x, "shape") else x, abstract_state)
        try:
            state = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(target)))["state"]
        except Exception as e:
            raise CheckpointCorruptError(f"checkpoint {where}: cannot read its state: {e}") from e
        if "checksums" in meta:
            verify_checksums(state, meta["checksums"], where)
        else:
            _warn(f"checkpoint {where} predates checksums; restored without verification")
        return state, meta

    def _quarantine(self, path: str, reason: str):
        """Moves `path` to <workdir>/quarantine/<its directory>/ (never deletes: it may be worth inspecting)."""
        dest_dir = os.path.join(self.workdir, "quarantine", os.path.basename(os.path.dirname(path)))
        dest = os.path.join(dest_dir, os.path.basename(path))
        n = 0
        while os.path.exists(dest):
            n += 1
            dest = os.path.join(dest_dir, f"{os.path.basename(path)}.{n}")
        if jax.process_index() == 0:
            os.makedirs(dest_dir, exist_ok=True)
            shutil.move(path, dest)
        _warn(f"{reason}; moved {path} to {dest}")

    def _strays(self, directory: str) -> list[str]:
        """Numeric entries of `directory` that are not finished Orbax steps."""
        return [os.path.join(directory, name) for name in sorted(os.listdir(directory))
                if name.isdigit() and not os.path.exists(os.path.join(directory, name, STEP_METADATA))]

    def resume(self, abstract_state, *, check_meta=None):
        """(state, meta) of the newest intact step, or None when there is none; see the module docstring."""
        for directory in (self.directory, self.best_directory):
            for path in self._strays(directory):
                self._quarantine(path, f"{path} is not a finished checkpoint (no {STEP_METADATA}); ignoring it")
        _barrier("mmjax-checkpoint-strays")
        self.manager.reload()
        self.best.reload()
        failures, restored, resumed = [], None, 0
        for step in sorted(self.manager.all_steps(), reverse=True):
            try:
                restored, resumed = self.restore(abstract_state, step, check_meta=check_meta), step
                break
            except CheckpointCorruptError as e:
                failures.append((os.path.join(self.directory, str(step)), str(e)))
                _warn(f"{e}; trying an older step")
        if failures and restored is None:
            raise CheckpointError(f"no intact checkpoint in {self.directory}; every finished step failed:\n" +
                                  "\n".join(f"  {path}: {msg}" for path, msg in failures) +
                                  "\nMove them away (or use a new workdir) to start over.")
        for path, _ in failures:
            self._quarantine(path, f"falling back to step {resumed}: {path} is damaged")
        for step in self.best.all_steps():
            if step > resumed and jax.process_index() == 0:
                # Replayed bit for bit from `resumed`, so the run saves this step again; left here it collides.
                shutil.rmtree(os.path.join(self.best_directory, str(step)))
        _barrier("mmjax-checkpoint-resume")
        self.manager.reload()
        self.best.reload()
        return restored

    def wait(self):
        self._check_issued()

    def close(self):
        try:
            self.wait()
        finally:
            self.manager.close()
            self.best.close()
