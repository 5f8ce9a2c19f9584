"""Screenshots of the page for the README: before (a picture chosen) and after (its background
removed), and, where image.segment is set up, a selection made by a click.

    .venv/bin/python -m tools.web_screenshots                    # its own `craftai serve --web`
    .venv/bin/python -m tools.web_screenshots --url 'http://127.0.0.1:8080/#key=...'

Alone it starts `craftai serve --web` on a fresh store, sets u2netp up there (the real file, from
the catalogue's sources) and writes docs/web-before.png and docs/web-after.png; with --url it uses
that page (and writes docs/web-select.png when its segment route is ready). The browser is
Debian's chromium (craftai_dev.browser).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from craftai_dev.browser import launch
from craftai_dev.samples import photos

REPO = Path(__file__).resolve().parents[1]


def _serve(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """`craftai serve --web` on free ports, u2netp set up; answers the process and the page link."""
    from craftai import AiClient

    ready, web_ready = workdir / "grpc.address", workdir / "web.address"
    env = {
        **os.environ,
        "CRAFTAI_STORE": str(workdir / "store"),
        "CRAFTAI_PORT": "0",
        "CRAFTAI_READY_FILE": str(ready),
        "CRAFTAI_WEB_PORT": "0",
        "CRAFTAI_WEB_READY_FILE": str(web_ready),
    }
    log = (workdir / "serve.log").open("wb")
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "craftai"), "serve", "--web"], env=env, stdout=log, stderr=log
    )
    deadline = time.monotonic() + 60
    while not (ready.exists() and web_ready.exists()):
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"craftai serve --web did not start: {(workdir / 'serve.log').read_text()}")
        time.sleep(0.1)
    with AiClient(app_id="screenshots", target=ready.read_text()) as ai:
        list(ai.setup("image.matte", "u2netp"))
    link = next(
        line.split(" on ", 1)[1]
        for line in (workdir / "serve.log").read_text().splitlines()
        if line.startswith("craftai web: the page")
    )
    return process, link


def shoot(url: str, photo: Path, out: Path) -> list[Path]:
    from playwright.sync_api import sync_playwright

    written = []
    with tempfile.TemporaryDirectory() as profile, sync_playwright() as playwright:
        context = launch(playwright, Path(profile) / "chromium", viewport={"width": 1280, "height": 900})
        page = context.new_page()
        page.goto(url)
        page.wait_for_selector("body[data-ready=true]")
        page.set_input_files("#file", str(photo))
        page.wait_for_selector("#picture-view:not([hidden])")
        written.append(out / "web-before.png")
        page.screenshot(path=str(written[-1]), full_page=True)
        page.click("#remove")
        page.wait_for_selector("body[data-cutout=shown]", timeout=120_000)
        written.append(out / "web-after.png")
        page.screenshot(path=str(written[-1]), full_page=True)
        if page.get_attribute(".route[data-feature='image.segment']", "data-ready") == "true":
            page.click("#select")
            page.wait_for_selector("#select[aria-pressed=true]", timeout=120_000)
            box = page.locator("#marks").bounding_box()
            assert box is not None
            page.mouse.click(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.45)
            page.wait_for_selector("body[data-masks='1']", timeout=60_000)
            written.append(out / "web-select.png")
            page.screenshot(path=str(written[-1]), full_page=True)
        context.close()
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="the page's link (with #key=...); default: start craftai serve --web")
    parser.add_argument("--photo", type=Path, default=None, help="the picture (default: scikit-image's chelsea)")
    parser.add_argument("--out", type=Path, default=REPO / "docs")
    options = parser.parse_args()
    photo = options.photo or photos()["chelsea.png"]
    if options.url:
        written = shoot(options.url, photo, options.out)
    else:
        with tempfile.TemporaryDirectory() as workdir:
            process, link = _serve(Path(workdir))
            try:
                written = shoot(link, photo, options.out)
            finally:
                process.send_signal(signal.SIGTERM)
                process.wait(30)
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
