"""Hugging Face checkpoint directory → (Flax module, param tree, tokenizer), read without torch.

A directory holds `config.json`, `model.safetensors` (or shards listed in `model.safetensors.index.json`) and the
tokenizer files. Tensors are read with `safetensors.numpy` (never pickle: `pytorch_model.bin` is refused) and mapped
onto the module's parameter tree, whose submodule names mirror the HF state dict:

    HF name                                    Flax path                                   transform
    a.layer.3.b.weight   (nn.Linear, out×in)   a/layer_3/b/kernel                          transpose → in×out
    a.patch_embedding.weight (conv o,i,kh,kw)  a/patch_embedding/kernel                    → kh,kw,i,o
    a.LayerNorm.weight                         a/LayerNorm/scale                           —
    a.word_embeddings.weight                   a/word_embeddings/embedding                 —
    a.b.bias / class_embedding / logit_scale   same path, same leaf name                   — (0-d stays 0-d)

Which of kernel / scale / embedding a `weight` becomes is read off the module's own (abstract) parameter tree, so the
mapping needs no per-architecture table. Every checkpoint tensor must land on a parameter of the right shape and
every parameter must be filled; otherwise the error names the tensor, both shapes and the file. Deliberately
skipped: `*.position_ids` buffers (checked to be 0..n−1) and, for BERT, the `pooler.*` tensors and — only in
`bert.`-prefixed BertFor* checkpoints — the task-head tensors outside `bert.`; any other name is an error.
"""

import json
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util
from safetensors.numpy import load_file

from mmjax.models.bert import BertConfig, BertModel
from mmjax.models.clip import CLIPConfig, CLIPModel

_WEIGHT_LEAVES = ("kernel", "scale", "embedding")


class CheckpointError(ValueError):
    """A checkpoint does not match the module: unknown, missing or mis-shaped tensors."""


# ----------------------------------------------------------------------------------------------------------- reading

def read_config(directory: str | os.PathLike) -> dict[str, Any]:
    path = os.path.join(directory, "config.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no config.json in {directory!s}")
    with open(path) as f:
        return json.load(f)


def read_safetensors(directory: str | os.PathLike) -> dict[str, tuple[np.ndarray, str]]:
    """All tensors of a checkpoint directory as {name: (array, file it came from)}."""
    directory = os.fspath(directory)
    single = os.path.join(directory, "model.safetensors")
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.isfile(single):
        files = [single]
    elif os.path.isfile(index):
        with open(index) as f:
            files = [os.path.join(directory, name) for name in sorted(set(json.load(f)["weight_map"].values()))]
    else:
        pickled = [n for n in ("pytorch_model.bin", "model.ckpt", "flax_model.msgpack")
                   if os.path.isfile(os.path.join(directory, n))]
        hint = f" (found {pickled}; only safetensors are read — no pickle)" if pickled else ""
        raise FileNotFoundError(f"no model.safetensors or model.safetensors.index.json in {directory}{hint}")
    tensors: dict[str, tuple[np.ndarray, str]] = {}
    for path in files:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"checkpoint shard {path} listed in the index is missing")
        for name, array in load_file(path).items():
            tensors[name] = (array, path)
    return tensors


# ----------------------------------------------------------------------------------------------------------- mapping

def _flax_module_path(hf_name: str) -> tuple[str, ...]:
    """'encoder.layer.3.attention.self.query' → ('encoder', 'layer_3', 'attention', 'self', 'query')."""
    return tuple(re.sub(r"\.(\d+)(?=\.|$)", r"_\1", hf_name).split("."))


def _hf_name(flax_path: tuple[str, ...]) -> str:
    """Inverse of the mapping, for naming missing parameters in errors."""
    *module, leaf = flax_path
    leaf = "weight" if leaf in _WEIGHT_LEAVES else leaf
    return re.sub(r"_(\d+)(?=\.|$)", r".\1", ".".join([*module, leaf]))


def _to_flax_layout(array: np.ndarray, leaf: str) -> np.ndarray:
    if leaf == "kernel" and array.ndim == 2:
        return array.T  # torch Linear (out, in) → Dense (in, out)
    if leaf == "kernel" and array.ndim == 4:
        return array.transpose(2, 3, 1, 0)  # torch Conv2d (out, in, kh, kw) → Conv (kh, kw, in, out)
    return array


def convert_state_dict(tensors: Mapping[str, tuple[np.ndarray, str]], abstract_params: Any, *,
                       rename: Callable[[str], str | None] = lambda n: n,
                       dtype: Any = np.float32) -> dict:
    """Map HF-named tensors onto a Flax parameter tree shaped like `abstract_params` (e.g. from `jax.eval_shape`).

    `rename(name)` returns the name relative to the module (prefix stripped) or None for a tensor that is skipped
    on purpose. Floating tensors are cast to `dtype` (float32 reference precision by default).
    """
    expected = traverse_util.flatten_dict(abstract_params)
    filled: dict[tuple[str, ...], np.ndarray] = {}
    unknown: list[str] = []
    for name, (array, source) in sorted(tensors.items()):
        local = rename(name)
        if local is None:
            continue
        module, _, leaf = local.rpartition(".")
        module_path = _flax_module_path(module) if module else ()
        if leaf == "weight":
            candidates = [module_path + (w,) for w in _WEIGHT_LEAVES if module_path + (w,) in expected]
        else:
            candidates = [module_path + (leaf,)] if module_path + (leaf,) in expected else []
        if not candidates:
            unknown.append(f"{name} {tuple(array.shape)} in {source}")
            continue
        path = candidates[0]
        value = _to_flax_layout(array, path[-1])
        want = tuple(expected[path].shape)
        if value.shape != want:
            raise CheckpointError(
                f"shape mismatch for tensor {name!r} in {source}: checkpoint shape {tuple(array.shape)} "
                f"(→ {tuple(value.shape)} in Flax layout) but parameter {'/'.join(path)} expects {want}")
        if np.issubdtype(value.dtype, np.floating) and dtype is not None:
            value = value.astype(dtype)
        filled[path] = value
    if unknown:
        raise CheckpointError("unknown tensors (no matching parameter in the module): " + "; ".join(unknown))
    missing = [f"{_hf_name(p)} (parameter {'/'.join(p)}, shape {tuple(expected[p].shape)})"
               for p in expected if p not in filled]
    if missing:
        sources = sorted({src for _, src in tensors.values()})
        raise CheckpointError(f"missing tensors in {sources}: " + "; ".join(missing))
    return traverse_util.unflatten_dict({p: jnp.asarray(v) for p, v in filled.items()})


