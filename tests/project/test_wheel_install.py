"""mmjax works when installed from its wheel, away from the source tree.

A wheel is built offline from a clean copy of the repository (`pip wheel --no-build-isolation --no-index`; the copy
keeps the build's `build/` and `*.egg-info` out of the checkout), installed into a fresh virtual environment, and the
smoke retrieval config — taken from the package itself — is trained and evaluated there with the working directory
outside the repository. The dependencies come from the environment running the tests: a `.pth` file in the fresh
venv lists its site-packages directories. A path line in a `.pth` only appends that directory to `sys.path`; the
`.pth` files inside it (the editable-install finder that points `import mmjax` at a checkout) are not executed,
because it is not a site directory. The script checks that too, and that every loaded `mmjax` module comes from the
wheel and no module from the repository.

The wheel itself must hold `mmjax` only (no `reproduce/`, `tests/`, `configs/`), every file of the source tree's
`mmjax/` (so a subpackage `packages.find` misses fails here), and requirements.txt as its dependencies.

Building offline needs setuptools >= 70.1 (or an older one plus `wheel`) in the test environment;
scripts/setup_env.sh installs it.
"""

import importlib.metadata
import importlib.util
import json
import os
import pathlib
import shutil
import site
import subprocess
import sys
import sysconfig
import textwrap
import zipfile

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

REPO = pathlib.Path(__file__).resolve().parents[2]

# Runs in the fresh venv (as a file, so a failing assertion shows its line): argv[1] = JSON {"venv", "workdir",
# "repo", "dep_dirs"}.
SCRIPT = textwrap.dedent("""
    import json, os, pathlib, sys, sysconfig

    args = json.loads(sys.argv[1])
    venv = pathlib.Path(args["venv"]).resolve()
    repo = pathlib.Path(args["repo"]).resolve()
    dep_dirs = [pathlib.Path(d).resolve() for d in args["dep_dirs"]]
    purelib = pathlib.Path(sysconfig.get_paths()["purelib"]).resolve()
    assert pathlib.Path(sys.prefix).resolve() == venv, (sys.prefix, venv)
    assert purelib.is_relative_to(venv), purelib

    def editable_hooks():
        mods = [m for m in sys.modules if m.startswith("__editable__")]
        finders = [repr(f) for f in sys.meta_path + sys.path_hooks if "__editable__" in type(f).__module__
                   or "__editable__" in repr(f)]
        return mods + finders

    # The .pth's path lines reached sys.path, the .pth files inside those directories did not run.
    on_path = {pathlib.Path(p).resolve() for p in sys.path if p}
    assert all(d in on_path for d in dep_dirs), (dep_dirs, sys.path)
    assert repo not in on_path, sys.path
    assert not editable_hooks(), editable_hooks()

    import mmjax
    import mmjax.experiment
    from mmjax.train.defaults import retrieval_config

    assert pathlib.Path(mmjax.__file__).resolve().is_relative_to(purelib), mmjax.__file__

    c = retrieval_config("smoke")
    c.final_eval = False
    workdir = args["workdir"]
    mmjax.experiment.run(c, workdir)
    mmjax.experiment.evaluate(c, workdir)
    results = json.loads(pathlib.Path(workdir, "results.json").read_text())
    retrieval = results.get("retrieval")
    assert retrieval, sorted(results)
    for kind, r in retrieval.items():
        assert {"i2t_r1", "t2i_r1", "rsum"} <= set(r["all"]), (kind, r)
    # The loader, as a notebook uses it: a trained run -> retrieve with the run's own tokenizer and score.
    from mmjax.data.shapesworld import generate
    r = mmjax.load(workdir)
    images = r.embed_images(generate("test", preset=c.data.preset, seed=c.data.seed, mode=c.data.mode, limit=8))
    hits = r.retrieve("a red circle", k=3, images=images)
    assert len(hits.indices) == 3 and list(hits.scores) == sorted(hits.scores, reverse=True), hits

    # Nothing imported from the repository: every mmjax module is the wheel's, and no other module lives in the
    # source tree (the dependency directories excepted, for an environment kept inside the checkout).
    assert not editable_hooks(), editable_hooks()
    outside, from_repo = [], []
    for name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None)
        if not f:
            continue
        f = pathlib.Path(f).resolve()
        if (name == "mmjax" or name.startswith("mmjax.")) and not f.is_relative_to(purelib):
            outside.append((name, str(f)))
        elif f.is_relative_to(repo) and not any(f.is_relative_to(d) for d in dep_dirs + [purelib]):
            from_repo.append((name, str(f)))
    assert not outside, outside
    assert not from_repo, from_repo
""")


