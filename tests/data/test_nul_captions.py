"""A caption holding a NUL character is refused where caption strings enter: the tokenizers (naming the caption's
index) and the dataset readers (naming file and line). Tokenizers treat NUL inconsistently (dropped, [UNK], end of
string), so such a caption used to be encoded silently as some other text."""

import pytest

from mmjax.data import readers
from mmjax.data.records import DataFormatError
from mmjax.data.tokenizers import HFTokenizer, WordTokenizer, check_texts, load_tokenizer


def test_check_texts_names_the_first_bad_index():
    check_texts(["a red circle", "", "a blue square"])          # fine
    with pytest.raises(ValueError, match=r"caption 2 contains a NUL character"):
        check_texts(["a", "b", "a red\x00 circle", "c\x00"])


def test_word_tokenizer_refuses_nul_naming_the_caption_index():
    tok = load_tokenizer("shapesworld", max_len=20)
    tok.encode(["a red circle", "a blue square"])
    with pytest.raises(ValueError, match=r"caption 1 contains a NUL character \('\\x00' at position 5\)"):
        tok.encode(["a red circle", "a red\x00circle"])


def test_hf_tokenizer_refuses_nul_naming_the_caption_index(tmp_path):
    pytest.importorskip("transformers")
    directory = WordTokenizer(["a", "red", "circle"], max_len=8).export(str(tmp_path / "bert"))
    tok = HFTokenizer(directory, "bert", max_len=8)
    tok.encode(["a red circle"])
    with pytest.raises(ValueError, match=r"caption 0 contains a NUL character"):
        tok.encode(["\x00a red circle", "a red circle"])


def test_precomp_reader_refuses_nul_naming_file_and_line(tmp_path):
    from tests.data.readers.conftest import OfficialFiles
    d, _, _ = OfficialFiles(tmp_path).precomp(n_images=2, per_image=2)
    caps = (d / "testall_caps.txt").read_text().splitlines()
    caps[2] = "image 1 caption\x00 0"
    (d / "testall_caps.txt").write_text("\n".join(caps) + "\n")
    with pytest.raises(DataFormatError, match=r"testall_caps\.txt:3: caption contains a NUL character"):
        readers.precomp(d)
