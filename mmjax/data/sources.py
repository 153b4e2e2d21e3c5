"""Tokenised splits for set-retrieval training and evaluation, from `config.data` — the one place a config's data
fields become arrays.

    data.name = 'shapesworld'   preset, seed, mode ('regions' | 'pixels'), max_len; generated in memory
                                (`mmjax.data.shapesworld.generate`), tokenised by the ShapesWorld word tokenizer or,
                                with tokenizer='bert', a WordPiece directory (`tokenizer_dir` or `model.text.bert_dir`)
    data.name = 'precomp'       SCAN/VSE precomputed region features under `path` (`mmjax.data.readers.precomp`;
                                `train_split` / `val_split` name the files), tokenised by a WordPiece directory

`RetrievalSplits(data_cfg, bert_dir)` keeps each split once: `.tokenizer`, `.split(name) -> (raw ShapesWorld dict or
None, InMemorySource)`, `.regions` (whether images are region features with a mask).
"""

from __future__ import annotations

import os

import numpy as np

from mmjax.data.pipeline import InMemorySource, source_from_shapesworld


def _wordpiece_dir(data_cfg, bert_dir: str) -> str:
    directory = data_cfg.get("tokenizer_dir") or bert_dir
    if not directory or not os.path.isdir(directory):
        raise FileNotFoundError(f"config.data.tokenizer_dir / model.text.bert_dir: WordPiece tokenizer directory not "
                                f"found: {directory!r}")
    return directory


def text_tokenizer(data_cfg, bert_dir: str = ""):
    """The tokenizer `config.data` asks for (module docstring)."""
    from mmjax.data.tokenizers import load_tokenizer
    if data_cfg.name == "shapesworld":
        if data_cfg.get("tokenizer", "shapesworld") == "bert":
            return load_tokenizer("bert", directory=_wordpiece_dir(data_cfg, bert_dir), max_len=data_cfg.max_len)
        from mmjax.data import shapesworld
        sw_cfg = shapesworld.ShapesWorldConfig.from_preset(data_cfg.preset, seed=data_cfg.seed, mode=data_cfg.mode,
                                                           max_len=data_cfg.max_len)
        return shapesworld.ShapesWorld(sw_cfg).tokenizer()
    if data_cfg.name == "precomp":
        if not os.path.isdir(data_cfg.path):
            raise FileNotFoundError(f"config.data.path: precomputed-feature directory not found: {data_cfg.path!r}")
        return load_tokenizer("bert", directory=_wordpiece_dir(data_cfg, bert_dir), max_len=data_cfg.max_len)
    raise ValueError(f"config.data.name must be 'shapesworld' or 'precomp', got {data_cfg.name!r}")


def precomp_source(ds, tokenizer) -> InMemorySource:
    """A precomputed-feature split (`mmjax.data.readers.precomp`) as an `InMemorySource` (every region valid; C
    captions per image)."""
    feats = np.asarray(ds.features, np.float32)
    n, c = feats.shape[0], len(ds.captions) // feats.shape[0]
    enc = tokenizer.encode(list(ds.captions))
    shape = (n, c, -1)
    ids = np.asarray(ds.image_ids)
    return InMemorySource(
        images=feats, image_mask=np.ones(feats.shape[:2], bool),
        image_ids=ids.astype(np.int64) if ids.dtype.kind in "iu" else np.arange(n, dtype=np.int64),
        caption_ids=enc.ids.reshape(shape), caption_mask=enc.attention_mask.reshape(shape),
        caption_valid=enc.valid_mask.reshape(shape), pad_id=tokenizer.pad_id, mask_id=tokenizer.mask_id,
        random_token_ids=np.setdiff1d(np.arange(tokenizer.vocab_size), sorted(tokenizer.special_ids)))


class RetrievalSplits:
    """Lazily generated / read, tokenised splits of `config.data` (module docstring)."""

    def __init__(self, data_cfg, bert_dir: str = ""):
        self.cfg = data_cfg
        self.tokenizer = text_tokenizer(data_cfg, bert_dir)
        self.regions = data_cfg.name == "precomp" or data_cfg.get("mode") == "regions"
        self._splits: dict = {}
        self._first_precomp = None  # (file split, dataset): later splits must match its feature size

    def split(self, name: str):
        """(raw generated ShapesWorld split or None, tokenised `InMemorySource`) of split `name`, made once."""
        if name not in self._splits:
            d = self.cfg
            if d.name == "shapesworld":
                from mmjax.data import shapesworld
                data = shapesworld.generate(name, preset=d.preset, seed=d.seed, mode=d.mode, max_len=d.max_len)
                self._splits[name] = (data, source_from_shapesworld(data, self.tokenizer))
            else:
                from mmjax.data import readers
                file_split = {"train": d.train_split, "val": d.val_split}.get(name, name)
                ds = readers.precomp(d.path, split=file_split)
                if self._first_precomp is not None:  # a dev split of another feature size fails here, not later
                    readers.check_same_feature_dim([self._first_precomp[1], ds], [self._first_precomp[0], file_split])
                else:
                    self._first_precomp = (file_split, ds)
                self._splits[name] = (None, precomp_source(ds, self.tokenizer))
        return self._splits[name]