def _tail(text: str, n: int = 6000) -> str:
    text = text or ""
    return text if len(text) <= n else "…" + text[-n:]


def _run(cmd, *, timeout=600, **kw) -> subprocess.CompletedProcess:
    """Runs `cmd` quietly; a failure (or timeout) reports the command with the tails of its stdout and stderr."""
    cmd = [str(c) for c in cmd]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr
        pytest.fail(f"timed out after {timeout}s: {' '.join(cmd)}\n--- stdout (tail) ---\n{_tail(out)}\n"
                    f"--- stderr (tail) ---\n{_tail(err)}", pytrace=False)
    if p.returncode != 0:
        pytest.fail(f"exit {p.returncode}: {' '.join(cmd)}\n--- stdout (tail) ---\n{_tail(p.stdout)}\n"
                    f"--- stderr (tail) ---\n{_tail(p.stderr)}", pytrace=False)
    return p


def _copy_ignore(src, names):
    """A clean checkout: no hidden entries (.git, .venv, .ci-venv), caches, build outputs or training workdirs."""
    top = pathlib.Path(src).resolve() == REPO
    return {n for n in names
            if n.startswith(".") or n == "__pycache__" or n.endswith((".pyc", ".egg-info"))
            or (top and (n in ("build", "dist") or n.startswith("workdir")))}


def _dep_dirs() -> list[str]:
    """The site-packages directories of the environment running the tests (where the dependencies are)."""
    dirs = list(site.getsitepackages())
    dirs += [sysconfig.get_paths()[k] for k in ("purelib", "platlib")]
    if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
        dirs.append(site.getusersitepackages())
    out = []
    for d in dirs:
        if os.path.isdir(d) and os.path.realpath(d) not in map(os.path.realpath, out):
            out.append(d)
    return out


def _requirements() -> set[str]:
    reqs = set()
    for line in (REPO / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            reqs.add(str(Requirement(line)))
    return reqs


def _check_wheel(wheel: pathlib.Path):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"mmjax", next(t for t in tops if t.endswith(".dist-info"))}, sorted(tops)

    source = {p.relative_to(REPO).as_posix() for p in (REPO / "mmjax").rglob("*")
              if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}
    missing = sorted(source - set(names))
    subpackages = sorted({str(pathlib.PurePosixPath(m).parent) for m in missing
                          if (REPO / m).parent.joinpath("__init__.py").is_file()})
    assert not missing, f"not in the wheel: {missing} (subpackages: {subpackages})"

    requires = set()
    for line in metadata.splitlines():
        if line.startswith("Requires-Dist:"):
            requires.add(str(Requirement(line.split(":", 1)[1].strip())))
    assert _requirements() <= requires, sorted(_requirements() - requires)


@pytest.mark.slow
def test_wheel_install_trains_and_evaluates(tmp_path):
    # The build backend, checked without importing it here (setuptools patches distutils on import).
    try:
        have = Version(importlib.metadata.version("setuptools"))
    except importlib.metadata.PackageNotFoundError:
        pytest.fail("building the wheel offline needs setuptools here; run scripts/setup_env.sh", pytrace=False)
    if have < Version("70.1") and importlib.util.find_spec("wheel") is None:  # bdist_wheel before 70.1
        pytest.fail(f"setuptools {have} cannot build a wheel without the `wheel` package; install "
                    "setuptools>=70.1 (scripts/setup_env.sh does)", pytrace=False)

    # 1. The wheel, from a clean copy of the checkout.
    src, dist = tmp_path / "src", tmp_path / "dist"
    shutil.copytree(REPO, src, ignore=_copy_ignore)
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
          "-w", dist, src])
    (wheel,) = dist.glob("mmjax-*.whl")
    _check_wheel(wheel)

    # 2. A fresh venv with the wheel; the dependencies through a .pth of path lines.
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv])
    py = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-deps", "--no-index", wheel])
    purelib = _run([py, "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    dep_dirs = _dep_dirs()
    pathlib.Path(purelib, "_mmjax_test_deps.pth").write_text("".join(d + "\n" for d in dep_dirs))

    # 3. Train and evaluate the smoke config there, outside the repository (-I: no PYTHON* variables, no cwd or
    # script directory on sys.path, no user site; site-packages and its .pth files as usual).
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    args = dict(venv=str(venv), workdir=str(cwd / "workdir"), repo=str(REPO), dep_dirs=dep_dirs)
    script = tmp_path / "check_installed.py"
    script.write_text(SCRIPT)
    _run([py, "-I", script, json.dumps(args)], cwd=cwd, env=env, timeout=1200)
