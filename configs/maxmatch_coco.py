"""MaxMatch on COCO / Flickr30k precomputed BUTD region features (SCAN layout: `{split}_ims.npy`,
`{split}_caps.txt`) with a BERT text tower (default) or a Bi-GRU over WordPiece tokens.

    python train.py --config configs/maxmatch_coco.py:bert --workdir workdir/maxmatch_coco_bert \
        --config.data.path=/data/coco_precomp --config.model.text.bert_dir=/models/bert-base-uncased
    python train.py --config configs/maxmatch_coco.py:bigru --workdir workdir/maxmatch_coco_bigru \
        --config.data.path=/data/coco_precomp --config.data.tokenizer_dir=/models/bert-base-uncased
    Flickr30k: add `--config.data.val_split=dev` and (Faster R-CNN + Bi-GRU) `--config.loss.lambda_gd=0.05
    --config.loss.lambda_isd=0.05`.

Set Div COCO recipe (docs/design.md#training-recipe): D = 1024, K = 4, SPM depth 4 shared (4 × 512), batch 200 images ×
5 captions, AdamW 1e-3 (×0.1 image side and text SPM), wd 1e-4, per-step cosine over 80 epochs, clip 1.0, region drop
0.2, caption token drop 0.2, VSE0 for epoch 0. Validation (best-by-RSUM checkpoint) every epoch.
"""

from mmjax.train.defaults import retrieval_config


def get_config(arg: str = "bert"):
    variant = arg or "bert"
    if variant not in ("bert", "bigru"):
        raise ValueError(f"unknown variant {variant!r}; known: 'bert', 'bigru'")
    c = retrieval_config()
    c.data.update(name="precomp", path="", train_split="train", val_split="dev", tokenizer="bert", max_len=40,
                  batch_size=200)
    c.model.update(embed_dim=1024)
    c.model.spm.update(depth=4, num_heads=4, head_dim=512)
    c.model.text.tower = variant
    c.model.text.global_pool = "cls" if variant == "bert" else "rnn"   # Set Div `--txt_pooling cls` for BERT
    c.model.text.word_dim = 300                                       # Bi-GRU word embeddings (GloVe width)
    c.model.image.pool = "max"
    c.train.update(num_epochs=80, eval_every_epoch=True, checkpoint_every=2000)
    return c
