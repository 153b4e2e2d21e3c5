"""Orbax checkpoints: latest-N for resuming plus the best by validation RSUM.

Layout in the workdir:
    checkpoints/<step>/   state (params, batch_stats, optimiser state, step, rng) + meta (data position, config)
    best/<step>/          the same for the best validation RSUM so far (max_to_keep=1, `best_fn`)

Saves are asynchronous (training continues while arrays are written). Orbax writes each step into a temporary
directory and renames it on completion, so a process killed mid-save leaves no checkpoint that `latest_step()` would
return; resuming always reads a finished one. Restoring takes an abstract target with shardings, so a checkpoint
written on one mesh restores onto another.
"""

import os

import jax
import orbax.checkpoint as ocp


class Checkpointer:

    def __init__(self, workdir: str, *, keep: int = 2, async_save: bool = True):
        self.directory = os.path.abspath(os.path.join(workdir, "checkpoints"))
        self.best_directory = os.path.abspath(os.path.join(workdir, "best"))
        opts = dict(enable_async_checkpointing=async_save, create=True)
        self.manager = ocp.CheckpointManager(
            self.directory, options=ocp.CheckpointManagerOptions(max_to_keep=keep, **opts))
        self.best = ocp.CheckpointManager(
            self.best_directory, options=ocp.CheckpointManagerOptions(
                max_to_keep=1, best_fn=lambda m: m["rsum"], best_mode="max", **opts))

    @staticmethod
    def _args(state, meta):
        return ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta))

    def save(self, step: int, state, meta: dict, *, force: bool = False):
        self.manager.save(step, args=self._args(state, meta), force=force)

    def save_best(self, step: int, state, meta: dict, rsum: float):
        self.best.save(step, args=self._args(state, meta), metrics={"rsum": float(rsum)}, force=True)

    def latest_step(self):
        return self.manager.latest_step()

    def restore(self, abstract_state, step=None, *, best: bool = False):
        """(state, meta) from `step` (default latest finished) onto the shardings in `abstract_state`."""
        manager = self.best if best else self.manager
        step = (manager.best_step() if best else manager.latest_step()) if step is None else step
        if step is None:
            raise FileNotFoundError(f"no finished checkpoint in {manager.directory}")
        target = jax.tree_util.tree_map(
            lambda x: ocp.utils.to_shape_dtype_struct(x) if hasattr(x, "shape") else x, abstract_state)
        restored = manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(target), meta=ocp.args.JsonRestore()))
        return restored["state"], restored["meta"]

    def wait(self):
        self.manager.wait_until_finished()
        self.best.wait_until_finished()

    def close(self):
        self.wait()
        self.manager.close()
        self.best.close()
