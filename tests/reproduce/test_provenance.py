"""The report's code line: git decides whether the commits a grid ran on differ in what the cells compute."""

import os
import subprocess

import pytest

from reproduce import provenance


_CLOCK = [1_700_000_000]


def _git(root, *args):
    _CLOCK[0] += 60  # commits a minute apart: the report orders a grid's commits by commit time
    env = {**os.environ, "GIT_COMMITTER_DATE": f"{_CLOCK[0]} +0000", "GIT_AUTHOR_DATE": f"{_CLOCK[0]} +0000"}
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True,
                          capture_output=True, text=True, env=env).stdout.strip()


def _commit(root, files: dict, message: str) -> str:
    for path, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
        with open(os.path.join(root, path), "w") as f:
            f.write(text)
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", message)
    return _git(root, "rev-parse", "HEAD")[:10]


@pytest.fixture
def repo(tmp_path):
    try:
        _git(tmp_path, "init", "-q")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("git not available")
    # The study's code lived in the library (mmjax/reproduce/) in older commits and sits beside it (reproduce/) now:
    # a commit that touches either, or moves one to the other, changes nothing the cells compute.
    base = _commit(tmp_path, {"mmjax/losses.py": "a", "mmjax/reproduce/report.py": "r", "configs/x.py": "c"}, "base")
    report_only = _commit(tmp_path, {"mmjax/reproduce/report.py": "r2", "docs/x.md": "d"}, "report")
    _git(tmp_path, "mv", "mmjax/reproduce", "reproduce")
    moved = _commit(tmp_path, {"reproduce/report.py": "r3"}, "the study leaves the library")
    loss_change = _commit(tmp_path, {"mmjax/losses.py": "b"}, "loss")
    config_change = _commit(tmp_path, {"configs/x.py": "c2"}, "config")
    return str(tmp_path), base, report_only, moved, loss_change, config_change


def test_commits_that_differ_only_in_the_report_compute_the_same(repo):
    root, base, report_only, moved, loss_change, config_change = repo
    same = provenance.compare([base, report_only, moved], root)
    assert same["identical"] is True and same["differ"] == []
    assert "are identical at all of them" in provenance.sentence(same)
    assert "the study's own code aside: `reproduce/`, formerly `mmjax/reproduce/`" in provenance.sentence(same)
    mixed = provenance.compare([base, report_only, moved, loss_change, config_change], root)
    assert mixed["identical"] is False and sorted(mixed["differ"]) == sorted([loss_change, config_change])
    assert mixed["commits"][0] == base and f"differ from the oldest, {base}," in provenance.sentence(mixed)


def test_dirty_unknown_and_end_labelled_records(repo):
    root, base, report_only, *_ = repo
    dirty = provenance.compare([base, report_only + "+dirty"], root)
    assert dirty["identical"] is False and dirty["dirty"] == [report_only + "+dirty"]
    assert "ran with uncommitted edits" in provenance.sentence(dirty)
    unknown = provenance.compare([base, "0123456789"], root)
    assert unknown["identical"] is None and provenance.sentence(unknown) == ""
    assert provenance.sentence(provenance.compare([base], root)) == ""  # one clean commit: nothing to say
    records = [{"code": {"commit": base + "0" * 30, "dirty": False, "at": "launch"}},
               {"code": {"commit": report_only + "0" * 30, "dirty": True}}, {"code": {}},
               {"code": {"commit": base + "0" * 30, "dirty": False}, "code_at_end": {"commit": "f" * 40}}]
    assert provenance.commits_of(records) == sorted([base, report_only + "+dirty"])
    assert provenance.end_labelled(records) == 1
    line = provenance.sentence(provenance.compare(provenance.commits_of(records), root),
                               provenance.end_labelled(records))
    assert line.endswith("possibly a later commit than the process had loaded.")


