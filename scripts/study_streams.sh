#!/usr/bin/env bash
# The reproduction study's remaining declared runs on a CPU machine, as two streams that never train one cell twice
# (each has its own output directories). Resumable: rerun the same stream after a stop; finished cells come back from
# the committed archive and a preempted cell resumes from its last checkpoint in its output directory.
#   usage: nice -n 19 bash scripts/study_streams.sh a   (and, beside it, ... b)
# Order, as docs/reproduction/flowclip_protocol.md and docs/reproduction/protocol.md declare it: #25 first (G's
# Global-M heads at 2E, then base R's Flow-CLIP heads), then #24 (stream a: the baselines' seeds, the budget check,
# seeds 3-4 of the undecided ablation rows; stream b: the L_con cells, then reading B and cosine units; last, the
# false-negative cells, split between the streams).
# After each finished cell: bash scripts/publish_study_records.sh "<cell> seed <n>" (republishes the report, commits).
# Every declared run finished on 2026-12-08: either stream now restores all its cells from the archive and trains none.
set -eu
cd "$(dirname "$0")/.."
stream=${1:?usage: study_streams.sh a|b}
py=${PYTHON:-.venv/bin/python}
keep="--archive docs/reproduction/records --no-report"
run() { "$py" -m reproduce "$@" $keep; }
case "$stream" in
  a)
    run --budget flowclip --seeds 5 --cells fcs_G_globalm_hnb_2e --out workdir/repro_fcs
    run --budget flowclip --seeds 5 --cells fcs_R_flowclip_hnb --out workdir/repro_fcs
    run --budget converged --seeds 3 --cells pvse,pvse_maxmatch,setdiv,vse --out workdir/repro_converged
    run --budget converged_x2 --seeds 1 --cells sc_divmmd,sh_full --out workdir/repro_converged_x2
    run --budget converged --seeds 2 --first-seed 3 --cells sc_divmmd,sh_divmmd,sc_full,sh_full \
      --out workdir/repro_converged
    run --budget converged --seeds 3 --cells vse_fn,setdiv_fn,sh_full_fn --out workdir/repro_converged ;;
  b)
    run --budget flowclip --seeds 5 --cells fcs_G_globalm_cimr_2e --out workdir/repro_fcs_cimr
    run --budget flowclip --seeds 5 --cells fcs_R_flowclip_cimr --out workdir/repro_fcs_cimr
    run --budget converged --seeds 3 --cells vse_con,pvse_con,pvse_maxmatch_con --out workdir/repro_converged_b
    run --budget converged --seeds 3 --cells sc_full_b,sh_full_b,sh_divmmd_cos,sh_full_cos \
      --out workdir/repro_converged_b
    run --budget converged --seeds 3 --cells pvse_fn,pvse_maxmatch_fn --out workdir/repro_converged_b ;;
  *) echo "study_streams.sh: unknown stream '$stream' (a or b)" >&2; exit 2 ;;
esac
