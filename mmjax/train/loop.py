"""The trainer: one pure jitted step `(state, batch, rng) -> (state, metrics)` driven by a resumable loop.

Per step: the pipeline yields this process's rows of the global batch (a pure function of (seed, epoch, step)); they
become global `jax.Array`s sharded over the mesh's batch axes; the step computes the loss over the whole global
batch (the B×cB similarity is global — XLA all-gathers what it needs), applies the optimiser and returns metrics.
The task (`mmjax.train.task.Task`) prepares each batch and names its training phases (e.g. the VSE0
warm-up, the hard-negative ramp, hardest negatives), each compiled as its own step when first reached.

Checkpoints (Orbax, async) hold the state, the data position and the config; a restarted run resumes from the
newest intact checkpoint (`Checkpointer.resume`: verified, damaged steps set aside) and reproduces the uninterrupted
run bit for bit (same keys: `fold_in(state.rng, step)`; same batches; validations and best saves after the resumed
step replayed, `metrics.jsonl` rows after it dropped) — whatever point the previous run was killed at. A resume whose
outcome-affecting config fields changed is refused (`ConfigError` naming them). A non-finite loss stops training
with an error naming the step; the last good checkpoint stays on disk. A checkpoint that cannot be written stops
training at that save (`CheckpointWriteError` naming the path); any error closes the iterator, the log and the
checkpointer on its way out, so no background thread keeps the process alive.

A cluster's view (docs/reliability.md#preemption): the lead process holds `<workdir>/LOCK` for the run
(`mmjax.train.workdir_lock`: a second run there refuses at start, naming the holder); SIGTERM / SIGINT stop training
after the step in flight with a checkpoint of that step and raise `TrainingPreempted` (`mmjax.train.preemption`;
`train.py` exits with code 75; several processes act one step later, all on the same step); besides every
`train.checkpoint_every` steps, a checkpoint is written whenever `train.checkpoint_every_s` seconds have passed since
the last one (0 = off).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import PartitionSpec as P

from mmjax.train.checkpoint import Checkpointer
from mmjax.train.export import export_params
from mmjax.train.logging import MetricWriter, Progress
from mmjax.train.optim import make_optimizer
from mmjax.train.sharding import (FSDP_MIN_SIZE, batch_sharding, forward_shardings, make_mesh, replicated, rules_for,
                                  shard_batch)
from mmjax.models.factory import count_params
from mmjax.train.state import TrainState, abstract_with_shardings, create_train_state
from mmjax.train.preemption import STOP, TIME_DUE, StopSignals, TrainingPreempted, agree, agree_later
from mmjax.train.task import Phase
from mmjax.train.workdir_lock import WorkdirLock


class NonFiniteLossError(RuntimeError):
    pass


def _cast_floating(tree, dtype):
    return jax.tree_util.tree_map(lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, tree)


def make_train_step(task, tx, phase: Phase, *, compute_dtype: str = "float32", gather_params=False):
    """The pure step of one training `phase` (`mmjax.train.task`). `compute_dtype='bfloat16'` runs the model on bf16
    copies of the f32 params and of the task's `float_inputs`. `gather_params`: True (every parameter replicated) or
    a tree of shardings like the params (`mmjax.train.sharding.forward_shardings`: the leaves under "fsdp" rules
    replicated, others as stored), set whenever a sharding rule is "fsdp": the stored
    parameters stay split, and the step all-gathers them once before the forward pass (their gradients are reduced
    and returned to the split layout; XLA chose an all-reduce then a slice here), so every activation keeps the batch
    layout; left to itself, XLA's propagation carried the
    weights' split into the activations and resharded them ("involuntary full rematerialization": 114 GiB of
    collectives per step for MaxMatch + BERT-base at B = 1K on 8 devices, docs/scaling.md). Needs the mesh in context
    (`jax.set_mesh`)."""
    float_inputs = tuple(task.float_inputs)

    def step(state: TrainState, batch: dict, rng):
        phase_value = phase.value(state.step)

        def loss_fn(params):
            if gather_params is True:
                params = jax.tree_util.tree_map(lambda x: jax.lax.with_sharding_constraint(x, P()), params)
            elif gather_params is not False and gather_params is not None:
                params = jax.lax.with_sharding_constraint(params, gather_params)
            p, b = params, batch
            if compute_dtype != "float32":
                p = _cast_floating(params, jnp.dtype(compute_dtype))
                b = {k: (v.astype(compute_dtype) if k in float_inputs and jnp.issubdtype(v.dtype, jnp.floating)
                         else v) for k, v in batch.items()}
            return task.loss(p, state.extra, b, rng, phase_value)

        (loss, (metrics, extra)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        metrics = dict(metrics, grad_norm=optax.tree.norm(grads))
        new_extra = jax.tree_util.tree_map(lambda new, old: new.astype(old.dtype), dict(extra), dict(state.extra))
        return state.replace(step=state.step + 1, params=params, extra=new_extra, opt_state=opt_state), metrics

    return step


def _quietly(close):
    """Runs a cleanup on the error path; its own failure must not hide the error that ended the run."""
    try:
        close()
    except Exception as e:  # noqa: BLE001
        print(f"[train] while cleaning up: {type(e).__name__}: {e}", flush=True)


def _fire(hooks, event: str, step: int):
    if jax.process_index() == 0:
        for hook in hooks:
            hook(event, step)


def train(config, workdir: str, task, *, validate: Callable[[dict], dict] | None = None,
          hooks: Sequence[Callable[[str, int], None]] = (), export_info: dict | None = None,
          check_resume: Callable[[dict, dict], None] | None = None) -> dict:
    """Trains `task` (see `mmjax.tasks`) as `config` says in `workdir`, resuming if it holds checkpoints.

    validate(variables) -> metrics: the per-epoch validation (the experiment passes the configured retrieval
      evaluator on the val split; "rsum" drives best-checkpointing). None = no validation.
    hooks: callables `hook(event, step)` run on the lead process after "step" (each finished step), "checkpoint"
      (a regular save was issued), "best" (a best save was issued) and "export" (params exported; step = last).
      Tests use them to inject faults; nothing in the loop depends on them.
    export_info: written into `export/export.json` (final parameters) and `export_best/export.json` (those of
      each new best validation RSUM) with the task's own `export_info()` and the step.
    check_resume(saved config, current config) (dicts): called before resuming from a checkpoint that recorded
      its config; raises to refuse the resume (the experiment passes `mmjax.config_validation.check_resume`).
    The config is expected to be validated by the caller (`mmjax.config_validation.validate`).
    Returns {"final_val": metrics, "best_rsum": float, "state": TrainState, "start_step": the step this call
    started from (0, or the resumed checkpoint's)}.
    """
    if config.get("distributed") and config.distributed.get("coordinator"):
        jax.config.update("jax_cpu_collectives_implementation", config.distributed.get("cpu_collectives", "gloo"))
        jax.distributed.initialize(config.distributed.coordinator, num_processes=config.distributed.num_processes,
                                   process_id=config.distributed.process_id)
    is_lead = jax.process_index() == 0
    devices = jax.devices()
    if config.sharding.get("num_devices"):
        if config.sharding.num_devices > len(devices):
            raise ValueError(f"config.sharding.num_devices={config.sharding.num_devices} but only {len(devices)} "
                             f"device(s) are available")
        devices = devices[:config.sharding.num_devices]
    mesh = make_mesh(tuple(config.sharding.mesh), devices)
    batch_axes = tuple(config.sharding.batch_axes)
    n_shards = int(np.prod([mesh.shape[a] for a in batch_axes]))
    if config.data.batch_size % n_shards:
        raise ValueError(f"config.data.batch_size={config.data.batch_size} is not divisible by the {n_shards} "
                         f"devices of mesh axes {batch_axes}")
    os.makedirs(workdir, exist_ok=True)
    with contextlib.ExitStack() as always:
        if is_lead:  # one run per workdir: a scheduler's relaunch into a busy workdir refuses here
            always.enter_context(WorkdirLock(workdir))
        on_error = always.enter_context(contextlib.ExitStack())  # emptied on success: on an error, close all
        data = task.make_iterator((0, 0))
        on_error.callback(_quietly, data.close)
        steps_per_epoch = data.steps_per_epoch
        total_steps = int(config.train.num_steps or config.train.num_epochs * steps_per_epoch)
        phases = tuple(task.phases(steps_per_epoch))
        evals_per_epoch = int(config.train.get("evals_per_epoch", 1))
        eval_every = (max(1, steps_per_epoch // evals_per_epoch) if config.train.get("eval_every_epoch")
                      else int(config.train.eval_every))
        select_metric = config.train.get("select_metric", "rsum")
        sample = task.prepare_batch(data.batch_at(0, 0))

        params_shape = jax.eval_shape(lambda r: task.init_variables(r, sample), jax.random.PRNGKey(0))["params"]
        tx, schedule = make_optimizer(config.optim, params_shape, total_steps)
        rng = jax.random.PRNGKey(config.seed)
        state, state_shardings = create_train_state(lambda r: task.init_variables(r, sample), tx, rng, mesh,
                                                    rules_for(config.sharding),
                                                    config.sharding.get("fsdp_min_size", FSDP_MIN_SIZE))
        ckpt = Checkpointer(workdir, keep=config.train.keep_checkpoints, async_save=config.train.async_checkpoints)
        on_error.callback(_quietly, ckpt.close)  # an error must not leave Orbax's writer threads holding the process
        position = (0, 0)
        best_rsum = -math.inf
        config_json = json.loads(config.to_json_best_effort())
        export_base = {"task": config.task, **(export_info or {}), **task.export_info()}

        def check_saved_config(meta):
            if "config" in meta and check_resume is not None:  # checkpoints from before configs were recorded: none
                check_resume(meta["config"], config_json)

        resumed = ckpt.resume(abstract_with_shardings(state, state_shardings), check_meta=check_saved_config)
        if resumed is not None:
            state, meta = resumed
            position = tuple(meta["position"])
            best_rsum = meta.get("best_rsum", -math.inf)
            if is_lead:
                print(f"[train] resumed from step {int(state.step)} (data position {position}) in {ckpt.directory}",
                      flush=True)
        start_step = int(state.step)
        if is_lead:  # written after the resume check, so a refused resume leaves the workdir's record as it was
            with open(os.path.join(workdir, "config.json"), "w") as f:
                f.write(config.to_json_best_effort(indent=2))
        data.close()
        data = task.make_iterator(position)
        on_error.callback(_quietly, data.close)

        b_shard = batch_sharding(mesh, batch_axes)
        in_shardings = (state_shardings, {k: b_shard for k in sample}, replicated(mesh))
        out_shardings = (state_shardings, replicated(mesh))
        # One step function per phase (`Task.phases`), compiled when the phase is first reached.
        gather = forward_shardings(params_shape, rules_for(config.sharding), mesh,
                                   config.sharding.get("fsdp_min_size", FSDP_MIN_SIZE))
        steps = [jax.jit(make_train_step(task, tx, p, compute_dtype=config.train.compute_dtype, gather_params=gather),
                         in_shardings=in_shardings, out_shardings=out_shardings, donate_argnums=(0,)) for p in phases]

        def step_fn(step):
            for p, fn in zip(phases, steps):
                if p.covers(step):
                    return fn
            raise ValueError(f"no phase of the task covers step {step}: {phases}")

        writer = MetricWriter(workdir, enabled=is_lead, resume_step=start_step)
        on_error.callback(_quietly, writer.close)
        progress = Progress(total_steps, start_step, task.examples_per_step, enabled=is_lead,
                            every=config.train.progress_every_s)
        on_error.callback(_quietly, progress.close)
        if is_lead and start_step == 0:
            print(f"[train] {config.task}: {count_params(state.params):,} parameters, {total_steps} steps "
                  f"({steps_per_epoch}/epoch), mesh {dict(mesh.shape)}, {jax.process_count()} process(es)", flush=True)

        def meta():
            return {"position": list(data.position), "best_rsum": best_rsum, "step": int(state.step),
                    "config": config_json}

        val_metrics = {}
        pending = []
        t_last = last_save = time.time()
        every_s = float(config.train.get("checkpoint_every_s", 0) or 0)
        stop = always.enter_context(StopSignals())  # the previous handlers come back however the run ends

        def requests():  # this process's stop request and due time-based checkpoint, as `agree` bits
            due = bool(every_s) and time.time() - last_save >= every_s
            return (STOP if stop.requested else 0) | (TIME_DUE if due else 0)

        several = jax.process_count() > 1
        agreed = None   # several processes: the OR of the previous step's requests, queued behind that step
        for step in range(start_step, total_steps):
            batch = shard_batch(task.prepare_batch(next(data)), mesh, batch_axes)
            step_rng = jax.random.fold_in(state.rng, step)
            with jax.set_mesh(mesh):  # the mesh in context: the step's explicitly sharded parts (sharding.all_pairs)
                state, metrics = step_fn(step)(state, batch, step_rng)
            pending.append(metrics)
            done = step + 1
            # A stop request (SIGTERM/SIGINT) or a due time-based checkpoint, agreed by all processes (same step): one
            # process acts at once; several act on the previous step's requests (`agree_later`), read now that this
            # step is queued, so the devices never wait for the check. The first step agrees at once.
            urgent = agreed.result() if agreed is not None else agree(requests())
            regular = done % config.train.checkpoint_every == 0 or done == total_steps or bool(urgent)
            # Metrics are fetched (and checked for finiteness) before every checkpoint, so none holds a diverged state.
            if done % config.train.log_every == 0 or regular:
                host = jax.device_get(pending)
                pending = []
                loss = float(host[-1]["loss/total"])
                if not all(math.isfinite(float(m["loss/total"])) for m in host):
                    # `host` holds steps done-len(host)+1 .. done: name the first non-finite one.
                    bad = done - len(host) + 1 + next(
                        i for i, m in enumerate(host) if not math.isfinite(float(m["loss/total"])))
                    ckpt.wait()
                    last = ckpt.latest_step()
                    ckpt.close()
                    where = (f"the last good checkpoint is {os.path.join(ckpt.directory, str(last))} (step {last})"
                             if last is not None else f"no checkpoint has been written yet (none in {ckpt.directory}); "
                                                      f"a restart trains from step 0")
                    raise NonFiniteLossError(f"non-finite loss at step {bad} (last logged value {loss}); training "
                                             f"stopped; {where}.")
                now = time.time()
                mean = {k: float(np.mean([float(m[k]) for m in host])) for k in host[-1]}
                mean["lr"] = float(schedule(done))
                mean["steps_per_s"] = len(host) / max(now - t_last, 1e-9)
                t_last = now
                writer.write(done, mean)
                progress.update(done, loss)
            if validate is not None and eval_every and (done % eval_every == 0 or done == total_steps):
                val_metrics = validate({"params": state.params, **state.extra})
                writer.write(done, {f"val/{k}": v for k, v in val_metrics.items()})
                if is_lead:
                    shown = ("i2t_r1", "t2i_r1", "rsum", "semantic/rsum", select_metric)
                    print(f"[val] step {done}: " + "  ".join(f"{k} {v:.2f}" for k, v in val_metrics.items()
                                                              if k in shown), flush=True)
                if select_metric not in val_metrics:
                    raise KeyError(f"config.train.select_metric = {select_metric!r} is not a validation metric; "
                                   f"the validation gives {sorted(val_metrics)}")
                if val_metrics[select_metric] > best_rsum:
                    best_rsum = val_metrics[select_metric]
                    ckpt.save_best(done, state, meta(), best_rsum)
                    # The best parameters as an export too, so evaluation can test them (the VSE∞ / Set Div protocol).
                    export_params(workdir, {"params": state.params, **state.extra},
                                  {**export_base, "step": done, "val_rsum": best_rsum}, name="export_best")
                    _fire(hooks, "best", done)
            if regular:
                ckpt.save(done, state, meta(), force=done == total_steps or bool(urgent))
                last_save = time.time()
                _fire(hooks, "checkpoint", done)
            if urgent & STOP:
                ckpt.close()  # waits until the step is on disk
                where = os.path.join(ckpt.directory, str(done))
                cause = stop.requested or "a signal on another process"
                if is_lead:
                    print(f"[train] stopped by {cause} after step {done}; checkpoint {where}; rerun the same command "
                          f"to resume", flush=True)
                raise TrainingPreempted(f"training stopped after step {done} ({cause}); checkpoint {where}", done)
            if several and done < total_steps:
                agreed = agree_later(requests())  # after this step's save, so a time-based one is not asked twice
            _fire(hooks, "step", done)
        ckpt.close()
        data.close()
        writer.close()
        progress.update(total_steps, force=True)
        progress.close()
        export_params(workdir, {"params": state.params, **state.extra}, {**export_base, "step": int(state.step)})
        _fire(hooks, "export", total_steps)
        if validate is not None and not val_metrics and eval_every:
            val_metrics = validate({"params": state.params, **state.extra})
        if is_lead:
            with open(os.path.join(workdir, "train_summary.json"), "w") as f:
                json.dump({"final_val": val_metrics, "best_rsum": best_rsum, "steps": total_steps}, f, indent=2)
        on_error.pop_all()  # finished: everything above was closed in order
        return {"final_val": val_metrics, "best_rsum": best_rsum, "state": state, "start_step": start_step}
