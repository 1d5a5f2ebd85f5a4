"""Screenshots of the web console's main pages (docs/how-to/console.md), taken while `make demo`'s scenario
plays: at 45 s the job list, the queues (jobs waiting for quota) and the clusters (a region stocked out); at
the end the usage report and the page of the spot job preempted and resumed. Needs Playwright and the system's
Chromium (as tests/console):

    python scripts/console_screenshots.py [--out docs/images] [--base-port 29700]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run"]


def main() -> int:
    from playwright.sync_api import sync_playwright

    from zen_dev import demo

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs/images"))
    parser.add_argument("--base-port", type=int, default=29700)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    base = f"http://127.0.0.1:{args.base_port + 12}"
    started = time.monotonic()
    taken: set[str] = set()

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_context(viewport={"width": 1280, "height": 860},
                                   extra_http_headers={"X-Zen-As": "demo"}).new_page()

        def shoot(name: str, path: str) -> None:
            page.goto(base + path)
            page.wait_for_timeout(300)
            page.screenshot(path=str(args.out / f"console-{name}.png"), full_page=False)
            taken.add(name)

        def view(db) -> None:  # called about once a second while the demo plays
            from zen.store import repository

            if time.monotonic() - started > 45 and "jobs" not in taken:
                shoot("jobs", "/jobs")
                shoot("queues", "/queues")
                shoot("clusters", "/clusters")
            if "job" not in taken:
                with db.transaction() as session:
                    spot = repository.get_job(session, "spot-8")
                if spot is not None and spot.status.terminal:
                    time.sleep(6)  # its last output lines and its attempt's usage row
                    shoot("job", "/jobs/spot-8")
                    shoot("usage", "/usage?by=region&window=24h")

        demo.run(home=Path(".zen/screenshots"), base_port=args.base_port, progress=lambda *a: None, view=view)
        browser.close()
    print("took " + ", ".join(sorted(taken)) + f" in {args.out}/")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
