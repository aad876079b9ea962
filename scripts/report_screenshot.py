"""Open HTML reports in Debian's headless Chromium (Playwright) and check that every plot drew.

    python scripts/report_screenshot.py   # docs/images/report.png, from a fresh unfair-tenants run

The browser test (tests/report/test_html_browser.py) uses the same functions. Chromium comes
from the system (`make browser`: apt-get install chromium), never from `playwright install`,
which downloads its own build.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCREENSHOT = ROOT / "docs" / "images" / "report.png"
CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--disable-sync"]
VIEWPORT = {"width": 1100, "height": 1500}
TIMEOUT_MS = 30_000

# How many plots drew something: a plot counts when one of its canvases (Bokeh draws each
# plot on layered canvases inside a shadow root) has a pixel that is not blank.
DRAWN = """() => {
  const canvases = (node) => {
    const found = [...node.querySelectorAll('canvas')];
    for (const el of node.querySelectorAll('*')) {
      if (el.shadowRoot) found.push(...canvases(el.shadowRoot));
    }
    return found;
  };
  const inked = (canvas) => {
    if (!canvas.width || !canvas.height) return false;
    const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
    for (let i = 3; i < data.length; i += 4) if (data[i] !== 0) return true;
    return false;
  };
  return [...document.querySelectorAll('div.plot')].map((div) => canvases(div).some(inked));
}"""


def chromium() -> str | None:
    found = next((path for path in CHROMIUM if Path(path).is_file()), None)
    return found or shutil.which("chromium")


@dataclass
class Checked:
    """What the browser saw: per plot whether it drew, console errors, requests that left
    the file."""

    drawn: list[bool]
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


@contextmanager
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    executable = chromium()
    if executable is None:
        raise FileNotFoundError("no chromium: run `make browser` (apt-get install chromium)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=FLAGS,
                                              headless=True)
        try:
            yield launched
        finally:
            launched.close()


def check(browser: Any, report: Path, screenshot: Path | None = None) -> Checked:
    """Open `report`, refuse every request that would leave the file, wait until every plot
    has drawn (or the timeout), and report what happened."""
    page = browser.new_page(viewport=VIEWPORT)
    url = report.resolve().as_uri()
    checked = Checked([])
    page.on("console", lambda m: m.type == "error" and checked.errors.append(m.text))
    page.on("pageerror", lambda e: checked.errors.append(str(e)))

    def outside(route: Any) -> None:
        if route.request.url != url:
            checked.requests.append(route.request.url)
            route.abort()
        else:
            route.continue_()

    page.route("**/*", outside)
    page.goto(url, wait_until="load")
    with suppress(Exception):  # the timeout: `drawn` below says which plots stayed blank
        page.wait_for_function(f"() => ({DRAWN})().every(Boolean)", timeout=TIMEOUT_MS)
    checked.drawn = page.evaluate(DRAWN)
    if screenshot is not None:
        page.screenshot(path=str(screenshot))
    page.close()
    return checked


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        for command in (["run", "unfair-tenants", "--trace-level", "decisions", "--quiet"],
                        ["report", "out/unfair-tenants", "--html"]):
            subprocess.run([sys.executable, "-m", "blis_simpy", *command], cwd=tmp,
                           check=True, stdout=subprocess.DEVNULL)
        with browser() as chrome:
            checked = check(chrome, Path(tmp) / "out/unfair-tenants/report.html", SCREENSHOT)
    print(f"{SCREENSHOT}: {sum(checked.drawn)} of {len(checked.drawn)} plots drawn, "
          f"{len(checked.errors)} console errors")
    return 0 if all(checked.drawn) and not checked.errors else 1


if __name__ == "__main__":
    sys.exit(main())
