"""Every name, config field and command the README (and docs/design.md, reproduce/README.md) promises exists.

- The README's library table: each row names a module and, in backticks, the public names it offers; each must be
  importable from that module.
- Config fields written in backticks (`model.spm.pad_mode`, `matching.auction.*`, `loss.reduction='sum'`) in the
  README, docs/design.md and reproduce/README.md must exist in at least one shipped config (`configs/*.py`, any variant its docstring
  names); the README's departures list is also applied as `--config.<field>=<value>` flag overrides, as a user
  would type them.
- Commands: every `configs/NAME.py[:variant]` the README mentions loads, and every `--flag` of train.py /
  evaluate.py it uses is defined; every `python -m reproduce ...` the docs show parses.
"""

import importlib
import re
from pathlib import Path

import pytest

from tests.module_loader import ROOT, load, shipped_configs

README = (ROOT / "README.md").read_text()
DESIGN = (ROOT / "docs" / "design.md").read_text()
TOP = ("model", "loss", "matching", "data", "train", "optim", "sharding", "flowclip", "distributed", "evals",
       "benchmarks")
FIELD = re.compile(r"`(?:config\.)?((?:%s)\.[A-Za-z_][\w.*]*)(?:=([^`]*))?`" % "|".join(TOP))
FILE_SUFFIXES = (".py", ".safetensors", ".json", ".md", ".txt", ".npy")


def _library_rows():
    rows = []
    for line in README.splitlines():
        m = re.match(r"\|\s*`(mmjax(?:\.\w+)*)`\s*\|(.*)\|\s*$", line)
        if m:
            names = [re.sub(r"\(.*", "", n) for n in re.findall(r"`([A-Za-z_][\w]*(?:\([^`]*\))?)`", m.group(2))]
            rows.append((m.group(1), [n for n in names if n.isidentifier()]))
    return rows


def test_library_table_is_found():
    rows = _library_rows()
    assert len(rows) >= 10 and sum(len(n) for _, n in rows) >= 40, rows


@pytest.mark.parametrize("module,names", _library_rows(), ids=[m for m, _ in _library_rows()])
def test_library_table_names_import(module, names):
    mod = importlib.import_module(module)
    missing = [n for n in names if not hasattr(mod, n)]
    assert not missing, f"README lists {missing} under {module}, which does not export them"


def _flat_paths(tree, prefix=""):
    out = set()
    for k, v in tree.items():
        path = f"{prefix}{k}"
        out.add(path)
        if isinstance(v, dict):
            out |= _flat_paths(v, path + ".")
    return out


@pytest.fixture(scope="module")
def config_paths():
    paths = set()
    for _, _, c in shipped_configs():
        paths |= _flat_paths(c.to_dict())
    return paths


def _resolves(path: str, paths: set) -> bool:
    import fnmatch
    if path.startswith("evals."):  # evaluator options: the evaluator must exist; its options are documented
        parts = path.split(".")   # in mmjax.evaluation.registry and checked by mmjax.config_validation
        return ".".join(parts[:2]) in paths or parts[1] == "*"
    if "*" in path:
        return any(fnmatch.fnmatchcase(p, path) or p.startswith(path.split("*")[0]) for p in paths)
    return path in paths


@pytest.mark.parametrize("doc", ["README.md", "docs/design.md", "reproduce/README.md"])
def test_config_fields_named_in_docs_exist(doc, config_paths):
    text = (ROOT / doc).read_text()
    fields = sorted({m.group(1).rstrip(".") for m in FIELD.finditer(text)} - {""})
    fields = [f for f in fields if not f.endswith(FILE_SUFFIXES)]
    assert len(fields) >= {"README.md": 8, "docs/design.md": 40, "reproduce/README.md": 4}[doc], fields
    missing = [f for f in fields if not _resolves(f, config_paths)]
    assert not missing, f"{doc} names config fields no shipped config has: {missing}"


def _departures():
    section = README.split("## Where mmjax departs", 1)[1].split("\n## ", 1)[0]
    return [(m.group(1), m.group(2)) for m in FIELD.finditer(section) if m.group(2) is not None]


def test_departures_list_fields_are_overridable_by_flags(tmp_path):
    from absl import flags
    from ml_collections import config_flags
    overrides = _departures()
    assert len(overrides) >= 3, overrides
    fv = flags.FlagValues()
    argv = ["prog", f"--config={ROOT / 'configs' / 'maxmatch_shapes.py'}:smoke"]
    argv += [f"--config.{path}={value.strip(chr(39))}" for path, value in overrides]
    # As train.py declares it; the override flags (--config.a.b=v) are read from the command line given here.
    config_flags.DEFINE_config_file("config", str(ROOT / "configs" / "maxmatch_shapes.py"), "", flag_values=fv,
                                    lock_config=True, sys_argv=argv)
    fv(argv)
    config = fv.config
    for path, value in overrides:
        node = config
        for key in path.split("."):
            node = node[key]
        want = value.strip("'")
        assert str(node) == want or (isinstance(node, bool) and str(node).lower() == want.lower()), (path, node)
    from mmjax.config_validation import validate
    validate(config, check_paths=False)  # the documented overrides make a valid config


