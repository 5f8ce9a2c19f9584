"""rembg's recipes against rembg: each recipe through `craftai serve` (onnxruntime) beside rembg's
own session of it on the same file, in one run, interleaved rounds (harness.interleaved).

    CRAFTAI_CPU_THREADS=2 .venv/bin/python -m tools.bench.rembg_recipes --out DIR [--rounds 3]
    python3 -m tools.bench.rembg_recipes --device cuda --torch --recipes u2net_human_seg,... --out DIR

`--device cuda` (the GPU machine, STEPS=rembg_recipes_gpu): rembg's session on onnxruntime's CUDA
provider, ours on the GPU: onnxruntime's CUDA build must be importable (tools/gpu/ort_gpu.sh brings
it there), or the run stops saying so. `--torch` times our torch route of each recipe beside (where
the recipe has one). u2net_human_seg's stand-in is U²-Net, u2net's network, for machines where
u2net's published file cannot be fetched.

u2net is the published file; isnet-general-use and isnet-anime are stand-ins of the published
networks (the references with random weights: the same work per picture); birefnet-general's
stand-in is the Swin-T graph of the same contract (craftai_dev.birefnet_rembg_fixture), not the
published Swin-L network's cost. Writes DIR/rembg_recipes.json.
"""

from __future__ import annotations

import argparse
import functools
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
    if recipe in ("u2net_human_seg", "silueta"):
        from craftai_dev import u2net_fixture

        return u2net_fixture.onnx_files()[recipe], "a stand-in of the published network (U²-Net)"
    if recipe.startswith("isnet"):
        return isnet_fixture.onnx_files()[recipe], "a stand-in of the published network"
    return birefnet_rembg_fixture.onnx_files()[recipe], "a Swin-T stand-in of the contract (not Swin-L's cost)"


def _rembg_providers(device: str) -> list[str]:
    """The providers rembg's sessions are opened with: CUDA first on a GPU, refused plainly where
    the installed onnxruntime cannot give it (its CPU fallback would time the wrong thing)."""
    if device == "cpu":
        return ["CPUExecutionProvider"]
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        raise SystemExit(
            f"onnxruntime {ort.__version__} here has no CUDA provider ({ort.get_available_providers()}): "
            "on the GPU machine bring onnxruntime-gpu with tools/gpu/ort_gpu.sh, then eval its `env`"
        )
    return ["CUDAExecutionProvider", "CPUExecutionProvider"]


def measure(rounds: int, recipes: list[str] | None = None, device: str = "cpu", torch: bool = False) -> dict[str, Any]:
    """Each recipe (all by default) timed against rembg's session of it, `rounds` interleaved rounds,
    on `device`; `torch`: our torch route of each recipe too, where it has one."""
    # pymatting (alpha matting, imported by rembg, never called here) compiles at import without it:
    # ~40 s in a process that finds no numba cache
    os.environ.setdefault("NUMBA_DISABLE_JIT", "1")
    import rembg
    from PIL import Image

    from craftai import AiClient, CraftAiError
    from craftai_dev import stand_ins
    from craftai_dev.samples import photos

    providers = _rembg_providers(device)
    files = {name: _file(name) for name in (recipes or RECIPES)}
    pictures = {name: photos()[name] for name in PHOTOS}
    opened = {name: Image.open(path).convert("RGB") for name, path in pictures.items()}
    results: dict[str, Any] = {"photos": list(PHOTOS), "rounds": rounds, "device": device, "recipes": {}}
    with tempfile.TemporaryDirectory(prefix="rembg-recipes-") as folder:
        work = Path(folder)
        home = work / "rembg-home"
        home.mkdir()
        for name, (path, _what) in files.items():
            (home / f"{name}.onnx").symlink_to(path.resolve())
        os.environ["U2NET_HOME"] = str(home)  # rembg takes a model already in its home folder
        paths = {name: path for name, (path, _what) in files.items()}
        with (
            stand_ins.serving(paths, work / "serve", list(files), {"CRAFTAI_DEVICE": device}) as served,
            AiClient(app_id="bench", target=served.address) as ai,
        ):
            for recipe, (_path, what) in files.items():
                session = rembg.new_session(recipe, providers=providers)

                def theirs(_i: int, session: Any = session) -> Callable[[], object]:
                    return lambda: [rembg.remove(p, session=session, only_mask=True) for p in opened.values()]

                def ours(_i: int, recipe: str = recipe, engine: str = "onnxruntime") -> Callable[[], object]:
                    return lambda: [
                        ai.remove_background(p, outputs="matte", recipe=recipe, engine=engine)
                        for p in pictures.values()
                    ]

                contenders: dict[str, Callable[[int], Callable[[], object]]] = {"rembg": theirs, "ours": ours}
                found: dict[str, Any] = {"file": what, "rembg_providers": session.inner_session.get_providers()}
                if torch:
                    try:
                        list(ai.setup("image.matte", recipe, "torch"))
                        contenders["ours_torch"] = functools.partial(ours, engine="torch")
                    except CraftAiError as e:
                        found["torch"] = f"not timed: {e}"
                run = interleaved(contenders, "rembg", rounds=rounds, calls=1)
                found |= {  # seconds a picture (a call is the photos, one by one)
                    "rembg_s": 1 / run.median_rate("rembg") / len(PHOTOS),
                    "ours_s": 1 / run.median_rate("ours") / len(PHOTOS),
                    "ours_per_rembg_speed": run.median_ratio("ours"),
                    "routes": {r.route.engine: r.device for r in ai.runtime().loaded if r.route.recipe == recipe},
                }
                if "ours_torch" in contenders:
                    found["ours_torch_s"] = 1 / run.median_rate("ours_torch") / len(PHOTOS)
                    found["ours_torch_per_rembg_speed"] = run.median_ratio("ours_torch")
                results["recipes"][recipe] = found
                print(recipe, found, flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--recipes", default="", help="comma-separated (default: all)")
    parser.add_argument(
        "--device", default="cpu", help="cpu, or cuda: rembg on onnxruntime's CUDA provider, ours on the GPU"
    )
    parser.add_argument("--torch", action="store_true", help="our torch route of each recipe too, where it has one")
    options = parser.parse_args(argv)
    options.out.mkdir(parents=True, exist_ok=True)
    found = measure(
        options.rounds, options.recipes.split(",") if options.recipes else None, options.device, options.torch
    )
    (options.out / "rembg_recipes.json").write_text(json.dumps(found, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
