"""Device mesh and sharding rules — config data in one small module.

Config (`config.sharding`):
    mesh  = (("data", -1), ("model", 1))     ordered (axis name, size); one size may be −1 = "the rest"
    rules = (("embed.*", "fsdp"), (".*", "replicate"))   first regex matching a parameter path wins
    batch_axes = ("data",)                   mesh axes the leading batch dimension is split over

Rule values: "replicate"; "fsdp" (split the largest dimension divisible by the size of the `fsdp` axis — or of `data`
when there is none — over that axis; replicate if none divides, or if the leaf has fewer than `fsdp_min_size`
elements); or a tuple giving a PartitionSpec per dimension (e.g. `(None, "model")`).

Presets (`sharding.preset`, one flag instead of a rule list; `rules_for(config.sharding)`):
    "rules"           the config's own `sharding.rules` (the default; every shipped config replicates: pure data
                      parallelism)
    "data_parallel"   every parameter and optimiser leaf replicated, the batch split over `batch_axes`
    "fsdp"            every leaf of the train state — parameters *and* their optimiser moments, which follow the same
                      paths under `opt_state/…` — with at least `sharding.fsdp_min_size` elements (default 2¹⁴) split
                      over the `fsdp` axis (or `data`), smaller leaves (biases, norms, scalars) replicated. The step
                      stays one jitted function and gathers the split weights once before the forward pass
                      (`forward_shardings`; so does any rule list with an "fsdp" entry).
    e.g. `python train.py --config configs/maxmatch_shapes.py --config.sharding.preset=fsdp`. Meshes are built with Auto axis types (the `jax.make_mesh` default, Explicit, changes the
semantics of ordinary jnp code).
"""

import re

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P


def make_mesh(axes, devices=None) -> Mesh:
    """Mesh from ordered (name, size) pairs; raises before any compute when the sizes do not fit the devices."""
    devices = list(jax.devices() if devices is None else devices)
    names = tuple(name for name, _ in axes)
    sizes = [int(size) for _, size in axes]
    if len(set(names)) != len(names):
        raise ValueError(f"sharding.mesh: duplicate axis names in {names}")
    if sum(s == -1 for s in sizes) > 1:
        raise ValueError(f"sharding.mesh: at most one axis may have size -1, got {dict(axes)}")
    fixed = int(np.prod([s for s in sizes if s != -1]))
    if any(s == 0 or s < -1 for s in sizes):
        raise ValueError(f"sharding.mesh: axis sizes must be positive or -1, got {dict(axes)}")
    if fixed > len(devices) or len(devices) % fixed:
        raise ValueError(f"sharding.mesh {dict(axes)} needs a multiple of {fixed} devices, but {len(devices)} "
                         f"device(s) are available ({jax.default_backend()})")
    sizes = [len(devices) // fixed if s == -1 else s for s in sizes]
    if int(np.prod(sizes)) != len(devices):
        raise ValueError(f"sharding.mesh {dict(zip(names, sizes))} uses {int(np.prod(sizes))} devices, "
                         f"but {len(devices)} are available; use -1 for one axis")
    device_grid = np.asarray(devices).reshape(sizes)
    return Mesh(device_grid, names, axis_types=(jax.sharding.AxisType.Auto,) * len(names))


def path_name(path) -> str:
    """'tower/dense/kernel' from a jax key path."""
    parts = []
    for k in path:
        parts.append(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))))
    return "/".join(parts)


PRESETS = {
    "data_parallel": ((".*", "replicate"),),
    "fsdp": ((".*", "fsdp"),),
}
FSDP_MIN_SIZE = 2 ** 14  # leaves smaller than this stay replicated under "fsdp" (gathering them costs more than it saves)


def rules_for(sharding_config) -> tuple:
    """The (regex, rule) list of a `config.sharding`: its preset's, or its own `rules` when the preset is 'rules'."""
    preset = sharding_config.get("preset", "rules")
    if preset == "rules":
        return tuple(tuple(r) for r in sharding_config.rules)
    if preset not in PRESETS:
        raise ValueError(f"sharding.preset must be 'rules' or one of {sorted(PRESETS)}, got {preset!r}")
    return PRESETS[preset]


