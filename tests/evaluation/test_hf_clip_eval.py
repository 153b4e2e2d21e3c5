"""`configs/clip_hf_eval.py` end to end on tiny files: a numpy-written HF CLIP (tests/models/conftest.py), a
SugarCrepe subset JSON and an ARO VG-Relation JSON (bbox crops) with their images, and a 2-class × 2-image zero-shot
folder → `mmjax.experiment.evaluate` without any training run → results.json with Real/Shuffle/Fixed accuracies and zero-shot
top-1. Scores are checked against a direct computation from the model's outputs, for plain CLIP cosine and for a
Flow-CLIP head written as a `flowclip_head` export.
"""

import json
from pathlib import Path

import jax
import numpy as np
import pytest
from PIL import Image

from mmjax.data.clip_preprocess import preprocess_image
from mmjax.data.readers import aro, sugarcrepe
from mmjax.evaluation.hf_clip import HFCLIPEvaluation
from mmjax.experiment import evaluate
from mmjax.flowclip import score_pairs
from mmjax.models.hf import load_hf_clip
from mmjax.train.defaults import flowclip_head_config
from mmjax.train.export import export_params
from mmjax.train.export import load_exported

from tests.module_loader import load as _load


hf_fixtures = _load("tests/models/conftest.py", "hf_fixtures")
hf_loader_tests = _load("tests/models/test_hf_loaders.py", "hf_loader_tests")
clip_eval_config = _load("configs/clip_hf_eval.py", "clip_hf_eval_config")

# Captions use lower-case letters only: the tiny BPE knows single letters, "cat" and "dog".
SUGARCREPE = {"1": {"filename": "a.jpg", "caption": "a cat on a dog", "negative_caption": "a dog on a cat"},
              "2": {"filename": "b.png", "caption": "a red cat", "negative_caption": "a blue cat"},
              "3": {"filename": "c.jpg", "caption": "two dogs", "negative_caption": "two cats"}}
ARO_VGR = [{"image_id": 1, "image_path": "x.jpg", "bbox_x": 2, "bbox_y": 3, "bbox_w": 20, "bbox_h": 12,
            "true_caption": "the cat is on the dog", "false_caption": "the dog is on the cat", "relation_name": "on"},
           {"image_id": 2, "image_path": "y.png", "bbox_x": 0, "bbox_y": 0, "bbox_w": 9, "bbox_h": 30,
            "true_caption": "the dog is under the cat", "false_caption": "the cat is under the dog",
            "relation_name": "under"},
           {"image_id": 3, "image_path": "z.jpg", "bbox_x": 5, "bbox_y": 1, "bbox_w": 17, "bbox_h": 17,
            "true_caption": "the cat is on the dog", "false_caption": "the dog is on the cat", "relation_name": "on"}]
TEMPLATES = ("a photo of a {}", "a {}")


def _write_image(path: Path, rng, hw):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rng.integers(0, 256, (*hw, 3), dtype=np.uint8)).save(path)


write_tiny_clip = hf_loader_tests.write_tiny_clip


def write_head_export(workdir: Path, dim: int, clip_dir=None) -> dict:
    """A finished `flowclip_head` run as the trainer exports it (random M, M_tok, W so the local term counts);
    `clip_dir`: the Hugging Face CLIP its caches were encoded with, recorded as the trainer records it."""
    rng = np.random.default_rng(1)
    params = {k: np.asarray(np.eye(dim) + 0.3 * rng.normal(size=(dim, dim)), np.float32) for k in ("M", "M_tok")}
    params["W"] = np.asarray(0.3 * rng.normal(size=(dim, dim)), np.float32)
    params["log_logit_scale"] = np.asarray(np.log(1 / 0.07), np.float32)
    flowclip = flowclip_head_config("flowclip_hnb,smoke").flowclip.to_dict()
    info = {"task": "flowclip_head", "step": 4, "dim": dim, "flowclip": flowclip}
    if clip_dir is not None:
        info["base"] = {"hf_clip_dir": str(clip_dir)}
    export_params(str(workdir), {"params": params}, info)
    return {"params": params, "flowclip": flowclip}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf_clip_eval")
    rng = np.random.default_rng(0)
    for name, hw in (("a.jpg", (20, 28)), ("b.png", (24, 18)), ("c.jpg", (16, 16))):
        _write_image(root / "val2017" / name, rng, hw)
    (root / "sugarcrepe").mkdir()
    (root / "sugarcrepe" / "swap_obj.json").write_text(json.dumps(SUGARCREPE))
    for name, hw in (("x.jpg", (20, 30)), ("y.png", (32, 24)), ("z.jpg", (24, 24))):
        _write_image(root / "aro_images" / name, rng, hw)
    (root / "visual_genome_relation.json").write_text(json.dumps(ARO_VGR))
    for cls in ("cat", "dog"):
        for k in range(2):
            _write_image(root / "zeroshot" / cls / f"{k}.png", rng, (18, 22))
    return {"root": root, "clip_dir": write_tiny_clip(root / "clip")}


