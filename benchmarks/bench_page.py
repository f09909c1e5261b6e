"""Size and opening time of the interactive page (``make bench-page``).

Side by side in one run: a 6-layer x 12-head run over 128 tokens (the packaged all-MiniLM-L6-v2 on
a 126-word text, and a synthetic one of the same shape) written as float16 and float32 pages,
then each float16 page opened ``--repeat`` times in headless chromium (chromium-driver, Selenium).
Opening time = the page's own ``performance.now()`` when its script has drawn the first layer's
12 heatmaps (from navigation start: reading, parsing, decoding the base64, painting), plus the
time to switch to another layer. Targets: at most 4 MB, under 1 s to open.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from attndesk.render.page import (  # noqa: E402 - after the path and platform are set
    MAX_PAGE_BYTES,
    PageTooLarge,
    estimate_page_bytes,
    pretrained_page_maps,
    write_page,
)
from tests.words import WORDS  # noqa: E402


def minilm_maps():
    from attndesk.models import load_pretrained, run_pretrained

    random.seed(1)
    text = " ".join(random.choice(WORDS) for _ in range(126))
    run = run_pretrained(load_pretrained(None), text)
    assert run.length == 128, run.length
    return pretrained_page_maps(run)


def synthetic_maps():
    sys.path.insert(0, os.path.join(ROOT, "tests", "render"))
    from page_helpers import model_page_maps

    return model_page_maps(6, 12, 128)


def open_times(path: Path, repeat: int) -> tuple[list[float], list[float]]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))
    try:
        opened, switched = [], []
        for _ in range(repeat):
            driver.get(path.as_uri())
            opened.append(float(driver.execute_script("return window.attndesk.readyMs")))
            switched.append(
                float(
                    driver.execute_script(
                        "const t = performance.now(); window.attndesk.setLayer(5); return performance.now() - t"
                    )
                )
            )
        return opened, switched
    finally:
        driver.quit()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="attndesk-bench-page-"))
    try:
        print(
            f"{'case':<24}{'precision':>10}{'bytes':>12}{'of 4 MB':>9}{'open median':>13}{'(min-max)':>16}{'layer switch':>14}"
        )
        for name, maps in (("all-MiniLM-L6-v2 x128", minilm_maps()), ("synthetic 6x12x128", synthetic_maps())):
            for precision in ("float16", "float32"):
                try:
                    path = write_page(maps, name, folder / f"{name.split()[0]}_{precision}.html", precision=precision)
                except PageTooLarge:
                    size = estimate_page_bytes(maps, precision)
                    print(
                        f"{name:<24}{precision:>10}{size:>12,}{size / MAX_PAGE_BYTES:>9.2f}   refused (over the limit)"
                    )
                    continue
                size = path.stat().st_size
                opened, switched = open_times(path, args.repeat)
                print(
                    f"{name:<24}{precision:>10}{size:>12,}{size / MAX_PAGE_BYTES:>9.2f}{statistics.median(opened):>10.0f} ms"
                    f"{f'({min(opened):.0f}-{max(opened):.0f})':>16}{statistics.median(switched):>11.0f} ms"
                )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