def _fsdp_spec(shape, mesh: Mesh, min_size: int = FSDP_MIN_SIZE) -> P:
    if int(np.prod(shape)) < min_size:
        return P()
    axis = "fsdp" if "fsdp" in mesh.axis_names else "data"
    size = mesh.shape[axis]
    order = sorted(range(len(shape)), key=lambda d: -shape[d])
    for d in order:
        if shape[d] % size == 0 and shape[d] >= size:
            spec = [None] * len(shape)
            spec[d] = axis
            return P(*spec)
    return P()


def spec_for(name: str, shape, rules, mesh: Mesh, fsdp_min_size: int = FSDP_MIN_SIZE) -> P:
    for pattern, rule in rules:
        if re.fullmatch(pattern, name):
            if rule == "replicate":
                return P()
            if rule == "fsdp":
                return _fsdp_spec(shape, mesh, fsdp_min_size)
            if isinstance(rule, (tuple, list)):
                if len(rule) != len(shape):
                    raise ValueError(f"sharding rule {pattern!r} -> {rule} has {len(rule)} entries but parameter "
                                     f"{name} has shape {shape}")
                for d, ax in enumerate(rule):
                    axes = ax if isinstance(ax, (tuple, list)) else (ax,)
                    size = int(np.prod([mesh.shape[a] for a in axes if a is not None]))
                    if ax is not None and shape[d] % size:
                        raise ValueError(f"sharding rule {pattern!r}: dimension {d} of {name} (shape {shape}) is not "
                                         f"divisible by mesh axis {ax} of size {size}")
                return P(*rule)
            raise ValueError(f"sharding rule {pattern!r}: unknown value {rule!r} (use 'replicate', 'fsdp' or a tuple)")
    return P()


def tree_shardings(abstract_tree, rules, mesh: Mesh, fsdp_min_size: int = FSDP_MIN_SIZE):
    """NamedShardings for every leaf of an abstract (ShapeDtypeStruct) tree, by rule on its path."""
    def one(path, leaf):
        shape = getattr(leaf, "shape", ())
        return NamedSharding(mesh, spec_for(path_name(path), shape, rules, mesh, fsdp_min_size) if len(shape)
                             else P())
    return jax.tree_util.tree_map_with_path(one, abstract_tree)


def forward_shardings(abstract_params, rules, mesh: Mesh, fsdp_min_size: int = FSDP_MIN_SIZE):
    """The layout the forward pass reads the parameters in: each leaf stored under an "fsdp" rule gathered whole
    (replicated), every other leaf as stored (a tuple rule's model-parallel split is kept). None when no rule is
    "fsdp" (nothing to gather). `mmjax.train.loop.make_train_step(gather_params=...)` constrains the parameters to
    it once per step; left to XLA, the weights' split spread into the activations (docs/scaling.md)."""
    if not any(rule == "fsdp" for _, rule in rules):
        return None
    gathered = tuple((pattern, "replicate" if rule == "fsdp" else rule) for pattern, rule in rules)
    return tree_shardings(abstract_params, gathered, mesh, fsdp_min_size)


def batch_sharding(mesh: Mesh, batch_axes=("data",)) -> NamedSharding:
    return NamedSharding(mesh, P(tuple(batch_axes)))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def shard_batch(local_batch: dict, mesh: Mesh, batch_axes=("data",)) -> dict:
    """Global jax.Arrays from this process's slice of the batch (multi-host: every process passes its own rows)."""
    sharding = batch_sharding(mesh, batch_axes)
    n_shards = int(np.prod([mesh.shape[a] for a in batch_axes]))

    def put(x):
        x = np.asarray(x)
        global_rows = x.shape[0] * jax.process_count()
        if global_rows % n_shards:
            raise ValueError(f"batch dimension {global_rows} (global) is not divisible by the {n_shards} data shards "
                             f"of mesh axes {tuple(batch_axes)}")
        return jax.make_array_from_process_local_data(sharding, x)

    return {k: put(v) for k, v in local_batch.items()}
