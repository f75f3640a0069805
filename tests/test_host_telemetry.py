"""Host telemetry: the engine's CPU time per measurement window, read from /proc (no server needed)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from lorabench.resources import HostTelemetry
from lorabench.summary import summarize_cell

from .test_gpu_telemetry import measured_cell

MEASURED = Path(__file__).parents[1] / "studies/h200-both/servers/sglang-lora-2/measurements.jsonl"

# One spinning thread beside four idle ones, as an engine's scheduler loop beside its helper threads.
SPIN = (
    "import threading, time\n"
    "for _ in range(4): threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
    "t = time.time() + 30\nwhile time.time() < t: pass\n"
)


def test_a_busy_engine_thread_is_seen():
    # A stand-in for an engine's scheduler loop: one process in its own group, spinning on one thread.
    proc = subprocess.Popen([sys.executable, "-c", SPIN], start_new_session=True)
    try:
        host = HostTelemetry(proc.pid)
        time.sleep(0.3)
        a = host.snapshot()
        time.sleep(1.0)
        got = host.window(a, host.snapshot())
    finally:
        proc.kill()
        proc.wait()
    assert got["engine_top_thread"].startswith("python") and got["engine_top_thread_pct"] > 30
    # each thread's own CPU time, not its process's (five threads, one CPU's worth in all)
    assert 0.3 < got["engine_cpus"] <= 1.2 and got["engine_top_thread_preempted_per_s"] >= 0
    assert 0 <= got["host_steal_pct"] <= 100 and got["host_busy_cpus"] > 0.3
    # this process slept through the window: the client's own share is small
    assert 0 <= got["client_cpu_pct"] < 30 and got["client_preempted_per_s"] >= 0


def test_a_busy_client_is_seen():
    host = HostTelemetry(None)
    a = host.snapshot()
    t = time.process_time() + 0.5
    while time.process_time() < t:
        pass
    got = host.window(a, host.snapshot())
    assert got["client_cpu_pct"] > 50
    # the fixed piece of work took some time, and about as long at either end
    assert 0 < got["host_cpu_probe_ms"] < 1000
    assert 0.3 < HostTelemetry.cpu_probe_ms() / got["host_cpu_probe_ms"] < 3


def test_no_engine_and_no_time_give_host_figures_or_nothing():
    host = HostTelemetry(None)
    a = host.snapshot()
    time.sleep(0.05)
    got = host.window(a, host.snapshot())
    assert "engine_cpus" not in got and "host_busy_cpus" in got
    assert host.window(a, a) == {}


def test_cell_reports_what_moves_with_throughput():
    # Four measured rows of a committed H200 cell; the busiest engine thread made busier where throughput is lower.
    ms = measured_cell(MEASURED)
    ms["m_engine_top_thread_pct"] = [99.0, 90.0, 80.0, 70.0]
    ms["m_host_steal_pct"] = 0.0
    row = summarize_cell(ms)
    assert row["engine_top_thread_pct_median"] == 85.0 and row["engine_top_thread_pct_throughput_corr"] < -0.5
    assert row["host_steal_pct_median"] == 0.0 and row["host_steal_pct_throughput_corr"] is None
    # the GPU's busy share was recorded on the H200 (GpuTelemetry); it rose and fell with throughput there
    assert row["gpu_util_pct_median"] > 0 and row["gpu_util_pct_throughput_corr"] is not None
    assert "engine_cpus_median" not in row
