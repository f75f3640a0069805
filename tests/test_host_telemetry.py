"""Host telemetry: the engine's CPU time per measurement window, read from /proc (no server needed)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lorabench.resources import CLOCK_TICKS, HostTelemetry, cpu_identity, cpu_share, machine_facts, other_machines
from lorabench.summary import summarize_cell

from .support.scripts import benchmark
from .test_gpu_telemetry import measured_cell

ROOT = Path(__file__).parents[1]
MEASURED = ROOT / "tests/fixtures/h200-v1/sglang-lora-2.jsonl"  # see tests/test_gpu_telemetry.py

# One spinning thread beside four idle ones, as an engine's scheduler loop beside its helper threads, all on the
# last CPU this process may use.
LAST_CPU = max(os.sched_getaffinity(0))
SPIN = (
    f"import os, threading, time\nos.sched_setaffinity(0, {{{LAST_CPU}}})\n"
    "for _ in range(4): threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
    "print('started', flush=True)\nt = time.time() + 30\nwhile time.time() < t: pass\n"
)


def started(code: str) -> subprocess.Popen:
    """A process running ``code`` in its own group, once the code has printed its first line: its start-up (the
    interpreter, its threads' start) stays out of the window, which a fixed wait may not cover on a busy host (one
    fresh clone, with a fixed 0.3 s, saw the spinning thread wait 9.9 times a second: its start-up, most likely)."""
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline()
    return proc


def watched(code: str) -> dict:
    """HostTelemetry's window of one second over a process running ``code`` in its own group."""
    proc = started(code)
    try:
        host = HostTelemetry(proc.pid)
        time.sleep(0.3)
        a = host.snapshot()
        time.sleep(1.0)
        return host.window(a, host.snapshot())
    finally:
        proc.kill()
        proc.wait()


def test_a_busy_engine_thread_is_seen():
    # A stand-in for an engine's scheduler loop: one process in its own group, spinning on one thread.
    got = watched(SPIN)
    assert got["engine_top_thread"].startswith("python") and got["engine_top_thread_pct"] > 30
    # each thread's own CPU time, not its process's (five threads, one CPU's worth in all)
    assert 0.3 < got["engine_cpus"] <= 1.2 and got["engine_top_thread_preempted_per_s"] >= 0
    assert 0 <= got["host_steal_pct"] <= 100 and got["host_busy_cpus"] > 0.3
    # this process slept through the window: the client's own share is small
    assert 0 <= got["client_cpu_pct"] < 30 and got["client_preempted_per_s"] >= 0
    # the spinning thread stayed on its one CPU, never waited by itself, and that CPU's own steal is a share
    assert got["engine_top_thread_cpu"] == str(LAST_CPU) and got["engine_top_thread_waits_per_s"] < 5
    assert 0 <= got["engine_top_cpu_steal_pct"] <= 100
    if Path("/proc/self/sched").exists():  # kernels that keep scheduler statistics
        assert got["engine_top_thread_migrations_per_s"] == 0


def test_a_thread_that_sleeps_between_work_is_seen_waiting():
    # a loop that works a little and sleeps 1 ms: hundreds of waits a second, where a spinning one has none
    code = (
        "import time\nprint('started', flush=True)\n"
        "t = time.time() + 10\nwhile time.time() < t:\n    sum(range(20000)); time.sleep(0.001)\n"
    )
    got = watched(code)
    assert got["engine_top_thread_waits_per_s"] > 100


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_a_thread_moved_to_another_cpu_is_seen():
    first, last = min(os.sched_getaffinity(0)), LAST_CPU
    proc = started(SPIN.replace(f"{{{LAST_CPU}}}", f"{{{first}}}"))
    try:
        host = HostTelemetry(proc.pid)
        time.sleep(0.3)
        a = host.snapshot()
        time.sleep(0.3)
        for tid in os.listdir(f"/proc/{proc.pid}/task"):  # every thread of it moved to the other CPU
            os.sched_setaffinity(int(tid), {last})
        time.sleep(0.3)
        got = host.window(a, host.snapshot())
    finally:
        proc.kill()
        proc.wait()
    assert got["engine_top_thread_cpu"] == f"{first}>{last}"
    if "engine_top_thread_migrations_per_s" in got:
        assert got["engine_top_thread_migrations_per_s"] > 0


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
    row = summarize_cell(ms).to_json()
    assert row["engine_top_thread_pct_median"] == 85.0 and row["engine_top_thread_pct_throughput_corr"] < -0.5
    assert row["host_steal_pct_median"] == 0.0 and row["host_steal_pct_throughput_corr"] is None
    # the GPU's busy share was recorded on the H200 (GpuTelemetry); it rose and fell with throughput there
    assert row["gpu_util_pct_median"] > 0 and row["gpu_util_pct_throughput_corr"] is not None
    assert "engine_cpus_median" not in row
    # a cell that misses its target, whose engine thread kept a CPU full throughout, is said to be bound by it
    ms["m_engine_top_thread_pct"] = [99.5, 100.2, 99.8, 100.0]
    ms["m_engine_top_thread"] = "VLLM::EngineCor"
    bound = summarize_cell(ms, target_pct=0.1).to_json()
    assert bound["engine_top_thread_pct_min"] == 99.5 and bound["engine_top_thread"] == "VLLM::EngineCor"
    assert "the engine's busiest thread (VLLM::EngineCor) kept one CPU full" in bound["spread_reason"]
    # SGLang's scheduler polls for work (no --sleep-on-idle): its full CPU is its loop, not a bound
    ms["m_engine_top_thread"] = "sglang::schedul"
    assert "kept one CPU full" not in summarize_cell(ms, target_pct=0.1).to_json()["spread_reason"]
    ms["m_engine_top_thread"] = "VLLM::EngineCor"
    ms["m_engine_top_thread_pct"] = [99.5, 100.2, 60.0, 100.0]  # not in every measurement
    assert "kept one CPU full" not in summarize_cell(ms, target_pct=0.1).to_json()["spread_reason"]


