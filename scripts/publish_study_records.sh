#!/usr/bin/env bash
# After a study cell finishes (scripts/study_streams.sh archives its record): republish docs/reproduction.md from every
# committed record and commit the records with it, so the report never lags the archive.
#   usage: bash scripts/publish_study_records.sh "sc_full seed 3 (second look)"
# The commit message is "Records: <what>; report republished". Refuses when nothing under docs/reproduction changed.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:?usage: publish_study_records.sh "<records named>"}
py=${PYTHON:-.venv/bin/python}
mkdir -p workdir
"$py" -m reproduce --report-only --archive docs/reproduction/records --out workdir/report \
  --publish docs/reproduction.md > workdir/publish_report.log 2>&1 \
  || { tail -n 20 workdir/publish_report.log >&2; echo "publish_study_records: the report failed (workdir/publish_report.log)" >&2; exit 1; }
git add docs/reproduction docs/reproduction.md
if git diff --cached --quiet; then
  echo "publish_study_records: no new record or report change to commit" >&2; exit 1
fi
git commit -q -m "Records: ${what#Records: }; report republished"
git log --oneline -1
