import numpy as np
import pytest

from mmjax.data.records import CompositionalDataset, CompositionalRecord, RetrievalDataset


def test_record_validates_and_freezes():
    r = CompositionalRecord(image="a.jpg", captions=["x", "y"], correct=1, task="t", bbox=(1, 2, 3, 4),
                            meta={"relation": "on"})
    assert r.captions == ("x", "y") and r.gold_caption == "y" and r.bbox == (1.0, 2.0, 3.0, 4.0)
    assert r.identity == "a.jpg"
    with pytest.raises(TypeError):
        r.meta["relation"] = "under"  # read-only
    with pytest.raises(ValueError, match="correct=2"):
        CompositionalRecord(image="a.jpg", captions=("x", "y"), correct=2, task="t")
    with pytest.raises(ValueError, match="caption 1 is empty"):
        CompositionalRecord(image="a.jpg", captions=("x", "  "), correct=0, task="t")
    with pytest.raises(ValueError, match="bbox"):
        CompositionalRecord(image="a.jpg", captions=("x",), correct=0, task="t", bbox=(0, 0, 0, 4))
    assert CompositionalRecord(image="a.jpg", captions=("x",), correct=0, task="t", image_id="7").identity == "7"


def test_dataset_sequence_and_skipped():
    recs = [CompositionalRecord(image=f"{i}.jpg", captions=("x",), correct=0, task="b" if i else "a") for i in range(3)]
    ds = CompositionalDataset(records=recs, name="n", skipped={"missing_image": 2})
    assert len(ds) == 3 and ds[1] is recs[1] and list(ds) == recs and ds.num_skipped == 2
    assert ds.tasks() == ("a", "b")


def test_retrieval_folds_reindex():
    feats = np.arange(6 * 2, dtype=np.float32).reshape(6, 2)
    ds = RetrievalDataset(split="testall", captions=tuple(f"c{j}" for j in range(12)),
                          caption_to_image=np.arange(12) // 2, image_ids=tuple("abcdef"), features=feats)
    folds = ds.folds(3)
    assert [f.num_images for f in folds] == [2, 2, 2]
    f1 = folds[1]
    assert f1.captions == ("c4", "c5", "c6", "c7") and f1.image_ids == ("c", "d")
    np.testing.assert_array_equal(f1.caption_to_image, [0, 0, 1, 1])
    np.testing.assert_array_equal(f1.features, feats[2:4])
    assert [list(x) for x in ds.image_to_captions()][:2] == [[0, 1], [2, 3]]
    with pytest.raises(ValueError, match="equal folds"):
        ds.folds(4)
    with pytest.raises(ValueError, match="exactly one"):
        RetrievalDataset(split="s", captions=("a",), caption_to_image=[0], image_ids=("x",))
    with pytest.raises(ValueError, match="outside"):
        RetrievalDataset(split="s", captions=("a",), caption_to_image=[3], image_ids=("x",), images=("p",))
