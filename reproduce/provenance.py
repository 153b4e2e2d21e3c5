"""Which code the grid's cells ran on, and whether that code differs where it matters (reproduce/README.md).

A grid spread over sessions runs on several commits: each cell record names the commit its grid process was
launched on (`runner.code_version`). Most commits between them touch only the study's own code — the runner and
the report, `reproduce/` at the repository root (`mmjax/reproduce/` in older commits) — which cannot change a
cell's numbers. `compare(commits)` asks git whether the code a cell's numbers depend on — `COMPUTE_PATHS`, the
library and the configs — is identical at every commit, so the report can say so (or name the commits that differ)
instead of leaving the reader to diff them.
"""

from __future__ import annotations

import subprocess

from reproduce import paths

# What a cell's numbers depend on: the library (models, losses, training, evaluation, data) and the configs. The
# study's own code only schedules cells and renders records: today `reproduce/`, outside both paths; older commits
# kept it inside the library as `mmjax/reproduce/`, hence the exclusion (a no-op for newer commits).
COMPUTE_PATHS = ("mmjax", "configs", ":(exclude)mmjax/reproduce")
ROOT = paths.ROOT
# The report's name for COMPUTE_PATHS: the study's own code is not part of what the cells compute.
SCOPE = "`mmjax/` and `configs/` (the study's own code aside: `reproduce/`, formerly `mmjax/reproduce/`)"


def compare(commits: list[str], root: str = ROOT) -> dict:
    """{"commits": [oldest first], "identical": bool | None, "differ": [commits whose `COMPUTE_PATHS` differ from
    the oldest's], "dirty": [commits marked +dirty]}. `identical` is None when git cannot answer (no checkout, an
    unknown commit): the report then says nothing it cannot back. A '+dirty' commit ran with uncommitted edits,
    which no diff can see: it never counts as identical."""
    clean = sorted({c.split("+")[0] for c in commits if c})
    dirty = sorted({c for c in commits if c.endswith("+dirty")})
    out = {"commits": clean, "identical": None, "differ": [], "dirty": dirty}
    if not clean:
        return out

    def _git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=60)

    try:
        if any(_git("cat-file", "-e", f"{c}^{{commit}}").returncode for c in clean):
            return out
        clean.sort(key=lambda c: int(_git("show", "-s", "--format=%ct", c).stdout.strip() or 0))  # oldest first
        out["commits"] = clean
        full = [_git("rev-parse", c).stdout.strip() for c in clean]
        differ = [c for c, f in zip(clean[1:], full[1:])
                  if _git("diff", "--quiet", full[0], f, "--", *COMPUTE_PATHS).returncode != 0]
    except (OSError, subprocess.SubprocessError):
        return out
    out["differ"] = differ
    out["identical"] = not differ and not dirty
    return out


def commits_of(records: list[dict]) -> list[str]:
    """'<commit[:10]>[+dirty]' of every record that names its code."""
    return sorted({(r.get("code") or {}).get("commit", "")[:10] + ("+dirty" if (r.get("code") or {}).get("dirty")
                   else "") for r in records} - {""})


def end_labelled(records: list[dict]) -> int:
    """How many records name the checkout at the cell's end (written before the runner recorded the launch
    version, `"at": "launch"`): a process keeps the code it imported, so theirs may be a later commit than it ran."""
    return sum(bool(r.get("code")) and (r.get("code") or {}).get("at") != "launch" and "code_at_end" not in r
               for r in records)  # a record with code_at_end was written by a runner that kept the launch version


def sentence(result: dict, n_end_labelled: int = 0) -> str:
    """One line for the report ('' when git could not answer or there is only one clean commit)."""
    commits, n = result["commits"], len(result["commits"])
    if result["identical"] is None or (n < 2 and not result["dirty"]):
        return ""
    end = (f" {n_end_labelled} record(s) predate launch-time capture and name the checkout when the cell ended, "
           "possibly a later commit than the process had loaded." if n_end_labelled else "")
    parts = [f"Code: the cells ran on {n} commit(s) ({', '.join(commits)})"]
    if result["differ"]:
        parts.append(f"{SCOPE} differ from the oldest, {commits[0]}, at {', '.join(result['differ'])}")
    elif n > 1:
        parts.append(f"{SCOPE} are identical at all of them, so the commits differ only in the report and runner, "
                     "not in what the cells compute")
    if result["dirty"]:
        parts.append(f"{', '.join(result['dirty'])} ran with uncommitted edits, which no diff can show")
    return "; ".join(parts) + "." + end
