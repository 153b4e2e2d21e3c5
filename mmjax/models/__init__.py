"""Flax (linen) modules and Hugging Face weight loaders — `mmjax.models`.

Modules only hold parameters; the math they call lives in `mmjax.similarity`, `mmjax.losses` and `mmjax.flowclip`.

- Set heads: `SetPredictionModule` (Set Div / MaxMatch), `PIEHead` (PVSE); pooling: `GPO` (VSE∞).
- Towers: `RegionTower`, `GridTower` (+ `SmallResNet`), `BiGRUTextTower`, `BagOfWordsTextTower`, `BertTextTower`;
  `SetRetrievalModel` (two towers) built from `config.model` by `build_retrieval_model`.
- Encoders: `BertModel`, `CLIPModel` with `load_hf_bert` / `load_hf_clip` (safetensors, no torch);
  `load_pretrained_text` (BERT / GloVe weights a config names); `read_glove`.
- Flow-CLIP: `FlowCLIPHead` (M, M_tok, W, logit scale) and `head_objective` (its training loss);
  `FeatureCache` / `write_feature_cache` (frozen features); `FrozenShapesWorldCLIP` (an exported ShapesWorld CLIP
  as a feature extractor).
"""

from mmjax.models.bert import BertConfig, BertModel
from mmjax.models.clip import CLIPConfig, CLIPModel
from mmjax.models.factory import build_retrieval_model
from mmjax.models.feature_cache import FeatureCache, write_feature_cache
from mmjax.models.flowclip_head import FlowCLIPHead, head_objective
from mmjax.models.frozen_clip import FrozenShapesWorldCLIP
from mmjax.models.glove import read_glove
from mmjax.models.gpo import GPO
from mmjax.models.hf import load_hf_bert, load_hf_clip
from mmjax.models.image_towers import GridTower, RegionTower
from mmjax.models.pie import PIEHead
from mmjax.models.pretrained import load_pretrained_text
from mmjax.models.retrieval import SetRetrievalModel
from mmjax.models.set_prediction import SetPredictionModule
from mmjax.models.small_cnn import SmallResNet
from mmjax.models.text_towers import BagOfWordsTextTower, BertTextTower, BiGRUTextTower

__all__ = ["BagOfWordsTextTower", "BertConfig", "BertModel", "BertTextTower", "BiGRUTextTower", "CLIPConfig",
           "CLIPModel", "FeatureCache", "FlowCLIPHead", "FrozenShapesWorldCLIP", "GPO", "GridTower", "PIEHead",
           "RegionTower", "SetPredictionModule", "SetRetrievalModel", "SmallResNet", "build_retrieval_model",
           "head_objective", "load_hf_bert", "load_hf_clip", "load_pretrained_text", "read_glove",
           "write_feature_cache"]
