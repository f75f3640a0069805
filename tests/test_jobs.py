"""Job kinds over one server session (lorabench.jobs, lorabench.session): each kind run end to end by ``run_job``
against the fake server behind a toy engine (its process started, waited ready and stopped by the session), the
files each writes, the files of a job that cannot run here, and the burst row's record against committed rows."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

import lorabench.session as session_module
from lorabench.engines import ServerSettings, ServerSpec
from lorabench.engines import base as engines_base
from lorabench.engines.vllm import VLLM
from lorabench.io import open_stored, read_json, read_jsonl, write_json
from lorabench.job import JobInputs, PrefixCache, RuntimeLoad, ServerJob
from lorabench.jobs import JobKind, run_job
from lorabench.loadtest import LoadTest
from lorabench.measure.burst import BURST_SCHEMA, Burst
from lorabench.measure.sweep import OverSaturation, Slo, SweepSettings
from lorabench.prefix_cache import PrefixCaching
from lorabench.rate_sweep import RateSweep
from lorabench.runtime_load import RuntimeLoading

from .conftest import ROOT, STUDIES

FAKE_SERVER = ROOT / "tests" / "support" / "fake_server.py"


class Toy(VLLM):
    """The fault-injection server (run as a script) behind vLLM's interface: its requests, adapter loading and
    metric names are vLLM's, its command runs the script."""

    name = "toy"
    server_markers = ()

    def command(self, spec: ServerSpec, host: str, port: int) -> list[str]:
        return [spec.python, str(FAKE_SERVER), "--host", host, "--port", str(port), *spec.args.get("fake", [])]

    def version_code(self) -> str:
        return "print('1.0')"


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The toy engine registered; the device lock of this test's own (other jobs of the machine, real servers
    included, are none of its business)."""
    monkeypatch.setitem(engines_base._REGISTRY, "toy", Toy)
    monkeypatch.setenv("LORABENCH_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setattr(session_module, "all_server_markers", lambda: ())


RSET = {
    "prompt": "x",
    "max_tokens": 8,
    "temperature": 0.0,
    "ignore_eos": True,
    "sets": {f"base/{b}": [{"request_id": f"base-{b}-{i}", "adapter": "base"} for i in range(b)] for b in (2, 4)},
}


def job_of(tmp_path: Path, adapters: dict[str, str] | None = None, fake: list[str] | None = None, **kw: Any):
    """A toy server's job (no CPU pinning: the test process keeps its CPUs) and its inputs."""
    lora = bool(adapters)
    settings = ServerSettings(server_id="toy-1", engine="toy", served_name="m", lora=lora, args={"fake": fake or []})
    kw.setdefault("repetitions", 2)
    kw.setdefault("max_repetitions", 2)
    job = ServerJob(
        server=settings, conditions=["base"], bursts=[2], hardware="cpu", harness={"pin": "off"}, warmup_bursts=1,
        readiness_timeout_s=60, **kw,
    )  # fmt: skip
    write_json(tmp_path / "requests.json", RSET)
    spec = ServerSpec(**{**settings.__dict__, "python": sys.executable, "model_path": "/m", "adapters": adapters or {}})
    return job, JobInputs(spec, str(tmp_path / "requests.json"), dict(adapters or {}), "1.0")


def _out(tmp_path: Path, kind: JobKind) -> Path:
    return tmp_path / "results" / kind.folder / "toy-1"


@pytest.mark.integration
def test_the_load_test_writes_its_four_files_and_the_server_log(tmp_path: Path, toy: None):
    job, inputs = job_of(tmp_path)
    kind = LoadTest()
    out = _out(tmp_path, kind)
    result = run_job(kind, job, inputs, out)
    assert result is not None
    assert sorted(p.name for p in out.iterdir() if p.name != "server.pid") == sorted([*kind.files, "server.log"])
    rows = list(read_jsonl(out / "measurements.jsonl"))
    measured = [r for r in rows if not r["warmup"]]
    assert len(measured) == 2 * 2 and {r["cycle"] for r in measured} == {0, 1}  # two cycles, streamed or not
    assert all(r["schema"] == BURST_SCHEMA and r["n_errors"] == 0 for r in rows)
    assert not any("cycle" in r for r in rows if r["warmup"])  # warm-up rows carry no cycle, as before
    records = list(read_jsonl(out / "records.jsonl"))
    assert len(records) == 2 * len(rows) and {r["measurement_id"] for r in records} == {
        r["measurement_id"] for r in rows
    }
    facts = read_json(out / "facts.json")
    assert facts["status"] == "ok" and facts["server"] == "toy-1" and facts["readiness_s"] > 0
    assert facts["probes"]["models_listed"] == ["m"] and facts["probes"]["cycles"]["cycles"] == 2
    assert facts["timing"]["total_s"] >= facts["timing"]["readiness_s"] + facts["timing"]["measuring_s"]
    assert facts["api_key_required"] is True and facts["per_adapter"][0]["adapter"] == "base"
    assert not (out / "server.log.partial").exists()


@pytest.mark.integration
def test_a_server_started_twice_records_both_starts(tmp_path: Path, toy: None):
    job, inputs = job_of(tmp_path, server_starts=2)
    out = _out(tmp_path, LoadTest())
    run_job(LoadTest(), job, inputs, out)
    facts = read_json(out / "facts.json")
    assert len(facts["readiness_starts_s"]) == 2 and facts["timing"]["stop_s"] > 0
    rows = list(read_jsonl(out / "measurements.jsonl"))
    assert {r["server_start"] for r in rows if not r["warmup"]} == {0, 1}


