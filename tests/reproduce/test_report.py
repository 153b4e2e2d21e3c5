"""The reproduction report (`reproduce.report`, `tables`, `figures`) on hand-made records of every budget: the
headline rows with their verdicts and 'why', quotes, derived, sensitivity, knob, budget-check and quick-budget
tables, figures and JSON; `publish`; the `--report-only --archive` command line; and one slow end-to-end smoke run
of `python -m reproduce`."""

import json
import os
import re
import shlex
import subprocess
import sys

import pytest
from scipy import stats as st

from reproduce import __main__ as cli
from reproduce import archive, grid, metrics, report
from reproduce.claims import HEADLINE_ALPHA
from tests.reproduce.helpers import (J, MACHINE, PNG, REPO, assert_tables_are_rectangular, converged_metrics,
                                     record, results, section, table_row)
from tests.subprocess_env import subprocess_env

J2 = (0.5, -1.0, 1.2, -0.3, 0.9)   # sh_full's own jitter: within noise of sh_divmmd's
# converged cells: (semantic RSUM, source RSUM, seeds, jitter, mean ln CV of the image elements)
CONV = {"mil_divmmd": (380, 280, 3, J, -7.0), "sc_divmmd": (400, 300, 3, J, -3.0), "sh_divmmd": (410, 290, 5, J, -2.5),
        "sc_full": (390, 310, 3, J, -3.0), "sh_full": (410, 300, 5, J2, -1.5), "pvse": (420, 320, 3, J, -7.0),
        "pvse_maxmatch": (400, 300, 3, J, -2.0), "setdiv": (380, 280, 3, J, -2.0), "sc_full_b": (405, 305, 3, J, -2.8),
        "sh_full_b": (420, 300, 3, J, -1.4)}
HEADLINE = {"M1": "reproduced", "M2a": "reversed", "M2b": "not reproduced", "M2c": "reproduced",
            "M3": "not reproduced", "S1": "reproduced", "S2": "reproduced", "S3": "reversed", "C1": "reproduced",
            "P1": "reversed", "B1": "reproduced", "B2": "missing"}
DERIVED = {"D1": "reproduced", "D2": "reproduced", "D3": "reproduced", "D4": "reproduced", "D5": "reversed"}


def _sets(name, k):
    """(single_sem) of the set cells the S rows read: MIL's weakest element far below its full set, smooth-Chamfer's
    elements within ~0.15 % of its full set, MaxMatch's full set below its best element (S3 reversed)."""
    if name == "mil_divmmd":
        return 440 + J[k], [300 + 2 * J[k], 420, 430, 435]
    if name == "sc_divmmd":
        e = 400 * (1 - (0.1, 0.2, 0.15)[k] / 100)
        return 400, [e - 1, e + 1, e, e]
    if name == "sh_full":
        return 440, [445 + (0.0, 1.0, -0.5, 0.3, 0.2)[k], 430, 431, 432]
    return None


def converged_records():
    out = []
    for name, (sem, src, n, jit, cv) in CONV.items():
        for k in range(n):
            scores = {"mil": (390 + jit[k], src + jit[k])} if name == "sh_divmmd" else None  # MIL flips M1
            sets = _sets(name, k)
            m = converged_metrics(name, sem + jit[k], src + jit[k], scores=scores, cv_log=cv + 0.1 * jit[k],
                                  single=sets, single_sem=sets)
            out.append(record(name, k, m, budget="converged", curves={
                "train": {"step": [100, 200], "loss/triplet": [0.5, 0.4]},
                "val": {"step": [100, 200], "val/rsum": [200.0, 210.0], "val/semantic/rsum": [250.0, 260.0]}}))
    for name, sem, src, cv in (("sc_divmmd", 402, 302, -3.0), ("sh_full", 415, 295, -1.5)):
        out.append(record(name, 0, converged_metrics(name, sem, src, cv_log=cv), budget="converged_x2"))
    return out


