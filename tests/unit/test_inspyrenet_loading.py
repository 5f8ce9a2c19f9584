"""Strict, pinned loading of a safetensors checkpoint, refused in plain words (small crafted files)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from craftai_catalogue import recipes
from craftai_common.store import FilePin
from craftai_models.checkpoints import CheckpointRefusedError, read_state_dict

EXPECTED = {
    "a.weight": ((2, 3), "F32"),
    "a.bias": ((2,), "F32"),
    "b.num_batches_tracked": ((), "I64"),
}


def tensors() -> dict[str, torch.Tensor]:
    return {
        "a.weight": torch.arange(6, dtype=torch.float32).reshape(2, 3),
        "a.bias": torch.tensor([0.5, -0.5]),
        "b.num_batches_tracked": torch.tensor(7),
    }


def pinned(name: str, size: int, sha256: str) -> FilePin:
    return FilePin("m", name, size, sha256)


def write(path: Path, content: dict[str, torch.Tensor]) -> FilePin:
    save_file(content, str(path))
    return pinned(path.name, path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest())


@pytest.fixture
def no_tensor_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if any tensor is parsed."""
    import safetensors.torch

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a tensor was read")

    monkeypatch.setattr(safetensors.torch, "load", refuse)
    monkeypatch.setattr(safetensors.torch, "load_file", refuse)


def test_the_pinned_file_loads(tmp_path: Path) -> None:
    pin = write(tmp_path / "m.safetensors", tensors())
    got = read_state_dict(tmp_path / "m.safetensors", EXPECTED, pin=pin)
    assert got.keys() == tensors().keys()
    assert all(torch.equal(got[k], v) for k, v in tensors().items())


@pytest.mark.usefixtures("no_tensor_read")
def test_another_size_is_refused_before_reading(tmp_path: Path) -> None:
    pin = write(tmp_path / "m.safetensors", tensors())
    other = pinned(pin.name, pin.size + 8, pin.sha256)
    with pytest.raises(CheckpointRefusedError, match=rf"expected {pin.size + 8:,} bytes, found {pin.size:,}"):
        read_state_dict(tmp_path / "m.safetensors", EXPECTED, pin=other)


@pytest.mark.usefixtures("no_tensor_read")
def test_same_size_other_bytes_are_refused_by_hash(tmp_path: Path) -> None:
    pin = write(tmp_path / "m.safetensors", tensors())
    changed = tensors()
    changed["a.bias"] = torch.tensor([0.25, -0.5])  # same header, one value differs
    path = tmp_path / "other.safetensors"
    found = write(path, changed)
    assert found.size == pin.size
    with pytest.raises(CheckpointRefusedError, match=f"expected SHA-256 {pin.sha256}, found {found.sha256}"):
        read_state_dict(path, EXPECTED, pin=pin)


@pytest.mark.usefixtures("no_tensor_read")
def test_garbage_of_the_pinned_size_is_refused_by_hash(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    path.write_bytes(b"\xff" * 64)
    pin = pinned("m.safetensors", 64, "0" * 64)
    with pytest.raises(CheckpointRefusedError, match=r"is not the pinned m\.safetensors: expected SHA-256"):
        read_state_dict(path, EXPECTED, pin=pin)


@pytest.mark.usefixtures("no_tensor_read")
def test_missing_keys_are_named(tmp_path: Path) -> None:
    content = tensors()
    del content["a.bias"]
    pin = write(tmp_path / "m.safetensors", content)
    with pytest.raises(CheckpointRefusedError, match=r"missing tensors: 1 \(a\.bias\)"):
        read_state_dict(tmp_path / "m.safetensors", EXPECTED, pin=pin)


@pytest.mark.usefixtures("no_tensor_read")
def test_extra_keys_are_named_first_few_and_counted(tmp_path: Path) -> None:
    content = tensors() | {f"extra.{i}": torch.zeros(1) for i in range(8)}
    pin = write(tmp_path / "m.safetensors", content)
    with pytest.raises(CheckpointRefusedError) as refused:
        read_state_dict(tmp_path / "m.safetensors", EXPECTED, pin=pin)
    message = str(refused.value)
    assert "unexpected tensors: 8 (extra.0, extra.1, extra.2, extra.3, extra.4 and 3 more)" in message
    assert "missing" not in message


@pytest.mark.usefixtures("no_tensor_read")
def test_wrong_shape_and_dtype_are_named(tmp_path: Path) -> None:
    content = tensors()
    content["a.weight"] = torch.zeros(3, 2)
    content["a.bias"] = torch.zeros(2, dtype=torch.float16)
    pin = write(tmp_path / "m.safetensors", content)
    with pytest.raises(CheckpointRefusedError) as refused:
        read_state_dict(tmp_path / "m.safetensors", EXPECTED, pin=pin)
    message = str(refused.value)
    assert "tensors of the wrong shape or type: 2" in message
    assert "a.bias is F16[2], expected F32[2]" in message
    assert "a.weight is F32[3x2], expected F32[2x3]" in message


@pytest.mark.usefixtures("no_tensor_read")
def test_not_a_safetensors_file(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    path.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
    pin = pinned("m.safetensors", path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest())
    with pytest.raises(CheckpointRefusedError, match="is not a safetensors file"):
        read_state_dict(path, EXPECTED, pin=pin)


def test_published_pin_is_the_one_in_pins_md() -> None:
    recipe = recipes.load().recipe("image.matte", "inspyrenet-swinb")
    assert recipe is not None
    (published,) = recipe.files
    assert published.size == 367_120_444
    assert published.sha256 == "5c8ab4541f9a960b376a80362b07f1d96262e689c501365e6323faa958de47ea"
