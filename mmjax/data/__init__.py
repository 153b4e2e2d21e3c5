"""Data: ShapesWorld (the embedded default), tokenizers, readers for official formats, the input pipeline."""