def quick_records():
    out = []
    for k in range(3):
        for name, src in (("sc_divmmd", 300), ("sh_divmmd", 310)):
            sim = grid.SPEC_BY_NAME[name].similarity
            m = metrics.cell_metrics(results({sim: src + J[k], "maxmatch_topk": src + J[k], "maxmatch": src + J[k]},
                                             single=(src, [src - 5] * 4), cv_log=-3.0), sim)
            arrays = {"best": {"element_similarity": [[0.9, 0.1], [0.2, 0.8]]}, "final": {}} if k == 0 else {}
            out.append(record(name, k, m, arrays=arrays))
        b, e1, e2 = (-2.0, 0.0, 2.0)[k], (0.1, -0.1, 0.0)[k], (0.2, -0.1, 0.1)[k]   # the seed's CLIP moves all heads
        for name, suites in (("clip", (55 + b, 50 + b, 50 + b)), ("globalm_hnb", (60 + b, 50 + b, 50 + b)),
                             ("globalm_cimr", (60 + b, 45 + b, 45 + b)),
                             ("flowclip_hnb", (63 + b + e1, 50 + b, 50 + b)),
                             ("flowclip_cimr", (63 + b + e2, 40 + b + e2, 41 + b + e2))):
            out.append(record(name, k, metrics.cell_metrics(results({"x": 100.0 + k}, suites=suites), None)))
    return out


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    rep = report.write_report(converged_records() + quick_records(), str(out), command="python -m reproduce X",
                              oracle_path=str(out / "no_oracle.json"),   # hermetic: not the committed oracle
                              replay_dir=str(out / "no_replays"))         # nor the committed replays
    return out, rep, (out / "reproduction.md").read_text()


def test_headline_and_derived_verdicts(written):
    _, rep, md = written
    got = {r["id"]: r["result"]["verdict"] for r in rep["rows"]["headline"] + rep["rows"]["derived"]}
    assert got == {**HEADLINE, **DERIVED}
    m1 = next(r["result"] for r in rep["rows"]["headline"] if r["id"] == "M1")
    ref = st.ttest_ind([409, 410, 411], [399, 400, 401], equal_var=False)   # semantic RSUM, seeds 0–2
    assert m1["p"] == pytest.approx(ref.pvalue) and ref.pvalue < HEADLINE_ALPHA and m1["delta"] == pytest.approx(10)
    claims_md = section(md, "MaxMatch claims (converged budget)")
    assert "Verdicts: reproduced 6, reversed 3, not reproduced 2, missing 1 (of 12 rows" in claims_md
    for cid, verdict in HEADLINE.items():
        assert f"| **{verdict}** |" in table_row(claims_md, cid), cid
    assert "| +10.00 |" in table_row(claims_md, "M1") and "| sc_divmmd → sh_divmmd |" in table_row(claims_md, "M1")
    assert "vs sc_divmmd: Δ +10.23, p = " in table_row(claims_md, "M3")          # every part of the M3 test
    assert "TOST p = " in table_row(claims_md, "S2") and "margin ±1" in table_row(claims_md, "S2")
    for cid, verdict in DERIVED.items():
        assert f"| **{verdict}** |" in table_row(section(md, "Derived rows (not the source's statements)"), cid)


def test_the_why_column_names_what_else_bears_on_a_row(written):
    _, rep, _ = written
    why = {r["id"]: r["why"] for r in rep["rows"]["headline"]}
    assert "source ground truth: reversed" in why["M1"]             # source RSUM: 300 → 290
    assert "another verdict under MIL" in why["M1"]                 # S_H's MIL score: 400 → 390
    assert "2 epochs: Δ +10.00, reproduced" in why["M1"]
    assert "undecided at 3 seeds, tested on 5" in why["M2b"] and "undecided" not in why["M1"]
    assert f"`{grid.READING_B_KNOB}`: Δ +5.00, reproduced" in why["M2a"]      # sc_full_b: 405
    assert f"`{grid.READING_B_KNOB}`: Δ +10.00, reproduced" in why["M2b"]     # sh_full_b: 420
    assert "cells not run yet: vse" in why["B2"]
    # one 20-epoch seed per cell: no test (the record's ln CV −3.0 → −1.5 gives no Δ either, see the report)
    assert re.search(r"20 epochs: Δ (–|\+1\.50), inconclusive", why["C1"]), why["C1"]
    assert "source ground truth" not in why["P1"] and "READING" not in why["P1"] and "`" not in why["P1"]
    m2b = next(r for r in rep["rows"]["headline"] if r["id"] == "M2b")["result"]
    assert m2b["seeds"] == [0, 1, 2, 3, 4] and m2b["first_look"] == "not reproduced"


