#!/usr/bin/env python3
"""Fixing a cutout through the page: from a keep click on the picture to the new cutout drawn, in
Chromium (Debian's, headless, driven by Playwright), against `craftai web` in front of a `craftai
serve` (u2netp's real weights, the SAM 2.1 random-weight fixture), all on this machine.

    .venv/bin/python -m tools.bench.cutout_page --out out/bench/cutout_page.json        # 2048x1536, 10 clicks
    .venv/bin/python -m tools.bench.cutout_page --size 320x240 --clicks 2 --out /tmp/page.json

The picture is tools/bench/cutout.py's (the astronaut with the coffee photo pasted; the click is on
the coffee). The page removes its background, Fix opens the cutout session (not timed), one click
warms the decoder; then each timed click is a keep on the pasted subject followed by an Undo (not
timed), so that every timed click sends a list of one prompt, as the SDK benchmark's do. A click's
time runs from the mouse event Playwright sends to the page's count of cutouts shown
(`body[data-fixed]`) going up, polled on each animation frame: the request, the service's
refinement, the JSON answer read, the PNG decoded and drawn. Its round trip through the gateway
alone is in tools/bench/cutout.py --web.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tools.bench import harness
from tools.bench.cutout import _machine, _size, click, composed

if TYPE_CHECKING:
    from playwright.sync_api import Page

REPO = Path(__file__).resolve().parents[2]


def _fixed(page: Page) -> int:
    return int(page.evaluate("() => Number(document.body.dataset.fixed || 0)"))


def _screen(page: Page, x: float, y: float) -> tuple[float, float]:
    """Where picture pixel (x, y) is on the screen (the marks canvas lies over the picture)."""
    page.locator("#marks").scroll_into_view_if_needed()
    box = page.locator("#marks").bounding_box()
    size = page.evaluate("() => [document.getElementById('marks').width, document.getElementById('marks').height]")
    assert box is not None
    return box["x"] + x * box["width"] / size[0], box["y"] + y * box["height"] / size[1]


def _shown(page: Page, count: int) -> None:
    page.wait_for_function(f"() => Number(document.body.dataset.fixed || 0) >= {count}", polling="raf", timeout=300_000)


def measure(page: Page, picture: Path, size: tuple[int, int], clicks: int) -> dict[str, Any]:
    """The page's removal, fix mode, then the timed clicks (ms each)."""
    started = time.perf_counter()
    page.set_input_files("#file", str(picture))
    page.wait_for_selector("#remove:not([disabled])", timeout=300_000)
    page.click("#remove")
    page.wait_for_selector("body[data-cutout=shown]", timeout=300_000)
    removed_ms = (time.perf_counter() - started) * 1000
    page.wait_for_selector("#fix:not([disabled])")
    before = _fixed(page)
    started = time.perf_counter()
    page.click("#fix")
    _shown(page, before + 1)
    open_ms = (time.perf_counter() - started) * 1000
    print(f"== removed in {removed_ms:.0f} ms, fix mode opened in {open_ms:.0f} ms; warming up", flush=True)
    times = []
    for index in range(-1, clicks):
        count = _fixed(page)
        x, y = _screen(page, *click(size, index))
        started = time.perf_counter()
        page.mouse.click(x, y)
        _shown(page, count + 1)
        took = (time.perf_counter() - started) * 1000
        page.click("#undo")  # back to no prompt: the next click's list is of one
        _shown(page, count + 2)
        if index >= 0:
            times.append(took)
            print(f"  click {index + 1}: {took:.0f} ms to the new cutout drawn", flush=True)
    found = harness.percentiles(times)
    return {
        "removed_ms": round(removed_ms, 1),
        "fix_open_ms": round(open_ms, 1),
        "click_to_picture_ms": {"p50": round(found["p50"], 1), "p90": round(found["p90"], 1), "n": found["n"]},
        "clicks_ms": [round(t, 1) for t in times],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--size", type=_size, default=(2048, 1536), help="the picture's WIDTHxHEIGHT (default 2048x1536)"
    )
    parser.add_argument("--clicks", type=int, default=10, help="timed clicks (default 10)")
    parser.add_argument("--out", type=Path, default=REPO / "out" / "bench" / "cutout_page.json", help="the JSON file")
    args = parser.parse_args(argv)
    if args.clicks < 1:
        parser.error("--clicks must be at least 1")
    from playwright.sync_api import sync_playwright

    from craftai_dev import servers, web
    from tools.bench.load import serve_fixture

    machine = _machine()
    began = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    with harness.scratch("bench-cutout-page-") as work:
        picture = work / "picture.png"
        picture.write_bytes(composed(args.size))
        print("== craftai serve with u2netp and the SAM 2.1 fixture, craftai web, chromium", flush=True)
        command = [sys.executable, "-m", "craftai.cli"]
        with (
            serve_fixture(work / "server") as served,
            servers.running(web.gateway(served.address, work / "gateway", command=command)) as gateway,
            sync_playwright() as playwright,
        ):
            browser = web.launch(playwright, work / "profile", viewport={"width": 1400, "height": 1200})
            try:
                page = browser.new_page()
                page.goto(f"{gateway.address}/#key={servers.ensure_local_key()}")
                page.wait_for_selector("body[data-ready=true]")
                found = measure(page, picture, args.size, args.clicks)
            finally:
                browser.close()
    width, height = args.size
    stats = found["click_to_picture_ms"]
    print(
        f"\n{args.clicks} keep clicks on a {width}x{height} cutout in the page: p50 {stats['p50']:.1f} ms, "
        f"p90 {stats['p90']:.1f} ms from the click to the new cutout drawn"
    )
    report = {
        "benchmark": "cutout_page",
        "date": began,
        "command": " ".join(["tools/bench/cutout_page.py", *(argv if argv is not None else sys.argv[1:])]),
        "machine": machine,
        "settings": {
            "size": f"{width}x{height}",
            "clicks": args.clicks,
            "picture": "astronaut.png with coffee.png pasted",
        },
        **found,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
