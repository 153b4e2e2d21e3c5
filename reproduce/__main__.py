"""`python -m reproduce --budget {smoke,default,long,converged,converged_x2,flowclip_pilot,flowclip} --seeds N [--first-seed K] --out DIR
[--cells a,b] [--clip-from DIR_BASE] [--archive docs/reproduction/records] [--publish docs/reproduction.md]
[--config-dir DIR_CONFIGS]`, or `python -m reproduce --report-only --archive docs/reproduction/records --out DIR
[--publish docs/reproduction.md]`, run from the repository root (reproduce/README.md).

Runs the unfinished cells of the grid (`reproduce.grid`) in DIR, then writes DIR/reproduction.md,
DIR/reproduction.json and DIR/figures/ from every archived record (all budgets) and DIR's finished cells. With
--archive, the run's budget's records kept in the repository are restored into DIR first and every record is saved
there as soon as its cell finishes (`reproduce.archive`), a frozen base's export with it (`reproduce.base_exports`).
Exit status 1 when a cell failed (the report is still written from the others). While DIR/PAUSE exists the grid
waits before its next cell (`runner.wait_while_paused`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def parse_args(argv):
    from reproduce import paths
    from reproduce.grid import BUDGETS
    p = argparse.ArgumentParser(prog="python -m reproduce", description=__doc__.split("\n\n")[1])
    p.add_argument("--budget", choices=BUDGETS, default="default",
                   help="smoke: tiny data, a few steps (CI); default: the configs' main-job budgets (the quick grid); "
                   "long: 5× the default training length (use with --cells); converged: the retrieval cells at the "
                   "budget the MaxMatch claims are decided at; converged_x2: twice that (the budget check); flowclip_pilot, "
                   "flowclip: the Flow-CLIP study's cells (fcs_*; docs/reproduction/flowclip_protocol.md)")
    p.add_argument("--seeds", type=int, default=3, help="seeds per cell (≥ 3 for verdicts at the default budget)")
    p.add_argument("--first-seed", type=int, default=0, help="first seed (the grid runs seeds K … K+N−1; e.g. a "
                   "one-seed long-budget grid on seed 2 of the default grid's CLIP)")
    p.add_argument("--out", required=True, help="output directory (resumable: finished cells are skipped)")
    p.add_argument("--cells", default="", help="comma-separated cell names (default: the whole grid)")
    p.add_argument("--report-only", action="store_true", help="run nothing: write the report from the archived "
                   "records (every budget) and the finished cells already in --out, into --out")
    p.add_argument("--archive", default="", help="directory of committed cell records (docs/reproduction/records): "
                   "records the output directories lack are restored from it (those cells are skipped), and every "
                   "finished record is saved to it")
    p.add_argument("--clip-from", default="", help="grid directory whose finished CLIP cells the Flow-CLIP heads "
                   "sit on (e.g. the default grid's workdir/repro for long-budget heads); this grid then trains no "
                   "CLIP of its own")
    p.add_argument("--publish", default="", help="also copy the report to this .md path, figures beside it in a "
                   "directory of the same name (e.g. docs/reproduction.md + docs/reproduction/)")
    p.add_argument("--no-report", action="store_true", help="run the cells and archive them, write no report (one "
                   "of several processes side by side: `python -m reproduce.parallel`)")
    p.add_argument("--config-dir", default=paths.CONFIG_DIR, help="directory of the config files the cells build on "
                   "(default: configs/ of the repository this program sits in, %(default)s)")
    args = p.parse_args(argv)
    if args.seeds < 1:
        p.error(f"--seeds must be >= 1, got {args.seeds}")
    if args.report_only and args.no_report:
        p.error("--no-report and --report-only exclude each other")
    if args.first_seed < 0:
        p.error(f"--first-seed must be >= 0, got {args.first_seed}")
    return args


def report_command(args) -> str:
    """The command that rebuilds the report from the committed records (what the report says at its top)."""
    parts = ["python -m reproduce --report-only"] + ([f"--archive {args.archive}"] if args.archive else []) + [
        f"--out {args.out}"]
    if args.publish:
        parts.append(f"--publish {args.publish}")
    return " ".join(parts)


def _cells_in(out: str, names: str) -> list:
    from reproduce.grid import make_grid
    path = os.path.join(out, "grid.json")
    if not os.path.exists(path):
        return []
    try:
        with open(path) as f:
            seeds = int(json.load(f).get("seeds", 0))
    except (OSError, json.JSONDecodeError, TypeError, ValueError) as e:
        raise ValueError(f"{path}: unreadable grid description ({e})") from e
    return make_grid(seeds, [c for c in names.split(",") if c] or None) if seeds else []


def main(argv=None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from absl import logging
    logging.set_verbosity(logging.WARNING)  # keep Orbax's per-file INFO lines out of the progress output
    from reproduce import archive, base_exports
    from reproduce.grid import make_grid
    from reproduce.report import publish, write_report
    from reproduce.runner import check_budget, check_clip_source, load_cell, run_grid
    from mmjax.train import EXIT_PREEMPTED, TrainingPreempted
    failed = []
    try:
        cells = make_grid(args.seeds, [c for c in args.cells.split(",") if c] or None,
                          with_clip=not args.clip_from, first_seed=args.first_seed)
        if not args.report_only:
            if args.clip_from:
                check_clip_source(cells, args.clip_from)
            check_budget(args.out, args.budget, args.first_seed + args.seeds)  # grid.json: 1 + the largest seed
            if args.archive:
                restored = archive.restore(cells, args.out, args.archive, args.budget)
                if restored:
                    print(f"[reproduce] restored {len(restored)} cell record(s) from {args.archive}: "
                          f"{', '.join(restored)}", flush=True)
                restored = base_exports.restore(cells, args.out, args.archive, args.budget)
                if restored:
                    print(f"[reproduce] restored {len(restored)} base export(s) from {args.archive}: "
                          f"{', '.join(restored)}", flush=True)
            if not args.clip_from:
                base_exports.check_heads_have_bases(cells, args.out, args.archive, args.budget)
        else:  # the finished cells of a grid already in --out (its grid.json says how many seeds it covered)
            cells = _cells_in(args.out, args.cells)
        archived = archive.load_all(args.archive) if args.archive and not args.no_report else []
    except ValueError as e:  # a bad cell name, a directory of another budget, a bad archived record: no traceback
        print(f"python -m reproduce: error: {e}", file=sys.stderr)
        return 2
    if not args.report_only:
        t0 = time.perf_counter()
        on_finished = None
        archived_now = {"records": 0, "exports": 0}
        if args.archive:  # each record is archived as soon as its cell finishes, not only when the grid ends
            def on_finished(cell):
                archived_now["records"] += len(archive.save([cell], args.out, args.archive, args.budget))
                archived_now["exports"] += len(base_exports.save([cell], args.out, args.archive, args.budget))
        try:
            status = run_grid(cells, args.out, args.budget, on_finished=on_finished, clip_out=args.clip_from,
                              config_dir=args.config_dir)
        except TrainingPreempted as e:
            print(f"[reproduce] preempted: {e}; rerun the same command to resume the grid", flush=True)
            return EXIT_PREEMPTED
        failed = status["failed"]
        print(f"[reproduce] {len(status['done'])} cell(s) run, {len(status['skipped'])} skipped, {len(failed)} "
              f"failed in {time.perf_counter() - t0:.1f} s; load average {os.getloadavg()}", flush=True)
        if args.archive:
            saved = archive.save(cells, args.out, args.archive, args.budget)
            exports = base_exports.save(cells, args.out, args.archive, args.budget)
            print(f"[reproduce] {archived_now['records'] + len(saved)} cell record(s) and "
                  f"{archived_now['exports'] + len(exports)} base export(s) saved to {args.archive}", flush=True)
            if args.no_report:
                return 1 if failed else 0
            archived = archive.load_all(args.archive)
        elif args.no_report:
            return 1 if failed else 0
    # The report: every archived record (all budgets), and this grid's finished cells the archive lacks.
    known = {(r["budget"], r["name"], r["seed"]) for r in archived}
    local = [r for r in (load_cell(c, args.out) for c in cells) if r is not None]
    records = archived + [r for r in local if (r["budget"], r["name"], r["seed"]) not in known]
    if not records:
        print(f"[reproduce] no finished cells in {args.out} or {args.archive or '(no --archive)'}: nothing to "
              "report", file=sys.stderr)
        return 1
    report = write_report(records, args.out, command=report_command(args))
    if args.publish:
        print(f"[reproduce] published to {args.publish} (figures in {publish(args.out, args.publish)})", flush=True)
    print(f"[reproduce] {os.path.join(args.out, 'reproduction.md')}: headline rows "
          f"{[r['result']['verdict'] for r in report['rows']['headline']]}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
