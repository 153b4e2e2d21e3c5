"""Input contracts for the Flow-CLIP scorer.

Batched inputs (docs/design.md#flowclip-inputs):

    image  = {"global": [Bi, d], "patches": [Bi, N, d]}
    text   = {"global": [Bt, d], "tokens": [Bt, L, d], "valid": bool[Bt, L]}
    params = {"M": [d, d], "M_tok": [d, d], "W": [d, d]}

`valid` marks V_T: non-special, non-padding positions.

Two levels of checking, by design:

- `check_shapes` runs inside `score_pairs` on every call. It only looks at static shapes and dtypes, so it also
  works under `jit`/`grad`/`vmap` and costs nothing at run time.
- `validate_inputs` additionally rejects non-finite values. A value check needs concrete arrays, so it is meant to
  be run by callers on host data (cache reader, data pipeline, evaluation entry points) before the jitted step.
  We chose this over `jax.experimental.checkify` because checkify would force every caller (trainer, evaluators,
  external scripts) to functionalise and thread an error value through its jitted functions; a host-side check
  on the numpy batch is explicit and free for the device.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

IMAGE_KEYS = ("global", "patches")
TEXT_KEYS = ("global", "tokens", "valid")
PARAM_KEYS = ("M", "M_tok", "W")


def _shape(x) -> tuple[int, ...]:
    return tuple(np.shape(x))


def _require_keys(name: str, tree: Any, keys: tuple[str, ...]) -> None:
    if not isinstance(tree, Mapping):
        raise TypeError(f"{name} must be a mapping with keys {keys}; got {type(tree).__name__}")
    missing = [k for k in keys if k not in tree]
    if missing:
        raise KeyError(f"{name} is missing key(s) {missing}; expected keys {keys}, got {sorted(tree)}")


def _require_rank(name: str, x, rank: int, layout: str) -> tuple[int, ...]:
    shape = _shape(x)
    if len(shape) != rank:
        raise ValueError(f"{name} must have shape {layout}; got shape {shape}")
    return shape


def check_image(image: Mapping[str, Any], *, need_patches: bool = True) -> tuple[int, int, int | None]:
    """Checks an image batch; returns (Bi, d, N) with N None when patches are absent and not needed."""
    _require_keys("image", image, IMAGE_KEYS if need_patches else ("global",))
    bi, d = _require_rank("image['global']", image["global"], 2, "[Bi, d]")
    if "patches" not in image:
        return bi, d, None
    pshape = _require_rank("image['patches']", image["patches"], 3, "[Bi, N, d]")
    if pshape[0] != bi or pshape[2] != d:
        raise ValueError(
            f"image['patches'] has shape {pshape}; expected ({bi}, N, {d}) to match image['global'] {(bi, d)}"
        )
    if pshape[1] < 1:
        raise ValueError(f"image['patches'] must have at least one patch; got shape {pshape}")
    return bi, d, pshape[1]


def check_text(text: Mapping[str, Any], *, need_tokens: bool = True) -> tuple[int, int, int | None]:
    """Checks a caption batch; returns (Bt, d, L) with L None when tokens are absent and not needed."""
    _require_keys("text", text, TEXT_KEYS if need_tokens else ("global",))
    bt, d = _require_rank("text['global']", text["global"], 2, "[Bt, d]")
    if "tokens" not in text:
        return bt, d, None
    tshape = _require_rank("text['tokens']", text["tokens"], 3, "[Bt, L, d]")
    if tshape[0] != bt or tshape[2] != d:
        raise ValueError(f"text['tokens'] has shape {tshape}; expected ({bt}, L, {d}) to match "
                         f"text['global'] {(bt, d)}")
    if "valid" not in text:
        raise KeyError("text has 'tokens' but no 'valid' mask; expected bool[Bt, L]")
    vshape = _shape(text["valid"])
    if vshape != tshape[:2]:
        raise ValueError(f"text['valid'] has shape {vshape}; expected {tshape[:2]} = text['tokens'].shape[:2]")
    vdtype = np.asarray(text["valid"]).dtype if not hasattr(text["valid"], "dtype") else text["valid"].dtype
    if vdtype != np.bool_:
        raise TypeError(f"text['valid'] must be a bool array; got dtype {vdtype}")
    return bt, d, tshape[1]


def check_params(params: Mapping[str, Any], d: int, *, need_local: bool = True) -> None:
    """Checks that every head matrix is [d, d]."""
    keys = PARAM_KEYS if need_local else ("M",)
    _require_keys("params", params, keys)
    for k in keys:
        if _shape(params[k]) != (d, d):
            raise ValueError(f"params['{k}'] has shape {_shape(params[k])}; expected ({d}, {d}) from the features' d")


def check_shapes(params, image, text, *, use_local: bool = True) -> tuple[int, int, int]:
    """Static shape/dtype checks for `score_pairs`; returns (Bi, Bt, d). Works on tracers."""
    bi, d_img, _ = check_image(image, need_patches=use_local)
    bt, d_txt, _ = check_text(text, need_tokens=use_local)
    if d_img != d_txt:
        raise ValueError(
            f"embedding dimension differs between towers: image['global'] has d={d_img}, text['global'] has "
            f"d={d_txt}"
        )
    check_params(params, d_img, need_local=use_local)
    return bi, bt, d_img


def _check_finite(name: str, x) -> None:
    arr = np.asarray(x)
    if arr.dtype == np.bool_:
        return
    bad = ~np.isfinite(arr)
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"{name} (shape {arr.shape}) has {int(bad.sum())} non-finite value(s); first at index {first}: {arr[first]}"
        )


def validate_inputs(params=None, image=None, text=None) -> None:
    """Host-side check of concrete inputs: shapes, dtypes and finiteness. Any argument may be None (skipped).

    Raises ValueError / KeyError / TypeError naming the offending argument, field and shape. Must be called on
    concrete (numpy or committed jax) arrays, not inside `jit`.
    """
    d = None
    if image is not None:
        _, d, _ = check_image(image, need_patches=False)
        for k in image:
            _check_finite(f"image['{k}']", image[k])
    if text is not None:
        _, d_txt, _ = check_text(text, need_tokens=False)
        if d is not None and d_txt != d:
            raise ValueError(
                f"embedding dimension differs between towers: image['global'] has d={d}, text['global'] has d={d_txt}"
            )
        d = d_txt
        for k in text:
            _check_finite(f"text['{k}']", text[k])
    if params is not None:
        present = [k for k in PARAM_KEYS if k in params]
        if "M" not in present:
            raise KeyError(f"params is missing key 'M'; got {sorted(params)}")
        if d is None:
            d = _shape(params["M"])[0] if len(_shape(params["M"])) == 2 else -1
        for k in present:
            if _shape(params[k]) != (d, d):
                raise ValueError(f"params['{k}'] has shape {_shape(params[k])}; expected ({d}, {d})")
            _check_finite(f"params['{k}']", params[k])
