"""Shared fixtures. Slow tests start real vLLM (CPU build) servers; they are marked and still run in CI."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))
FIXTURES = ROOT / "tests" / "fixtures"
