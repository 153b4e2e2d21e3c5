"""Train state and its sharded initialisation.

The state is a pytree: step, params (trainable), extra (other Flax collections, e.g. batch_stats), optimiser state,
and the base RNG key (per-step keys are `fold_in(rng, step)`, so a resumed run draws exactly the same keys).

Initialisation follows the big_vision pattern: shapes via `jax.eval_shape`, shardings from the config rules, then
`jax.jit(init, out_shardings=...)` so every array is created directly on its devices (nothing is materialised on one
host first).
"""

from typing import Any

import flax
import jax
import jax.numpy as jnp

from mmjax.train.sharding import FSDP_MIN_SIZE, tree_shardings


@flax.struct.dataclass
class TrainState:
    step: jax.Array
    params: Any
    extra: Any
    opt_state: Any
    rng: jax.Array


def split_variables(variables):
    variables = dict(variables)
    params = variables.pop("params")
    return params, variables


def create_train_state(init_variables, tx, rng, mesh, rules, fsdp_min_size: int = FSDP_MIN_SIZE):
    """(state, state_shardings). `init_variables(rng) -> flax variables` must be pure. The rules apply to the paths
    of the whole state, so an "fsdp" rule shards a parameter's optimiser moments (`opt_state/…/<param path>`) too."""

    def init(rng):
        params_rng, state_rng = jax.random.split(rng)
        params, extra = split_variables(init_variables(params_rng))
        return TrainState(step=jnp.zeros((), jnp.int32), params=params, extra=extra, opt_state=tx.init(params),
                          rng=state_rng)

    abstract = jax.eval_shape(init, rng)
    shardings = tree_shardings(abstract, rules, mesh, fsdp_min_size)
    state = jax.jit(init, out_shardings=shardings)(rng)
    return state, shardings


def abstract_with_shardings(state_or_abstract, shardings):
    """ShapeDtypeStructs carrying shardings: the restore target for Orbax (any mesh)."""
    return jax.tree_util.tree_map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                                  state_or_abstract, shardings)
