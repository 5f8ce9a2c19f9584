"""The SAM 2 decoder on one batch of the automatic mask generator's points, in several variants:
where its time goes and what fusing its layers buys (issue 15's floor; STEPS=fusion).

    python3 -m tools.gpu.decoder_fusion --out DIR [--batch 64] [--budget 420]

The weights are the random SAM 2.1 tiny fixture's (craftai_dev.sam21), the picture's
embedding is the encoder's on a synthetic picture, the points a 32x32 grid's first batch. Every
variant is captured in a CUDA graph the way the route replays it (engines.cuda_graphs) and timed
with CUDA events; its logits and IoUs are compared with fp32's (the share of logits on the other
side of 0 and the largest IoU difference). Variants:

- fp32 and fp16 autocast: the route's decoder as it runs today (`Sam2ImageModel.decode`);
- shared: the no-mask dense embedding kept at batch 1, so the first layer's projections of the
  image are computed once for the batch rather than once per point;
- compiled: `torch.compile` (inductor) of the same function, then captured (fused elementwise
  chains and norms); "autotuned" lets inductor choose its GEMM kernels too;
- two steps (the multimask grid since issue 15's round 7): `attend` (the transformer, the IoU head
  and the hypernetworks) then `predict_masks` (the upscaling and the mask product), each compiled
  as the route compiles them; "first step alone" is what a batch costs where no point has a mask
  above pred_iou_thresh (only the IoUs are compared then).

`--only "name;name"` runs those variants alone (their names exactly as in the table).

Also torch's profile (kernels by CUDA time) of the eager fp16 batch and the compiled one. Writes
decoder_fusion.json and decoder_fusion.md into --out.
"""

from __future__ import annotations

import argparse
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tools.bench import harness
from tools.gpu.timing import times_ms

Decoder = Callable[..., tuple[torch.Tensor, torch.Tensor]]


def network() -> Any:
    from safetensors.torch import load_file

    from craftai_dev import sam21
    from craftai_models.sam2.model import build_sam21_tiny, state_dict_from_meta

    fixture = sam21.ensure_fixture()
    return build_sam21_tiny(state_dict_from_meta(load_file(str(fixture.weights)))).cuda().eval()


def feeds(net: Any, batch: int) -> list[torch.Tensor]:
    from craftai_infer.pipelines import mask_generator
    from craftai_infer.pipelines.segment_sam import grid_point_feeds
    from craftai_infer.pipelines.segment_sam_torch import network_input

    height, width = 768, 1024
    rng = np.random.default_rng(0)
    picture = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    with torch.inference_mode():
        feats_0, feats_1, embed = net.encode(network_input(torch.from_numpy(picture).cuda()))
    points = mask_generator.grid_points(32, height, width)[:batch]
    coords, labels = grid_point_feeds(points, height, width)
    return [
        embed,
        feats_0,
        feats_1,
        torch.from_numpy(coords).cuda(),
        torch.from_numpy(labels).cuda(),
        torch.zeros((batch, 1, 256, 256), device="cuda"),
        torch.zeros((batch,), device="cuda"),
    ]


