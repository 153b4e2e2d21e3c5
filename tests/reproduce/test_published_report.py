"""The published report is rebuilt, byte for byte, from the committed cell records alone.

`docs/reproduction.md` opens with the command that regenerates it (`--report-only`: every archived record, all
budgets, runs nothing). Run in an empty working directory that holds nothing but a copy of
`docs/reproduction/records` (a fresh checkout: no `workdir/`), with the same relative paths, that command must write
the very Markdown that is committed, and leave the records as they were. The PNG figures are re-drawn, not
compared (their bytes depend on the matplotlib build). Everything the report says comes from the records (the
machines too) except its Code line, which asks git about the commits the records name
(`reproduce.provenance`): a checkout that lacks one of them (a shallow clone) skips the test.
"""

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reproduce import provenance
from reproduce.__main__ import parse_args
from tests.subprocess_env import subprocess_env

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ROOT / "docs" / "reproduction.md"
RECORDS = Path("docs") / "reproduction" / "records"   # relative, as the report's command has it
CANONICAL = {"report_only": True, "archive": str(RECORDS), "out": "workdir/report", "publish": "docs/reproduction.md"}


def _regenerate_command(text: str) -> list[str]:
    m = re.search(r"^Regenerate: `(python -m reproduce [^`]*)`", text, re.M)
    assert m, "docs/reproduction.md does not open with its Regenerate command"
    argv = shlex.split(m.group(1))[3:]
    args = vars(parse_args(argv))
    assert {k: args[k] for k in CANONICAL} == CANONICAL, m.group(1)  # path-independent relative paths
    return argv


def _missing_commits(commits: list[str]) -> list[str]:
    missing = []
    for c in sorted({c.split("+")[0] for c in commits}):
        try:
            found = subprocess.run(["git", "cat-file", "-e", f"{c}^{{commit}}"], cwd=ROOT, capture_output=True,
                                   timeout=60).returncode == 0
        except (OSError, subprocess.SubprocessError):
            found = False
        if not found:
            missing.append(c)
    return missing


def test_the_regenerate_command_is_the_canonical_one():
    _regenerate_command(PUBLISHED.read_text())


@pytest.mark.slow
def test_published_report_is_rebuilt_byte_for_byte_from_the_committed_records(tmp_path):
    committed = PUBLISHED.read_bytes()
    argv = _regenerate_command(committed.decode())
    paths = sorted((ROOT / RECORDS).rglob("seed*.json"))
    assert paths, f"no committed records under {RECORDS}"
    commits = provenance.commits_of([json.loads(p.read_text()) for p in paths])
    if provenance.compare(commits, str(ROOT))["identical"] is None:  # the report would then leave its Code line out
        missing = _missing_commits(commits)
        pytest.skip("git cannot answer which code the committed records ran on (shallow clone or no checkout?): "
                    + (f"commit(s) {', '.join(missing)} missing" if missing else "git unavailable"))

    shutil.copytree(ROOT / RECORDS, tmp_path / RECORDS)  # a fresh checkout: the records and nothing else
    before = {p.relative_to(tmp_path): p.read_bytes() for p in (tmp_path / RECORDS).rglob("*") if p.is_file()}
    env = subprocess_env(env_extra={"MPLBACKEND": "Agg"})
    proc = subprocess.run([sys.executable, "-m", "reproduce", *argv], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    after = {p.relative_to(tmp_path): p.read_bytes() for p in (tmp_path / RECORDS).rglob("*") if p.is_file()}
    assert after == before  # the records are read, never rewritten; publishing the figures leaves them alone
    produced = (tmp_path / "docs" / "reproduction.md").read_bytes()
    if produced != committed:
        import difflib
        diff = "\n".join(list(difflib.unified_diff(committed.decode().splitlines(), produced.decode().splitlines(),
                                                   "docs/reproduction.md (committed)", "rebuilt", lineterm=""))[:60])
        pytest.fail(f"`python -m reproduce {' '.join(argv)}` does not rebuild docs/reproduction.md (records added "
                    f"since it was published? rerun that command from the repository root):\n{diff}")
    links = re.findall(r"\]\((reproduction/[^)]+\.png)\)", produced.decode())
    assert links and all((tmp_path / "docs" / link).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for link in links)
