"""Which code the grid's cells ran on, and whether that code differs where it matters (reproduce/README.md).

A grid spread over sessions runs on several commits: each cell record names the commit its grid process was
launched on (`runner.code_version`). Most commits between them touch only the study's own code — the runner and
the report, `reproduce/` at the repository root (`mmjax/reproduce/` in older commits) — which cannot change a
cell's numbers. `compare(commits)` asks git whether the code a cell's numbers depend on — `COMPUTE_PATHS`, the
library and the configs — is identical at every commit, so the report can say so (or name the commits that differ)
instead of leaving the reader to diff them.
"""

from __future__ import annotations

import collections
import os
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
    the oldest's], "files": [the files under `COMPUTE_PATHS` that differ from the oldest at any of them], "dirty":
    [commits marked +dirty]}. `identical` is None when git cannot answer (no checkout, an unknown commit): the report
    then says nothing it cannot back. A '+dirty' commit ran with uncommitted edits, which no diff can see: it never
    counts as identical."""
    clean = sorted({c.split("+")[0] for c in commits if c})
    dirty = sorted({c for c in commits if c.endswith("+dirty")})
    out = {"commits": clean, "identical": None, "differ": [], "files": [], "dirty": dirty}
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
        changed = {}
        for c, f in zip(clean[1:], full[1:]):
            diff = _git("diff", "--name-only", full[0], f, "--", *COMPUTE_PATHS)
            if diff.returncode:
                return out
            changed[c] = diff.stdout.split()
    except (OSError, subprocess.SubprocessError):
        return out
    out["differ"] = [c for c in clean[1:] if changed[c]]
    out["files"] = sorted({name for names in changed.values() for name in names})
    out["identical"] = not out["differ"] and not dirty
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


def row_code(result: dict, max_files: int = 4) -> str:
    """What the code a row's cells ran on says, in one table cell ('' when git cannot answer)."""
    if result["identical"] is None:
        return ""
    n, files = len(result["commits"]), result["files"]
    if len(files) > max_files:  # many files: where they are (package: count), not a truncated list
        where = collections.Counter(os.path.dirname(f) or f for f in files)
        listed = ", ".join(f"`{d}/` ({k})" for d, k in sorted(where.items()))
    else:
        listed = ", ".join(f"`{f}`" for f in files)
    text = ("one commit" if n == 1 else "identical at all of them" if not result["differ"] else
            f"differs from the oldest, {result['commits'][0]}, in {len(files)} file(s): {listed}")
    if result["dirty"]:
        text += f"; {', '.join(result['dirty'])} ran with uncommitted edits, which no diff can show"
    return text


def rows_code(groups: list[tuple[str, str, list[dict]]], root: str = ROOT) -> list[dict]:
    """[(row id, budget or base, the records of the cells the row compares)] -> [{"rows", "scope", "result"}]: rows
    whose cells ran on the same commits share an entry; `result` is `compare` of those commits."""
    merged: dict = {}
    for row_id, scope, records in groups:
        commits = tuple(commits_of(records))
        if commits:
            merged.setdefault((scope, commits), []).append(row_id)
    return [{"rows": ids, "scope": scope, "result": compare(list(commits), root)}
            for (scope, commits), ids in merged.items()]


def rows_section(entries: list[dict], table, replays: list[str] = (), replay_summary: str = "") -> list[str]:
    """'Code each row's cells ran on' (Markdown lines; none when git could answer for no entry and nothing was
    replayed). `replays`: one line per replayed cell (`reproduce.replay.sentence`)."""
    body = [[", ".join(e["rows"]), e["scope"], ", ".join(e["result"]["commits"] + e["result"]["dirty"]),
             row_code(e["result"])] for e in entries if e["result"]["identical"] is not None]
    if not body and not replays:
        return []
    L = ["## Code each row's cells ran on", "",
         "Per row (rows on the same commits share a line): the commits its compared cells' records name, and "
         f"whether {SCOPE} differ between them, with the files that do, so a reader can judge whether a change "
         "could reach the row's numbers. Git cannot say whether it did; a replay can (`python -m reproduce.replay`: "
         "the record's cell retrained at a later commit, every logged value compared).", ""]
    L += table(["rows", "budget / base", "commits (oldest first)", "what the cells compute"], body) if body else []
    if replays:
        L += [f"Replays: {replay_summary}" if replay_summary else "Replays:", ""]
        L += [f"- {line}" for line in replays] + [""]
    return L


# A machine the tree was copied to without its .git (an accelerator lent for one batch of cells) cannot ask git which
# commit it runs. The launching checkout then declares it: `python -m reproduce.provenance --declare` prints
# `REPRODUCE_CODE_VERSION=<commit>:<digest>` for a clean checkout, the digest being `compute_digest` of what the cells
# compute. Where git cannot answer, the runner takes that commit only if the copy's digest matches (else it marks the
# version +dirty): the claim "these cells ran commit C" stays one the copy itself checked.
DECLARED_ENV = "REPRODUCE_CODE_VERSION"
_DIGEST_DIRS = ("mmjax", "configs")
_DIGEST_SKIP_DIRS = {"__pycache__", "reproduce"}  # reproduce: only mmjax/reproduce, in the old layout (see below)


def _digest_files(root: str) -> list[str]:
    files = []
    for top in _DIGEST_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            rel = os.path.relpath(dirpath, root)
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.endswith(".egg-info")
                                 and not (rel == "mmjax" and d == "reproduce"))
            files += [os.path.join(rel, f) for f in filenames if not f.endswith((".pyc", ".pyo"))]
    return sorted(files)


def compute_digest(root: str = ROOT) -> str:
    """sha256 over the paths and contents of the files under `COMPUTE_PATHS` (caches aside), hex, 16 digits."""
    import hashlib
    h = hashlib.sha256()
    for rel in _digest_files(root):
        with open(f"{root}/{rel}", "rb") as f:
            data = f.read()
        h.update(rel.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    return h.hexdigest()[:16]


def declare(root: str = ROOT) -> str:
    """`<commit>:<digest>` of a clean checkout whose files under `COMPUTE_PATHS` are exactly git's; else ValueError."""
    def _git(*args):
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=60, check=True).stdout
    if _git("status", "--porcelain", "--", *_DIGEST_DIRS).strip():
        raise ValueError(f"{root}: uncommitted or untracked files under {_DIGEST_DIRS}; commit them first")
    tracked = sorted(f for f in _git("ls-files", "--", *COMPUTE_PATHS).splitlines())
    walked = _digest_files(root)
    if tracked != walked:
        extra = sorted(set(walked) - set(tracked))[:5]
        raise ValueError(f"{root}: files under {_DIGEST_DIRS} that git does not track: {extra}")
    return f"{_git('rev-parse', 'HEAD').strip()}:{compute_digest(root)}"


def declared_version(root: str = ROOT, environ=None) -> dict:
    """{"commit", "dirty", "declared": True} from `DECLARED_ENV`, checked against this tree's digest ({} if unset)."""
    value = (os.environ if environ is None else environ).get(DECLARED_ENV, "")
    if not value:
        return {}
    commit, _, digest = value.partition(":")
    return {"commit": commit, "dirty": digest != compute_digest(root), "declared": True}


if __name__ == "__main__":
    import sys
    if sys.argv[1:] != ["--declare"]:
        sys.exit("usage: python -m reproduce.provenance --declare")
    try:
        print(f"{DECLARED_ENV}={declare()}")
    except ValueError as e:
        sys.exit(f"python -m reproduce.provenance: error: {e}")
