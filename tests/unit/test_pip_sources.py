"""tools/pip_sources.py: the installs through uv come from the places pip's configuration names."""

from __future__ import annotations

from pathlib import Path

from tools.pip_sources import parse, uv_arguments


def test_pips_listing_is_read_with_later_lines_winning() -> None:
    listed = (
        "global.extra-index-url='file:///a/simple https://mirror.example/simple'\n"
        "global.find-links='/old'\n"
        ":env:.find-links='/wheels'\n"
        "global.cert='/etc/ssl/certs/ca-certificates.crt'\n"
        "not a setting\n"
    )
    assert parse(listed) == {
        "extra-index-url": ["file:///a/simple", "https://mirror.example/simple"],
        "find-links": ["/wheels"],
        "cert": ["/etc/ssl/certs/ca-certificates.crt"],
    }


def test_what_does_not_exist_is_left_out_as_pip_leaves_it(tmp_path: Path) -> None:
    wheels, index, constraints = tmp_path / "wheels", tmp_path / "simple", tmp_path / "constraints.txt"
    wheels.mkdir()
    index.mkdir()
    constraints.write_text("torch<=2.14.1\n")
    settings = {
        "extra-index-url": [index.as_uri(), (tmp_path / "missing").as_uri(), "https://mirror.example/simple"],
        "find-links": [str(wheels), str(tmp_path / "gone")],
        "constraint": [str(constraints), str(tmp_path / "none.txt")],
    }
    assert uv_arguments(settings) == [
        "--extra-index-url",
        index.as_uri(),
        "--extra-index-url",
        "https://mirror.example/simple",
        "--find-links",
        str(wheels),
        "--constraint",
        str(constraints),
        "--index-strategy",
        "unsafe-best-match",  # the best version over every index, as pip picks it
    ]


def test_no_configuration_gives_uvs_defaults() -> None:
    assert uv_arguments({}) == []
