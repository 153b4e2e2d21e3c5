"""Fixtures for the Hugging Face encoder tests: a tiny CLIP BPE tokenizer directory and tiny CLIP configs.

The tokenizer has 58 ids: 26 letters, 26 letters + "</w>", four merged tokens (ca, cat</w>, do, dog</w>), then SOT
(56) and EOT (57), so EOT is the largest id as in OpenAI's vocabulary. Like real CLIP, padding and unknown characters
map to EOT, which is why Flow-CLIP takes the FIRST EOT position.
"""

import json
import string

import pytest

TINY_CLIP_SOT, TINY_CLIP_EOT, TINY_CLIP_VOCAB = 56, 57, 58


def write_tiny_clip_tokenizer(directory, model_max_length: int = 16) -> None:
    letters = list(string.ascii_lowercase)
    tokens = letters + [c + "</w>" for c in letters] + ["ca", "cat</w>", "do", "dog</w>"]
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    assert len(tokens) == TINY_CLIP_VOCAB
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}))
    (directory / "merges.txt").write_text("#version: 0.2\nc a\nca t</w>\nd o\ndo g</w>\n")
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "model_max_length": model_max_length, "tokenizer_class": "CLIPTokenizer",
        "bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}))


def tiny_clip_config_dict() -> dict:
    """HF `CLIPConfig` keyword arguments (also the content of config.json) for a CPU-sized CLIP."""
    return {
        "text_config": {"vocab_size": TINY_CLIP_VOCAB, "hidden_size": 32, "intermediate_size": 37,
                        "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 16,
                        "bos_token_id": TINY_CLIP_SOT, "eos_token_id": TINY_CLIP_EOT, "pad_token_id": TINY_CLIP_EOT},
        "vision_config": {"hidden_size": 24, "intermediate_size": 40, "num_hidden_layers": 2,
                          "num_attention_heads": 2, "image_size": 16, "patch_size": 4, "num_channels": 3},
        "projection_dim": 20,
    }


@pytest.fixture
def hf_tiny_clip_tokenizer_dir(tmp_path):
    directory = tmp_path / "tiny_clip_tokenizer"
    write_tiny_clip_tokenizer(directory)
    return directory


@pytest.fixture(scope="session")
def hf_write_tiny_clip_tokenizer():
    return write_tiny_clip_tokenizer


@pytest.fixture(scope="session")
def hf_tiny_clip_config():
    return tiny_clip_config_dict()


@pytest.fixture(scope="session")
def hf_tiny_clip_torch_dir(tmp_path_factory):
    """(directory, torch CLIPModel): a perturbed random tiny CLIP saved with `save_pretrained` + the tiny tokenizer."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    directory = tmp_path_factory.mktemp("tiny_clip_torch")
    torch.manual_seed(0)
    model = transformers.CLIPModel(transformers.CLIPConfig(**tiny_clip_config_dict())).eval()
    with torch.no_grad():  # HF inits biases to 0 and LayerNorms to 1: perturb so every tensor's mapping is tested
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    model.save_pretrained(directory)
    write_tiny_clip_tokenizer(directory)
    return directory, model


@pytest.fixture(scope="session")
def hf_random_params():
    """`(model, *example_args, seed=0) -> params`: random normal values on the module's abstract param tree.

    Avoids `model.init`, whose per-initialiser compilation costs tens of seconds on the shared CPUs, and gives
    LayerNorm scales / biases non-trivial values.
    """
    import jax
    import numpy as np

    def make(model, *example_args, seed: int = 0, scale: float = 0.2):
        abstract = jax.eval_shape(model.init, jax.random.PRNGKey(0), *example_args)["params"]
        rng = np.random.default_rng(seed)
        return jax.tree.map(lambda s: (scale * rng.normal(size=s.shape)).astype(s.dtype), abstract)

    return make
