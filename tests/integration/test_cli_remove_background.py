"""`craftai remove-background` on files, folders and standard input, against a real server: the
same tree under OUT, outputs that exist skipped (and only the missing ones asked), a failed picture
that stops nothing, the summary and the exit code, standard output."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
from PIL import Image

from craftai_dev import servers


def _craftai(address: str, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "CRAFTAI_ADDRESS": address}
    return subprocess.run(
        [str(servers.BIN / "craftai"), "-q", *args], check=False, env=env, capture_output=True, input=stdin, timeout=300
    )


def test_a_folder_with_a_bad_picture_skips_what_exists_and_says_what_failed(
    tmp_path: Path, matte_server: servers.Process, photos: dict[str, Path]
) -> None:
    tree = tmp_path / "photos"
    (tree / "sub" / "deep").mkdir(parents=True)
    shutil.copyfile(photos["chelsea.png"], tree / "chelsea.png")
    shutil.copyfile(photos["coffee.png"], tree / "sub" / "coffee.png")
    shutil.copyfile(photos["rocket.jpg"], tree / "sub" / "deep" / "rocket.jpg")
    (tree / "sub" / "bad.png").write_bytes(b"not a picture")
    out = tmp_path / "out"
    args = ["remove-background", str(tree), "-o", str(out), "--outputs", "matte,cutout,composite,mask"]
    args += ["--bg-color", "#2060f0", "--jobs", "2"]

    first = _craftai(matte_server.address, *args)
    stdout, stderr = first.stdout.decode(), first.stderr.decode()
    assert first.returncode == 1, stderr  # one picture failed
    assert "4 picture(s) in" in stdout and "3 done, 0 skipped" in stdout and "1 failed" in stdout
    assert f"craftai: {tree / 'sub' / 'bad.png'}: the picture is not a PNG, JPEG or WebP file" in stderr
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert written == sorted(
        f"{stem}.{kind}.png"
        for stem in ("chelsea", "sub/coffee", "sub/deep/rocket")
        for kind in ("matte", "cutout", "composite", "mask")
    )
    assert Image.open(out / "sub/deep/rocket.cutout.png").mode == "RGBA"
    assert Image.open(out / "sub/coffee.mask.png").mode == "1"
    composite = np.asarray(Image.open(out / "chelsea.composite.png"))
    assert composite.shape == (300, 451, 3)

    before = (out / "chelsea.matte.png").stat().st_mtime_ns
    (out / "sub/coffee.cutout.png").unlink()
    again = _craftai(matte_server.address, *args)
    assert "1 done, 2 skipped" in again.stdout.decode() and again.returncode == 1
    assert (out / "sub/coffee.cutout.png").exists() and (out / "chelsea.matte.png").stat().st_mtime_ns == before
    assert "coffee.png" in again.stdout.decode() and "chelsea.png" not in again.stdout.decode().split("picture(s)")[0]

    (tree / "sub" / "bad.png").unlink()
    redo = _craftai(matte_server.address, *args, "--overwrite")
    assert redo.returncode == 0 and "3 picture(s) in" in redo.stdout.decode() and "3 done" in redo.stdout.decode()
    assert not list(out.rglob(".*.part"))  # every file was written whole, then renamed


def test_standard_input_to_standard_output(matte_server: servers.Process, photos: dict[str, Path]) -> None:
    run = _craftai(
        matte_server.address,
        "remove-background",
        "-",
        "-o",
        "-",
        "--outputs",
        "composite",
        "--bg-blur",
        "5",
        "--format",
        "jpeg",
        stdin=photos["chelsea.png"].read_bytes(),
    )
    assert run.returncode == 0, run.stderr.decode()
    picture = Image.open(io.BytesIO(run.stdout))
    assert (picture.format, picture.size, picture.mode) == ("JPEG", (451, 300), "RGB")
    assert "1 picture(s) in" in run.stderr.decode()  # what people read goes to standard error


def test_options_that_cannot_work_are_refused_before_any_picture(tmp_path: Path, matte_server: servers.Process) -> None:
    run = _craftai(
        matte_server.address,
        "remove-background",
        "x.png",
        "-o",
        str(tmp_path),
        "--outputs",
        "matte",
        "--bg-color",
        "#000",
    )
    assert run.returncode == 2 and "a background is for the composite" in run.stderr.decode()
    run = _craftai(matte_server.address, "remove-background", "x.png", "-o", str(tmp_path / "o.jpg"))
    assert run.returncode == 2 and "can hold only the composite" in run.stderr.decode()


def test_raw_files_are_the_pixels_and_the_line_gives_their_size(
    tmp_path: Path, matte_server: servers.Process, photos: dict[str, Path]
) -> None:
    """--format raw writes .raw files holding the pixels alone; the picture's line says their size
    and bytes a pixel (the file cannot); `-o photo.raw` chooses raw from the suffix."""
    out = tmp_path / "out"
    args = ["remove-background", str(photos["chelsea.png"]), "--outputs", "matte,cutout,mask"]
    run = _craftai(matte_server.address, *args, "-o", str(out), "--format", "raw")
    png = _craftai(matte_server.address, *args, "-o", str(tmp_path / "png"))
    stdout = run.stdout.decode()
    assert run.returncode == 0 and png.returncode == 0, run.stderr.decode()
    assert sorted(p.name for p in out.iterdir()) == ["chelsea.cutout.raw", "chelsea.mask.raw", "chelsea.matte.raw"]
    assert "(raw pixels, rows top to bottom, no header: matte 451x300 grey, 1 byte a pixel; " in stdout
    assert "cutout 451x300 RGBA, 4 bytes a pixel; mask 451x300 grey (0 or 255), 1 byte a pixel)" in stdout
    cutout = np.frombuffer((out / "chelsea.cutout.raw").read_bytes(), np.uint8).reshape(300, 451, 4)
    assert np.array_equal(cutout, np.asarray(Image.open(tmp_path / "png" / "chelsea.cutout.png")))
    mask = np.frombuffer((out / "chelsea.mask.raw").read_bytes(), np.uint8).reshape(300, 451)
    assert np.array_equal(mask == 255, np.asarray(Image.open(tmp_path / "png" / "chelsea.mask.png")))

    one = _craftai(matte_server.address, "remove-background", str(photos["chelsea.png"]), "-o", str(tmp_path / "c.raw"))
    assert one.returncode == 0 and (tmp_path / "c.raw").stat().st_size == 451 * 300 * 4  # the cutout, raw
    assert "cutout 451x300 RGBA, 4 bytes a pixel" in one.stdout.decode()
