"""bench/scaling.py's smallest case (`--quick`: small MaxMatch and Flow-CLIP steps at mesh 8, batch 64, data parallel
and FSDP; the chunked `rows` all-pairs layout, whose sharding the bench is about — the default `xla` layout is the
one every training test compiles) compiles ahead of time on 8 simulated devices and reports what docs/scaling.md is
built from; and its HLO reader counts collective bytes on a hand-written HLO fragment."""

import json
import subprocess
import sys

import pytest

from bench.scaling import collective_bytes, shape_bytes
from tests.train.helpers import REPO


def test_shape_bytes_reads_hlo_shapes():
    assert shape_bytes("f32[128,1024]{1,0}") == 128 * 1024 * 4
    assert shape_bytes("(bf16[8,2]{1,0}, s32[3]{0})") == 8 * 2 * 2 + 3 * 4
    assert shape_bytes("pred[]") == 1


def test_collective_bytes_counts_each_kind_and_loop_trips():
    hlo = """HloModule m

%body.1 (p: (s32[], f32[4])) -> (s32[], f32[4]) {
  %ar = f32[4]{0} all-reduce(f32[4]{0} %x), replica_groups={{0,1}}, to_apply=%add
}

ENTRY %main (a: f32[16,8]) -> f32[16,8] {
  %ag = f32[64,8]{1,0} all-gather(f32[16,8]{1,0} %a), dimensions={0}
  %rs = f32[4,8]{1,0} reduce-scatter(f32[16,8]{1,0} %a), dimensions={0}
  %w = (s32[], f32[4]) while((s32[], f32[4]) %t), condition=%cond.1, body=%body.1, backend_config={"known_trip_count":{"n":"5"}}
}
"""
    got = collective_bytes(hlo)
    assert got["all-gather"] == 64 * 8 * 4
    assert got["reduce-scatter"] == 4 * 8 * 4
    assert got["all-reduce"] == 5 * 4 * 4          # inside the loop body: once per trip
    assert got["all-to-all"] == got["collective-permute"] == 0


@pytest.mark.slow
def test_quick_sizing_compiles_every_case(tmp_path):
    out = tmp_path / "scaling.json"
    proc = subprocess.run([sys.executable, "bench/scaling.py", "--quick", "--all-pairs", "rows", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 5 and not [r for r in rows if "error" in r], rows   # 1 objective + 2 MaxMatch + 2 Flow-CLIP
    for r in rows:
        assert r["mesh"] == 8 and r["batch"] == 64
        assert r["bytes_per_device"] > 0 and r["flops_per_device"] > 0, r
        assert r["bytes_per_device"] == (r["argument_bytes"] + r["output_bytes"] - r["alias_bytes"]
                                         + r["temp_bytes"])
        # data parallelism all-reduces the gradients; FSDP gathers weights and reduce-scatters their gradients
        c = r["collective_bytes"]
        assert c["all-reduce"] > 0 if r["sharding"] == "data_parallel" else c["all-gather"] > 0, r
    by = {(r["model"], r["sharding"], r["all_pairs"]): r for r in rows}
    # FSDP holds less of the parameters and optimiser state per device than data parallelism
    assert (by[("maxmatch", "fsdp", "rows")]["argument_bytes"]
            < by[("maxmatch", "data_parallel", "rows")]["argument_bytes"])
    assert "GiB/device" in proc.stdout
