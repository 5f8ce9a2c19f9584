"""The SAM 2.1 fixture generator: every tensor randomised deterministically; a cache never holding half a fixture."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from craftai_dev import sam21


def test_every_parameter_and_buffer_is_replaced_deterministically() -> None:
    built = sam21.build_reference_model()
    before = {k: v.clone() for k, v in built.state_dict().items()}
    count = sam21.randomise(built, seed=5)
    after = built.state_dict()
    assert count == len(after) == 471  # docs/research/sam21.md
    unchanged = [k for k in after if torch.equal(after[k], before[k])]
    assert not unchanged
    # No two tensors of the same shape are equal, so the exporter never merges initializers.
    seen: dict[tuple[tuple[int, ...], float], str] = {}
    for name, tensor in after.items():
        fingerprint = (tuple(tensor.shape), float(tensor.double().sum()))
        assert fingerprint not in seen, f"{name} equals {seen.get(fingerprint)}"
        seen[fingerprint] = name

    # The values depend on the seed and the names alone (shown on the mask decoder, to keep it quick).
    decoder = built.sam_mask_decoder
    sam21.randomise(decoder, seed=5)
    first = {k: v.clone() for k, v in decoder.state_dict().items()}
    sam21.randomise(decoder, seed=6)
    assert not any(torch.equal(first[k], v) for k, v in decoder.state_dict().items())
    sam21.randomise(decoder, seed=5)
    assert all(torch.equal(first[k], v) for k, v in decoder.state_dict().items())


def test_the_key_names_the_seed_and_the_generator() -> None:
    assert sam21.fixture_key(1) != sam21.fixture_key(2)
    assert sam21.fixture_key(1) == sam21.fixture_key(1)
    assert len(sam21.fixture_key()) == 16


def _fake_fixture(folder: Path, *, truncate: str | None = None) -> None:
    folder.mkdir(parents=True)
    files = {}
    for name in sam21.FILES:
        data = name.encode() * 10
        (folder / name).write_bytes(data[:5] if name == truncate else data)
        files[name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (folder / sam21.MANIFEST_FILE).write_text(json.dumps({"files": files}))


def test_a_complete_cached_fixture_is_used_without_generating(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_fixture(tmp_path / f"sam21-{sam21.fixture_key(3)}")
    monkeypatch.setattr(sam21, "generate", lambda *a, **k: pytest.fail("generated again"))
    found = sam21.ensure_fixture(tmp_path, seed=3, verify=True)
    assert found.encoder.read_bytes() == b"encoder.onnx" * 10


def test_a_truncated_fixture_is_made_again_and_a_crash_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    final = tmp_path / f"sam21-{sam21.fixture_key(3)}"
    _fake_fixture(final, truncate=sam21.DECODER_FILE)

    def crash(folder: Path, seed: int, key: str | None = None) -> None:
        (folder / sam21.ENCODER_FILE).write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(sam21, "generate", crash)
    with pytest.raises(KeyboardInterrupt):
        sam21.ensure_fixture(tmp_path, seed=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"sam21-{sam21.fixture_key(3)}.lock"]

    def good(folder: Path, seed: int, key: str | None = None) -> None:
        folder.rmdir()
        _fake_fixture(folder)

    monkeypatch.setattr(sam21, "generate", good)
    assert sam21.ensure_fixture(tmp_path, seed=3).folder == final