def test_a_copy_without_git_takes_the_declared_commit_only_if_its_digest_matches(repo, tmp_path_factory):
    """The lent machine's copy has no .git: `declare` on the clean checkout names commit and digest, the copy checks
    the digest over what the cells compute (mmjax/, configs/; the study's code and caches aside)."""
    import shutil
    root = repo[0]
    value = provenance.declare(root)
    head = _git(root, "rev-parse", "HEAD")
    assert value.split(":")[0] == head
    copy = str(tmp_path_factory.mktemp("copy") / "tree")
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns(".git"))
    env = {provenance.DECLARED_ENV: value}
    assert provenance.declared_version(copy, env) == {"commit": head, "dirty": False, "declared": True}
    assert provenance.declared_version(copy, {}) == {}
    # The study's own code and Python caches do not change what the cells compute; a library file does.
    os.makedirs(os.path.join(copy, "mmjax", "__pycache__"))
    open(os.path.join(copy, "mmjax", "__pycache__", "losses.cpython-311.pyc"), "wb").close()
    with open(os.path.join(copy, "reproduce", "report.py"), "w") as f:
        f.write("changed")
    assert provenance.declared_version(copy, env)["dirty"] is False
    with open(os.path.join(copy, "configs", "x.py"), "w") as f:
        f.write("c3")
    assert provenance.declared_version(copy, env)["dirty"] is True


def test_declare_refuses_a_checkout_whose_computing_files_git_does_not_hold(repo):
    root = repo[0]
    with open(os.path.join(root, "mmjax", "losses.py"), "w") as f:
        f.write("uncommitted")
    with pytest.raises(ValueError, match="uncommitted or untracked files under"):
        provenance.declare(root)
    _git(root, "checkout", "--", "mmjax/losses.py")
    with open(os.path.join(root, "mmjax", "new.py"), "w") as f:
        f.write("untracked")
    with pytest.raises(ValueError, match=r"mmjax"):
        provenance.declare(root)


def test_rows_name_their_commits_and_the_files_that_differ(repo):
    """The per-row table: rows whose cells ran on the same commits share a line; each line names the files under
    what the cells compute that differ between its commits (by package when there are many), or says identical."""
    root, base, report_only, moved, loss_change, config_change = repo

    def recs(*commits):
        return [{"code": {"commit": c + "0" * 30, "dirty": False, "at": "launch"}} for c in commits]

    groups = [("A1", "converged", recs(base, report_only)), ("A2", "converged", recs(report_only, base)),
              ("B1", "converged", recs(base, loss_change, config_change)), ("C1", "converged", recs(moved)),
              ("D1", "converged", [{"code": {}}])]
    entries = provenance.rows_code(groups, root)
    assert [e["rows"] for e in entries] == [["A1", "A2"], ["B1"], ["C1"]]  # D1 names no commit: no line
    assert entries[1]["result"]["files"] == ["configs/x.py", "mmjax/losses.py"]
    texts = [provenance.row_code(e["result"]) for e in entries]
    assert texts[0] == "identical at all of them" and texts[2] == "one commit"
    assert texts[1] == f"differs from the oldest, {base}, in 2 file(s): `configs/x.py`, `mmjax/losses.py`"
    assert provenance.row_code(entries[1]["result"], max_files=1).endswith("2 file(s): `configs/` (1), `mmjax/` (1)")
    lines = provenance.rows_section(entries, lambda head, body: [" | ".join(head)] + [" | ".join(r) for r in body])
    assert lines[0] == "## Code each row's cells ran on" and lines[-3].startswith("A1, A2 | converged | ")
    with_replay = provenance.rows_section(entries, lambda head, body: ["t"], ["sh_full seed 0 ... bitwise equal."])
    assert with_replay[-5:] == ["t", "Replays:", "", "- sh_full seed 0 ... bitwise equal.", ""]
    only_replay = provenance.rows_section([], None, ["a replay"])
    assert only_replay[0] == "## Code each row's cells ran on" and "- a replay" in only_replay
    unknown = provenance.rows_code([("E1", "converged", recs("0123456789"))], root)
    assert provenance.row_code(unknown[0]["result"]) == "" and provenance.rows_section(unknown, None) == []
