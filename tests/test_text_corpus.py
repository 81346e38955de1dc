"""Chapter 9's corpus ships with the package: the same bytes on every Python version.

The running Python's own ``pydoc_data`` text differs between versions (466,195 bytes on 3.11,
493,422 on 3.12, 511,869 on 3.13), and so would every loss of chapter 9. ``mha.text_corpus``
reads the text of Python 3.11.7 from ``mha/data`` instead.
"""

import hashlib
import sys

import pytest

import mha
from mha.tasks import text_corpus

pytestmark = pytest.mark.chapter(9)  # make chapter runs this file (issue 38)

# sha256 of the UTF-8 text, taken once from Python 3.11.7's pydoc_data.topics
SHA256 = "2a95af4ac93f5b719944030ce3769070ddf827d847cba42192afa8da989e5dc4"


def test_the_shipped_corpus_is_python_3_11_7_s_language_reference():
    data = text_corpus.reference_text().encode("utf-8")
    assert len(data) == 466_195
    assert hashlib.sha256(data).hexdigest() == SHA256
    train, held_out = mha.text_splits()
    assert train.numel() == 419_575 and held_out.numel() == 46_620  # chapter 9 prints these


@pytest.mark.skipif(sys.version_info[:3] != (3, 11, 7), reason="the text of Python 3.11.7")
def test_it_equals_what_python_3_11_7_itself_carries():
    from pydoc_data.topics import topics

    assert text_corpus.reference_text() == "\n".join(topics[k] for k in sorted(topics))


def test_the_corpus_and_its_licence_are_package_data():
    from importlib import resources

    folder = resources.files("mha").joinpath("data")
    assert folder.joinpath(text_corpus.CORPUS_FILE).is_file()
    licence = folder.joinpath("python_reference.LICENSE.txt").read_text(encoding="utf-8")
    assert "PYTHON SOFTWARE FOUNDATION LICENSE VERSION 2" in licence


def test_windows_take_numpy_integers_as_plain_ints_and_refuse_bools():
    """translation_batch and bits_per_byte took np.int64; windows refused it."""
    import numpy as np
    import torch

    data = torch.arange(100)
    plain = text_corpus.windows(data, 4, 8, torch.Generator().manual_seed(0))
    numpy = text_corpus.windows(data, np.int64(4), np.int32(8),
                                torch.Generator().manual_seed(0))
    assert all(torch.equal(a, b) for a, b in zip(plain, numpy, strict=True))
    assert plain[0].shape == (4, 8)
    with pytest.raises(ValueError, match="batch_size must be a positive int, got True"):
        text_corpus.windows(data, True, 8, torch.Generator())
