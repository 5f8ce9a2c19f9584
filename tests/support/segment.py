"""image.segment through the real services: the SAM fixture pinned in a test catalogue, a store set
up by the real prepare service from a loopback HTTP server, and `craftai serve` on that store."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from PIL import Image

from tests.support import catalogues, servers
from tests.support.sam_fixture import Sam21Fixture

RECIPE = "sam2-hiera-tiny"
ROLE_FILES = {"encoder": "encoder.onnx", "decoder": "decoder.onnx"}


def catalogue(path: Path, fixture: Sam21Fixture, url: str) -> Path:
    """The real recipe data with sam2-hiera-tiny pinned to the fixture's own sizes and hashes,
    fetched from `url` (a FileServer serving the fixture's folder)."""
    data = catalogues.real_data()
    for pinned in catalogues.recipe(data, RECIPE)["files"]:
        name = ROLE_FILES[pinned["role"]]
        entry = fixture.manifest["files"][name]
        pinned.update(size=entry["size"], sha256=entry["sha256"], sources=[{"url": f"{url}/{name}"}])
    return catalogues.write(path, data)


@dataclass(frozen=True)
class SetUpStore:
    """A store where prepare has set sam2-hiera-tiny up, and the catalogue that pins it."""

    store: Path
    recipes: Path

    def serve(self, workdir: Path, env: dict[str, str] | None = None) -> servers.Process:
        """`craftai serve` on this store (nothing is downloaded again: the infer service checks hashes)."""
        return servers.embedded(self.store, workdir, {"CRAFTAI_RECIPES": str(self.recipes), **(env or {})})


def set_up_store(root: Path, fixture: Sam21Fixture) -> SetUpStore:
    """Serve the fixture on loopback, and let the real prepare service download and check it."""
    from craftai import AiClient

    with servers.FileServer(fixture.folder) as files:
        recipes = catalogue(root / "recipes.toml", fixture, files.url)
        process = servers.embedded(root / "store", root / "setup", {"CRAFTAI_RECIPES": str(recipes)})
        with servers.running(process), AiClient(app_id="tests", target=process.address) as ai:
            result = list(ai.setup("image.segment", RECIPE))[-1]
    hashes = {f.sha256 for f in result.files}  # type: ignore[union-attr]
    assert hashes == {fixture.manifest["files"][n]["sha256"] for n in ROLE_FILES.values()}
    return SetUpStore(root / "store", recipes)


def png(picture: Image.Image) -> bytes:
    out = io.BytesIO()
    picture.save(out, format="PNG")
    return out.getvalue()


def mask_of(data: bytes) -> npt.NDArray[np.uint8]:
    """An answered mask PNG as a 0/255 array (checked: a 1-bit grayscale PNG)."""
    image = Image.open(io.BytesIO(data))
    assert image.format == "PNG" and image.mode == "1", (image.format, image.mode)
    return np.asarray(image.convert("L"))
