"""`mmjax.load`: a trained run's export, copied alone, loads in a fresh process and scores as evaluate.py does.

One smoke run per module (4 steps, captions tokenised to 16 positions where the ShapesWorld tokenizer's default is
20), evaluated by evaluate.py; its `export/` is copied alone to another directory and the original workdir is moved
away while a fresh process loads the copy (docs/design.md#loading).
"""

import json
import os
import shutil
import textwrap

import numpy as np
import pytest

from tests.train.helpers import run_python, train_cmd

CONFIG = "configs/maxmatch_shapes.py:smoke"
FLAGS = ("--config.train.num_steps=4", "--config.data.max_len=16")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(workdir, the copy of its export/ alone) of a trained and evaluated smoke run."""
    root = tmp_path_factory.mktemp("load")
    workdir = str(root / "run")
    run_python(train_cmd(CONFIG, workdir, *FLAGS))
    run_python(["evaluate.py", f"--config={CONFIG}", f"--workdir={workdir}", *FLAGS])
    copy = str(root / "elsewhere" / "model")
    shutil.copytree(os.path.join(workdir, "export"), copy)
    return workdir, copy


# A fresh process with only the copied export: the scores of `mmjax.load`, and (as the evaluation computes them)
# the score matrix of the task rebuilt from export.json's complete config.
LOAD_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import mmjax
    from mmjax.data.shapesworld import generate

    copy, out = sys.argv[1], sys.argv[2]
    r = mmjax.load(copy)
    data = generate("test", preset="tiny", seed=0, mode="regions")
    captions = [c for caps in data["captions"] for c in caps]
    img, txt = r.embed_images(data), r.embed_texts(captions)
    scores = r.score(img, txt)
    top_images = [r.retrieve(captions[j], k=5, images=img).indices for j in (0, 7, 100)]

    # The evaluation's own scorer on the task rebuilt from the export (export.json's full_config).
    import ml_collections
    from mmjax.evaluation.embed import context_sets, evaluate_retrieval
    from mmjax.experiment import scoring
    from mmjax.similarity import inference_kind
    from mmjax.tasks import build_task
    from mmjax.train.export import read_export
    variables, info = read_export(copy)
    config = ml_collections.ConfigDict(info["full_config"])
    context = build_task(config).eval_context(variables, "test", suites=False)
    image_sets, caption_sets = context_sets(context)
    kind = inference_kind(config.loss.similarity)
    reference = evaluate_retrieval(image_sets, caption_sets, context["caption_to_image"], kinds=[kind],
                                   similarity_kw=scoring(config)["similarity_kw"], return_scores=True)
    np.savez(out, scores=scores, reference=reference["scores"][kind], top_images=np.stack(top_images),
             caption_to_image=context["caption_to_image"])
    print(json.dumps({"score_name": r.score_name, "kind": kind, "max_len": r.max_len}))
""")


@pytest.mark.slow
def test_a_copied_export_scores_as_evaluate_does(run, tmp_path):
    workdir, copy = run
    script, out = tmp_path / "load_copy.py", str(tmp_path / "scores.npz")
    script.write_text(LOAD_SCRIPT)
    away = workdir + ".away"
    os.rename(workdir, away)  # nothing of the run but the copy exists while it loads
    try:
        proc = run_python([str(script), copy, out])
    finally:
        os.rename(away, workdir)
    said = json.loads(proc.stdout.strip().splitlines()[-1])
    assert said == {"score_name": "maxmatch_topk", "kind": "maxmatch_topk", "max_len": 16}
    got = np.load(out)
    np.testing.assert_allclose(got["scores"], got["reference"], rtol=1e-5, atol=1e-6)
    # The numbers behind results.json, recomputed from the loaded model's scores.
    from mmjax.evaluation.retrieval import recall_at_k
    results = json.load(open(os.path.join(workdir, "results.json")))
    assert results["task"] == "retrieval" and results["params"] == "final"
    recomputed = recall_at_k(got["scores"], got["caption_to_image"])
    expected = results["retrieval"]["maxmatch_topk"]["all"]
    assert recomputed == pytest.approx(expected, abs=1e-6)
    # The same top-k as a ranking of the evaluation's scores.
    for row, j in zip(got["top_images"], (0, 7, 100)):
        np.testing.assert_array_equal(row, np.argsort(-got["reference"][:, j], kind="stable")[:5])


