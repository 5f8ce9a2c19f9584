"""rembg's recipes on a CPU, against rembg: each recipe through `craftai serve` (onnxruntime) beside
rembg's own session of it on the same file, in one run, interleaved rounds (harness.interleaved).

    CRAFTAI_CPU_THREADS=2 .venv/bin/python -m tools.bench.rembg_recipes --out DIR [--rounds 3]

u2net is the published file; isnet-general-use and isnet-anime are stand-ins of the published
networks (the references with random weights: the same work per picture); birefnet-general's
stand-in is the Swin-T graph of the same contract (craftai_dev.birefnet_rembg_fixture), not the
published Swin-L network's cost. Writes DIR/rembg_recipes.json.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tools.bench.harness import interleaved

PHOTOS = ("astronaut.png", "chelsea.png")


RECIPES = ("u2net", "isnet-general-use", "isnet-anime", "birefnet-general")


def _file(recipe: str) -> tuple[Path, str]:
    """The recipe's file, and what it is (a stand-in made, or read from the cache, only when asked)."""
    from craftai_dev import birefnet_rembg_fixture, isnet_fixture
    from craftai_dev.files import u2net_onnx, u2netp_onnx

    if recipe == "u2net":
        return u2net_onnx(), "the published file"
    if recipe == "u2netp":  # not in the default set (docs/PERFORMANCE.md has its own table): the tiny check's
        return u2netp_onnx(), "the published file"
    if recipe.startswith("isnet"):
        return isnet_fixture.onnx_files()[recipe], "a stand-in of the published network"
    return birefnet_rembg_fixture.onnx_files()[recipe], "a Swin-T stand-in of the contract (not Swin-L's cost)"


def measure(rounds: int, recipes: list[str] | None = None) -> dict[str, Any]:
    """Each recipe (all by default) timed against rembg's session of it, `rounds` interleaved rounds."""
    # pymatting (alpha matting, imported by rembg, never called here) compiles at import without it:
    # ~40 s in a process that finds no numba cache
    os.environ.setdefault("NUMBA_DISABLE_JIT", "1")
    import rembg
    from PIL import Image

    from craftai import AiClient
    from craftai_dev import stand_ins
    from craftai_dev.samples import photos

    files = {name: _file(name) for name in (recipes or RECIPES)}
    pictures = {name: photos()[name] for name in PHOTOS}
    opened = {name: Image.open(path).convert("RGB") for name, path in pictures.items()}
    results: dict[str, Any] = {"photos": list(PHOTOS), "rounds": rounds, "recipes": {}}
    with tempfile.TemporaryDirectory(prefix="rembg-recipes-") as folder:
        work = Path(folder)
        home = work / "rembg-home"
        home.mkdir()
        for name, (path, _what) in files.items():
            (home / f"{name}.onnx").symlink_to(path.resolve())
        os.environ["U2NET_HOME"] = str(home)  # rembg takes a model already in its home folder
        paths = {name: path for name, (path, _what) in files.items()}
        with (
            stand_ins.serving(paths, work / "serve", list(files)) as served,
            AiClient(app_id="bench", target=served.address) as ai,
        ):
            for recipe, (_path, what) in files.items():
                session = rembg.new_session(recipe)

                def theirs(_i: int, session: Any = session) -> Callable[[], object]:
                    return lambda: [rembg.remove(p, session=session, only_mask=True) for p in opened.values()]

                def ours(_i: int, recipe: str = recipe) -> Callable[[], object]:
                    return lambda: [ai.remove_background(p, outputs="matte", recipe=recipe) for p in pictures.values()]

                run = interleaved({"rembg": theirs, "ours": ours}, "rembg", rounds=rounds, calls=1)
                results["recipes"][recipe] = {  # seconds a picture (a call is the photos, one by one)
                    "file": what,
                    "rembg_s": 1 / run.median_rate("rembg") / len(PHOTOS),
                    "ours_s": 1 / run.median_rate("ours") / len(PHOTOS),
                    "ours_per_rembg_speed": run.median_ratio("ours"),
                }
                print(recipe, results["recipes"][recipe], flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--recipes", default="", help="comma-separated (default: all)")
    options = parser.parse_args(argv)
    options.out.mkdir(parents=True, exist_ok=True)
    found = measure(options.rounds, options.recipes.split(",") if options.recipes else None)
    (options.out / "rembg_recipes.json").write_text(json.dumps(found, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
