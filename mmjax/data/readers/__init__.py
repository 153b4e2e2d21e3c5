"""Readers for the official benchmark / data-set files the user downloaded (nothing is fetched).

One function per format; each takes the file path(s) and the image root (`precomp`: the feature directory only)
and returns the common record types of `mmjax.data.records`:

| function | files | returns |
|---|---|---|
| `precomp` | SCAN/VSE++ ``{split}_ims.npy`` + ``_caps.txt`` (COCO ``testall`` 5K, 1K folds) | `RetrievalDataset` |
| `karpathy` | ``dataset_coco.json`` / ``dataset_flickr30k.json`` | `RetrievalDataset` |
| `negclip_tsv` | NegCLIP ``*_neg_clip.tsv`` | `CompositionalDataset` |
| `aro` | VG-Relation / VG-Attribution JSON, COCO/Flickr30k-Order (+ 4 perturbations) | `CompositionalDataset` |
| `sugarcrepe` | the 7 SugarCrepe subset JSONs | `CompositionalDataset` |
| `whatsup` | ``{coco,vg}_qa_{one,two}_obj.json``, ``controlled_{images,clevr}_dataset.json`` | `CompositionalDataset` |
| `abc6k` | ``ABC-6K.txt`` + COCO 2014 caption annotations | `CompositionalDataset` |
| `clevr_pug` | CLEVR ``output_2obj.csv`` / ``PUG_SPARE.csv`` | `CompositionalDataset` |
| `winoground` | ``examples.jsonl`` (2 grouped records per example) | `CompositionalDataset` |

Every reader raises `DataFormatError` (a ValueError) naming the file and line or field on malformed input and
FileNotFoundError for missing files/images (``missing_images='skip'`` drops and counts such records instead);
anything skipped is reported in the result's ``skipped`` mapping and logged. Malformed input includes: duplicate
keys in a JSON object, repeated ids of records keyed by id, image paths that are absolute or climb out of the image
root, NaN/inf in numeric fields and in precomputed features. `check_same_feature_dim` compares splits read by
separate `precomp` calls (train vs dev).
"""

from mmjax.data.readers.abc6k_txt import abc6k
from mmjax.data.readers.aro_json import aro
from mmjax.data.readers.aro_order import OrderPerturber
from mmjax.data.readers.binding_csv import clevr_pug
from mmjax.data.readers.images import open_image
from mmjax.data.readers.karpathy_json import karpathy
from mmjax.data.readers.negclip_tsv import negclip_tsv
from mmjax.data.readers.scan_precomp import check_same_feature_dim, precomp
from mmjax.data.readers.sugarcrepe_json import sugarcrepe
from mmjax.data.readers.whatsup_json import whatsup
from mmjax.data.readers.winoground_jsonl import group_pairs as winoground_pairs
from mmjax.data.readers.winoground_jsonl import winoground
from mmjax.data.records import CompositionalDataset, CompositionalRecord, DataFormatError, RetrievalDataset

__all__ = [
    "CompositionalDataset", "CompositionalRecord", "DataFormatError", "OrderPerturber", "RetrievalDataset",
    "abc6k", "aro", "check_same_feature_dim", "clevr_pug", "karpathy", "negclip_tsv", "open_image", "precomp",
    "sugarcrepe", "whatsup", "winoground", "winoground_pairs",
]
