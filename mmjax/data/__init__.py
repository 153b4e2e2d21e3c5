"""Data — `mmjax.data`: ShapesWorld (the embedded default), tokenizers, readers for official formats, the input
pipeline.

- `shapesworld` (`generate`, `ShapesWorld`, `ShapesWorldConfig`; TFDS builder in `shapesworld.tfds_builder`).
- `load_tokenizer` ('shapesworld' | 'bert' | 'clip'); `readers` (one function per official format).
- `BatchIterator`, `PipelineConfig`, `InMemorySource`, `source_from_shapesworld`: deterministic, resumable batches.
- `RetrievalSplits`: the tokenised splits a retrieval config names; `CachedRecordIterator`: Flow-CLIP records
  from a feature cache.
- Record types: `CompositionalRecord`, `CompositionalDataset`, `RetrievalDataset`, `DataFormatError`.
"""

from mmjax.data import readers, shapesworld
from mmjax.data.cached_records import CachedRecordIterator
from mmjax.data.pipeline import BatchIterator, InMemorySource, PipelineConfig, source_from_shapesworld
from mmjax.data.records import CompositionalDataset, CompositionalRecord, DataFormatError, RetrievalDataset
from mmjax.data.sources import RetrievalSplits
from mmjax.data.tokenizers import load_tokenizer

__all__ = ["BatchIterator", "CachedRecordIterator", "CompositionalDataset", "CompositionalRecord", "DataFormatError",
           "InMemorySource", "PipelineConfig", "RetrievalDataset", "RetrievalSplits", "load_tokenizer", "readers",
           "shapesworld", "source_from_shapesworld"]
