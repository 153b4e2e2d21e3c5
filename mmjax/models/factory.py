"""Build a `SetRetrievalModel` from config (`config.model`).

    model.embed_dim        D (1024 COCO/F30K; 256 ShapesWorld)
    model.set_head         'spm' (MaxMatch / Set Div) | 'pie' (PVSE) | 'none' (single vector, VSE∞)
    model.num_embeds       K
    model.spm              depth, share_weights, num_heads, head_dim, ff_mult, dropout
    model.image.tower      'region' (precomputed regions / grid features [B,N,F]) | 'cnn' (pixels → SmallResNet)
    model.image.pool       'max' | 'gpo'  (`maxmatch.img_pool`)
    model.image.cnn_widths SmallResNet widths ('cnn' tower)
    model.text.tower       'bigru' | 'bow' | 'bert'
    model.text.word_dim    word-embedding width (Bi-GRU / bag of words)
    model.text.global_pool 'rnn' | 'max' (Bi-GRU); 'cls' | 'max' (BERT)
    model.text.bert_dir    Hugging Face BERT directory ('bert' tower; weights loaded by the trainer)
    model.text.glove_path  GloVe-format text file initialising the word embeddings (read by the trainer; '' = random)
    model.dropout          dropout in the towers

The text SPM gets a 1-D sine positional encoding on its keys (Set Div text setting); image SPMs get none.
"""

from __future__ import annotations

from mmjax.models.image_towers import GridTower, RegionTower
from mmjax.models.pie import PIEHead
from mmjax.models.retrieval import SetRetrievalModel
from mmjax.models.set_prediction import SetPredictionModule
from mmjax.models.small_cnn import SmallResNet
from mmjax.models.text_towers import BagOfWordsTextTower, BertTextTower, BiGRUTextTower


def _set_head(cfg, pos_encoding: str):
    kind = cfg.set_head
    if kind == "none":
        return None
    if kind == "pie":
        return PIEHead(num_embeds=cfg.num_embeds, dropout_rate=cfg.dropout)
    if kind == "spm":
        spm = cfg.spm
        return SetPredictionModule(num_embeds=cfg.num_embeds, depth=spm.depth, share_weights=spm.share_weights,
                                   num_heads=spm.num_heads, head_dim=spm.head_dim, ff_mult=spm.ff_mult,
                                   dropout_rate=spm.dropout, pos_encoding=pos_encoding)
    raise ValueError(f"model.set_head must be 'spm', 'pie' or 'none', got {kind!r}")


def build_retrieval_model(cfg, vocab_size: int, bert_module=None) -> SetRetrievalModel:
    """`cfg` = config.model; `vocab_size` from the tokenizer; `bert_module` (a `BertModel`) for the 'bert' tower."""
    image, text = cfg.image, cfg.text
    if image.tower == "region":
        image_tower = RegionTower(cfg.embed_dim, pool=image.pool, set_head=_set_head(cfg, "none"),
                                  dropout_rate=cfg.dropout)
    elif image.tower == "cnn":
        image_tower = GridTower(cfg.embed_dim, backbone=SmallResNet(widths=tuple(image.cnn_widths),
                                                                   blocks_per_stage=(1,) * len(image.cnn_widths)),
                                pool=image.pool, set_head=_set_head(cfg, "none"), dropout_rate=cfg.dropout)
    else:
        raise ValueError(f"model.image.tower must be 'region' or 'cnn', got {image.tower!r}")
    if text.tower == "bigru":
        text_tower = BiGRUTextTower(vocab_size, cfg.embed_dim, word_dim=text.word_dim,
                                    set_head=_set_head(cfg, "sine"), global_pool=text.global_pool,
                                    dropout_rate=cfg.dropout)
    elif text.tower == "bow":
        text_tower = BagOfWordsTextTower(vocab_size, cfg.embed_dim, word_dim=text.word_dim,
                                         set_head=_set_head(cfg, "sine"))
    elif text.tower == "bert":
        if bert_module is None:
            raise ValueError("model.text.tower='bert' needs the BERT module (model.text.bert_dir)")
        text_tower = BertTextTower(bert_module, cfg.embed_dim, global_pool=text.global_pool,
                                   set_head=_set_head(cfg, "none"))
    else:
        raise ValueError(f"model.text.tower must be 'bigru', 'bow' or 'bert', got {text.tower!r}")
    return SetRetrievalModel(image_tower=image_tower, text_tower=text_tower)
