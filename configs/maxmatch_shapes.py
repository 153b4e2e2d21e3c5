"""MaxMatch on ShapesWorld — the main job (`python train.py` with no flags runs this config's default variant).

    python train.py --config configs/maxmatch_shapes.py --workdir workdir/maxmatch_shapes          # ≤ 10 min, 2 CPUs
    python train.py --config configs/maxmatch_shapes.py:full --workdir workdir/maxmatch_shapes_full   # spec preset
    python train.py --config configs/maxmatch_shapes.py:pixels --workdir workdir/maxmatch_pixels      # small ResNet
    python train.py --config configs/maxmatch_shapes.py:smoke --workdir /tmp/mm_smoke                 # tests (seconds)

Model = docs/design.md#shapesworld-presets `maxmatch_regions`: D = 256, region fc + MLP, max-pool global, random-init
128-d word embeddings + Bi-GRU(256), SPM K = 4, depth 2 shared, 4 heads × 64; S_H similarity (exact assignment) with
triplet (one VSE0 warm-up epoch, then hardest negatives) + InfoNCE + GD + ISD + Div + MMD at the project defaults; AdamW
1e-3 (×0.1 image side and text SPM), wd 1e-4, per-step cosine, clip 1.0. The default variant trains 2 epochs (the
CPU budget of the main job: ≤ 10 minutes on 2 cores) and then evaluates the test split (retrieval with both
MaxMatch scores, set analysis and figures, compositional suites under the image-replacement controls);
`full` trains the preset's 30 epochs. Captions are tokenised to 16 positions (the
longest ShapesWorld caption is 14 words + [CLS]/[SEP]).
"""

from mmjax.train.defaults import retrieval_config

VARIANTS = ("", "full", "pixels", "smoke")


def get_config(arg: str = ""):
    parts = [p for p in (arg or "").split(",") if p]
    unknown = [p for p in parts if p not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown variant(s) {unknown}; known: {[v for v in VARIANTS if v]}")
    c = retrieval_config("smoke" if "smoke" in parts else "")
    c.loss.similarity = "maxmatch"
    if "full" in parts:
        c.train.num_epochs = 30
    if "pixels" in parts:
        c.data.mode = "pixels"
        c.model.image.tower = "cnn"
    return c