def test_every_section_and_table(written):
    _, rep, md = written
    headings = re.findall(r"^## (.+)$", md, re.M)
    assert headings == ["MaxMatch claims (converged budget)", "Derived rows (not the source's statements)",
                        "What the tests could detect", "Every cell under every score (converged budget)", "Readings of unstated defaults (knob cells)",
                        "Budget check: 10 against 20 epochs",
                        "Flow-CLIP study (protocol: [docs/reproduction/flowclip_protocol.md]"
                        "(reproduction/flowclip_protocol.md))", "The quick budget (2 epochs)", "Figures", "Verdict rule"]
    study = section(md, headings[6])
    assert study.strip().startswith("No records yet: the study's bases, pilot and heads have not run"), study[:600]
    assert md.startswith("# Reproduction report\n\nRegenerate: `python -m reproduce X`")
    assert "Records: 34 run(s) at the converged budget, 2 run(s) at the converged_x2 budget, 21 run(s) at the " \
           f"default budget. Total cell wall time: converged 34.0 h, converged_x2 2.0 h, default 21.0 h; machines: " \
           f"{MACHINE} (57 run(s))." in md
    assert "**The converged grid is still running: 24 of the 27 runs" in md      # vse has not run
    for r in rep["rows"]["headline"]:
        assert f"- **{r['id']}** (MaxMatch project page (ACL 2025)): “{r['claim'].quote}”" in md
    sens = section(md, "Every cell under every score (converged budget)")
    semantic, source = sens.split("**Source ground truth**")
    row = table_row(semantic, "S_H, Div+MMD")   # 5 seeds, std √0.625; its MIL score 20 lower
    assert row == "| S_H, Div+MMD | 5 | 410.00 ± 0.79 | " + "410.00 ± 0.79 | " * 3 + "390.00 ± 0.79 |"
    assert table_row(source, "S_H, Div+MMD") == "| S_H, Div+MMD | 5 |" + " 290.00 ± 0.79 |" * 5
    knobs = section(md, "Readings of unstated defaults (knob cells)")
    assert (f"| converged | smooth-Chamfer, Div+MMD+GD+ISD (reading B) | `{grid.READING_B_KNOB}` | 3 / 3 | "
            "390.00 ± 1.00 | 405.00 ± 1.00 | -3.000 ± 0.100 | -2.800 ± 0.100 |") in knobs
    reading_b = table_row(knobs.split("Headline rows under each knob")[1], f"`{grid.READING_B_KNOB}`")
    assert "M2a: reversed → reproduced" in reading_b and "M2b: not reproduced → reproduced" in reading_b
    assert reading_b.split(" | ")[-1].startswith("M2a, M2b")   # the rows whose verdict reading B changes
    check = section(md, "Budget check: 10 against 20 epochs")
    assert "| smooth-Chamfer, Div+MMD | 0 | 399.00 | 402.00 | 299.00 | 302.00 |" in check
    assert "| S_H, Div+MMD+GD+ISD (MaxMatch) | 0 | 410.50 | 415.00 | 300.50 | 295.00 |" in check
    assert "sh_full − sc_divmmd, seed 0: Δ +11.50 at 10 epochs, +13.00 at 20 (semantic RSUM)" in check
    quick = section(md, "The quick budget (2 epochs)")
    flow = quick.split("**Flow-CLIP rows")[1]
    for cid in ("F1", "F2", "F3", "F4", "F5"):
        assert "| **reproduced** |" in table_row(flow, cid), cid
        assert f"- **{cid}** (Flow-CLIP paper): “" in flow
    assert "| **reproduced** |" in table_row(quick.split("**Flow-CLIP rows")[0], "M1")   # source RSUM 300 → 310
    assert "![smooth-Chamfer, Div+MMD](figures/heatmap_sc_divmmd.png)" in quick
    assert "| S_H, Div+MMD | 3 | 310.00 ± 1.00 |" in quick        # the retrieval table, source RSUM
    assert "## Verdict rule\n\nEvery claim row is one estimate" in md
    assert_tables_are_rectangular(md)


