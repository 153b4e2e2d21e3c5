"""What a result was computed with: the Python, the platform, the CPU's SIMD features and the versions of the packages
that decide the numbers.

`environment()` is written into every export (`export.json`), every evaluation (`results.json`) and every cell record
of the reproduction study (`cell.json`), so a number can be traced to the jax / jaxlib / flax / optax / orbax / numpy
it came from. The versions are read from the installed distributions' metadata (`importlib.metadata`), so asking
costs no import of the packages themselves; a package that is not installed is recorded as null. The repository pins
one tested set of versions in `requirements.lock` (`read_lock`); `requirements.txt` keeps the ranges.

    python -m mmjax.provenance        # prints environment() as JSON
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import platform
import re
import sys

# Distributions recorded, by their PyPI names: the numerics first, then the model / data / tokenizer stack.
PACKAGES = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "chex", "numpy", "scipy", "ml-collections",
            "transformers", "tokenizers", "safetensors", "tensorflow-datasets", "torch", "mmjax")


def canonical_name(name: str) -> str:
    """The PEP 503 form of a distribution name (`ml_collections` → `ml-collections`), as the lock file writes it."""
    return re.sub(r"[-_.]+", "-", name).lower()


@functools.lru_cache(maxsize=None)
def _versions(names: tuple[str, ...]) -> tuple[tuple[str, str | None], ...]:
    out = []
    for name in names:
        try:
            out.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            out.append((name, None))
    return tuple(out)


def package_versions(names=PACKAGES) -> dict[str, str | None]:
    """{distribution name: installed version, or None when it is not installed}."""
    return dict(_versions(tuple(names)))


def _jax_devices() -> dict | None:
    """The backend jax computes on, when this process has already imported jax (asking never imports it)."""
    jax = sys.modules.get("jax")
    if jax is None:
        return None
    try:
        devices = jax.devices()
        return {"backend": jax.default_backend(), "device_kind": devices[0].device_kind,
                "device_count": jax.device_count(), "process_count": jax.process_count()}
    except Exception as e:  # noqa: BLE001 — provenance never fails the run it describes
        return {"error": f"{type(e).__name__}: {e}"}


# The CPU features XLA's CPU code generator chooses kernels by: two machines that differ in them may round differently
# (a cell replayed on another VM build differs from step 20 on; reproduce/replay.py), so records name them.
SIMD_FLAGS = re.compile(r"^(sse\d.*|ssse3|avx.*|fma.*|f16c|amx.*)$")


def cpu_features(cpuinfo: str | None = None) -> dict | None:
    """{"model", "simd": [the SSE/AVX/FMA/AMX flags, sorted]} of the first CPU in /proc/cpuinfo (or the text
    given); None where there is none (not Linux)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                cpuinfo = f.read()
        except OSError:
            return None
    fields = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            if fields:
                break  # the first processor's block ends at its blank line
            continue
        fields.setdefault(key.strip(), value.strip())
    if "flags" not in fields:
        return None
    return {"model": fields.get("model name", "unknown"),
            "simd": sorted(f for f in fields["flags"].split() if SIMD_FLAGS.match(f))}


def environment() -> dict:
    """{"python", "platform", "machine", "cpu": {"model", "simd"} | None, "packages": {name: version | None}}
    (+ "jax": {"backend", "device_kind", "device_count", "process_count"} when jax is imported) — JSON-able, for
    the outputs that record provenance."""
    env = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu": cpu_features(),
        "packages": package_versions(),
    }
    devices = _jax_devices()
    if devices is not None:
        env["jax"] = devices
    return env


def read_lock(path: str) -> dict[str, str]:
    """{canonical name: version} of a lock file of `name==version` lines (`requirements.lock`); comments skipped."""
    pins = {}
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            name, sep, version = line.partition("==")
            if not sep or not version.strip():
                raise ValueError(f"{path}: not a `name==version` line: {raw.rstrip()!r}")
            pins[canonical_name(name.strip())] = version.strip()
    return pins


if __name__ == "__main__":
    import jax  # noqa: F401 — so the backend and devices are reported too
    print(json.dumps(environment(), indent=1))
