"""Pretrained text weights named by `config.model.text`, loaded once and written into freshly initialised variables.

    text.tower = 'bert'   `model.text.bert_dir`: a Hugging Face BERT directory (`load_hf_bert`, safetensors only);
                          its weights replace the random `text_tower/bert` subtree
    text.glove_path       a GloVe-format text file; rows for the tokenizer's vocabulary replace the word-embedding
                          table of the Bi-GRU / bag-of-words tower (`read_glove`, `replace_word_embeddings`)
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass
class PretrainedText:
    bert_module: object = None  # a `mmjax.models.bert.BertModel` for `build_retrieval_model` ('bert' tower)
    bert_params: dict | None = None
    glove: np.ndarray | None = None  # [V, word_dim]

    def apply(self, variables: dict) -> dict:
        """`variables` with the pretrained weights written in (a new tree; the input is not modified)."""
        if self.bert_params is not None:
            variables = jax.tree_util.tree_map(lambda x: x, variables)
            variables["params"]["text_tower"]["bert"] = jax.tree_util.tree_map(jnp.asarray, self.bert_params)
        if self.glove is not None:
            from mmjax.models.text_towers import replace_word_embeddings
            variables = dict(variables, params=replace_word_embeddings(variables["params"], self.glove))
        return variables


def load_pretrained_text(text_cfg, tokenizer=None, *, verbose: bool = True) -> PretrainedText:
    """What `text_cfg` (= config.model.text) names; the tokenizer is needed for GloVe (its vocabulary order)."""
    out = PretrainedText()
    if text_cfg.get("tower") == "bert":
        from mmjax.models.hf import load_hf_bert
        out.bert_module, out.bert_params, _ = load_hf_bert(text_cfg.bert_dir, with_tokenizer=False)
    glove_path = text_cfg.get("glove_path")
    if glove_path:
        if tokenizer is None:
            raise ValueError("config.model.text.glove_path needs the tokenizer whose vocabulary it initialises")
        from mmjax.models.glove import read_glove
        vocab = tokenizer.vocab if hasattr(tokenizer, "vocab") else tokenizer.hf.get_vocab()
        out.glove, found = read_glove(glove_path, vocab, dim=text_cfg.word_dim)
        if verbose:
            print(f"[model] GloVe: {int(found.sum())}/{len(found)} vocabulary words found in {glove_path}",
                  flush=True)
    return out