def make_config(files, head_workdir: str = ""):
    """The CLI recipe (config argument + --config.* overrides) done on the config object."""
    c = clip_eval_config.get_config("sugarcrepe,aro_vgr")
    root = files["root"]
    c.data.clip_dir = str(files["clip_dir"])
    c.data.head_workdir = head_workdir
    c.data.num_workers = 1
    c.benchmarks.sugarcrepe.path = str(root / "sugarcrepe" / "swap_obj.json")
    c.benchmarks.sugarcrepe.image_root = str(root / "val2017")
    c.benchmarks.aro_vgr.path = str(root / "visual_genome_relation.json")
    c.benchmarks.aro_vgr.image_root = str(root / "aro_images")
    c.evals.compositional.keep_scores = True
    c.evals.zeroshot.folder = str(root / "zeroshot")
    c.evals.zeroshot.templates = TEMPLATES
    return c


def _direct_features(clip_dir, record, captions):
    """CLIP outputs for one record's (cropped) image and some captions, without the task's batching/caching."""
    model, params, tokenizer = load_hf_clip(clip_dir)
    size = model.config.vision_config.image_size
    pixels = preprocess_image(record.image, size, bbox=record.bbox)[None]
    img = model.apply({"params": params}, pixels, method="encode_image")
    enc = tokenizer(list(captions), padding="max_length", max_length=16, truncation=True, return_tensors="np")
    txt = model.apply({"params": params}, enc["input_ids"], enc["attention_mask"], method="encode_text")
    return jax.tree_util.tree_map(np.asarray, img), jax.tree_util.tree_map(np.asarray, txt)


def _check_results(results, workdir: Path):
    on_disk = json.loads((workdir / "results.json").read_text())
    assert on_disk["task"] == "hf_clip" and set(on_disk) >= {"compositional", "zeroshot"}
    comp = on_disk["compositional"]
    assert set(comp) == {"sugarcrepe", "aro_vgr"}
    for bench, task in (("sugarcrepe", "sugarcrepe"), ("aro_vgr", "vg_relation")):
        conditions = comp[bench]["conditions"]
        assert set(conditions) == {"real", "shuffle", "fixed"}
        for m in conditions.values():
            assert 0.0 <= m["tasks"][task]["accuracy"] <= 100.0
        assert conditions["real"]["tasks"][task]["n"] == 3
    zs = on_disk["zeroshot"]
    assert zs["n"] == 4 and zs["classes"] == 2 and zs["templates"] == len(TEMPLATES)
    assert zs["top1"] in (0.0, 25.0, 50.0, 75.0, 100.0)
    assert "sugarcrepe" in (workdir / "results.md").read_text()
    return comp


def test_plain_clip_cosine(files, tmp_path):
    workdir = tmp_path / "out"  # does not exist: no training run, no export
    comp = _check_results(evaluate(make_config(files), str(workdir)), workdir)

    # The first ARO record: cosine of its bbox-cropped image against both candidates, computed directly.
    record = aro(files["root"] / "visual_genome_relation.json", files["root"] / "aro_images",
                 task="vg_relation").records[0]
    img, txt = _direct_features(files["clip_dir"], record, record.captions)
    v = img["global"][0] / np.linalg.norm(img["global"][0])
    t = txt["global"] / np.linalg.norm(txt["global"], axis=-1, keepdims=True)
    np.testing.assert_allclose(comp["aro_vgr"]["conditions"]["real"]["per_record"][0], t @ v, atol=1e-5)


def test_flowclip_head_scores(files, tmp_path):
    head = write_head_export(tmp_path / "head", dim=hf_fixtures.tiny_clip_config_dict()["projection_dim"])
    workdir = tmp_path / "out"
    comp = _check_results(evaluate(make_config(files, str(tmp_path / "head")), str(workdir)), workdir)

    record = sugarcrepe(files["root"] / "sugarcrepe" / "swap_obj.json", files["root"] / "val2017").records[1]
    img, txt = _direct_features(files["clip_dir"], record, record.captions)
    fc, length = head["flowclip"], head["flowclip"]["max_tokens"]

    def as_head_input(x):  # the float16 features of the training caches
        return np.asarray(x, np.float16).astype(np.float32)

    image = {"global": as_head_input(img["global"]), "patches": as_head_input(img["patches"])}
    text = {"global": as_head_input(txt["global"]), "tokens": as_head_input(txt["tokens"][:, :length]),
            "valid": txt["valid"][:, :length]}
    scorer = {k: head["params"][k] for k in ("M", "M_tok", "W")}
    want = score_pairs(scorer, image, text, alpha=fc["alpha"], tau_p=fc["tau_p"], pool=fc["pool"],
                       method=fc["all_pairs"], chunk_size=fc["score_chunk_images"], use_local=fc["use_local"])
    np.testing.assert_allclose(comp["sugarcrepe"]["conditions"]["real"]["per_record"][1], np.asarray(want)[0],
                               atol=1e-4)

    # Zero-shot scores the full matrix in blocks; compositional scores pair by pair: both must agree.
    task = HFCLIPEvaluation(make_config(files, str(tmp_path / "head")), str(workdir),
                            head_export=load_exported(str(tmp_path / "head")))
    paths = sorted(str(p) for p in (files["root"] / "zeroshot").rglob("*.png"))[:3]
    prompts = ["a cat", "a dog", "two cats"]
    matrix = task.zeroshot_score_fn()(paths, prompts)
    img, txt = task.encode_images(paths), task.encode_texts(prompts)
    np.testing.assert_allclose(np.diag(matrix), task.score_head_pairs(img, txt), atol=1e-5)


