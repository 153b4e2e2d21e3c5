"""CIMR donor images (docs/design.md#donors) [default].

A donor map is a random *cyclic derangement* π of the batch: draw a permutation σ, then π(σ_k) = σ_{(k+1) mod B}
(a single B-cycle, so π(i) ≠ i whenever B > 1). `tries` (`flowclip.donor_tries`, default 4) independent maps are
drawn; each record takes the first whose donor has a different image identity (g_{π(i)} ≠ g_i). Records with no
such donor are ineligible and get donor[i] = i, which `cimr_loss` also recognises as ineligible. Shapes are fixed,
so this is jit friendly. Callers derive `rng` as fold_in(step_rng, DONOR_TAG).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

DONOR_TAG = 0xD0_0E  # fixed fold_in tag for the donor stream of a step rng


def cyclic_derangement(rng: jax.Array, size: int) -> jax.Array:
    """π as an int array [size] with π(σ_k) = σ_{(k+1) mod size} for a random permutation σ."""
    sigma = jax.random.permutation(rng, size)
    return jnp.zeros((size,), sigma.dtype).at[sigma].set(jnp.roll(sigma, -1))


def choose_donors(rng: jax.Array, image_ids, *, tries: int = 4) -> tuple[jax.Array, jax.Array]:
    """Returns (donor int [B], eligible bool [B]) with image_ids[donor[i]] ≠ image_ids[i] wherever eligible[i]."""
    image_ids = jnp.asarray(image_ids)
    if image_ids.ndim != 1:
        raise ValueError(f"image_ids must have shape [B]; got {image_ids.shape}")
    if not isinstance(tries, int) or tries < 1:
        raise ValueError(f"tries must be a positive int; got {tries!r}")
    b = image_ids.shape[0]
    candidates = jax.vmap(lambda k: cyclic_derangement(k, b))(jax.random.split(rng, tries))  # [tries, B]
    ok = image_ids[candidates] != image_ids[None, :]
    first = jnp.argmax(ok, axis=0)  # index of the first successful try (0 if none; masked below)
    eligible = jnp.any(ok, axis=0)
    rows = jnp.arange(b)
    donor = jnp.where(eligible, candidates[first, rows], rows)
    return donor.astype(jnp.int32), eligible
