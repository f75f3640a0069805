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

from lorabench.resources import (
    CLOCK_TICKS,
    HostTelemetry,
    cpu_identity,
    cpu_share,
    machine_facts,
    other_machines,
    proc_stat,
)
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
    "for _ in range(4): threading.Thread(target=time.sleep, args=(300,), daemon=True).start()\n"
    "print('started', flush=True)\nt = time.time() + 300\nwhile time.time() < t: pass\n"
)


def started(code: str) -> subprocess.Popen:
    """A process running ``code`` in its own group, once the code has printed its first line: its start-up (the
    interpreter, its threads' start) stays out of the window, which a fixed wait may not cover on a busy host (one
    fresh clone, with a fixed 0.3 s, saw the spinning thread wait 9.9 times a second: its start-up, most likely)."""
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline()
    return proc


def thread_ticks(pid: int) -> int:
    """CPU time (clock ticks) of the busiest thread of process ``pid`` so far."""
    ticks = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        stat = proc_stat(pid, int(tid))
        if stat:
            ticks.append(int(stat[11]) + int(stat[12]))
    return max(ticks, default=0)


def run_for(pid: int, cpu_s: float, since: int, deadline_s: float = 120.0) -> None:
    """Wait until the busiest thread of ``pid`` has had ``cpu_s`` seconds of CPU time more than ``since`` ticks:
    a window as long as the work it holds, not a fixed wall time, which a busy host may give that thread almost
    none of (a one-second window on a 2-core host running engine servers beside it once saw the spinning thread
    get 0.0 % of a CPU)."""
    deadline = time.monotonic() + deadline_s
    while thread_ticks(pid) - since < cpu_s * CLOCK_TICKS:
        assert time.monotonic() < deadline, f"the thread got less than {cpu_s} s of CPU in {deadline_s} s"
        time.sleep(0.1)


def watched(code: str, cpu_s: float) -> tuple[dict, float]:
    """HostTelemetry's window over a process running ``code`` in its own group, while its busiest thread gets
    ``cpu_s`` seconds of CPU time; and the window's length in seconds."""
    proc = started(code)
    try:
        host = HostTelemetry(proc.pid)
        time.sleep(0.3)
        a = host.snapshot()
        run_for(proc.pid, cpu_s, max(ticks[1] for ticks in a["threads"].values()))
        b = host.snapshot()
        return host.window(a, b), b["t"] - a["t"]
    finally:
        proc.kill()
        proc.wait()


def test_a_busy_engine_thread_is_seen():
    # A stand-in for an engine's scheduler loop: one process in its own group, spinning on one thread. The window
    # holds a second of its CPU time, however long a busy host takes to give it that: the figures are checked
    # against the CPU time, not against a share of the wall time.
    got, secs = watched(SPIN, 1.0)
    top = got["engine_top_thread_pct"] / 100 * secs  # the busiest thread's CPU seconds in the window
    assert got["engine_top_thread"].startswith("python") and top >= 0.95
    # each thread's own CPU time, not its process's (five threads, one CPU's worth in all): the process's CPUs are
    # the spinning thread's (its four sleeping threads add nothing), not five times them
    share = got["engine_top_thread_pct"] / 100  # rounded to a thousandth, engine_cpus to a hundredth
    assert share - 0.01 <= got["engine_cpus"] <= 1.2 * share + 0.02
    assert got["engine_top_thread_preempted_per_s"] >= 0
    # the host's busy CPUs hold the spinning thread's (both counted in clock ticks)
    assert 0 <= got["host_steal_pct"] <= 100 and got["host_busy_cpus"] >= 0.8 * got["engine_cpus"] - 0.02
    # this process slept through the window but for its checks every 0.1 s: its own CPU time is small
    assert 0 <= got["client_cpu_pct"] / 100 * secs < 0.3 and got["client_preempted_per_s"] >= 0
    # the spinning thread stayed on its one CPU, never waited by itself, and that CPU's own steal is a share
    assert got["engine_top_thread_cpu"] == str(LAST_CPU) and got["engine_top_thread_waits_per_s"] * secs < 5
    assert 0 <= got["engine_top_cpu_steal_pct"] <= 100
    if Path("/proc/self/sched").exists():  # kernels that keep scheduler statistics
        assert got["engine_top_thread_migrations_per_s"] == 0


def test_a_thread_that_sleeps_between_work_is_seen_waiting():
    # a loop that works a little (well under 2 ms of CPU) and sleeps 1 ms: in half a second of its CPU time, well
    # over a hundred waits, where a spinning thread has none
    code = (
        "import time\nprint('started', flush=True)\n"
        "t = time.time() + 300\nwhile time.time() < t:\n    sum(range(20000)); time.sleep(0.001)\n"
    )
    got, secs = watched(code, 0.5)
    assert got["engine_top_thread_waits_per_s"] * secs > 100


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_a_thread_moved_to_another_cpu_is_seen():
    first, last = min(os.sched_getaffinity(0)), LAST_CPU
    proc = started(SPIN.replace(f"{{{LAST_CPU}}}", f"{{{first}}}"))
    try:
        host = HostTelemetry(proc.pid)
        time.sleep(0.3)
        a = host.snapshot()
        run_for(proc.pid, 0.05, thread_ticks(proc.pid))  # it ran on the first CPU in the window
        for tid in os.listdir(f"/proc/{proc.pid}/task"):  # every thread of it moved to the other CPU
            os.sched_setaffinity(int(tid), {last})
        run_for(proc.pid, 0.05, thread_ticks(proc.pid))  # and then on the other one
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
    b = host.snapshot()
    got = host.window(a, b)
    # half a second of this process's CPU time, however long the host took to give it (not a share of the window)
    assert got["client_cpu_pct"] / 100 * (b["t"] - a["t"]) >= 0.45
    # the fixed piece of work took some time, timed at either end of the window (how long it takes is the host's:
    # benchmarks/, not a test)
    assert a["probe_ms"] > 0 and b["probe_ms"] > 0
    assert got["host_cpu_probe_ms"] == round((a["probe_ms"] + b["probe_ms"]) / 2, 3)


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
