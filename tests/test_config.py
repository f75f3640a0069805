"""A config with an unknown key, a wrong type or a dangling reference stops before any job, naming the key."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lorabench.config import ConfigError, load_and_check

from .conftest import ROOT

DEFAULT = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


def check(cfg):
    import os

    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        return load_and_check(cfg)
    finally:
        os.chdir(cwd)


def test_default_config_is_valid_and_defaults_are_filled():
    cfg = check(copy.deepcopy(DEFAULT))
    assert cfg["servers"]["lora-2"]["env"] == {}
    assert cfg["conditions"]["ab"]["assignment"] == "cycle"


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda c: c.update(repetitons=3), "repetitons"),
        (lambda c: c["servers"]["lora-2"].update(max_lora=2), "servers.lora-2.max_lora"),
        (lambda c: c.update(repetitions="five"), "repetitions: 'five' is not of type 'integer'"),
        (lambda c: c["adapters"]["a"].update(rank="8"), "adapters.a.rank"),
        (lambda c: c["servers"]["lora-2"].update(engine="vllm-gpu"), "servers.lora-2.engine"),
        (lambda c: c["servers"]["lora-off"].update(conditions=["base", "a"]), "servers.lora-off.conditions"),
        (lambda c: c["conditions"]["ab"].update(adapters=["a", "zz"]), "conditions.ab.adapters"),
        (lambda c: c["baseline"].update(server="nope"), "baseline.server"),
        (lambda c: c["runtime_load"].update(adapter="zz"), "runtime_load.adapter"),
        (lambda c: c["model"].update(path="/x"), "model: give exactly one"),
        (lambda c: c["servers"]["lora-off"].update(max_loras=2), "servers.lora-off.max_loras: only meaningful"),
    ],
)
def test_bad_config_names_the_key(mutate, expected):
    cfg = copy.deepcopy(DEFAULT)
    mutate(cfg)
    with pytest.raises(ConfigError) as e:
        check(cfg)
    assert expected in str(e.value)


def snakemake_dry_run(cfg: dict, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``snakemake -n`` of this repository with ``cfg`` as its config (written to a file under tmp_path)."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    return subprocess.run(
        [str(Path(sys.executable).parent / "snakemake"), "-n", "--configfile", str(bad), "--directory", str(ROOT)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


def test_snakemake_stops_before_any_job(tmp_path: Path):
    cfg = copy.deepcopy(DEFAULT)
    cfg["servers"]["lora-2"]["max_lora"] = 2
    proc = snakemake_dry_run(cfg, tmp_path)
    assert proc.returncode != 0
    assert "servers.lora-2.max_lora" in proc.stdout + proc.stderr
    assert "Job stats" not in proc.stdout


SWEEP = {"servers": ["lora-off", "lora-2"], "mixes": ["base", "ab"], "slo": {"ttft_p99_ms": 500}}


def test_rate_sweep_defaults_and_the_mixes_each_server_sweeps():
    from lorabench.config import rate_sweep_mixes

    cfg = check(copy.deepcopy(DEFAULT) | {"rate_sweep": copy.deepcopy(SWEEP)})
    rs = cfg["rate_sweep"]
    assert (rs["points"], rs["repeats"], rs["over_saturation"]["min_achieved_fraction"]) == (10, 6, 0.9)
    assert rate_sweep_mixes(cfg) == {"lora-off": ["base"], "lora-2": ["base", "ab"]}
    lean = check(copy.deepcopy(DEFAULT) | {"rate_sweep": copy.deepcopy(SWEEP) | {"base_on_lora": False}})
    assert rate_sweep_mixes(lean) == {"lora-off": ["base"], "lora-2": ["ab"]}  # base only where LoRA is off
    from lorabench.measure.sweep import Slo, SweepSettings

    st = SweepSettings.from_config(rs, cfg["workload"]["seed"], cfg["request_timeout_s"])
    assert st.slo == Slo(ttft_p99_ms=500) and st.over_saturation.ttft_growth_factor == 2.0
    assert st.over_saturation.ttft_growth_alpha == 0.001
    assert st.phases.total_s == rs["warmup_s"] + rs["duration_s"] + rs["drain_s"]
    tpot = check(copy.deepcopy(DEFAULT) | {"rate_sweep": copy.deepcopy(SWEEP) | {"slo": {"tpot_p99_ms": 40}}})
    assert SweepSettings.from_config(tpot["rate_sweep"], 0, 60).slo == Slo(tpot_p99_ms=40)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"point": 5}, "unknown key(s): rate_sweep.point"),
        ({"servers": ["nope"]}, "rate_sweep.servers: unknown server 'nope'"),
        ({"mixes": ["zz"]}, "rate_sweep.mixes: unknown condition 'zz'"),
        ({"slo": {}}, "rate_sweep.slo"),
        ({"slo": {"tpot_p99_ms": 0}}, "rate_sweep.slo.tpot_p99_ms"),
        ({"slo": {"tpot_ms": 40}}, "rate_sweep.slo.tpot_ms"),
        ({"points": 1}, "rate_sweep.points"),
        ({"over_saturation": {"min_achieved_fraction": 1.5}}, "rate_sweep.over_saturation.min_achieved_fraction"),
        ({"servers": ["lora-off"], "mixes": ["ab"]}, "rate_sweep.servers: 'lora-off' can serve none"),
        ({"servers": ["lora-2"], "mixes": ["ab", "zz"]}, "rate_sweep.mixes: unknown condition 'zz'"),
        ({"servers": ["lora-2"], "mixes": ["base"], "base_on_lora": False}, "base_on_lora is false"),
    ],
)
def test_bad_rate_sweep_names_the_key(change, expected):
    cfg = copy.deepcopy(DEFAULT) | {"rate_sweep": copy.deepcopy(SWEEP) | change}
    with pytest.raises(ConfigError) as e:
        check(cfg)
    assert expected in str(e.value)


def test_a_key_that_moved_names_what_replaced_it():
    cfg = copy.deepcopy(DEFAULT) | {"bursts_per_measurement": 3, "min_measurement_s": 2.0, "repetitons": 3}
    with pytest.raises(ConfigError) as e:
        check(cfg)
    lines = str(e.value).split("\n  ")
    assert lines[1:] == [
        "unknown key(s): repetitons",  # a typo: nothing to say
        "unknown key(s): bursts_per_measurement (replaced by repetitions, max_repetitions: method v2 measures one "
        "burst of each cell per cycle and repeats cycles, not bursts within a measurement)",
        "unknown key(s): min_measurement_s (replaced by target_points, target_ci_pct: method v2 measures until an "
        "interval is narrow enough, not for a minimum time (up to max_repetitions cycles and max_measuring_s "
        "seconds))",
    ]


def test_a_moved_key_below_a_map_is_found_by_its_path(monkeypatch: pytest.MonkeyPatch):
    from lorabench import config as config_module

    moved = config_module.MovedKey((), "a knob of an earlier version")
    monkeypatch.setitem(config_module.MOVED_KEYS, "servers.ID.old_knob", moved)
    assert config_module.moved_key("servers.lora-2.old_knob") is moved
    assert config_module.moved_key("servers.old_knob") is None and config_module.moved_key("old_knob") is None
    cfg = copy.deepcopy(DEFAULT)
    cfg["servers"]["lora-2"]["old_knob"] = 1
    with pytest.raises(ConfigError, match=r"unknown key\(s\): servers\.lora-2\.old_knob \(removed: a knob of an"):
        check(cfg)
