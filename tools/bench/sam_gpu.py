"""SAM 2.1 tiny: this project's torch route against Meta's SAM2ImagePredictor, same weights, same GPU.

    python -m tools.bench.sam_gpu [--device cuda] [--reps 50] [--out DIR]

Weights: the random-weight fixture (craftai_dev.sam21): Meta's model loads its state_dict;
this project's network gets its weights by converting the fixture's encoder.onnx/decoder.onnx, as
the prepare step does. Parity first (per mask IoU of the picture-size masks and predicted-IoU
differences, fp32 and the reduced-precision variants), then median wall-clock times (device
synchronised after each call, as a caller sees them, after warm-up) of:

- encoder alone: the network on a prepared [1,3,1024,1024] input;
- picture set: a 2048x1536 uint8 picture in memory to embedding ready (ours: `encode`; Meta's:
  `set_image`);
- one click / one box: the best mask at the picture's size as a numpy array (ours: `decode`;
  Meta's: `predict(multimask_output=True)` then the best of the three by predicted IoU).

Writes sam_gpu.json and sam_gpu.md (a table) into --out.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from PIL import Image

from craftai_dev import sam_fixture
from craftai_infer.pipelines.segment_sam import SamPrompt
from craftai_infer.routes.sam2_torch import SamTorchRunner
from craftai_models.sam2.model import build_sam21_tiny
from craftai_prepare.converters import sam21
from tools.bench.harness import timed_on

REPO = Path(__file__).resolve().parents[2]
T = TypeVar("T")

WIDTH, HEIGHT = 2048, 1536
CLICK = SamPrompt(points=[(1020, 700)], labels=[1])  # on the 2048x1536 picture; scaled for others
BOX = SamPrompt(box=(500, 300, 1500, 1200))


def scaled(prompt: SamPrompt, width: int, height: int) -> SamPrompt:
    sx, sy = width / WIDTH, height / HEIGHT
    points = [(x * sx, y * sy) for x, y in prompt.points]
    box = (
        None if prompt.box is None else (prompt.box[0] * sx, prompt.box[1] * sy, prompt.box[2] * sx, prompt.box[3] * sy)
    )
    return SamPrompt(points=points, labels=prompt.labels, box=box)


# name -> (encoder autocast, TF32 matmuls, CUDA graphs)
VARIANTS: dict[str, tuple[torch.dtype | None, bool, bool]] = {
    "fp32-eager": (None, False, False),
    "fp32": (None, False, True),
    "tf32": (None, True, True),
    "bf16": (torch.bfloat16, False, True),
    "fp16": (torch.float16, False, True),
}


def picture(width: int = WIDTH, height: int = HEIGHT) -> np.ndarray:
    from craftai_dev.samples import photos

    image = Image.open(photos()["astronaut.png"]).convert("RGB").resize((width, height), Image.Resampling.BICUBIC)
    return np.asarray(image)


def iou(a: np.ndarray, b: np.ndarray) -> float:
    union = np.logical_or(a, b).sum()
    return 1.0 if union == 0 else float(np.logical_and(a, b).sum() / union)


def meta_best(predictor: Any, prompt: SamPrompt) -> tuple[np.ndarray, float]:
    kwargs: dict[str, Any] = {"multimask_output": True}
    if len(prompt.points):
        kwargs["point_coords"] = np.asarray(prompt.points, dtype=np.float32)
        kwargs["point_labels"] = np.asarray(prompt.labels, dtype=np.int32)
    if prompt.box is not None:
        kwargs["box"] = np.asarray(prompt.box, dtype=np.float32)
    masks, ious, _ = predictor.predict(**kwargs)
    best = int(np.argmax(ious))
    return masks[best] > 0, float(ious[best])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--out", type=Path, default=REPO / "out" / "bench")
    parser.add_argument("--picture", default=f"{WIDTH}x{HEIGHT}", help="picture size WxH")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"from {', '.join(VARIANTS)}")
    options = parser.parse_args(argv)
    device = torch.device(options.device)
    options.out.mkdir(parents=True, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    files = sam_fixture.fixture()
    meta_model = sam_fixture.reference_model(files.weights).to(device)
    predictor = sam_fixture.reference_predictor(meta_model)
    state = sam21.convert(sam21.load_onnx(files.encoder), sam21.load_onnx(files.decoder))
    net = build_sam21_tiny(state).to(device).eval()
    width, height = (int(v) for v in options.picture.split("x"))
    pic = picture(width, height)
    click, box = scaled(CLICK, width, height), scaled(BOX, width, height)

    results: dict[str, Any] = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "picture": options.picture,
        "variants": {},
    }
    # a run of one call without warm-up (the tiny check) times the picture set each side makes for
    # its answers rather than making it again: an encoder run less each
    one_call = options.reps == 1 and options.warmup == 0
    _, meta_set_ms = timed_answer(lambda: predictor.set_image(pic), device)
    meta_answers = {name: meta_best(predictor, p) for name, p in (("click", click), ("box", box))}

    for variant in options.variants.split(","):
        autocast, tf32, graphs = VARIANTS[variant]
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        runner = SamTorchRunner(net, str(device), encoder_autocast=autocast, graphs=graphs)
        runner.warm_up()
        embedding, set_ms = timed_answer(functools.partial(runner.encode, pic), device)
        row: dict[str, Any] = {}
        for name, prompt in (("click", click), ("box", box)):
            ours = runner.decode(embedding, prompt)
            theirs_mask, theirs_iou = meta_answers[name]
            row[f"{name}_mask_iou"] = iou(ours.masks[0], theirs_mask)
            row[f"{name}_pred_iou_diff"] = abs(float(ours.ious[0]) - theirs_iou)
        row.update(
            time_route(
                runner,
                pic,
                embedding,
                (click, box),
                reps=options.reps,
                warmup=options.warmup,
                set_ms=set_ms if one_call else None,
            )
        )
        results["variants"][variant] = row
        print(variant, json.dumps(row), flush=True)

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    meta_input = predictor._transforms(pic)[None].to(device)  # what set_image feeds the network
    with torch.inference_mode():
        results["meta_encoder_ms"] = timed_on(
            lambda: meta_model.forward_image(meta_input), options.reps, options.warmup, device
        )
    results["meta_set_ms"] = (
        meta_set_ms if one_call else timed_on(lambda: predictor.set_image(pic), options.reps, options.warmup, device)
    )
    results["meta_click_ms"] = timed_on(lambda: meta_best(predictor, click), options.reps, options.warmup, device)
    results["meta_box_ms"] = timed_on(lambda: meta_best(predictor, box), options.reps, options.warmup, device)

    (options.out / "sam_gpu.json").write_text(json.dumps(results, indent=2))
    lines = [
        f"SAM 2.1 tiny on {results['device']} (torch {results['torch']}), picture {results['picture']}, "
        f"median of {options.reps} after {options.warmup} warm-up",
        "",
        "| run | encoder alone ms | picture set ms | click ms | box ms | click mask IoU vs Meta | box mask IoU vs Meta "
        "| pred-IoU diff (max) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for variant, row in results["variants"].items():
        lines.append(
            f"| ours {variant} | {row['ours_encoder_ms']:.2f} | {row['ours_set_ms']:.2f} | {row['ours_click_ms']:.2f} "
            f"| {row['ours_box_ms']:.2f} | {row['click_mask_iou']:.4f} | {row['box_mask_iou']:.4f} "
            f"| {max(row['click_pred_iou_diff'], row['box_pred_iou_diff']):.1e} |"
        )
    lines.append(
        f"| Meta SAM2ImagePredictor fp32 | {results['meta_encoder_ms']:.2f} | {results['meta_set_ms']:.2f} "
        f"| {results['meta_click_ms']:.2f} | {results['meta_box_ms']:.2f} | 1 | 1 | 0 |"
    )
    (options.out / "sam_gpu.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def timed_answer(fn: Callable[[], T], device: torch.device) -> tuple[T, float]:
    """`fn`'s answer and the ms it took, the device synchronised (one call, no warm-up)."""
    started = time.perf_counter()
    answer = fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return answer, (time.perf_counter() - started) * 1000


def time_route(
    runner: SamTorchRunner,
    pic: np.ndarray,
    embedding: Any,
    prompts: tuple[SamPrompt, SamPrompt],
    *,
    reps: int,
    warmup: int,
    set_ms: float | None = None,
) -> dict[str, float]:
    """The route's times; `set_ms`, the picture set already timed, is not measured again."""
    click, box = prompts
    x = runner.preprocess(pic)

    def encoder_alone() -> Any:
        with torch.inference_mode():
            if runner._encoder_graphs is not None:
                return runner._encoder_graphs.run(1, [x])
            return runner._encode_network(x)

    device = runner.device
    return {
        "ours_encoder_ms": timed_on(encoder_alone, reps, warmup, device),
        "ours_set_ms": set_ms if set_ms is not None else timed_on(lambda: runner.encode(pic), reps, warmup, device),
        "ours_click_ms": timed_on(lambda: runner.decode(embedding, click), reps, warmup, device),
        "ours_box_ms": timed_on(lambda: runner.decode(embedding, box), reps, warmup, device),
    }


if __name__ == "__main__":
    raise SystemExit(main())
