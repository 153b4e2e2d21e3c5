"""A batched `while_loop` that shrinks its working set as problems finish (stream compaction).

Problem. A `while_loop` over a batch of N independent problems (the batched auction) passes over all N every
iteration until the slowest one finishes, so it costs max_b(T_b)·N element-steps for per-problem trip counts T_b.

Compaction. Run on the full batch only while more than C₁ problems are active, gather the active ones into a static
buffer of C₁ slots (`jnp.nonzero(size=C₁)`), run there while more than C₂ are active, gather into C₂, …, and run the
last buffer until every problem is done; after each stage the buffer is scattered back into the full state. With
capacities C_s = N / r^s the cost is

    Σ_s C_s · (T_(N − C_{s+1}) − T_(N − C_s))        (T_(m): the m-th smallest trip count)

— close to mean_b(T_b)·N instead of max_b(T_b)·N when the trip counts have a long tail. A stage is entered only when
the active problems fit its buffer (the loop condition is `count > capacity`), so nothing overflows or is dropped.

Contract for `body(consts, state) -> state`: leaves of `consts` and `state` carry the batch on their LAST axis
(batch-last, as in `mmjax.matching.auction`); a problem with `done_of(state)` true must stay done and keep its state
unchanged (empty slots of a buffer are filled with copies of a finished problem and are never written back).
"""

import math

import jax
import jax.numpy as jnp


def stage_capacities(n: int, shrink: float = 4.0, min_capacity: int = 64) -> tuple[int, ...]:
    """Static, strictly decreasing buffer sizes N/shrink, N/shrink², … down to ≥ min_capacity (empty if N is small)."""
    if shrink <= 1.0:
        return ()
    caps, c = [], n
    while True:
        c = math.ceil(c / shrink)
        if c < min_capacity or c >= (caps[-1] if caps else n):
            return tuple(caps)
        caps.append(c)


def _take(tree, idx):
    return jax.tree.map(lambda x: jnp.take(x, idx, axis=-1), tree)


def _put(tree, idx, sub):
    return jax.tree.map(lambda x, y: x.at[..., idx].set(y, mode="drop"), tree, sub)


def compacting_while(body, done_of, consts, state, capacities=()):
    """Iterates `state = body(consts, state)` until `done_of(state)` is all true, in shrinking buffers (see above).

    Returns (state, trips) with trips int32[S + 1]: loop iterations run in each stage (the sequential trip count is
    their sum; element-steps are Σ trips_s·C_s).
    """
    n = jax.tree.leaves(done_of(state))[0].shape[-1]
    caps = [c for c in capacities if c < n]
    if any(b >= a for a, b in zip(caps, caps[1:])):
        raise ValueError(f"compaction capacities must be strictly decreasing and < batch size {n}, got {capacities}")
    bounds = caps + [0]

    def run(c, s, bound):
        def cond(carry):
            return jnp.sum(~done_of(carry[0])) > bound

        def step(carry):
            return body(c, carry[0]), carry[1] + 1

        return jax.lax.while_loop(cond, step, (s, jnp.zeros((), jnp.int32)))

    state, t = run(consts, state, bounds[0])
    trips = [t]
    for cap, bound in zip(caps, bounds[1:]):
        active = ~done_of(state)
        count = jnp.sum(active)
        # count ≤ cap < n here, so a finished problem exists to fill the empty slots (they stay idle).
        filler = jnp.argmin(active)
        idx = jnp.nonzero(active, size=cap, fill_value=filler)[0]
        sub, t = run(_take(consts, idx), _take(state, idx), bound)
        write = jnp.where(jnp.arange(cap) < count, idx, n)        # out of range → dropped by the scatter
        state = _put(state, write, sub)
        trips.append(t)
    return state, jnp.stack(trips)
