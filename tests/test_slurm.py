"""The default CPU study submitted to a real single-node SLURM cluster through snakemake-executor-plugin-slurm
(profiles/slurm), end to end to the report. The cluster (munged, slurmctld, slurmd from Debian's slurm-wlm and
munge, which `make test` installs) is started here on localhost with a partition whose node has two GPU gres
backed by dummy device files, and no accounting: job states come from squeue (MinJobAge keeps finished jobs).
Its config goes where SLURM's tools look by default (/etc/slurm): the executor plugin clears SLURM_* variables,
SLURM_CONF among them, before its job steps call srun. A config there that this test did not write stops it."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from lorabench.io import read_json

from .conftest import EAGER, seed_cache
from .test_pipeline_e2e import ENV_ROOT, copy_repo

pytestmark = [pytest.mark.slow, pytest.mark.full]
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
DAEMONS = ("munged", "slurmctld", "slurmd")


ETC = Path("/etc/slurm")
MARK = "# written by lorabench tests/test_slurm.py"


def _conf(d: Path) -> Path:
    host = socket.gethostname().split(".")[0]
    ETC.mkdir(parents=True, exist_ok=True)
    if (ETC / "slurm.conf").exists() and MARK not in (ETC / "slurm.conf").read_text():
        pytest.fail(f"{ETC / 'slurm.conf'} exists and is not this test's: not overwriting a real cluster's config")
    for sub in ("state", "spool", "log", "dev"):
        (d / sub).mkdir(exist_ok=True)
    for i in (0, 1):
        dev = d / "dev" / f"gpu{i}"
        if not dev.exists():
            os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))  # a character device, as gres.conf wants
    (ETC / "gres.conf").write_text(f"{MARK}\nNodeName={host} Name=gpu File={d}/dev/gpu[0-1]\n")
    (ETC / "cgroup.conf").write_text(f"{MARK}\nCgroupPlugin=cgroup/v1\nCgroupAutomount=no\n")
    conf = ETC / "slurm.conf"
    conf.write_text(
        "\n".join(
            [
                MARK,
                "ClusterName=lorabench-test",
                f"SlurmctldHost={host}",
                "SlurmctldPort=6917",
                "SlurmdPort=6918",
                "SlurmUser=root",
                "SlurmdUser=root",
                "AuthType=auth/munge",
                f"StateSaveLocation={d}/state",
                f"SlurmdSpoolDir={d}/spool",
                f"SlurmctldPidFile={d}/slurmctld.pid",
                f"SlurmdPidFile={d}/slurmd.pid",
                f"SlurmctldLogFile={d}/log/slurmctld.log",
                f"SlurmdLogFile={d}/log/slurmd.log",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "SchedulerType=sched/builtin",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core",
                "ReturnToService=2",
                # finished and cancelled jobs stay listed for two hours: the run takes 5-11 minutes on 2 cores and
                # the test reads its leftovers' cancellation, done at its start, at its end (600 s was too few once)
                "MinJobAge=7200",
                "GresTypes=gpu",
                "JobAcctGatherType=jobacct_gather/none",
                "AccountingStorageType=accounting_storage/none",
                "MpiDefault=none",
                f"NodeName={host} CPUs={os.cpu_count()} RealMemory=16000 Gres=gpu:2 State=UNKNOWN",
                f"PartitionName=main Nodes={host} Default=YES MaxTime=INFINITE State=UP",
                "",
            ]
        )
    )
    return conf


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    missing = [d for d in DAEMONS if not shutil.which(d)]
    assert not missing, f"{missing} not installed: `make test` installs Debian's slurm-wlm and munge"
    d = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "SLURM_CONF": str(_conf(d))}
    key = Path("/etc/munge/munge.key")
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True)
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        shutil.chown(key, "munge", "munge")
    if subprocess.run(["pgrep", "-x", "munged"], capture_output=True).returncode != 0:
        for p in ("/run/munge", "/var/log/munge", "/var/lib/munge"):
            Path(p).mkdir(parents=True, exist_ok=True)
            shutil.chown(p, "munge", "munge")
        subprocess.run(["sudo", "-u", "munge", "munged"] if shutil.which("sudo") else ["munged", "--force"], check=True)
    subprocess.run(["slurmctld"], env=env, check=True)
    subprocess.run(["slurmd"], env=env, check=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        out = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True).stdout
        if out.strip() in ("idle", "mix", "alloc"):
            break
        time.sleep(1)
    else:
        raise AssertionError(f"SLURM node never idle: {out!r}; logs in {d}/log")
    yield env
    subprocess.run(["scancel", "--user", "root"], env=env, capture_output=True)
    for pidfile in ("slurmd.pid", "slurmctld.pid"):
        p = d / pidfile
        if p.exists():
            subprocess.run(["kill", p.read_text().strip()], capture_output=True)
    time.sleep(2)
    for name in ("slurm.conf", "gres.conf", "cgroup.conf"):
        f = ETC / name
        if f.exists() and MARK in f.read_text():
            f.unlink()


def test_gpu_gres_is_handed_to_jobs(cluster):
    out = subprocess.run(
        ["srun", "-N1", "--gres=gpu:1", "bash", "-c", "echo CUDA=$CUDA_VISIBLE_DEVICES"],
        env=cluster, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0 and "CUDA=0" in out.stdout, out.stderr


def _sbatch(env: dict[str, str], out: Path, *args: str) -> str:
    proc = subprocess.run(
        ["sbatch", "--parsable", f"--output={out}/slurm-%j.out", *args, "--wrap", "sleep 600"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().split(";")[0]


JOB_TABLE = "%i %j %k %T %S %e %Z"  # id, name (run ID), comment (rule), state, start, end, working directory


def _jobs(env: dict[str, str]) -> dict[str, dict[str, str]]:
    out = subprocess.run(
        ["squeue", "--states=all", "-h", "-o", JOB_TABLE], env=env, capture_output=True, text=True, check=True
    ).stdout
    keys = ("id", "name", "comment", "state", "start", "end", "workdir")
    return {f[0]: dict(zip(keys, f, strict=True)) for f in (line.split() for line in out.splitlines())}


def test_default_study_through_slurm_to_the_report(cluster, tmp_path: Path, built_inputs: Path):
    work = copy_repo(tmp_path / "w")
    seed_cache(work, built_inputs)  # the engine's model-inspection record only: every build goes through the cluster
    # The default study's model, adapters, engines and bursts on its 2-slot servers (SGLang's reported as not
    # run), two conditions, 3 repetitions (the whole default study is measured by the end-to-end test; here what
    # matters is that every job goes through the cluster, and CI time is counted).
    cfg = yaml.safe_load((work / "config/config.yaml").read_text())
    cfg["servers"] = {k: v for k, v in cfg["servers"].items() if k in ("lora-2", "sglang-lora-2")}
    cfg["servers"]["lora-2"].update(conditions=["base", "ab"], args={**cfg["servers"]["lora-2"]["args"], **EAGER})
    cfg.pop("runtime_load")
    cfg.update(env_root=ENV_ROOT, server_starts=1, repetitions=3, max_repetitions=3, max_measuring_s=10)
    cfg.update(baseline={"server": "lora-2", "condition": "base"})
    (work / "slurm-study.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    # What a run killed hard leaves behind: a running server job and a queued environment build of this folder,
    # named by an earlier run's ID with the executor's comments. Beside them, jobs the run must leave alone: the
    # same names from another study's folder, and a job in this folder that Snakemake did not submit (held, so
    # that they stay queued without taking the node's CPUs).
    old_run = str(uuid.uuid4())
    other = tmp_path / "other-study"
    other.mkdir()
    logs = tmp_path / "sbatch"
    logs.mkdir()
    leftover = {
        _sbatch(cluster, logs, f"--job-name={old_run}", "--comment=rule_server_loadtest_wildcards_lora-2", f"-D{work}"),
        _sbatch(cluster, logs, f"--job-name={old_run}", "--comment=rule_engine_env_wildcards_vllm-cpu", "--hold",
                f"-D{work}"),
    }  # fmt: skip
    untouched = {
        _sbatch(cluster, logs, f"--job-name={old_run}", "--comment=rule_server_loadtest_wildcards_lora-2", "--hold",
                f"-D{other}"),
        _sbatch(cluster, logs, "--job-name=notebook", "--comment=rule_server_loadtest", "--hold", f"-D{work}"),
    }  # fmt: skip
    deadline = time.monotonic() + 30
    while not any(_jobs(cluster)[i]["state"] == "RUNNING" for i in leftover):
        assert time.monotonic() < deadline, f"the leftover server job never started: {_jobs(cluster)}"
        time.sleep(0.5)
    t0 = time.monotonic()
    proc = subprocess.run(
        # Status checks every few seconds instead of the plugin's 40 s first wait and Snakemake's 10 s rounds.
        [SNAKEMAKE, "--workflow-profile", "profiles/slurm", "--configfile", "slurm-study.yaml",
         "--replace-workflow-config", "--slurm-init-seconds-before-status-checks", "2",
         "--seconds-between-status-checks", "3"],
        cwd=work, env=cluster, capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    print(f"snakemake through SLURM: {time.monotonic() - t0:.0f} s")
    # The job table of the run, to quote: saved beside the study's logs and under the test's folder, and printed.
    table = subprocess.run(
        ["squeue", "--states=all", "-o", JOB_TABLE], env=cluster, capture_output=True, text=True
    ).stdout
    (work / "logs").mkdir(exist_ok=True)
    for f in (work / "logs" / "slurm-jobs.txt", tmp_path / "slurm-jobs.txt"):
        f.write_text(table)
    print(f"SLURM jobs of the run ({tmp_path / 'slurm-jobs.txt'}):\n" + table)
    print("Snakemake's log of the leftovers:\n" + "\n".join(x for x in proc.stderr.splitlines() if "SLURM: " in x))
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = read_json(work / "results/summary/summary.json")
    measured = [r for r in summary["rows"] if r["status"] == "ok"]
    assert len(measured) == 4 and all(r["throughput_median"] > 0 for r in measured)
    assert (work / "results/report/index.html").exists() and (work / "results/bundle/cpu-default.tar.gz").exists()
    jobs = _jobs(cluster)
    ran = [j for j in jobs.values() if _same(j["workdir"], work) and j["id"] not in leftover | untouched]
    # The builds and the server jobs went to the cluster (the light ones ran locally), and finished there.
    assert len(ran) >= 7 and all(j["state"] == "COMPLETED" for j in ran), table
    # The earlier run's leftovers were cancelled (and logged) before this run submitted any job; the others wait.
    assert all(jobs[i]["state"] == "CANCELLED" for i in leftover), table
    assert all(jobs[i]["state"] == "PENDING" for i in untouched), table
    ended = max(jobs[i]["end"] for i in leftover)
    assert all(j["start"] >= ended for j in ran), table
    err = proc.stderr
    for i in leftover:
        assert f"cancelled leftover job {i} " in err, err[-4000:]
        assert err.index(f"cancelled leftover job {i} ") < err.index("has been submitted with SLURM jobid"), err
    assert not any(f"leftover job {i} " in err for i in untouched), err[-4000:]
    subprocess.run(["scancel", *untouched], env=cluster, check=True)


def _same(a: str, b: Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)
