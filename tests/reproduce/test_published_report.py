"""The published report is rebuilt, byte for byte, from the committed cell records alone.

`docs/reproduction.md` opens with the command that regenerates it. Run with `--report-only` in an empty working
directory that holds nothing but a copy of `docs/reproduction/records` (a fresh checkout: no `workdir/`), with the
same relative paths, that command must write the very Markdown that is committed. The PNG figures are re-drawn,
not compared (their bytes depend on the matplotlib build).

Two things the report takes from outside the records: its Code line asks git about the commits the records name
(`reproduce.provenance`), so a checkout that lacks one of them (a shallow clone) skips the test; and its first line
names the machine that rendered it (`reproduce.report.machine_description`), so on another machine the rest of the
report is still compared byte for byte, and the test then skips for that one phrase.
"""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reproduce import provenance, report

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ROOT / "docs" / "reproduction.md"
RECORDS = Path("docs") / "reproduction" / "records"   # relative, as the report's command has it
CANONICAL = {"--out": "workdir/repro", "--long-out": "workdir/repro_long", "--archive": str(RECORDS),
             "--publish": "docs/reproduction.md"}


def _regenerate_command(text: str) -> list[str]:
    m = re.search(r"^Regenerate: `(python -m reproduce [^`]*)`", text, re.M)
    assert m, "docs/reproduction.md does not open with its Regenerate command"
    argv = shlex.split(m.group(1))[3:]
    flags = dict(zip(argv[::2], argv[1::2]))
    assert {k: flags.get(k) for k in CANONICAL} == CANONICAL, m.group(1)  # path-independent relative paths
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


@pytest.mark.slow
def test_published_report_is_rebuilt_byte_for_byte_from_the_committed_records(tmp_path):
    committed = PUBLISHED.read_bytes()
    argv = _regenerate_command(committed.decode()) + ["--report-only"]
    records = [json.loads(p.read_text()) for p in sorted((ROOT / RECORDS / "default").rglob("seed*.json"))]
    assert records, f"no committed records under {RECORDS}"
    commits = provenance.commits_of(records)
    if provenance.compare(commits, str(ROOT))["identical"] is None:  # the report would then leave its Code line out
        missing = _missing_commits(commits)
        pytest.skip("git cannot answer which code the committed records ran on (shallow clone or no checkout?): "
                    + (f"commit(s) {', '.join(missing)} missing" if missing else "git unavailable"))

    shutil.copytree(ROOT / RECORDS, tmp_path / RECORDS)  # a fresh checkout: the records and nothing else
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-m", "reproduce", *argv], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "0 cell record(s) saved" in proc.stdout  # the committed records round-trip unchanged
    produced = (tmp_path / "docs" / "reproduction.md").read_bytes()

    here = report.machine_description()
    theirs = re.search(r"\) on (.+?); the grid table gives", committed.decode())
    if theirs and theirs.group(1) != here:  # the one phrase taken from the rendering machine
        produced = produced.decode().replace(f") on {here}; ", f") on {theirs.group(1)}; ", 1).encode()
        assert produced == committed, "the report differs from docs/reproduction.md beyond the machine it names"
        pytest.skip(f"docs/reproduction.md names the machine that rendered it ({theirs.group(1)}), this is {here}: "
                    "everything else matched byte for byte")
    if produced != committed:
        import difflib
        diff = "\n".join(list(difflib.unified_diff(committed.decode().splitlines(), produced.decode().splitlines(),
                                                   "docs/reproduction.md (committed)", "rebuilt", lineterm=""))[:60])
        pytest.fail(f"`python -m reproduce {' '.join(argv)}` does not rebuild docs/reproduction.md:\n{diff}")
