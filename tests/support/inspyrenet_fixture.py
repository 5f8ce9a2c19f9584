"""A randomised InSPyReNet Swin-B checkpoint with the published key names (the real one cannot be
had here), and crafted variants for the refusal tests; cached under <repo>/.cache/fixtures/."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from craftai_common.store import FilePin
from craftai_models.inspyrenet import inspyrenet_swin_b
from tests.support.files import CACHE, exclusive, sha256_of
from tests.support.inspyrenet_reference import randomised_state_dict

SEED = 7


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    pin: FilePin


def _pinned(path: Path) -> Checkpoint:
    return Checkpoint(path, FilePin("inspyrenet-swinb", "inspyrenet.safetensors", path.stat().st_size, sha256_of(path)))


def _save(path: Path, state: dict[str, torch.Tensor]) -> Checkpoint:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".part")
        save_file({k: v.contiguous() for k, v in state.items()}, str(partial))
        partial.replace(path)
    return _pinned(path)


def checkpoints() -> dict[str, Checkpoint]:
    """ "random": every tensor randomised; "missing-key", "extra-key", "wrong-shape": crafted from it."""
    folder = CACHE / "fixtures" / f"inspyrenet-random-{SEED}"
    names = ("random", "missing-key", "extra-key", "wrong-shape")
    if all((folder / f"{n}.safetensors").exists() for n in names):
        return {n: _pinned(folder / f"{n}.safetensors") for n in names}
    with exclusive(folder.name):
        if all((folder / f"{n}.safetensors").exists() for n in names):  # made while this one waited
            return {n: _pinned(folder / f"{n}.safetensors") for n in names}
        state = randomised_state_dict(inspyrenet_swin_b(), seed=SEED)
        made = {"random": _save(folder / "random.safetensors", state)}
        missing = dict(state)
        del missing["decoder.conv5.conv.weight"]
        made["missing-key"] = _save(folder / "missing-key.safetensors", missing)
        extra = {**state, "decoder.conv6.conv.weight": torch.zeros(1)}
        made["extra-key"] = _save(folder / "extra-key.safetensors", extra)
        wrong = dict(state)
        wrong["attention0.threshold"] = torch.zeros(2)
        made["wrong-shape"] = _save(folder / "wrong-shape.safetensors", wrong)
    return made
