"""Where `craftai remove-background` writes each output (craftai.cli.batch.plan): files and folders,
the same tree under OUT, names that would clash, one file or standard output for one picture."""

from __future__ import annotations

from pathlib import Path

import pytest

from craftai.cli.batch import plan


def _tree(root: Path, *names: str) -> None:
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"")


def test_folders_keep_their_tree_under_out_and_files_go_straight_there(tmp_path: Path) -> None:
    photos = tmp_path / "photos"
    _tree(photos, "a.jpg", "trip/b.PNG", "trip/deeper/c.webp", "notes.txt", ".hidden/d.png", "trip/.e.png", "z.ppm")
    _tree(tmp_path, "single.png")
    out = tmp_path / "out"
    pictures = plan([str(photos), str(tmp_path / "single.png")], str(out), ["matte", "cutout"], {"cutout": "webp"})
    targets = {p.label: p.targets for p in pictures}
    assert list(targets) == [
        str(photos / "a.jpg"),
        str(photos / "z.ppm"),
        str(photos / "trip/b.PNG"),
        str(photos / "trip/deeper/c.webp"),
        str(tmp_path / "single.png"),
    ]
    assert targets[str(photos / "trip/deeper/c.webp")] == {
        "matte": out / "trip/deeper/c.matte.png",
        "cutout": out / "trip/deeper/c.cutout.webp",
    }
    assert targets[str(tmp_path / "single.png")]["matte"] == out / "single.matte.png"


def test_names_that_differ_by_their_suffix_keep_it(tmp_path: Path) -> None:
    _tree(tmp_path / "in", "a.jpg", "a.png", "b.png")
    pictures = plan([str(tmp_path / "in")], str(tmp_path / "out"), ["matte"], {})
    assert [p.targets["matte"].name for p in pictures if p.targets["matte"]] == [
        "a.jpg.matte.png",
        "a.png.matte.png",
        "b.matte.png",
    ]


def test_the_output_folder_inside_the_input_folder_is_not_read_again(tmp_path: Path) -> None:
    _tree(tmp_path, "a.png", "out/a.matte.png")
    pictures = plan([str(tmp_path)], str(tmp_path / "out"), ["matte"], {})
    assert [p.label for p in pictures] == [str(tmp_path / "a.png")]


def test_one_picture_to_one_file_or_to_standard_output(tmp_path: Path) -> None:
    _tree(tmp_path, "a.png", "b.png")
    (one,) = plan([str(tmp_path / "a.png")], str(tmp_path / "x.png"), ["matte", "cutout"], {})
    assert one.targets == {"matte": tmp_path / "x.png", "cutout": tmp_path / "x.cutout.png"}
    (piped,) = plan(["-"], "-", ["composite"], {"composite": "jpeg"})
    assert piped.source is None and piped.targets == {"composite": None}
    with pytest.raises(ValueError, match="one file, but there are 2 pictures"):
        plan([str(tmp_path / "a.png"), str(tmp_path / "b.png")], str(tmp_path / "x.png"), ["matte"], {})
    with pytest.raises(ValueError, match="standard output holds one output"):
        plan(["-"], "-", ["matte", "cutout"], {})


def test_a_missing_input_is_kept_to_fail_as_a_picture(tmp_path: Path) -> None:
    (missing,) = plan([str(tmp_path / "nope.png")], str(tmp_path / "out"), ["matte"], {})
    assert missing.source == tmp_path / "nope.png"
