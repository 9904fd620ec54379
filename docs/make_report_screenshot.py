"""Render the report of a sample log and save a screenshot of it in headless Chromium.

    PYTHONPATH=. python docs/make_report_screenshot.py [SAMPLE] [OUT.png]

Defaults: audit_samples/replan.jsonl -> docs/report-replan.png (the picture in the README).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pte._replay import write_report  # noqa: E402


def main(argv: list[str]) -> int:
    sample = Path(argv[0]) if argv else REPO / "audit_samples" / "replan.jsonl"
    out = Path(argv[1]) if len(argv) > 1 else REPO / "docs" / f"report-{sample.stem}.png"
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("chromium not found (apt-get install chromium)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="pte-report-") as tmp:
        page = write_report(sample, Path(tmp) / "report.html")
        subprocess.run(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--hide-scrollbars",
                f"--user-data-dir={Path(tmp) / 'profile'}",
                "--window-size=1280,2000",
                f"--screenshot={out.resolve()}",
                page.as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
    print(f"screenshot of the report of {sample.name} saved to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