@pytest.mark.integration
def test_prefix_caching_writes_its_pairs(tmp_path: Path, toy: None):
    job, inputs = job_of(tmp_path, adapters={"a": "/a", "b": "/b"})
    kind = PrefixCaching(PrefixCache(prefix_words=20, repeats=1))
    out = _out(tmp_path, kind)
    run_job(kind, job, inputs, out)
    result = read_json(out / "prefix.json")
    # the fake server reports no cached tokens: the answer is "not reported", never a guess
    assert result["status"] == "ok" and result["cached_tokens_reported"] is False and len(result["pairs"]) == 5
    assert len(list(read_jsonl(out / "records.jsonl"))) == 2 * 5 and (out / "server.log").exists()


def short_sweep() -> RateSweep:
    settings = SweepSettings(
        points=2, max_rate_factor=2.0, warmup_s=0.15, duration_s=0.6, drain_s=0.05, repeats=2, probe_concurrency=8,
        settle_s=0.05, max_send_lag_ms=50.0, max_in_flight=64, over_saturation=OverSaturation(0.9, 2.0, 50.0),
        slo=Slo(ttft_p99_ms=50.0, itl_p99_ms=1000.0), seed=1, request_timeout_s=30.0,
    )  # fmt: skip
    return RateSweep(["base"], {"base": {"adapters": ["base"]}}, settings)


@pytest.mark.integration
def test_the_rate_sweep_writes_its_sweeps_records_and_facts(tmp_path: Path, toy: None):
    from lorabench.capacity import SweepFile

    job, inputs = job_of(tmp_path, fake=["--slots", "4", "--delay", "0.005"])
    kind = short_sweep()
    assert RateSweep.from_json(kind.to_json()) == kind
    out = _out(tmp_path, kind)
    run_job(kind, job, inputs, out)
    assert sorted(p.name for p in out.iterdir() if p.name != "server.pid") == sorted([*kind.files, "server.log"])
    swept = SweepFile.read(out / "sweep.json")
    assert swept.status == "ok" and swept.slo == kind.params.slo and [s.mix for s in swept.sweeps] == ["base"]
    (res,) = swept.sweeps
    assert res.max_rate_per_s > 0 and res.cycles == 2 and len(res.points) == 2 * len(res.fractions)
    # when and on which boot it ran: tables of sweeps from several machines say so
    assert (
        swept.ran["started_utc"].endswith("Z")
        and swept.ran["boot_id"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    )
    records = list(read_jsonl(out / "records.jsonl"))
    assert {r["mix"] for r in records} == {"base"} and all(r["request_id"].startswith("toy-1/sweep/") for r in records)
    facts = read_json(out / "facts.json")
    assert facts["status"] == "ok" and facts["measurement"]["method"] == "rate_sweep" and facts["readiness_s"] > 0
    assert facts["probes"]["models_listed"] == ["m"] and facts["probes"]["canary"] is None


@pytest.mark.integration
def test_a_job_whose_server_cannot_start_leaves_no_output(tmp_path: Path, toy: None):
    job, inputs = job_of(tmp_path, fake=["--no-such-flag"])
    out = _out(tmp_path, LoadTest())
    with pytest.raises(Exception, match="exited"):
        run_job(LoadTest(), job, inputs, out)
    assert not any((out / f).exists() for f in (*LoadTest.files, "server.log"))


@pytest.mark.parametrize(
    "kind",
    [LoadTest(), RuntimeLoading(RuntimeLoad(adapter="c")), PrefixCaching(PrefixCache()), short_sweep()],
    ids=lambda k: k.name,
)
def test_a_job_that_cannot_run_here_says_so_in_every_file(tmp_path: Path, kind: JobKind):
    job, inputs = job_of(tmp_path)
    job.runnable = False
    out = tmp_path / kind.folder
    assert run_job(kind, job, inputs, out) is None
    main, *tables = kind.files
    assert read_json(out / main)["status"] == "not run: needs a GPU"
    assert all(not list(read_jsonl(out / t)) for t in tables if t.endswith(".jsonl"))
    assert (out / "server.log").read_text().startswith("# not run")


def test_kind_params_round_trip():
    for kind in (RuntimeLoading(RuntimeLoad(adapter="c", repeats=2)), PrefixCaching(PrefixCache(prefix_words=9))):
        assert type(kind).from_json(kind.to_json()) == kind
    with pytest.raises(ValueError, match="not of kind 'prefix_cache'"):
        PrefixCaching.from_json(RuntimeLoading(RuntimeLoad(adapter="c")).to_json())


def _text(path: Path) -> str:
    with open_stored(path) as f:
        return f.read()


COMMITTED = [  # measurements.jsonl.gz as studies keep them (a plain one read the same), of the committed studies
    p for p in sorted(STUDIES.glob("*/servers/*/measurements.jsonl*")) if BURST_SCHEMA in _text(p)
]


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: str(p.relative_to(ROOT)))
def test_committed_burst_rows_read_and_write_back_unchanged(path: Path):
    """The burst record keeps every field name and value of ``lorabench.burst/2``: each committed row reads into a
    ``Burst`` and writes back as the same JSON."""
    rows = list(read_jsonl(path))
    assert len(rows) > 10
    for row in rows:
        assert json.dumps(Burst.from_json(row).to_json(), sort_keys=True) == json.dumps(row, sort_keys=True)


def test_the_committed_rows_are_found():
    assert len(COMMITTED) >= 2  # two H200 studies' vLLM servers: the check above cannot pass by finding none
