"""Headless Chromium (Debian's package, never a downloaded browser) for the browser tests, and
where their screenshots go: docs/screenshots/ when MLQ_SCREENSHOTS=1 (to refresh the committed
ones), a temporary folder otherwise."""

import os
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-quic",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
]
DOCS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


def screenshot_dir(tmp_path: Path) -> Path:
    folder = DOCS if os.environ.get("MLQ_SCREENSHOTS") == "1" else tmp_path / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def log_in(page, base_url: str, username: str, password: str = "demo") -> None:
    page.goto(f"{base_url}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base_url}/")
