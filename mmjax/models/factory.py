"""Build a `SetRetrievalModel` from config (`config.model`).

    model.embed_dim        D (1024 COCO/F30K; 256 ShapesWorld)
    model.set_head         'spm' (MaxMatch / Set Div) | 'pie' (PVSE) | 'none' (single vector, VSE∞)
    model.num_embeds       K
    model.spm              depth, share_weights, num_heads, head_dim, ff_mult, dropout, pad_mode ('exclude' |
                           'reference': Set Div's padded-token leak, docs/design.md#set-prediction-module)
    model.image.tower      'region' (precomputed regions / grid features [B,N,F]) | 'cnn' (pixels → SmallResNet)
    model.image.pool       'max' | 'gpo'  (`maxmatch.img_pool`)
    model.image.cnn_widths SmallResNet widths ('cnn' tower)
    model.image.bn_use_mask True: padded regions stay out of the region tower's BatchNorm statistics; False: the
                           reference (`SequenceBN`) behaviour, padding included
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
                                   dropout_rate=spm.dropout, pos_encoding=pos_encoding,
                                   pad_mode=spm.get("pad_mode", "exclude"))
    raise ValueError(f"model.set_head must be 'spm', 'pie' or 'none', got {kind!r}")


def build_retrieval_model(cfg, vocab_size: int, bert_module=None) -> SetRetrievalModel:
    """`cfg` = config.model; `vocab_size` from the tokenizer; `bert_module` (a `BertModel`) for the 'bert' tower."""
    image, text = cfg.image, cfg.text
    if image.tower == "region":
        image_tower = RegionTower(cfg.embed_dim, pool=image.pool, set_head=_set_head(cfg, "none"),
                                  dropout_rate=cfg.dropout, bn_use_mask=image.get("bn_use_mask", True))
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


# ---- notebook-facing helpers: build *and* initialise from a config ----------------------------------------------


def retrieval_image_inputs(batch) -> tuple:
    """(images, image_mask) of a `mmjax.data.pipeline` batch: regions (`image_feats`, `image_mask`) or pixels
    (`images`, None)."""
    if "image_feats" in batch:
        return batch["image_feats"], batch["image_mask"]
    if "images" in batch:
        return batch["images"], None
    raise KeyError(f"batch has neither 'image_feats' (regions) nor 'images' (pixels); keys: {sorted(batch)}")


def init_retrieval_model(model_cfg, vocab_size: int, rng, sample_batch, *, bert_module=None):
    """(model, variables) for `config.model`: `build_retrieval_model` then `init` on one pipeline batch.

    `sample_batch` needs `caption_ids`, `caption_mask` and the image inputs of `retrieval_image_inputs`; only its
    shapes matter. Returns every collection `init` creates (`params`, plus `batch_stats` for BatchNorm towers);
    pretrained BERT weights or GloVe vectors are not loaded here.
    """
    import jax

    for key in ("caption_ids", "caption_mask"):
        if key not in sample_batch:
            raise KeyError(f"sample_batch needs '{key}' (a mmjax.data.pipeline batch); keys: {sorted(sample_batch)}")
    model = build_retrieval_model(model_cfg, vocab_size, bert_module)
    images, mask = retrieval_image_inputs(sample_batch)
    init = jax.jit(lambda r, x, m, ids, cm: model.init({"params": r, "dropout": r}, x, m, ids, cm, train=False))
    variables = init(rng, images, mask, sample_batch["caption_ids"], sample_batch["caption_mask"])
    return model, dict(variables)


def build_shapesworld_clip(model_cfg, tokenizer, *, regions: bool = False):
    """`mmjax.models.clip.CLIPModel` for ShapesWorld (docs/design.md#shapesworld-presets `base_clip`) from a
    `config.model` with width, heads, vision_layers, text_layers, image_size, patch_size, projection_dim
    (`clip_pretrain_config`); with `regions`, `mmjax.models.region_clip.RegionCLIPModel` (`base_clip_regions`:
    `vision_layers` transformer layers over the region vectors; image_size and patch_size unused).

    The text tower pools at the tokenizer's [SEP] (CLIP's EOT); positions are the tokenizer's `max_len`; the logit
    scale starts at log(1/0.07). Pixels go in as float32 in [−1, 1] (x / 127.5 − 1).
    """
    import math

    from mmjax.models.clip import CLIPConfig, CLIPModel, CLIPTextConfig, CLIPVisionConfig

    width = model_cfg.width
    text = CLIPTextConfig(vocab_size=tokenizer.vocab_size, hidden_size=width, intermediate_size=4 * width,
                          num_hidden_layers=model_cfg.text_layers, num_attention_heads=model_cfg.heads,
                          max_position_embeddings=tokenizer.max_len, hidden_act="gelu", pad_token_id=tokenizer.pad_id,
                          bos_token_id=tokenizer.cls_id, eos_token_id=tokenizer.sep_id)
    vision = CLIPVisionConfig(hidden_size=width, intermediate_size=4 * width,
                              num_hidden_layers=model_cfg.vision_layers, num_attention_heads=model_cfg.heads,
                              image_size=model_cfg.image_size, patch_size=model_cfg.patch_size, hidden_act="gelu")
    config = CLIPConfig(text_config=text, vision_config=vision, projection_dim=model_cfg.projection_dim,
                        logit_scale_init_value=math.log(1 / 0.07))
    if regions:
        from mmjax.models.region_clip import RegionCLIPModel
        return RegionCLIPModel(config)
    return CLIPModel(config)


def count_params(tree) -> int:
    """Number of scalars in a parameter pytree."""
    import jax

    return int(sum(x.size for x in jax.tree_util.tree_leaves(tree)))
