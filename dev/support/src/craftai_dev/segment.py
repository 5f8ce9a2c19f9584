"""image.segment through the real services: the SAM fixture pinned in a test catalogue, a store set
up by the real prepare service from a loopback HTTP server, and `craftai serve` on that store.

Both recipes are pinned to the fixture's files: SAM 2.1 tiny (the default of image.segment) from a
zip archive laid out like its publisher's (the archive source), SAM 2 tiny (named by the suites
that want a second recipe) from plain URLs.
"""

from __future__ import annotations

import io
import json
import os
import stat
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from PIL import Image

from craftai_common.hashing import sha256_file
from craftai_dev import catalogues, servers
from craftai_dev.sam_fixture import Sam21Fixture

if TYPE_CHECKING:
    from craftai_infer.routes.sam2_onnx import SamEmbedding, SamOnnxRunner

RECIPE = "sam2-hiera-tiny"  # from plain URLs
DEFAULT = "sam2.1-hiera-tiny"  # image.segment's default, from the archive
ROLE_FILES = {"encoder": "encoder.onnx", "decoder": "decoder.onnx"}
ARCHIVE = "sam2.1_hiera_tiny_20260221.zip"
# Where the archive holds the files: not the catalogue's member hints (sam2.1_hiera_tiny.encoder.onnx),
# so that setting up proves members are found by their pins.
ARCHIVE_MEMBERS = {"encoder": "sam2.1_hiera_tiny/encoder.onnx", "decoder": "sam2.1_hiera_tiny/decoder.onnx"}
ARCHIVE_CONFIG = "sam2.1_hiera_tiny/config.yaml"


@dataclass(frozen=True)
class Archive:
    path: Path
    size: int
    sha256: str


def fixture_pins(fixture: Sam21Fixture, url: str) -> dict[str, dict[str, Any]]:
    """The fixture's ONNX files pinned by role (size, SHA-256), served from `url` (a folder holding
    them under their own names): what a catalogue's recipe takes for them."""
    return {role: {**fixture.manifest["files"][name], "url": f"{url}/{name}"} for role, name in ROLE_FILES.items()}