def test_figures_and_json(written):
    out, rep, md = written
    assert set(rep["figures"]) == {"claims", "ablation_rsum", "flowclip_binding", "flowclip_controls",
                                   "training_curves"}
    assert rep["heatmaps"] == {n: os.path.join("figures", f"heatmap_{n}.png") for n in ("sc_divmmd", "sh_divmmd")}
    for name, path in {**rep["figures"], **rep["heatmaps"]}.items():
        assert (out / path).read_bytes()[:8] == PNG, name
        assert f"]({path})" in md, name

    def no_constant(name):
        raise ValueError(f"{name} is not JSON")
    data = json.loads((out / "reproduction.json").read_text(), parse_constant=no_constant)   # strict JSON
    assert data["command"] == "python -m reproduce X" and data["budgets"] == {"converged": 34, "converged_x2": 2,
                                                                              "default": 21}
    assert [r["claim"] for r in data["rows"]["headline"]] == list(HEADLINE)
    assert data["cells"]["converged"]["sh_divmmd"]["4"]["rsum_sem"] == pytest.approx(409.5)
    assert data["aggregates"]["converged"]["sc_divmmd"]["metrics"]["best"]["rsum_sem"]["values"] == [399, 400, 401]
    assert len(data["records"]) == 57


def test_a_report_without_converged_records_says_the_grid_is_still_running():
    md = report.render_markdown(report.build_report(quick_records(), command="c"))
    assert "**The converged grid is still running: 0 of the 27 runs the headline rows need" in md
    assert "Verdicts: missing 12 (of 12 rows" in md
    assert "cells not run yet: sc_divmmd, sh_divmmd; 2 epochs: Δ +10.00, reproduced" in md
    assert "(no converged records yet)" in md and "(no knob cells yet)" in md
    assert "(the 20-epoch runs have not finished)" in md
    full = [record(n, k, converged_metrics(n, 400.0 + k, 300.0 + k), budget="converged")
            for n in ("mil_divmmd", "sc_divmmd", "sh_divmmd", "sc_full", "sh_full", "pvse", "pvse_maxmatch",
                      "setdiv", "vse") for k in range(3)]
    md = report.render_markdown(report.build_report(full, command="c"))
    assert "still running" not in md and "(no quick-budget records)" in md


def test_the_status_names_the_runs_the_second_look_waits_for():
    names = ("mil_divmmd", "sc_divmmd", "sh_divmmd", "sc_full", "sh_full", "pvse", "pvse_maxmatch", "setdiv", "vse")
    full = [record(n, k, converged_metrics(n, 400.0 + k, 300.0 + k), budget="converged") for n in names
            for k in range(3)]
    rep = report.build_report(full, command="c")
    md = report.render_markdown(rep)
    why = {r["id"]: r["why"] for r in rep["rows"]["headline"]}
    assert "| **not reproduced** |" in table_row(section(md, "MaxMatch claims (converged budget)"), "M1")  # Δ = 0
    assert "the second look (seeds 0–4) waits for sc_divmmd seed 3, sc_divmmd seed 4, sh_divmmd seed 3, " \
           "sh_divmmd seed 4" in why["M1"]
    assert "First look done (seeds 0–2 of all 27 headline runs); the second look waits for 16 run(s).** M1" in md
    # seeds 3–4 of M1's cells: M1 has had its second look and leaves the list; M2a (sc_full) still waits
    more = [record(n, k, converged_metrics(n, 400.0 + k, 300.0 + k), budget="converged")
            for n in ("sc_divmmd", "sh_divmmd") for k in (3, 4)]
    rep = report.build_report(full + more, command="c")
    why = {r["id"]: r["why"] for r in rep["rows"]["headline"]}
    assert "undecided at 3 seeds, tested on 5" in why["M1"] and "waits for" not in why["M1"]
    assert "waits for sc_divmmd seed 3" not in why["M2a"] and "sc_full seed 3" in why["M2a"]


