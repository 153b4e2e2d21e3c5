"""A `.npy` header that claims more data than the file holds (truncated or corrupt) is refused naming the file,
before anything is allocated: with mmap=False numpy used to try to allocate the claimed size (36 GiB here) and die
with a MemoryError naming no file."""

import numpy as np
import pytest

from mmjax.data import readers
from mmjax.data.records import DataFormatError
from mmjax.data.readers.scan_precomp import load_feature_array

CLAIM = (131072, 36, 2048)   # float32: 36 GiB


def _lying_header(path, shape=CLAIM, n_values=24, version=(1, 0)):
    with open(path, "wb") as f:
        header = {"descr": "<f4", "fortran_order": False, "shape": shape}
        if version == (1, 0):
            np.lib.format.write_array_header_1_0(f, header)
        else:
            np.lib.format.write_array_header_2_0(f, header)
        f.write(np.zeros(n_values, np.float32).tobytes())


@pytest.mark.parametrize("mmap", [False, True])
@pytest.mark.parametrize("version", [(1, 0), (2, 0)])
def test_header_claiming_more_than_the_file_holds_is_refused_naming_the_file(official, mmap, version):
    d, _, _ = official.precomp(n_images=2, per_image=1)
    _lying_header(d / "testall_ims.npy", version=version)
    with pytest.raises(DataFormatError, match=r"testall_ims\.npy: the \.npy header declares shape "
                                              r"\(131072, 36, 2048\) of float32 \(38654705664 bytes of data\) but "
                                              r"the file holds 96 bytes after the header"):
        readers.precomp(d, mmap=mmap)


def test_truncated_by_one_value_is_refused_and_exact_size_is_read(tmp_path):
    _lying_header(tmp_path / "short.npy", shape=(2, 3, 4), n_values=23)
    with pytest.raises(DataFormatError, match=r"short\.npy: .* \(96 bytes of data\) but the file holds 92 bytes"):
        load_feature_array(tmp_path / "short.npy", mmap=False)
    _lying_header(tmp_path / "exact.npy", shape=(2, 3, 4), n_values=24)
    assert load_feature_array(tmp_path / "exact.npy", mmap=False).shape == (2, 3, 4)