@pytest.fixture(scope="module")
def loaded(run):
    """(retriever of the copied export, test split, its image and caption embeddings, captions), in this process."""
    import mmjax
    from mmjax.data.shapesworld import generate
    r = mmjax.load(run[1])
    data = generate("test", preset="tiny", seed=0, mode="regions", limit=24)
    captions = [c for caps in data["captions"] for c in caps]
    return r, data, r.embed_images(data), r.embed_texts(captions), captions


def _brute_force(scores: np.ndarray, k: int) -> list[int]:
    return sorted(range(len(scores)), key=lambda i: (-float(scores[i]), i))[:k]


@pytest.mark.slow
def test_retrieve_is_the_brute_force_ranking_of_score(loaded):
    r, _, img, txt, captions = loaded
    scores = r.score(img, txt)
    assert scores.shape == (24, 120) and scores.dtype == np.float32
    for j in (0, 13, 119):  # caption -> images
        column = r.score(img, txt[j])[:, 0]  # the query scored alone, as retrieve scores it
        np.testing.assert_allclose(column, scores[:, j], rtol=1e-5, atol=1e-6)
        hits = r.retrieve(txt[j], k=5, images=img)
        assert hits.indices.tolist() == _brute_force(column, 5)
        np.testing.assert_array_equal(hits.scores, column[hits.indices])
        from_string = r.retrieve(captions[j], k=5, images=img)  # embedded again, alone in its batch
        np.testing.assert_allclose(from_string.scores, hits.scores, rtol=1e-5, atol=1e-6)
    for i in (0, 5, 23):  # image -> captions, with the gallery indexed once
        row = r.score(img[i], txt)[0]
        np.testing.assert_allclose(row, scores[i], rtol=1e-5, atol=1e-6)
        hits = r.index(images=img, texts=txt).retrieve(i, k=7)
        assert hits.indices.tolist() == _brute_force(row, 7)
        np.testing.assert_array_equal(hits.scores, row[hits.indices])
        assert hits.texts == [captions[n] for n in hits.indices]
    assert len(r.retrieve("a red circle", k=1000, images=img).indices) == 24  # k capped at the gallery


@pytest.mark.slow
def test_embed_texts_uses_the_runs_max_len(loaded):
    from mmjax.data.shapesworld import ShapesWorld, ShapesWorldConfig
    r, data, _, _, captions = loaded
    assert ShapesWorld(ShapesWorldConfig.from_preset("tiny")).tokenizer().max_len == 20  # the default differs
    assert r.max_len == 16 and r.tokenizer.encode(["a red circle"]).ids.shape == (1, 16)
    with pytest.raises(ValueError, match="max_len"):  # 15 words do not fit 16 positions ([CLS] and [SEP])
        r.embed_texts([" ".join(["red"] * 15)])
    assert len(r.embed_texts(captions[:3])) == 3


@pytest.mark.slow
def test_embed_images_takes_a_split_or_the_towers_arrays(loaded):
    r, data, img, _, _ = loaded
    same = r.embed_images(data["regions"], data["region_mask"])
    np.testing.assert_array_equal(same.arrays["set"], img.arrays["set"])
    with pytest.raises(ValueError, match="text embeddings"):
        r.score(r.embed_texts(["a red circle"]), img)


@pytest.mark.slow
def test_the_export_carries_its_model_card(run):
    workdir, copy = run
    card = open(os.path.join(copy, "model_card.md")).read()
    assert "`retrieval`" in card and "maxmatch_shapes.py:smoke" in card
    assert "4 steps" in card and "seed 0" in card and "16 positions" in card
    assert "`maxmatch_topk`" in card  # the inference score
    assert "| maxmatch_topk | all |" in card  # evaluate.py wrote the test metrics in
    best = open(os.path.join(workdir, "export_best", "model_card.md")).read()
    assert "best validation parameters" in best and "Not evaluated yet" in best


def test_load_names_what_is_missing(tmp_path):
    import mmjax
    with pytest.raises(FileNotFoundError, match="export.json not found.*neither export.json"):
        mmjax.load(str(tmp_path))
    (tmp_path / "checkpoints").mkdir()
    with pytest.raises(FileNotFoundError, match=r"export/export.json not found.*not finished"):
        mmjax.load(str(tmp_path))
    with pytest.raises(ValueError, match="params must be 'final' or 'best'"):
        mmjax.load(str(tmp_path), params="last")
    with pytest.raises(FileNotFoundError, match="not found"):
        mmjax.load(str(tmp_path / "nowhere"))


# ---- Flow-CLIP heads on a frozen ShapesWorld CLIP, and the CLIP itself ------------------------------------------