def test_commands_name_existing_configs_and_flags():
    configs = {(n, v) for n, v in re.findall(r"configs/(\w+\.py)(?::([\w,]+))?", README) if n != "NAME.py"}
    assert configs
    for name, variant in configs:
        path = ROOT / "configs" / name
        assert path.exists(), name
        load(f"configs/{name}", "readme_" + name[:-3]).get_config(variant or "")
    train_flags = set(re.findall(r"(?:DEFINE_\w+|define_config_file)\(\s*\"(\w+)\"", (ROOT / "train.py").read_text()))
    eval_flags = set(re.findall(r"(?:DEFINE_\w+|define_config_file)\(\s*\"(\w+)\"", (ROOT / "evaluate.py").read_text()))
    for script, known in (("train.py", train_flags), ("evaluate.py", eval_flags)):
        for cmd in re.findall(rf"python {script}([^\n`]*)", README):
            for flag in re.findall(r"--(\w+)", cmd):
                assert flag in known, f"README runs {script} with --{flag}, which it does not define"


def test_reproduction_commands_in_the_docs_parse():
    """Every `python -m reproduce ...` the README, the design notes, the study's runbook and the published report show
    is accepted by its argument parser (synopses with {choices} or [optional] parts aside); none still names the
    module's old place inside the library."""
    import shlex
    from reproduce.__main__ import parse_args
    commands = []
    for doc in ("README.md", "docs/design.md", "reproduce/README.md", "docs/reproduction.md"):
        text = (ROOT / doc).read_text()
        assert "mmjax.reproduce" not in text and "design.md#reproduction" not in text, doc
        spans = re.findall(r"`(python -m reproduce\s[^`]*)`", text)   # inline code
        joined = text.replace("\\\n", " ")                              # fenced blocks: continuation lines joined
        spans += [m.split("#")[0] for m in re.findall(r"^(python -m reproduce\s.*)$", joined, re.M)]
        for span in spans:
            if not re.search(r"[{\[]", span):
                commands.append((doc, shlex.split(span)[3:]))
    assert len(commands) >= 6, commands
    assert {doc for doc, _ in commands} >= {"README.md", "reproduce/README.md", "docs/reproduction.md"}, commands
    for doc, argv in commands:
        try:
            parse_args(argv)
        except SystemExit:
            raise AssertionError(f"{doc}: `python -m reproduce {' '.join(argv)}` is not a valid command")


def test_docs_point_only_at_documents_in_the_repo():
    """Docstrings point at docs/design.md anchors that exist, never at documents outside the repository."""
    anchors = set(re.findall(r'<a id="([\w-]+)"></a>', DESIGN))
    bad, missing = [], []
    for path in (list(ROOT.glob("mmjax/**/*.py")) + list(ROOT.glob("configs/*.py")) + list(ROOT.glob("*.py"))
                 + list(ROOT.glob("reproduce/*.py"))):
        text = path.read_text()
        if re.search(r"(maxmatch|flowclip|shapesworld)\.m[d]\b|spec [§]", text):  # (written so it does not match itself)
            bad.append(str(path.relative_to(ROOT)))
        missing += [f"{path.relative_to(ROOT)}#{a}" for a in re.findall(r"docs/design\.md#([\w-]+)", text)
                    if a not in anchors]
    assert not bad, f"references to documents outside the repo in {bad}"
    assert not missing, f"docs/design.md anchors that do not exist: {missing}"


def test_links_between_the_design_notes_and_the_study_runbook_resolve():
    """The reproduction study's runbook (reproduce/README.md) and the design notes link to each other's anchors, and
    the runbook to its own: every such link names an anchor that exists."""
    runbook = (ROOT / "reproduce" / "README.md").read_text()
    ids = {doc: set(re.findall(r'<a id="([\w-]+)"></a>', text)) for doc, text in (("design", DESIGN),
                                                                                  ("runbook", runbook))}
    links = [("runbook", "design", a) for a in re.findall(r"\(\.\./docs/design\.md#([\w-]+)\)", runbook)]
    links += [("runbook", "runbook", a) for a in re.findall(r"\(#([\w-]+)\)", runbook)]
    links += [("design", "runbook", a) for a in re.findall(r"\(\.\./reproduce/README\.md#([\w-]+)\)", DESIGN)]
    assert len(links) >= 10, links
    missing = [(src, dst, a) for src, dst, a in links if a not in ids[dst]]
    assert not missing, f"links to anchors that do not exist: {missing}"


def test_reliability_table_names_existing_tests():
    """docs/reliability.md is kept true by the suite: every test it names exists."""
    import ast
    text = (ROOT / "docs" / "reliability.md").read_text()
    refs, last_file = [], None
    for cell in re.findall(r"`((?:tests/[\w/]+\.py)?::[\w\[\]-]+)`", text):
        file, _, name = cell.partition("::")
        last_file = file or last_file
        refs.append((last_file, name.split("[")[0]))
    assert len(refs) >= 15, refs
    missing = []
    for file, name in refs:
        tree = ast.parse((ROOT / file).read_text())
        names = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        if name not in names:
            missing.append(f"{file}::{name}")
    assert not missing, f"docs/reliability.md names tests that do not exist: {missing}"


def test_ci_runs_the_readme_test_command():
    """`.ci/run` runs the README's test command (extra reporting flags such as --durations aside)."""
    after = README.split("Run the tests:", 1)[1]
    command = re.search(r"python -m pytest([^\n`]*)", after).group(1).split()
    ci = (ROOT / ".ci" / "run").read_text()
    ci_command = re.search(r"^python -m pytest(.*)$", ci, re.M).group(1).split()
    assert [a for a in ci_command if not a.startswith("--durations")] == command