def test_long_budget_records_join_the_quick_and_headline_rows():
    longs = [dict(r, budget="long") for r in quick_records()
             if r["name"] in ("globalm_cimr", "flowclip_cimr") and r["seed"] < 2]
    for k in range(2):
        for name, src in (("sc_divmmd", 300), ("sh_divmmd", 305)):
            m = metrics.cell_metrics(results({grid.SPEC_BY_NAME[name].similarity: src + J[k]}),
                                     grid.SPEC_BY_NAME[name].similarity)
            longs.append(record(name, k, m, budget="long"))
    rep = report.build_report(quick_records() + longs, command="c")
    ten = "10 epochs, quick recipe: Δ +5.00, reproduced"            # 2 seeds a side: t = 7.07, ν = 2, p = 0.02
    assert ten in next(r["why"] for r in rep["rows"]["headline"] if r["id"] == "M1")
    assert ten in next(r["why"] for r in rep["quick"]["maxmatch"] if r["id"] == "M1")
    md = report.render_markdown(rep)
    flow = section(md, "The quick budget (2 epochs)").split("**Flow-CLIP rows")[1]
    assert table_row(flow, "F1").endswith("| **reproduced** | 1500 steps (seeds 0, 1): Δ +3.05, reproduced |")
    assert table_row(flow, "F2").endswith("| **reproduced** | – |")                  # no long HNB heads


def test_publish_copies_the_report_and_figures_and_keeps_the_rest(written, tmp_path):
    out, rep, _ = written
    docs = tmp_path / "docs"
    (docs / "reproduction" / "records" / "default").mkdir(parents=True)
    (docs / "reproduction" / "stale.png").write_bytes(b"old")     # a figure of an earlier report must not linger
    (docs / "reproduction" / "protocol.md").write_text("protocol")
    (docs / "reproduction" / "records" / "default" / "x.json").write_text("{}")
    fig_dir = report.publish(str(out), str(docs / "reproduction.md"))
    assert fig_dir == str(docs / "reproduction")
    md = (docs / "reproduction.md").read_text()
    links = re.findall(r"\]\(([^)]+\.png)\)", md)
    assert sorted(links) == sorted(f"reproduction/{os.path.basename(p)}"
                                   for p in list(rep["figures"].values()) + list(rep["heatmaps"].values()))
    for link in links:
        assert (docs / link).read_bytes()[:8] == PNG, link
    assert "](figures/" not in md and "[docs/reproduction/protocol.md](reproduction/protocol.md)" in md
    assert not (docs / "reproduction" / "stale.png").exists()
    assert (docs / "reproduction" / "protocol.md").read_text() == "protocol"
    assert (docs / "reproduction" / "records" / "default" / "x.json").read_text() == "{}"
    with pytest.raises(ValueError, match=r"\.md"):
        report.publish(str(out), str(docs / "reproduction.txt"))


def _archive(store, records):
    for r in records:
        archive._write_json(archive.record_path(str(store), r["budget"], r["name"], r["seed"]), r)
    return {p: open(p, "rb").read() for p in map(str, store.rglob("*.json"))}


def test_report_only_builds_the_report_from_every_archived_budget(tmp_path, capsys):
    store = tmp_path / "docs" / "reproduction" / "records"
    recs = [r for r in converged_records() if r["name"] in ("sc_divmmd", "sh_divmmd")] + [
        r for r in quick_records() if r["name"] in ("sc_divmmd", "sh_divmmd")]
    before = _archive(store, recs)
    out, md = tmp_path / "report", tmp_path / "docs" / "reproduction.md"
    argv = ["--report-only", "--archive", str(store), "--out", str(out), "--publish", str(md)]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "headline rows ['reproduced', 'missing'," in printed and "published to" in printed
    text = md.read_text()
    command = re.search(r"^Regenerate: `(python -m reproduce [^`]*)`", text, re.M).group(1)
    assert command == f"python -m reproduce --report-only --archive {store} --out {out} --publish {md}"
    args = cli.parse_args(shlex.split(command)[3:])
    assert (args.report_only, args.archive, args.out, args.publish) == (True, str(store), str(out), str(md))
    assert "Records: 8 run(s) at the converged budget, 1 run(s) at the converged_x2 budget, 6 run(s) at the " \
           "default budget." in text
    assert "| **reproduced** |" in table_row(section(text, "MaxMatch claims (converged budget)"), "M1")
    assert {p: open(p, "rb").read() for p in map(str, store.rglob("*.json"))} == before   # read, never written
    assert cli.main(argv) == 0 and md.read_text() == text                                 # the same report again
    # a record whose place in the archive contradicts it is refused, naming the file, before anything is written
    bad = dict(recs[0], seed=7)
    archive._write_json(archive.record_path(str(store), "converged", "sc_divmmd", 1), bad)
    capsys.readouterr()
    assert cli.main(argv) == 2
    assert re.search(r"converged/sc_divmmd/seed1\.json: field 'seed' is 7", capsys.readouterr().err)
    assert cli.main(["--report-only", "--out", str(tmp_path / "none")]) == 1      # no archive: nothing to report