HEAD_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import mmjax
    from mmjax.data.shapesworld import generate

    copy, out = sys.argv[1], sys.argv[2]
    r = mmjax.load(copy)
    base = json.load(open(copy + "/base/export.json"))
    data = generate("test", preset=base["preset"], seed=base["seed"], mode=base["mode"])
    captions = [c for caps in data["captions"] for c in caps]
    img, txt = r.embed_images(data), r.embed_texts(captions)
    np.savez(out, scores=r.score(img, txt), top=r.retrieve(captions[3], k=4, images=img).indices)
    print(json.dumps({"score_name": r.score_name, "task": r.task}))
""")


@pytest.fixture(scope="module")
def heads(tmp_path_factory):
    """(CLIP workdir, head workdir) of the smoke configs: a ShapesWorld CLIP and a Flow-CLIP head on it."""
    root = tmp_path_factory.mktemp("heads")
    clip, head = str(root / "clip"), str(root / "head")
    run_python(train_cmd("configs/clip_shapes.py:smoke", clip))
    run_python(train_cmd("configs/flowclip_shapes.py:smoke", head, f"--config.data.clip_workdir={clip}"))
    return clip, head


def _task_scores(workdir: str, export: str, split: str = "test"):
    """The score matrix the run's evaluation computes (its task rebuilt from export.json), and its variables."""
    import ml_collections
    from mmjax.tasks import build_task
    from mmjax.train.export import read_export
    variables, info = read_export(export)
    task = build_task(ml_collections.ConfigDict(info["full_config"]), workdir)
    return task.eval_context(variables, split, suites=False)["similarity"]


@pytest.mark.slow
def test_a_copied_flowclip_head_scores_on_its_own_base(heads, tmp_path):
    clip, head = heads
    copy, out, script = str(tmp_path / "head_model"), str(tmp_path / "scores.npz"), tmp_path / "load_head.py"
    shutil.copytree(os.path.join(head, "export"), copy)
    assert os.path.isfile(os.path.join(copy, "base", "export.json"))  # the frozen CLIP travels with the head
    script.write_text(HEAD_SCRIPT)
    for d in (clip, head):
        os.rename(d, d + ".away")
    try:
        proc = run_python([str(script), copy, out])
    finally:
        for d in (clip, head):
            os.rename(d + ".away", d)
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"score_name": "flowclip", "task": "flowclip_head"}
    got = np.load(out)
    reference = _task_scores(head, os.path.join(head, "export"))  # the head's test cache, as evaluate.py scores
    np.testing.assert_allclose(got["scores"], reference, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got["top"], np.argsort(-reference[:, 3], kind="stable")[:4])


@pytest.mark.slow
def test_a_clip_export_scores_by_cosine(heads):
    import mmjax
    from mmjax.data.shapesworld import generate
    clip, _ = heads
    r = mmjax.load(clip)
    assert r.score_name == "cosine" and r.task == "clip_pretrain"
    data = generate("test", preset=r.info["preset"], seed=r.info["seed"], mode=r.info["mode"])
    captions = [c for caps in data["captions"] for c in caps]
    scores = r.score(data, captions)  # raw inputs are embedded on the way
    np.testing.assert_allclose(scores, _task_scores(clip, os.path.join(clip, "export")), rtol=1e-5, atol=1e-6)


def test_an_hf_tokenizer_travels_with_the_export(tmp_path):
    """A WordPiece tokenizer directory named by the run is copied into `export/tokenizer/`, so the export needs it
    no more."""
    pytest.importorskip("transformers")
    from mmjax.data.tokenizers import HFTokenizer, WordTokenizer
    from mmjax.train.export import export_params, load_tokenizer_spec, read_export, tokenizer_spec
    source = str(tmp_path / "wordpiece")
    WordTokenizer(["a", "red", "circle"], max_len=12).export(source)
    spec = tokenizer_spec(HFTokenizer(source, "bert", 12))
    assert spec == {"kind": "bert", "max_len": 12, "directory": source}
    path = export_params(str(tmp_path / "run"), {"params": {"w": np.ones(2, np.float32)}},
                         {"task": "retrieval", "step": 1, "tokenizer_spec": spec})
    shutil.rmtree(source)
    _, info = read_export(path)
    assert info["tokenizer_spec"]["directory"] == "tokenizer"
    tokenizer = load_tokenizer_spec(info["tokenizer_spec"], path)
    ids = tokenizer.encode(["a red circle"]).ids
    assert ids.shape == (1, 12) and ids[0, :5].tolist() == [2, 5, 7, 6, 3]  # [CLS] a red circle [SEP]
