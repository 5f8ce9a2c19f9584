"""docs/PERFORMANCE.md's current tables, made from the benchmarks' raw JSON in docs/figures/.

    .venv/bin/python -m tools.bench.figures           # rewrite the block between the page's markers
    .venv/bin/python -m tools.bench.figures --check   # exit 1 when the page is not what the JSON gives

docs/figures/current.toml names, for each table, the run(s) it is made from (a raw JSON file each)
and what the JSON does not say: the command, the machine, the date, the tree, the floor and what the
fixtures cannot exercise. Each table puts ours and the peer's from the same run on one row. The
page is written by this command only, so that its figures cannot drift from the raw files
(tests/unit/test_performance_page.py runs the check).
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "PERFORMANCE.md"
FIGURES = REPO / "docs" / "figures"
BEGIN = "<!-- figures: written by `python -m tools.bench.figures` from docs/figures/; edit those, not this block -->"
END = "<!-- figures: end -->"

Runs = dict[str, Any]  # run name -> its raw JSON


def _ms(value: float) -> str:
    return f"{value:,.1f}"


def _times(ours: float, theirs: float) -> str:
    """How many times faster ours is (the peer's time over ours)."""
    return f"**{theirs / ours:.2f}x**"


def _stages(stages: dict[str, float]) -> str:
    return ", ".join(f"{name} {_ms(ms)}" for name, ms in stages.items())


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def u2netp_cpu(runs: Runs) -> list[str]:
    r = runs["run"]
    rows = [
        [
            c,
            f"{r['rembg'][c]:.2f}",
            f"{r['ours'][c]:.2f}",
            f"**{r['ratio'][c]:.2f}**",
            f"{r['ratio_in_process'][c]:.2f}",
            f"{r['ours_openvino'][c]:.2f}",
            f"**{r['ratio_openvino'][c]:.2f}**",
        ]
        for c in r["ours"]
    ]
    header = ["clients", "rembg `remove()`, pictures/s", "ours (onnxruntime)", "ours / rembg"]
    header += ["the route in this process / rembg", "ours (openvino, opt-in)", "openvino / rembg"]
    same = "identical" if r["same_output"] else f"within {r['max_abs_diff']}/255"
    return [
        *_table(header, rows),
        "",
        f"Through `craftai serve` against rembg 2.0.86 on the four sample photos: {r['rounds']} interleaved rounds "
        f"of {r['calls_per_round']} calls a client, the rates their medians, a ratio the median of the rounds' "
        f"ratios. The matte against rembg's: onnxruntime {same}; openvino within {r['max_abs_diff_openvino']}/255 "
        f"(smallest IoU of the >0.5 masks {r['min_iou_openvino']:.5f}).",
    ]


def inspyrenet(runs: Runs) -> list[str]:
    net, inproc, grpc = runs["network"]["network_ms"], runs["pipeline"]["inprocess"], runs["grpc"]["matte_grpc"]
    ours, theirs = inproc["calibrated"]["ms"]["p50"], inproc["transparent_background"]
    route = net["ours route bf16 (folded, channels-last, graph)"]["1280"]
    rows = [
        [
            "(1) the network's forward at 1280², fp32, the same weights",
            _ms(net["ours fp32"]["1280"]),
            _ms(net["reference fp32"]["1280"]),
            _times(net["ours fp32"]["1280"], net["reference fp32"]["1280"]),
        ],
        [
            "(1) the same, ours as the route runs it (bf16, BatchNorm folded, channels-last, CUDA graph); theirs "
            "in fp16",
            _ms(route),
            _ms(net["reference fp16"]["1280"]),
            _times(route, net["reference fp16"]["1280"]),
        ],
        [
            f"(2) the whole pipeline in process, {inproc['picture']}, {inproc['calibrated']['refined_tiles']} of "
            f'{inproc["tiles"]} tiles refined; theirs: `Remover.process(type="map")`',
            _ms(ours),
            _ms(theirs["map"]["p50"]),
            _times(ours, theirs["map"]["p50"]),
        ],
        [
            '(2) theirs with the cutout: `Remover.process(type="rgba")` (ours: the outputs below)',
            "-",
            _ms(theirs["rgba"]["p50"]),
            "-",
        ],
    ]
    for size in ("4000x3000", "1280x960"):
        found = grpc[size]
        rows.append(
            [
                f"(3) through gRPC, a {size} JPEG, round trip p50 (the server's stages)",
                f"{_ms(found['round_trip_ms']['p50'])} ({_stages(found['server_stages_ms'])})",
                "no server",
                "-",
            ]
        )
    return _table(["measure (run)", "ours, ms", "transparent-background, ms", "ours faster"], rows)


def birefnet(runs: Runs) -> list[str]:
    net, pipeline = runs["run"]["network_1024_ms"], runs["run"]["pipeline_ms"]
    rows = [
        [
            f"the network's forward at 1024², {p}",
            _ms(net[f"ours as the route runs it, {p}"]),
            _ms(net[theirs]),
            _times(net[f"ours as the route runs it, {p}"], net[theirs]),
        ]
        for p, theirs in (("fp32", "nobg fp32"), ("fp16", "nobg fp16 autocast"), ("bf16", "nobg bf16 autocast"))
    ]
    for size, found in pipeline.items():
        rows.append([f"the whole pipeline in process, {size} (matte to the host)", _ms(found["in_process"]), "-", "-"])
        rows.append(
            [
                f"through gRPC, {size}, round trip p50: the matte; the matte and the cutout",
                f"{_ms(found['grpc_matte_p50'])}; {_ms(found['grpc_matte_and_cutout_p50'])}",
                "no server",
                "-",
            ]
        )
    if "hr" in runs:  # birefnet-hr's torch route: Swin-L at 2048², fp32
        hr = runs["hr"]
        ours, theirs = hr["forward_ms"]["ours as the route runs it, fp32"], hr["forward_ms"]["nobg fp32"]
        rows.append(["BiRefNet_HR: the network's forward at 2048², fp32", _ms(ours), _ms(theirs), _times(ours, theirs)])
        for size, found in hr["pipeline_ms"].items():
            rows.append(
                [f"BiRefNet_HR: the whole pipeline in process, {size} (matte to the host)", _ms(found), "-", "-"]
            )
    if "general" in runs:  # birefnet-general's and -portrait's torch route: Swin-L at 1024², rembg's steps
        general = runs["general"]["forward_ms"]
        one, two, theirs = (
            general["ours as the route runs it, fp32, one picture"],
            general["ours as the route runs it, fp32, two pictures a call (per picture)"],
            general["nobg fp32, one picture"],
        )
        rows.append(
            [
                "birefnet-general, -portrait (Swin-L): the forward at 1024², fp32, one picture; two a call (each)",
                f"{_ms(one)}; {_ms(two)}",
                _ms(theirs),
                f"{_times(one, theirs)}; {_times(two, theirs)}",
            ]
        )
        found = runs["general"]["pipeline_ms"]
        rows.append(
            [
                "birefnet-general, -portrait: rembg's steps in process, " + "; ".join(found),
                "; ".join(_ms(v) for v in found.values()),
                "-",
                "-",
            ]
        )
    if "dynamic" in runs:  # birefnet-dynamic's torch route: Swin-L at each picture's size, eager
        forward = runs["dynamic"]["forward_ms"]
        sizes = [k.removeprefix("ours fp32 ") for k in forward if k.startswith("ours")]
        ours_ms = [forward[f"ours fp32 {s}"] for s in sizes]
        nobg_ms = [forward[f"nobg fp32 {s}"] for s in sizes]
        found = runs["dynamic"]["pipeline_ms"]
        rows.append(
            [
                f"birefnet-dynamic (Swin-L, eager): the forward, fp32, at {'; '.join(sizes)}; "
                f"in process (device matte) at {'; '.join(found)}",
                "; ".join(_ms(v) for v in ours_ms) + "; in process " + "; ".join(_ms(v) for v in found.values()),
                "; ".join(_ms(v) for v in nobg_ms),
                "; ".join(_times(a, b) for a, b in zip(ours_ms, nobg_ms, strict=True)),
            ]
        )
    return _table(
        ["measure (ours as the route runs it: CUDA graph, BatchNorm folded)", "ours, ms", "nobg, ms", "ours faster"],
        rows,
    )


def outputs(runs: Runs) -> list[str]:
    inproc, grpc = runs["run"]["in_process"], runs["run"]["grpc"]
    estimate = inproc["estimate_ms"]
    ours = estimate["ours, coarse levels on the CPU (the service)"]
    rows = [
        [
            f"the foreground colours' estimation, {inproc['picture']}: ours as the service runs it; theirs on the CPU",
            _ms(ours),
            _ms(inproc["pymatting_cpu_ms"]),
            _times(ours, inproc["pymatting_cpu_ms"]),
        ],
        [
            "the same, blur fusion (Forte & Pitié 2021; for comparison, not served)",
            _ms(estimate["blur fusion (Forte & Pitié 2021)"]),
            "-",
            "-",
        ],
    ]
    matte = grpc["sets"]["matte"]["round_trip_ms"]["p50"]
    for name in ("matte", "cutout", "composite over a colour", "mask", "all four"):
        found = grpc["sets"][name]
        rows.append(
            [
                f"through gRPC, {grpc['picture']}, {name}: round trip p50 (its ratio to the matte alone)",
                f"{_ms(found['round_trip_ms']['p50'])} ({found['round_trip_ms']['p50'] / matte:.2f})",
                "no server",
                "-",
            ]
        )
    header = ["measure (InSPyReNet on cuda)", "ours, ms", "pymatting `estimate_foreground_ml`, ms", "ours faster"]
    return [
        *_table(header, rows),
        "",
        "pymatting's estimation is what transparent-background's `process(type=\"rgba\")` runs for its cutout.",
    ]


def sam_prompts(runs: Runs) -> list[str]:
    r = runs["run"]
    fp16, fp32 = r["variants"]["fp16"], r["variants"]["fp32"]
    rows = [
        [
            name,
            _ms(fp16[f"ours_{key}_ms"]),
            _ms(fp32[f"ours_{key}_ms"]),
            _ms(r[f"meta_{key}_ms"]),
            _times(fp16[f"ours_{key}_ms"], r[f"meta_{key}_ms"]),
        ]
        for name, key in (
            ("the encoder alone", "encoder"),
            (f"a picture set ({r['picture']} in host memory to the embedding on the device)", "set"),
            ("a click (the best mask at the picture's size in host memory)", "click"),
            ("a box", "box"),
        )
    ]
    rows.append(
        [
            "the masks against Meta's (IoU: click, box)",
            f"{fp16['click_mask_iou']:.4f}, {fp16['box_mask_iou']:.4f}",
            f"{fp32['click_mask_iou']:.4f}, {fp32['box_mask_iou']:.4f}",
            "1, 1",
            "-",
        ]
    )
    header = ["measure", "ours, fp16 encoder (the GPU default), ms", "ours, fp32, ms", "Meta, fp32, ms", "ours faster"]
    return _table(header, rows)


def sam_grpc(runs: Runs) -> list[str]:
    r = runs["run"]["sam_grpc"]
    rows = [
        [name, _ms(r[key]["p50"]), _ms(r[key]["p90"])]
        for name, key in (
            ("a click round trip (the best mask's PNG)", "click_round_trip_ms"),
            ("a box round trip", "box_round_trip_ms"),
            ("a picture set (OpenSession round trip)", "picture_set_round_trip_ms"),
        )
    ]
    rates = ", ".join(f"{c}: {v:.0f}" for c, v in r["encoder_pictures_per_s"].items())
    stages = r["server_stages_ms"]
    return [
        *_table([f"measure ({r['picture']})", "p50, ms", "p90, ms"], rows),
        "",
        f"Pictures set per second by concurrency, one client process: {rates}. The server's stages: a click "
        f"{_stages(stages['click'])}; a picture set {_stages(stages['open_session'])} (ms).",
    ]


def segment_everything(runs: Runs) -> list[str]:
    r = runs["run"]
    rows = []
    for case, label in (("auto: meta-defaults", "Meta's defaults"), ("auto: calibrated", "calibrated thresholds")):
        found = r[case]
        rows.append(
            [
                f"{label}: both given the array; masks ours / Meta's / matched {found['ours']} / {found['meta']} / "
                f"{found['meta_matched']}",
                _ms(found["ours_array_open_and_everything_ms"]),
                _ms(found["meta_generate_ms"]),
                f"**{found['speedup_array_vs_array']:.2f}x**",
            ]
        )
        rows.append(
            [
                f"{label}: both from the PNG file",
                _ms(found["ours_open_and_everything_ms"]),
                _ms(found["meta_generate_ms"] + found["meta_png_decode_ms"]),
                f"{found['speedup_file_vs_file']:.2f}x",
            ]
        )
    header = [f"{r['picture']}, points_per_side {r['points_per_side']}", "ours: OpenSession + SegmentEverything, ms"]
    return _table([*header, "Meta: `generate`, ms", "ours faster"], rows)


def load(runs: Runs) -> list[str]:
    report = runs["run"]["report"]
    rows = [
        [name, str(found["count"]), *(f"{found[k]:,.0f}" for k in ("p50_ms", "p95_ms", "p99_ms", "max_ms"))]
        for name, found in sorted(report["rpcs"].items())
    ]
    errors = sum(report["errors"].values()) if report["errors"] else 0
    return [
        *_table(["RPC", "count", "p50 ms", "p95 ms", "p99 ms", "max ms"], rows),
        "",
        f"{report['clients']} clients over {report['apps']} app ids; errors: {errors}; sessions evicted and reopened "
        f"by the SDK: {report['reopened']}. The server's resident memory: {report['rss_baseline_mib']:,.0f} MiB after "
        f"the warm-up, at most {report['rss_max_mib']:,.0f} MiB, within the bound {report['rss_bound_mib']:,.0f} MiB "
        f"(warm-up + session budget {report['session_budget_mib']:.0f} MiB + margin {report['margin_mib']} MiB).",
    ]


def _alone_and_loaded(r: dict[str, Any], call: str) -> list[str]:
    """An interactive call's p50 and p99 alone, then loaded (the fairly bench's run `r`), in ms."""
    alone, loaded = r["alone_ms"][call], r["loaded_ms"][call]
    return [_ms(v) for v in (alone["p50"], alone["p99"], loaded["p50"], loaded["p99"])]


def shared_fairly(runs: Runs) -> list[str]:
    r = runs["run"]
    # the targets: on the 2-core machine both calls; on the GPU machine the click only
    targets = {"click": 3.0} if r["device"].startswith("cuda") else {"click": 3.0, "matte": 2.0}
    rows = []
    for call, words in (("click", "a click (Segment)"), ("matte", "a small matte and cutout (451x300)")):
        ratio = r["p99_loaded_over_alone"][call]
        target = f"<= {targets[call]:g}x" if call in targets else "-"
        rows.append([words, *_alone_and_loaded(r, call), f"**{ratio:.2f}x**", target])
    a = r["arguments"]
    m = r["memory_mib"]
    done = ", ".join(f"{count} {name}" for name, count in sorted(r["bulk_done"].items())) or "none"
    refused = ", ".join(f"{count} {name}" for name, count in sorted(r["bulk_refused"].items())) or "none"
    return [
        *_table(
            [
                "interactive call",
                "alone p50 ms",
                "alone p99 ms",
                "loaded p50 ms",
                "loaded p99 ms",
                "p99 loaded / alone",
                "target",
            ],
            rows,
        ),
        "",
        f"Beside: {a['encoders']} threads of other apps opening sessions, {a['everything']} running segment "
        f"everything ({a['points_per_side']}² points) and {a['large']} asking for cutouts of a "
        f"{a['large_side']}x{a['large_side'] * 3 // 4} picture, {a['rounds']} calls of each kind alone and loaded; "
        f"the bulk clients got done meanwhile: {done} (refused: {refused}). The server's resident memory: "
        f"{m['warm']:,.0f} MiB after the warm-up, {m['peak']:,.0f} MiB at its peak, {m['after']:,.0f} MiB "
        f"{m['settle']:.0f} s after the load ({(r['memory_after_over_warm'] - 1) * 100:+.1f}% of the warm size; "
        "target: within +10%).",
    ]


def shared_fairly_gpu(runs: Runs) -> list[str]:
    """The GPU's runs side by side, one per way of serving (a run's name says which), all of the
    same lease: the click has a target there, the small matte none."""
    rows, beside = [], []
    for name, r in runs.items():
        for call, words in (("click", "a click (Segment)"), ("matte", "a small matte and cutout (451x300)")):
            ratio = f"{r['p99_loaded_over_alone'][call]:.2f}x"
            ratio, target = (f"**{ratio}**", "<= 3x") if call == "click" else (ratio, "-")
            rows.append([name, words, *_alone_and_loaded(r, call), ratio, target])
        seconds = r["loaded_seconds"]
        rates = ", ".join(f"{count / seconds:.1f} {what}/s" for what, count in sorted(r["bulk_done"].items()))
        m = r["memory_mib"]
        beside.append(
            f"{name}: the bulk apps got done {rates} over the {seconds:.0f} s loaded (refused: "
            f"{sum(r['bulk_refused'].values())}); the first process's resident memory {m['warm']:,.0f} MiB warm, "
            f"{m['peak']:,.0f} MiB at its peak, {(r['memory_after_over_warm'] - 1) * 100:+.1f}% "
            f"{m['settle']:.0f} s after."
        )
    a = next(iter(runs.values()))["arguments"]
    header = ["served as", "interactive call", "alone p50 ms", "alone p99 ms", "loaded p50 ms", "loaded p99 ms"]
    return [
        *_table([*header, "p99 loaded / alone", "target"], rows),
        "",
        f"Beside: {a['encoders']} threads of other apps opening sessions and {a['everything']} running segment "
        f"everything ({a['points_per_side']}² points), each app a process of its own, {a['rounds']} calls of each "
        "kind alone and loaded. " + " ".join(beside),
    ]


def replicas(runs: Runs) -> list[str]:
    r = runs["run"]
    rows = []
    for label, kind in (("prompts (clicks)", "clicks"), ("mattes", "mattes")):
        one, two = r[f"1 replica, {kind}"], r[f"2 replicas, {kind}"]
        errors = len(one["errors"]) + len(two["errors"])
        rows.append([f"{label} per second", f"{one['per_second']:.2f}", f"{two['per_second']:.2f}"])
        rows[-1] += [f"{r[f'ratio, {kind}']:.2f}", str(errors)]
    return _table(["8 clients over 2 apps", "1 replica", "2 replicas", "ratio", "errors"], rows)


def rembg_recipes(runs: Runs) -> list[str]:
    r = runs["run"]
    rows = [
        [f"`{name}`, {v['file']}", f"{v['rembg_s']:.2f}", f"{v['ours_s']:.2f}", f"**{v['ours_per_rembg_speed']:.2f}x**"]
        for name, v in r["recipes"].items()
    ]
    header = ["recipe, the file timed", "rembg `remove()`, s a picture", "ours through `craftai serve`"]
    return _table([*header, f"ours faster (median of {r['rounds']} rounds)"], rows)


def cutout(runs: Runs) -> list[str]:
    """The cutout bench on 2 CPU cores (run "run", and "page": the page's click in Chromium) and,
    where a run "gpu" measured it, on the GPU machine beside it (the page's click there: no browser)."""
    measured = [runs["run"], *([runs["gpu"]] if "gpu" in runs else [])]

    def p50_p90(key: str) -> list[str]:
        return [_ms(r["summary"][key][q]) for r in measured for q in ("p50", "p90")]

    server = []
    for r in measured:
        stages = [r["summary"]["stages_ms"][name]["p50"] for name in ("model", "merge", "encode")]
        total = r["summary"]["server_ms"]
        server += [f"{_ms(total['p50'])} ({' + '.join(_ms(v) for v in stages)})", _ms(total["p90"])]
    first = runs["run"]
    clicks = first["summary"]["round_trip_ms"]["n"]
    rows = [
        [
            f"open a {first['settings']['size']} cutout session (matte, SAM's encoder, outputs)",
            *[c for r in measured for c in (_ms(r["open_ms"]), "")],
        ],
        [f"one keep click, round trip ({clicks:.0f} clicks)", *p50_p90("round_trip_ms")],
        ["… the server's part: SAM's decoder + the merge (regions, colours, outputs) + the PNG", *server],
    ]
    if "page" in runs:
        page = runs["page"]["click_to_picture_ms"]
        rows.append(
            [
                f"through the page: a keep click to the new cutout drawn, Chromium ({page['n']:.0f} clicks; the page "
                "asks for the cutout, the matte and the mask)",
                _ms(page["p50"]),
                _ms(page["p90"]),
                *(["not measured (no browser there)", ""] if len(measured) > 1 else []),
            ]
        )
    header = ["through `craftai serve`", "2 CPU cores, p50 ms", "p90 ms"]
    if len(measured) > 1:
        header += ["the GPU machine (run gpu), p50 ms", "p90 ms"]
    return _table(header, rows)


def _frames_peer(r: dict[str, Any]) -> tuple[str, str]:
    """The frames run's peer column and ratio: `rembg b` (u2netp on a CPU) or transparent-background's
    video loop (InSPyReNet), whichever the run measured; "-" for neither."""
    steady = r["ours"]["steady_frames_per_s"]
    for key, name in (("rembg", "`rembg b`"), ("transparent_background", "transparent-background")):
        theirs = r.get(key)
        if theirs is not None:
            overall = r["ratio_frames_per_s"] if key == "rembg" else r["ratio_transparent_background"]
            peer = f"{name}: {theirs['frames_per_s']:.2f} ({theirs['steady_frames_per_s']:.2f})"
            return peer, f"**{overall:.2f}x** ({steady / theirs['steady_frames_per_s']:.2f}x)"
    return "-", "-"


def frames(runs: Runs) -> list[str]:
    """One stream of a video's frames against `rembg b` (its run on the CPU), and ours on a GPU; then
    the fairly bench's runs with a video beside the click (a second table)."""
    rows = []
    clicks = {name: r for name, r in runs.items() if r.get("bench") == "interactive"}
    for name, r in runs.items():
        if name in clicks:
            continue
        size, count = r["settings"]["size"], r["settings"]["frames"]
        answered = "raw pixels" if r["settings"].get("format") == "raw" else "a PNG cutout"
        recipe = r["settings"].get("recipe", "u2netp")
        ours = r["ours"]
        where = "2 CPU cores" if ours["device"] == "cpu" else ours["device"]
        peer, ratio = _frames_peer(r)
        rows.append(
            [
                f"{count} frames of {size}, {recipe}, {answered} each, {where} (run: {name})",
                f"{ours['frames_per_s']:.2f} ({ours['steady_frames_per_s']:.2f})",
                peer,
                ratio,
            ]
        )
        stability = r.get("stability")
        if stability:
            plain, steady = stability["plain"], stability["stabilized"]
            rows.append(
                [
                    f"the matte alone, plain / stabilize {stability['weight']}: flicker on still pixels (levels a "
                    f"frame), frames/s ({name})",
                    f"{plain['flicker_levels']:.2f} / {steady['flicker_levels']:.2f}; {plain['frames_per_s']:.2f} / "
                    f"{steady['frames_per_s']:.2f}",
                    "no such option",
                    "-",
                ]
            )
    header = ["one MatteFrames stream", "ours, frames/s (steady)", "the peer's, frames/s (steady)", "ours / peer"]
    lines = _table(header, rows)
    if clicks:
        beside = []
        for name, r in clicks.items():
            ratio = f"**{r['p99_loaded_over_alone']['click']:.2f}x**"
            beside.append([f"a click (Segment), {name}", *_alone_and_loaded(r, "click"), ratio, "<= 3x"])
        header = ["beside one stream of 1920x1080 frames", "alone p50 ms", "alone p99 ms", "beside p50 ms"]
        lines += ["", *_table([*header, "beside p99 ms", "p99 beside / alone", "target"], beside)]
    return lines


RENDER: dict[str, Callable[[Runs], list[str]]] = {
    "u2netp_cpu": u2netp_cpu,
    "inspyrenet": inspyrenet,
    "birefnet": birefnet,
    "outputs": outputs,
    "sam_prompts": sam_prompts,
    "sam_grpc": sam_grpc,
    "segment_everything": segment_everything,
    "load": load,
    "replicas": replicas,
    "shared_fairly": shared_fairly,
    "shared_fairly_gpu": shared_fairly_gpu,
    "rembg_recipes": rembg_recipes,
    "cutout": cutout,
    "frames": frames,
}


def _section(table: dict[str, Any], figures: Path) -> list[str]:
    runs = {run["name"]: json.loads((figures / run["raw"]).read_text()) for run in table["run"]}
    lines = [f"### {table['title']}", ""]
    lines += [f'<a id="{anchor}"></a>' for anchor in table.get("anchors", [])]
    lines += [""] if table.get("anchors") else []
    lines += [*RENDER[table["id"]](runs), ""]
    several = len(table["run"]) > 1
    for i, run in enumerate(table["run"], 1):
        label = f"Run ({i})" if several else "Run"
        note = f" ({run['note']})" if "note" in run else ""
        lines.append(
            f"- {label}: {run['date']}, tree {run['tree']}, {run['machine']}. `{run['command']}`{note}. "
            f"Raw: [{run['raw']}](figures/{run['raw']})."
        )
    lines.append(f"- Floor: {' '.join(table['floor'].split())}")
    if "caveat" in table:
        lines.append(f"- What the fixtures cannot show: {' '.join(table['caveat'].split())}")
    if table["history"]:
        lines.append("- Before: " + ", ".join(f"[{name}](figures/{name})" for name in table["history"]) + ".")
    return [*lines, ""]


def render(figures: Path = FIGURES) -> str:
    """The block between the page's markers, markers included."""
    manifest = tomllib.loads((figures / "current.toml").read_text())
    lines = [BEGIN, ""]
    for table in manifest["table"]:
        lines += _section(table, figures)
    return "\n".join([*lines, END])


def with_block(page: str, block: str) -> str:
    """`page` with the text between its markers (markers included) replaced by `block`."""
    start, end = page.find(BEGIN), page.find(END)
    if start < 0 or end < start:
        raise ValueError(f"docs/PERFORMANCE.md lacks the markers {BEGIN!r} ... {END!r}")
    return page[:start] + block + page[end + len(END) :]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the page differs from what the JSON gives")
    options = parser.parse_args(argv)
    page = PAGE.read_text()
    made = with_block(page, render())
    if options.check:
        if made != page:
            print(
                "docs/PERFORMANCE.md differs from docs/figures/: run `python -m tools.bench.figures`", file=sys.stderr
            )
            return 1
        return 0
    PAGE.write_text(made)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