def test_the_regenerate_command_of_a_run_without_archive_parses():
    args = cli.parse_args(["--budget", "smoke", "--seeds", "1", "--out", "/tmp/x"])
    command = cli.report_command(args)
    cli.parse_args(shlex.split(command)[3:])


def test_report_only_without_archive_reports_the_finished_cells_of_the_out_directory(tmp_path, capsys):
    """What a run without --archive prints as its regenerate command works: the cells finished in --out."""
    out = tmp_path / "repro"
    recs = [r for r in converged_records() if r["name"] in ("sc_divmmd", "sh_divmmd") and r["budget"] == "converged"]
    cells = {(c.name, c.seed): c for c in grid.make_grid(5)}
    for r in recs:
        archive._write_json(os.path.join(cells[(r["name"], r["seed"])].workdir(str(out)), archive.RECORD), r)
    archive._write_json(str(out / "grid.json"), {"budget": "converged", "seeds": 5})
    assert cli.main(["--report-only", "--out", str(out)]) == 0
    assert "headline rows ['reproduced', 'missing'," in capsys.readouterr().out
    assert "8 run(s) at the converged budget" in (out / "reproduction.md").read_text()
    (out / "grid.json").write_text("{broken")
    assert cli.main(["--report-only", "--out", str(out)]) == 2
    assert "grid.json: unreadable grid description" in capsys.readouterr().err


# ---------------------------------------------------------------- end to end (smoke budget)


@pytest.mark.slow
def test_smoke_run_end_to_end_archives_reports_and_resumes(tmp_path):
    out, store = tmp_path / "repro", tmp_path / "records"
    env = subprocess_env(env_extra={"MPLBACKEND": "Agg"})
    cmd = [sys.executable, "-m", "reproduce", "--budget", "smoke", "--seeds", "1", "--cells", "sh_full,sc_divmmd",
           "--out", str(out), "--archive", str(store)]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "2 cell(s) run, 0 skipped, 0 failed" in proc.stdout
    assert "2 cell record(s) and 0 base export(s) saved" in proc.stdout   # archived as each cell finished
    files = sorted(store.rglob("*.json"))
    assert [p.relative_to(store).as_posix() for p in files] == ["smoke/sc_divmmd/seed0.json",
                                                                "smoke/sh_full/seed0.json"]
    for p in files:
        r = json.loads(p.read_text())
        assert r["budget"] == "smoke" and "CPU core" in r["machine"] and r["figures"] == {"best": {}, "final": {}}
        assert r["stability"]["nonfinite_losses"] == 0 and r["curves"]["val"]["step"][-1] == grid.SMOKE_STEPS
        best = r["metrics"]["best"]
        assert {"rsum", "cv_log_image", "single/full", "retrieval/maxmatch/rsum"} <= set(best), p
    md = (out / "reproduction.md").read_text()
    assert "Records: 2 run(s) at the smoke budget." in md and "0 of the 27 runs" in md
    assert f"--report-only --archive {store} --out {out}`" in md
    assert_tables_are_rectangular(md)
    json.loads((out / "reproduction.json").read_text())
    stamps = {p: p.stat().st_mtime_ns for p in [*files, *out.glob("cells/*/seed0/cell.json")]}
    again = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "0 cell(s) run, 2 skipped, 0 failed" in again.stdout
    assert "0 cell record(s) and 0 base export(s) saved" in again.stdout
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
