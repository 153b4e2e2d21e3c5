#!/usr/bin/env bash
# A batch of the reproduction study's cells on a lent accelerator machine, within one fixed lease.
#   usage: REPRODUCE_CODE_VERSION=<commit>:<digest> bash scripts/device_cells.sh TASKS DEADLINE_S JOBS
# JOBS: about a quarter of the cores (4 on a 16-core host): the cells' input pipelines and host-side dispatch are
# CPU work, and every process compiles its own programs.
# TASKS is a reproduce.parallel task file (reproduce/device_tasks.txt: the heaviest cells first). The tree arrives
# without .git, so the launching checkout declares its commit (`python -m reproduce.provenance --declare`) and each
# record takes it only if the copy's digest matches. The machine's own jax/flax/optax/orbax run the cells; packages
# it lacks travel as wheels in .whl/need/ (ml-collections, tensorboardX, googleapis-common-protos). A smoke grid of a
# retrieval cell and a Flow-CLIP head (every code path: train, checkpoint, validation, export, test evaluation, record)
# runs beside the batch; if it fails, the batch restarts on the repository's pinned flax/optax/orbax/chex
# (.whl/pins/) for the time left. What comes back in $OUT: records.tgz (the new records, at their places under
# docs/reproduction/records), partial.tgz (the preempted Flow-CLIP heads' cell directories, to resume elsewhere, when
# under 15 MiB), logs.tgz, summary.md, environment.json.
set -u
cd "$(dirname "$0")/.."
tasks=$1; deadline=$2; jobs=$3
OUT=${OUT:-/tmp/device_out}; mkdir -p "$OUT"
start=$(date +%s)
# Small thread pools per process: the first batch (16 processes on 16 cores, each with numpy's default pools) ran
# at a load average of 121 and finished no cell (docs/benchmarks.md#gpu-batch).
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 XLA_PYTHON_CLIENT_PREALLOCATE=false \
  TF_CPP_MIN_LOG_LEVEL=2 OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 MKL_NUM_THREADS=2
py=python3
work=/tmp/pool; smoke=/tmp/smoke; marker=/tmp/records.marker
touch "$marker"; sleep 1
$py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/need/*.whl || exit 3
export PYTHONPATH=/tmp/site
$py -c "import jax; print('jax', jax.__version__, jax.devices(), flush=True)"
$py -m mmjax.provenance > "$OUT/environment.json"
$py -c "from reproduce import provenance as p; v = p.declared_version(); print('code', v); assert v and not v['dirty']" \
  || echo "device_cells: the declared code version does not match this tree (records will say +dirty)"

run_batch() {  # $1: seconds left for the batch
  $py -m reproduce.parallel --tasks "@$tasks" --jobs "$jobs" --work "$work" --archive docs/reproduction/records \
    --deadline "$1" --grace 45 --min-start 60 &
  pool=$!
}
run_batch "$deadline"
$py -m reproduce --budget smoke --seeds 1 --cells sh_full,fcs_P_flowclip_hnb --out "$smoke" --no-report \
  > "$OUT/smoke.log" 2>&1
smoke_rc=$?
echo "device_cells: smoke grid exit $smoke_rc after $(( $(date +%s) - start )) s"
if [ "$smoke_rc" != 0 ]; then
  tail -30 "$OUT/smoke.log"
  kill -TERM "$pool"; wait "$pool"
  echo "device_cells: retrying on the pinned flax/optax/orbax/chex"
  $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/pins .whl/pins/*.whl || exit 3
  export PYTHONPATH=/tmp/pins:/tmp/site
  rm -rf "$smoke"
  $py -m reproduce --budget smoke --seeds 1 --cells sh_full --out "$smoke" --no-report > "$OUT/smoke2.log" 2>&1 \
    || { tail -30 "$OUT/smoke2.log"; exit 4; }
  run_batch $(( deadline - ($(date +%s) - start) ))
fi
wait "$pool"
cp "$work/summary.json" "$OUT/" 2>/dev/null
$py -c "import json; from reproduce.parallel import Task, summary
print(summary([Task(*r['task'].split('__')[:2], int(r['task'].rsplit('seed', 1)[1]), r['state'], r['returncode'],
                    r['wall_s']) for r in json.load(open('$work/summary.json'))]))" > "$OUT/summary.md" 2>/dev/null
cat "$OUT/summary.md"
find docs/reproduction/records -type f -newer "$marker" ! -name '*.tmp' > /tmp/new_records.txt
echo "device_cells: $(wc -l < /tmp/new_records.txt) new record file(s)"
tar czf "$OUT/records.tgz" -T /tmp/new_records.txt
tar czf "$OUT/logs.tgz" -C "$work" logs
# Preempted Flow-CLIP heads: their cell directories without the feature cache (rebuilt from the base on resume).
partial=$(cd "$work" && ls -d */cells/fcs_[PR]_*/seed* 2>/dev/null | while read -r d; do
  [ -e "$work/$d/cell.json" ] || echo "$d"; done)
if [ -n "$partial" ]; then
  (cd "$work" && tar czf "$OUT/partial.tgz" --exclude=feature_cache --exclude=tensorboard $partial)
  size=$(stat -c %s "$OUT/partial.tgz")
  [ "$size" -lt 15728640 ] || { echo "device_cells: partial.tgz is $size bytes, over 15 MiB: not returned"; \
    rm "$OUT/partial.tgz"; }
fi
echo "device_cells: done after $(( $(date +%s) - start )) s"