def publisher_archive(fixture: Sam21Fixture) -> Archive:
    """The fixture's encoder and decoder in a deflated zip laid out like the publisher's (a folder
    with encoder.onnx, decoder.onnx and config.yaml, the names AnyLabeling's model zips use),
    cached beside the fixture by its key (about 10 s on 2 cores the first time)."""
    folder = fixture.folder.parent / f"{fixture.folder.name}-archive"
    path, manifest = folder / ARCHIVE, folder / "archive.json"
    try:
        known = json.loads(manifest.read_text())
        if path.stat().st_size == known["size"]:
            return Archive(path, known["size"], known["sha256"])
    except (OSError, ValueError, KeyError):
        pass
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".archive-", dir=folder)
    os.close(fd)
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            members = [
                (ARCHIVE_MEMBERS[role], (fixture.folder / name).read_bytes()) for role, name in ROLE_FILES.items()
            ]
            members.append((ARCHIVE_CONFIG, b"type: segment_anything_2\nname: sam2.1_hiera_tiny_20260221\n"))
            for name, data in members:
                info = zipfile.ZipInfo(name, (2026, 2, 21, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = (stat.S_IFREG | 0o644) << 16
                archive.writestr(info, data)
        digest = sha256_file(Path(tmp))
        size = Path(tmp).stat().st_size
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    manifest.write_text(json.dumps({"size": size, "sha256": digest}))
    return Archive(path, size, digest)


def served_folder(root: Path, fixture: Sam21Fixture) -> Path:
    """A folder for a FileServer: the fixture's two files and the archive (links, not copies)."""
    folder = root / "sam-files"
    folder.mkdir(parents=True, exist_ok=True)
    for name in ROLE_FILES.values():
        (folder / name).symlink_to(fixture.folder / name)
    (folder / ARCHIVE).symlink_to(publisher_archive(fixture).path)
    return folder


def catalogue(path: Path, fixture: Sam21Fixture, url: str) -> Path:
    """The real recipe data with both SAM recipes pinned to the fixture's own sizes and hashes, fetched
    from `url` (a FileServer on `served_folder`): SAM 2.1 from the archive, SAM 2 from plain URLs."""
    data = catalogues.real_data()
    archive = publisher_archive(fixture)
    for recipe in (RECIPE, DEFAULT):
        for pinned in catalogues.recipe(data, recipe)["files"]:
            name = ROLE_FILES[pinned["role"]]
            entry = fixture.manifest["files"][name]
            if recipe == DEFAULT:
                hint = pinned["sources"][0]["member"]  # the real catalogue's archive source names it
                sources = [
                    {"archive": f"{url}/{ARCHIVE}", "archive_size": archive.size, "archive_sha256": archive.sha256}
                    | {"member": hint}
                ]
            else:
                sources = [{"url": f"{url}/{name}"}]
            pinned.update(size=entry["size"], sha256=entry["sha256"], sources=sources)
    return catalogues.write(path, catalogues.add_unconfirmed(data))


@dataclass(frozen=True)
class SetUpStore:
    """A store where prepare has set both SAM recipes up, the catalogue that pins them, and the
    folder their sources were served from (serve it again with a FileServer and `catalogue`)."""

    store: Path
    recipes: Path
    files: Path | None = None

    def serve(self, workdir: Path, env: dict[str, str] | None = None) -> servers.Process:
        """`craftai serve` on this store (nothing is downloaded again: the infer service checks hashes)."""
        return servers.embedded(self.store, workdir, {"CRAFTAI_RECIPES": str(self.recipes), **(env or {})})


def set_up_store(root: Path, fixture: Sam21Fixture) -> SetUpStore:
    """Serve the fixture on loopback, and let the real prepare service download, check and prepare
    it for onnxruntime: the default recipe (SAM 2.1 tiny, from the archive) and SAM 2 tiny."""
    from craftai import AiClient

    folder = served_folder(root, fixture)
    with servers.FileServer(folder) as files:
        recipes = catalogue(root / "recipes.toml", fixture, files.url)
        process = servers.embedded(root / "store", root / "setup", {"CRAFTAI_RECIPES": str(recipes)})
        with servers.running(process), AiClient(app_id="tests", target=process.address) as ai:
            # onnxruntime named: its routes are prepared (the decoder's copy), and on a GPU machine
            # the engine chosen by default would be torch
            default = list(ai.setup("image.segment", engine="onnxruntime"))[-1]
            named = list(ai.setup("image.segment", RECIPE, "onnxruntime"))[-1]
    expected = {fixture.manifest["files"][n]["sha256"] for n in ROLE_FILES.values()}
    for result in (default, named):
        assert {f.sha256 for f in result.files} == expected  # type: ignore[union-attr]
    assert default.route.recipe == DEFAULT  # type: ignore[union-attr]
    assert all(f.source.endswith(f"of the archive {files.url}/{ARCHIVE}") for f in default.files)  # type: ignore[union-attr]
    return SetUpStore(root / "store", recipes, folder)


def png(picture: Image.Image) -> bytes:
    out = io.BytesIO()
    picture.save(out, format="PNG")
    return out.getvalue()


def mask_of(data: bytes) -> npt.NDArray[np.uint8]:
    """An answered mask PNG as a 0/255 array (checked: a 1-bit grayscale PNG)."""
    image = Image.open(io.BytesIO(data))
    assert image.format == "PNG" and image.mode == "1", (image.format, image.mode)
    return np.asarray(image.convert("L"))


class Embeddings:
    """SAM embeddings of the onnxruntime route's runner (SamOnnxRunner.encode, on the CPU) kept in
    `folder` for a test run and shared by the processes that run its tests (pytest-xdist's workers).
    An embedding is the encoder file's answer to the picture: the suites that hold the server, the
    torch route or Meta's predictor to the runner's answers on the same photo encode it once a run,
    the first to ask under a lock a key, the others reading its arrays back bit for bit."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def encoded(self, runner: SamOnnxRunner, encoder: Path, picture: npt.NDArray[np.uint8]) -> SamEmbedding:
        """`runner.encode(picture)` for a SamOnnxRunner opened on `encoder` (onnxruntime's default
        threads), made by the first process that asks for these bytes of the file and the picture."""
        import fcntl
        import hashlib

        from craftai_infer.routes.sam2_onnx import SamEmbedding

        pixels = np.ascontiguousarray(picture)
        shape = "x".join(map(str, pixels.shape))
        key = f"{sha256_file(encoder)}-{shape}-{hashlib.sha256(pixels.tobytes()).hexdigest()}"
        kept = self.folder / f"{key}.npz"
        self.folder.mkdir(parents=True, exist_ok=True)
        with (self.folder / f"{key}.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if not kept.exists():
                made = runner.encode(picture)
                partial = kept.with_suffix(".part")
                with partial.open("wb") as handle:
                    np.savez(
                        handle,
                        high_res_feats_0=made.high_res_feats_0,
                        high_res_feats_1=made.high_res_feats_1,
                        image_embed=made.image_embed,
                        size=np.array([made.picture_height, made.picture_width]),
                    )
                partial.replace(kept)
                return made
        with np.load(kept) as arrays:
            height, width = (int(v) for v in arrays["size"])
            return SamEmbedding(
                arrays["high_res_feats_0"], arrays["high_res_feats_1"], arrays["image_embed"], height, width
            )