def test_mmjax_load_scores_and_retrieves_with_a_head_on_the_hf_clip(files, tmp_path):
    import shutil

    import mmjax
    dim = hf_fixtures.tiny_clip_config_dict()["projection_dim"]
    head = write_head_export(tmp_path / "head", dim=dim, clip_dir=files["clip_dir"])
    paths = sorted(str(p) for p in (files["root"] / "zeroshot").rglob("*.png"))
    captions = ["a cat", "a dog", "two cats"]
    r = mmjax.load(str(tmp_path / "head"))
    assert r.score_name == "flowclip" and r.max_len == hf_fixtures.tiny_clip_config_dict()["text_config"][
        "max_position_embeddings"]
    got = r.score(r.embed_images(paths), r.embed_texts(captions))

    # Oracle: the CLIP applied directly to each preprocessed image and the captions, the head by score_pairs.
    model, params, tokenizer = load_hf_clip(files["clip_dir"])
    size = model.config.vision_config.image_size
    pixels = np.stack([preprocess_image(p, size) for p in paths])
    img = model.apply({"params": params}, pixels, method="encode_image")
    enc = tokenizer(captions, padding="max_length", max_length=r.max_len, truncation=True, return_tensors="np")
    txt = model.apply({"params": params}, enc["input_ids"], enc["attention_mask"], method="encode_text")
    fc, length = head["flowclip"], head["flowclip"]["max_tokens"]
    half = lambda x: np.asarray(x, np.float16).astype(np.float32)   # the float16 features of the training caches
    want = score_pairs({k: head["params"][k] for k in ("M", "M_tok", "W")},
                       {"global": half(img["global"]), "patches": half(img["patches"])},
                       {"global": half(txt["global"]), "tokens": half(txt["tokens"][:, :length]),
                        "valid": np.asarray(txt["valid"])[:, :length]},
                       alpha=fc["alpha"], tau_p=fc["tau_p"], pool=fc["pool"], method=fc["all_pairs"],
                       chunk_size=fc["score_chunk_images"], use_local=fc["use_local"])
    assert got.shape == (len(paths), len(captions))
    np.testing.assert_allclose(got, np.asarray(want), atol=1e-4)
    hits = r.retrieve("a dog", k=3, images=paths)
    np.testing.assert_array_equal(hits.indices, np.argsort(-got[:, 1], kind="stable")[:3])

    # The export directory alone, copied elsewhere, loads and scores the same (the CLIP is found by its path) ...
    moved = tmp_path / "elsewhere" / "head"
    shutil.copytree(tmp_path / "head" / "export", moved)
    np.testing.assert_allclose(mmjax.load(str(moved)).score(paths, captions), got, atol=1e-6)
    # ... and with its CLIP gone, the error names the recorded directory and the override.
    write_head_export(tmp_path / "gone", dim=dim, clip_dir=tmp_path / "no_such_clip")
    with pytest.raises(FileNotFoundError, match=r"no_such_clip .*base\.hf_clip_dir.*hf_clip_dir="):
        mmjax.load(str(tmp_path / "gone"))
    np.testing.assert_allclose(mmjax.load(str(tmp_path / "gone"), hf_clip_dir=str(files["clip_dir"])).score(
        paths, captions), got, atol=1e-6)
    with pytest.raises(ValueError, match="no mask"):
        r.embed_images(paths, mask=np.ones(3, bool))


def test_config_errors_name_the_field(files, tmp_path):
    c = make_config(files)
    c.benchmarks.aro_vgr.path = ""
    with pytest.raises(ValueError, match=r"config\.benchmarks\.aro_vgr\.path"):
        HFCLIPEvaluation(c, str(tmp_path / "out"))
    c = make_config(files)
    c.data.clip_dir = ""
    with pytest.raises(ValueError, match=r"config\.data\.clip_dir"):
        HFCLIPEvaluation(c, str(tmp_path / "out"))
    with pytest.raises(ValueError, match="unknown benchmark"):
        clip_eval_config.get_config("sugarcrepe,nope")
    from mmjax.experiment import run
    with pytest.raises(ValueError, match="nothing to train"):
        run(make_config(files), str(tmp_path / "out"))