def _slow_states():
    return benchmark("slow_states")


def test_slow_states_groups_measurements_by_the_busiest_threads_cpu(tmp_path):
    # Committed H200 measurements with a made-up CPU per measurement: those on CPU 9 were the slow ones.
    rows = [json.loads(line) for line in (ROOT / "tests/fixtures/h200-v1/sglang-lora-4.jsonl").open()]
    rows = [r for r in rows if not r.get("warmup") and not r.get("n_errors")][:60]
    meds: dict[tuple, list[float]] = {}
    for r in rows:
        meds.setdefault((r["condition"], r["burst"]), []).append(r["throughput_tok_s"])
    for r in rows:
        slow = r["throughput_tok_s"] < statistics.median(meds[(r["condition"], r["burst"])])
        r["metrics"]["engine_top_thread_cpu"] = "9" if slow else "4"
    rows[0]["metrics"]["engine_top_thread_cpu"] = "4>9"
    path = tmp_path / "measurements.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = _slow_states().report(path)
    i = lines.index("  busiest engine thread's CPU: measurements, median deviation from their cell's median")
    names = [ln.split()[0] + (" " + ln.split()[1] if ln.split()[0] == "cpu" else "") for ln in lines[i + 1 : i + 4]]
    assert names[0] == "cpu 9" and set(names[1:]) == {"cpu 4", "moved"}
    assert float(lines[i + 1].split()[-2]) < 0


def test_paired_ratios_compares_pairing_with_not_pairing(tmp_path):
    mod = benchmark("paired_ratios")
    # a slow drift shared by measurements taken one after the other: the paired ratio is exact, unpaired is not
    rows = []
    for rep in range(12):
        drift = 1.0 + 0.1 * (rep % 4)
        for k, (cond, tok) in enumerate((("base", 1000.0), ("a", 800.0))):
            row = {"condition": cond, "burst": 8, "rep": rep, "order": 2 * rep + k, "throughput_tok_s": tok * drift}
            rows.append({**row, "n_errors": 0, "server_start": 0})
    path = tmp_path / "srv" / "measurements.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    c = mod.compare(*(mod.cells(path)[(k, 8)] for k in ("a", "base")))
    assert c["pairs"] == 12 and abs(c["p_ratio"] + 20) < 1e-9 and abs(c["p_hi"] - c["p_lo"]) < 1e-9
    assert c["hi"] - c["lo"] > 20  # the span of two drifting cells
    lines = mod.report(path)
    assert lines[-2].startswith("  median width in points: unpaired span")
    assert lines[-1].startswith("  A/A (interleaved halves of one cell): ") and " of 2 paired" in lines[-1]


def test_cpu_share_and_machines_from_what_was_read():
    """The load tests' and the sweeps' front-end share come from one formula; a missing read gives none."""
    assert cpu_share(0, 3 * CLOCK_TICKS, 2.0) == 1.5
    assert cpu_share(None, 5, 1.0) is None and cpu_share(1, 5, 0.0) is None
    assert other_machines("a", "b") and not other_machines("a", "a") and not other_machines("", "b")


CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC
stepping\t: 1
flags\t\t: fpu sse2 avx2 avx512f avx512bw avx512_vnni avx512_bf16 sha_ni

processor\t: 1
cpu family\t: 99
model name\t: other
flags\t\t: fpu
"""


def test_the_cpu_is_told_apart_by_generation_and_vector_extensions():
    """Two hosts that both say "AMD EPYC" differ in family/model and in the extensions CPU kernels use."""
    ident = cpu_identity(CPUINFO)
    assert ident == {
        "cpu": "AMD EPYC",
        "cpu_id": "cpu family 25 model 17 stepping 1",
        "cpu_isa": ["avx2", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16"],
    }
    assert cpu_identity("") == {"cpu": "", "cpu_id": "", "cpu_isa": []}
    facts = machine_facts()
    assert {"cpu", "cpu_id", "cpu_isa", "boot_id"} <= set(facts) and isinstance(facts["cpu_isa"], list)