def shared_decode(net: Any) -> Decoder:
    """`decode` with the no-mask dense embedding at batch 1 (every grid point has no mask input)."""
    from craftai_models.sam2.model import MASK_LOGIT_CLAMP

    def decode(*inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        embed, feats_0, feats_1, coords, labels, mask_input, has_mask = inputs
        sparse = net.prompt_encoder.embed_points(coords, labels)
        dense = net.prompt_encoder.embed_mask(mask_input[:1], has_mask[:1])  # [1, C, 64, 64]
        masks, iou = net.mask_decoder(
            embed,
            net.prompt_encoder.dense_positional_encoding(),
            sparse,
            dense,
            high_res_feats_0=feats_0,
            high_res_feats_1=feats_1,
        )
        return masks[:, 1:].clamp(-MASK_LOGIT_CLAMP, MASK_LOGIT_CLAMP), iou[:, 1:]

    return decode


def reduced(fn: Decoder, dtype: torch.dtype) -> Decoder:
    def run(*inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.autocast("cuda", dtype=dtype):
            masks, iou = fn(*inputs)
        return masks.float(), iou.float()

    return run


def compiled(fn: Decoder, autotune: bool) -> Decoder:
    options: dict[str, str | int | bool | Callable[..., Any]] | None = (
        {"max_autotune": True, "max_autotune_gemm_backends": "ATEN,TRITON"} if autotune else None
    )
    return torch.compile(fn, dynamic=False, fullgraph=False, options=options)


def two_steps(net: Any, dtype: torch.dtype, *, masks: bool) -> Callable[..., tuple[torch.Tensor, ...]]:
    """The route's multimask grid: `attend` and `predict_masks` compiled each (as the route does),
    under autocast; with `masks` False the first step alone (its IoUs)."""
    attend: Callable[..., tuple[torch.Tensor, ...]] = torch.compile(net.attend, dynamic=False)
    predict: Callable[..., torch.Tensor] = torch.compile(net.predict_masks, dynamic=False)

    def run(*inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with torch.autocast("cuda", dtype=dtype):
            cells, hyper, iou = attend(*inputs)
            if not masks:
                return (iou.float(),)
            logits = predict(cells, hyper, inputs[1], inputs[2])
        return logits.float(), iou.float()

    return run


def compare(got: list[torch.Tensor], want: tuple[torch.Tensor, torch.Tensor]) -> dict[str, float]:
    """Against fp32's (masks, IoUs); a variant that answers its IoUs alone is compared on those."""
    wm, wi = want
    if len(got) == 1:
        return {"iou_max_abs_diff": (got[0] - wi).abs().max().item()}
    masks, iou = got
    flipped = ((masks > 0) != (wm > 0)).float().mean().item()
    return {
        "logits_other_side_of_0": flipped,
        "logits_max_abs_diff": (masks - wm).abs().max().item(),
        "iou_max_abs_diff": (iou - wi).abs().max().item(),
    }


def profile(fn: Callable[..., tuple[torch.Tensor, ...]], inputs: list[torch.Tensor]) -> str:
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.inference_mode():
        for _ in range(2):
            fn(*inputs)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=activities) as prof:
            for _ in range(3):
                fn(*inputs)
            torch.cuda.synchronize()
    return str(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=30))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("out/gpu/fusion"))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--budget", type=float, default=420.0, help="seconds: later variants are skipped past it")
    parser.add_argument("--only", default="", help="variants' names, ';' between them")
    options = parser.parse_args(argv)
    options.out.mkdir(parents=True, exist_ok=True)
    from craftai_infer.engines.cuda_graphs import GraphCache

    started = time.monotonic()
    device = torch.device("cuda")
    net = network()
    inputs = feeds(net, options.batch)
    with torch.inference_mode():
        reference = net.decode(*inputs)
    plain = net.decode
    shared = shared_decode(net)
    variants: dict[str, Callable[[], Callable[..., tuple[torch.Tensor, ...]]]] = {
        "fp32": lambda: plain,
        "fp32, shared": lambda: shared,
        "fp16 autocast (the route today)": lambda: reduced(plain, torch.float16),
        "fp16 autocast, shared": lambda: reduced(shared, torch.float16),
        "bf16 autocast, shared": lambda: reduced(shared, torch.bfloat16),
        "compiled fp32, shared": lambda: compiled(shared, False),
        "compiled fp16 autocast": lambda: compiled(reduced(plain, torch.float16), False),
        "compiled fp16 autocast, shared": lambda: compiled(reduced(shared, torch.float16), False),
        "compiled fp16 autocast, shared, autotuned": lambda: compiled(reduced(shared, torch.float16), True),
        "compiled fp16, two steps, every point's masks": lambda: two_steps(net, torch.float16, masks=True),
        "compiled fp16, two steps, first step alone": lambda: two_steps(net, torch.float16, masks=False),
    }
    if options.only:
        names = options.only.split(";")
        unknown = set(names) - set(variants)
        if unknown:
            parser.error(f"no variant named {sorted(unknown)}; the variants: {list(variants)}")
        variants = {k: v for k, v in variants.items() if k in names}
    results: dict[str, Any] = {"batch": options.batch, "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}
    rows = []
    for name, make in variants.items():
        if time.monotonic() - started > options.budget:
            results[name] = {"skipped": f"past the {options.budget:.0f} s budget"}
            rows.append(f"| {name} | skipped (budget) | | | |")
            continue
        try:
            fn = make()
            built = time.monotonic()
            graphs = GraphCache(fn, device, capacity=1)
            with torch.inference_mode():
                out = [t.clone() for t in graphs.run("batch", inputs)]
            first_s = time.monotonic() - built

            def replay(g: GraphCache = graphs) -> None:
                with torch.inference_mode():
                    g.run("batch", inputs)

            samples = times_ms(replay, device, reps=50, warmup=5)
            stats = compare(out, reference)
            results[name] = {"ms": harness.percentiles(samples), "first_call_s": first_s, **stats}
            p = results[name]["ms"]
            flipped = stats.get("logits_other_side_of_0", float("nan"))
            rows.append(
                f"| {name} | {p['p50']:.2f} | {first_s:.1f} | {flipped:.2e} | {stats['iou_max_abs_diff']:.2e} |"
            )
            if name in ("fp16 autocast (the route today)", "compiled fp16 autocast, shared") or "two steps" in name:
                label = name.split(" ")[0] if "two steps" not in name else name.split(", ")[-1].replace(" ", "-")
                (options.out / f"profile-{label}.txt").write_text(profile(fn, inputs))
            del graphs
        except Exception:  # one variant failing must not lose the others' figures
            results[name] = {"error": traceback.format_exc()}
            rows.append(f"| {name} | failed: {traceback.format_exc().splitlines()[-1][:120]} | | | |")
        print(rows[-1], flush=True)
    table = "\n".join(
        [
            f"SAM 2.1 tiny decoder, one batch of {options.batch} grid points, {results['gpu']}, "
            f"torch {torch.__version__}",
            "",
            "| variant | ms (p50, CUDA graph replay) | first call s (compile + capture) | logits on the other side "
            "of 0 vs fp32 | IoU max diff vs fp32 |",
            "|---|---|---|---|---|",
            *rows,
        ]
    )
    harness.write_report(options.out, "decoder_fusion", results, table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