def _check_position_ids(name: str, array: np.ndarray, source: str) -> None:
    # The modules always use positions 0..n−1; a checkpoint storing anything else would be silently wrong.
    flat = np.asarray(array).reshape(-1)
    if not np.array_equal(flat, np.arange(flat.size)):
        raise CheckpointError(f"buffer {name!r} in {source} is not 0..{flat.size - 1}; unsupported")


# ----------------------------------------------------------------------------------------------------------- loaders

def _require_tokenizer_files(directory: str, options: tuple[tuple[str, ...], ...]) -> None:
    if not any(all(os.path.isfile(os.path.join(directory, f)) for f in files) for files in options):
        raise FileNotFoundError(f"no tokenizer files in {directory}: need one of {[list(o) for o in options]}")


def load_hf_bert(directory: str | os.PathLike, *, with_tokenizer: bool = True, dtype: Any = np.float32):
    """Load a HF BERT checkpoint directory → `(BertModel, params, tokenizer | None)`.

    `model.apply({"params": params}, input_ids, attention_mask)` returns the last hidden states [B, T, H]. Accepts
    bare `BertModel` names and `bert.`-prefixed ones (BertFor* checkpoints); the pooler and task heads are skipped.
    """
    directory = os.fspath(directory)
    config = BertConfig.from_dict(read_config(directory))
    model = BertModel(config)
    tensors = read_safetensors(directory)

    # BertFor* checkpoints nest the encoder under `bert.`; their other tensors (cls.*, classifier.*, qa_outputs.*)
    # are task heads. A bare BertModel checkpoint has no prefix and only the NSP pooler beside the encoder.
    wrapped = any(name.startswith("bert.") for name in tensors)

    def rename(name: str) -> str | None:
        if wrapped and not name.startswith("bert."):
            return None  # task head of a BertFor* checkpoint
        local = name[len("bert."):] if wrapped else name
        if local.endswith("position_ids"):
            _check_position_ids(name, *tensors[name])
            return None
        if local.startswith("pooler."):
            return None  # NSP pooler: not part of last_hidden_state
        return local

    ids = jnp.zeros((1, 1), jnp.int32)
    abstract = jax.eval_shape(model.init, jax.random.PRNGKey(0), ids, jnp.ones_like(ids))["params"]
    params = convert_state_dict(tensors, abstract, rename=rename, dtype=dtype)
    tokenizer = None
    if with_tokenizer:
        from transformers import BertTokenizerFast

        _require_tokenizer_files(directory, (("tokenizer.json",), ("vocab.txt",)))
        tokenizer = BertTokenizerFast.from_pretrained(directory, local_files_only=True)
    return model, params, tokenizer


def load_hf_clip(directory: str | os.PathLike, *, with_tokenizer: bool = True, dtype: Any = np.float32):
    """Load a HF `CLIPModel` checkpoint directory → `(CLIPModel, params, tokenizer | None)`.

    Use `model.apply({"params": params}, pixels_nhwc, method="encode_image")` and
    `model.apply({"params": params}, input_ids, attention_mask, method="encode_text")`.
    """
    directory = os.fspath(directory)
    config = CLIPConfig.from_dict(read_config(directory))
    model = CLIPModel(config)
    tensors = read_safetensors(directory)

    def rename(name: str) -> str | None:
        if name.endswith("position_ids"):
            _check_position_ids(name, *tensors[name])
            return None
        return name

    vc = config.vision_config
    pixels = jnp.zeros((1, vc.image_size, vc.image_size, vc.num_channels), jnp.float32)
    ids = jnp.zeros((1, 1), jnp.int32)
    abstract = jax.eval_shape(model.init, jax.random.PRNGKey(0), pixels, ids, jnp.ones_like(ids))["params"]
    params = convert_state_dict(tensors, abstract, rename=rename, dtype=dtype)
    tokenizer = None
    if with_tokenizer:
        from transformers import CLIPTokenizerFast

        _require_tokenizer_files(directory, (("tokenizer.json",), ("vocab.json", "merges.txt")))
        tokenizer = CLIPTokenizerFast.from_pretrained(directory, local_files_only=True)
        eot = config.text_config.eot_token_id
        if tokenizer.eos_token_id != eot:
            raise ValueError(f"tokenizer EOT id {tokenizer.eos_token_id} != model EOT id {eot} "
                             f"(text_config.eos_token_id = {config.text_config.eos_token_id}) in {directory}")
    return model, params, tokenizer
