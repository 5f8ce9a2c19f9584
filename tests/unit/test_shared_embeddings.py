"""craftai_dev.segment.Embeddings, the SAM embeddings the suites share in a run: a key is the encoder
file's bytes and the picture's, so another file or another picture is encoded again, and an embedding
read back is the one made, bit for bit."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import numpy as np
import numpy.typing as npt

from craftai_dev.segment import Embeddings
from craftai_infer.routes.sam2_onnx import SamEmbedding, SamOnnxRunner


class _Counting:
    """Answers like SamOnnxRunner.encode (arrays of the contract's shapes, seeded by the picture) and
    counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def encode(self, picture: npt.NDArray[np.uint8]) -> SamEmbedding:
        self.calls += 1
        rng = np.random.default_rng(int(picture.sum()) + self.calls)
        shapes = [(1, 32, 256, 256), (1, 64, 128, 128), (1, 256, 64, 64)]
        f0, f1, embed = (rng.standard_normal(s, dtype=np.float32) for s in shapes)
        return SamEmbedding(f0, f1, embed, int(picture.shape[0]), int(picture.shape[1]))


def test_an_embedding_is_made_once_a_key_and_read_back_bit_for_bit(tmp_path: Path) -> None:
    encoder, other = tmp_path / "encoder.onnx", tmp_path / "other.onnx"
    encoder.write_bytes(b"one graph")
    other.write_bytes(b"another graph")
    picture = np.arange(30 * 40 * 3, dtype=np.uint8).reshape(30, 40, 3)
    counting = _Counting()
    runner = cast(SamOnnxRunner, counting)
    shared = Embeddings(tmp_path / "kept")
    made = shared.encoded(runner, encoder, picture)
    again = Embeddings(tmp_path / "kept").encoded(runner, encoder, picture.copy())  # another process's view
    assert counting.calls == 1
    for name in ("high_res_feats_0", "high_res_feats_1", "image_embed"):
        assert np.array_equal(getattr(made, name), getattr(again, name)), name
        assert getattr(again, name).dtype == np.float32
    assert (again.picture_height, again.picture_width) == (30, 40)
    shared.encoded(runner, other, picture)  # another file's bytes
    shared.encoded(runner, encoder, picture[:, ::-1])  # another picture
    shared.encoded(runner, encoder, picture.reshape(40, 30, 3))  # the same bytes in another shape
    assert counting.calls == 4
