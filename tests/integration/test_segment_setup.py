"""`craftai setup image.segment` on a fresh store sets up the default recipe, SAM 2.1 tiny, from its
archive source: the SAM 2.1 fixture's encoder and decoder in a zip laid out like the publisher's,
served on loopback (craftai_dev.segment), the archive fetched once, each member found by its
pin, progress for the archive and each member, nothing left under tmp/; then the route's one-time
preparation (the decoder copy that answers Meta's single mask too), which the command reports.

About 5 s on 2 cores (126 MB unpacked and hashed; the archive itself is cached by the fixture's key).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from craftai import AiClient, CraftAiError, RouteState
from craftai_dev import segment, servers
from craftai_dev.files import sample_photo
from craftai_dev.sam_fixture import Sam21Fixture

pytestmark = pytest.mark.slow


def test_craftai_setup_image_segment_takes_sam21_tiny_from_the_archive(
    sam_store: segment.SetUpStore, sam21_files: Sam21Fixture, tmp_path: Path
) -> None:
    assert sam_store.files is not None
    with servers.FileServer(sam_store.files) as files:
        recipes = segment.catalogue(tmp_path / "recipes.toml", sam21_files, files.url)
        process = servers.embedded(tmp_path / "store", tmp_path, {"CRAFTAI_RECIPES": str(recipes)})
        with servers.running(process):
            env = {**os.environ, "CRAFTAI_ADDRESS": process.address}
            run = subprocess.run(
                [str(servers.BIN / "craftai"), "setup", "image.segment"],
                check=False,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
    assert run.returncode == 0, run.stderr
    prepared = "image.segment sam2.1-hiera-tiny (onnxruntime): set up, prepared revision sam21-onnx.1-"
    assert prepared in run.stdout and "(prepared now)" in run.stdout, run.stdout
    (folder,) = (tmp_path / "store" / "prepared" / "sam2.1-hiera-tiny").iterdir()
    assert sorted(p.name for p in folder.iterdir()) == ["decoder.onnx", "encoder.onnx", "manifest.json"]
    for role, member in segment.ARCHIVE_MEMBERS.items():
        name = f"sam2.1_hiera_tiny.{role}.onnx"
        size = sam21_files.manifest["files"][segment.ROLE_FILES[role]]["size"]
        assert f"sam2.1-hiera-tiny/{name}  {size:,} bytes" in run.stdout
        assert f"from member {member} of the archive {files.url}/{segment.ARCHIVE}" in run.stdout
    assert files.requests == {f"/{segment.ARCHIVE}": 1}  # one download for both files
    assert "download" in run.stderr and "extract" in run.stderr  # a progress bar for the archive and the members
    assert not [p for p in (tmp_path / "store" / "tmp").rglob("*") if p.is_file()]  # the archive is gone
    # Without its decoder copy (a store set up before the route needed it), the route says what to run.
    shutil.rmtree(folder)
    command = "craftai setup image.segment --recipe sam2.1-hiera-tiny --engine onnxruntime"
    process = servers.embedded(tmp_path / "store", tmp_path / "again", {"CRAFTAI_RECIPES": str(recipes)})
    with servers.running(process), AiClient(app_id="tests", target=process.address) as ai:
        (status,) = [s for s in ai.status("image.segment", "sam2.1-hiera-tiny") if s.route.engine == "onnxruntime"]
        assert status.state == RouteState.DOWNLOADED and command in status.detail, status.detail
        with pytest.raises(CraftAiError) as caught:
            ai.segment_once(sample_photo("chelsea.png"), [(200.0, 150.0, True)])
        assert caught.value.reason == "ROUTE_NOT_SET_UP" and f"run: {command}" in caught.value.message
