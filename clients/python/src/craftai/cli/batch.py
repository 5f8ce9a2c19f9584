"""remove-background's batch planner: which pictures the command's inputs name (files, folders
walked recursively, `-`), where each of their outputs goes, and how an output is written (whole
or not at all). No service is called here."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from craftai.outputs import SUFFIXES
from craftai_wire.vocabulary import ImageFormat

PICTURE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".ppm", ".pgm")
STDIO = "-"
FORMAT_OF_SUFFIX: dict[str, ImageFormat] = {
    **{suffix: fmt for fmt, suffix in SUFFIXES.items()},
    ".jpeg": ImageFormat.JPEG,
}


@dataclass(frozen=True)
class Picture:
    """One picture to do: where it comes from, and where each of its outputs goes."""

    label: str  # how the summary names it
    source: Path | None  # None: standard input
    targets: dict[str, Path | None]  # output name -> path; None: standard output


def _walk(folder: Path, skip: Path | None) -> list[Path]:
    """The pictures under a folder, recursively, in name order; hidden names and `skip` (the output
    folder, when it lies inside) left out."""
    found = []
    for root, folders, files in os.walk(folder):
        here = Path(root)
        folders[:] = sorted(
            f for f in folders if not f.startswith(".") and (skip is None or (here / f).resolve() != skip)
        )
        found += [here / f for f in sorted(files) if not f.startswith(".") and f.lower().endswith(PICTURE_SUFFIXES)]
    return found


def plan(inputs: list[str], output: str, names: Sequence[str], formats: Mapping[str, str]) -> list[Picture]:
    """Where every output of every picture goes (usage mistakes raise ValueError).

    Files and `-` (standard input) go straight under OUT; a folder's pictures go under OUT at their
    path inside it (the same tree). Each output is <name>.<output>.<suffix>; pictures whose names
    differ only by their suffix (a.jpg, a.png) keep it (a.jpg.matte.png). OUT may be a file name
    (.png, .webp, .jpg, .raw) for one picture: the first output goes there, the others beside it
    (photo.cutout.png), or `-` (standard output) for one picture and one output.
    """
    out = Path(output)
    skip = out.resolve() if output != STDIO else None
    found: list[tuple[str, Path | None, Path]] = []  # label, source, place under OUT (without suffixes)
    seen: set[Path] = set()
    for given in inputs:
        if given == STDIO:
            found.append(("standard input", None, Path("stdin")))
            continue
        path = Path(given)
        if path.is_dir():
            for picture in _walk(path, skip):
                if picture.resolve() not in seen:
                    seen.add(picture.resolve())
                    found.append((str(picture), picture, picture.relative_to(path)))
        elif path.resolve() not in seen:  # a missing file is kept: it fails as a picture, in plain words
            seen.add(path.resolve())
            found.append((str(path), path, Path(path.name)))
    suffix = {name: SUFFIXES[ImageFormat(formats.get(name, ImageFormat.PNG))] for name in names}
    to_stdout = output == STDIO
    single_file = not to_stdout and out.suffix.lower() in FORMAT_OF_SUFFIX
    if (to_stdout or single_file) and len(found) != 1:
        raise ValueError(f"{output} is one file, but there are {len(found)} pictures: give a folder (-o OUT/)")
    if to_stdout and len(names) != 1:
        raise ValueError(f"standard output holds one output, and {len(names)} are asked: give --outputs with one")
    stems: dict[Path, int] = {}
    for _, _, place in found:
        key = place.with_suffix("")
        stems[key] = stems.get(key, 0) + 1
    pictures = []
    for label, source, place in found:
        if to_stdout:
            targets: dict[str, Path | None] = {names[0]: None}
        elif single_file:
            first, *others = names
            targets = {first: out, **{n: out.with_name(f"{out.stem}.{n}{suffix[n]}") for n in others}}
        else:
            base = place.name if stems[place.with_suffix("")] > 1 else place.stem
            targets = {n: out / place.parent / f"{base}.{n}{suffix[n]}" for n in names}
        pictures.append(Picture(label, source, targets))
    return pictures


def write_output(target: Path | None, data: bytes) -> None:
    """The file appears whole or not at all (a partial file would count as done next time)."""
    if target is None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.part")
    try:
        part.write_bytes(data)
        os.replace(part, target)
    finally:
        part.unlink(missing_ok=True)
