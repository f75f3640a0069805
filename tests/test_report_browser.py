"""The rendered report opened in headless Chromium: screenshot to PNG, tables and images rendered."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from lorabench.report import render_report
from lorabench.report_model import ReportInputs

from .conftest import FIXTURES, ROOT

RUN = FIXTURES / "cpu-run"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Headless, and quiet on a machine without network (no background connections, no updates, no sync).
HEADLESS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import yaml

    from lorabench.claims import evaluate_file

    out = tmp_path_factory.mktemp("report")
    verdicts = out / "verdicts.json"
    adapters = [str(RUN / f"adapter-{a}.json") for a in "abc"]
    evaluate_file(
        str(ROOT / "config" / "claims.yaml"),
        str(RUN / "summary.json"),
        str(RUN / "model.json"),
        adapters,
        str(verdicts),
        str(ROOT / "config" / "models" / "qwen3-1.7b.json"),
    )
    html = out / "index.html"
    inputs = ReportInputs.read(
        "fixture",
        yaml.safe_load((ROOT / "config" / "config.yaml").read_text()),
        str(RUN / "summary.json"),
        str(verdicts),
        str(RUN / "model.json"),
        adapters,
        [],
    )
    render_report(
        inputs,
        html,
        out / "provenance.json",
        ROOT / "report" / "templates",
        ROOT,
    )
    return html


def test_report_content(report: Path):
    html = report.read_text()
    for section in (
        "Cost of adapters",
        "Adapter slots",
        "Engine comparison",
        "Runtime adapter loading",
        "Server facts",
        "Claims checked",
        "Provenance",
    ):
        assert section in html
    assert "not run: needs a GPU" in html
    assert html.count('<img src="') >= 3
    assert all((report.parent / p).exists() for p in ("throughput_burst4.png", "slot_cliff.png", "ttft.png"))


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (make test installs it)")
def test_report_renders_in_headless_chromium(report: Path, tmp_path: Path):
    png = tmp_path / "report.png"
    dom = subprocess.run(
        [
            CHROMIUM,
            *HEADLESS,
            f"--user-data-dir={tmp_path / 'profile'}",
            "--dump-dom",
            report.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    subprocess.run(
        [
            CHROMIUM,
            *HEADLESS,
            f"--user-data-dir={tmp_path / 'profile2'}",
            "--window-size=1300,2400",
            f"--screenshot={png}",
            report.as_uri(),
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert png.stat().st_size > 50_000
    from PIL import Image

    img = Image.open(png)
    assert img.size == (1300, 2400)
    colors = img.convert("RGB").resize((65, 120)).getcolors(65 * 120)
    assert colors is not None and len(colors) > 20  # not a blank page
    assert dom.stdout.count("<table") >= 6 and dom.stdout.count("<img") >= 3
