"""Keep a study's finished server jobs under studies/ and put them back, so a study that needs several stretches
of machine time runs each server job once.

  python dev/study_results.py save RESULTS STUDY_DIR      finished jobs of RESULTS/servers, runtime_load,
                                                            prefix_cache and rate_sweep into STUDY_DIR (the
                                                            measurements, metrics, server logs and per-request
                                                            records gzipped)
  python dev/study_results.py restore STUDY_DIR RESULTS [CONFIG]
                                                            the saved jobs back into RESULTS, as Snakemake's outputs;
                                                            with CONFIG, only jobs measured with that config's
                                                            measurement settings and server flags
  python dev/study_results.py take POLL_DIR STUDY_DIR LOAN  what one loan brought back (a poll's folder as
                                                            engine_stretch.sh pack fills it: KIND-NAME.tgz per
                                                            finished job, meta.tgz) into STUDY_DIR: each job under
                                                            KIND/NAME (replacing one taken before), the engine,
                                                            model and adapter records and the jobs' logs from
                                                            meta.tgz, its machine.txt (or the poll's, from loans
                                                            before 14) as machine-loanLOAN.txt

A job counts as finished when every output exists and its facts say ``status: ok``. Restored outputs have no
Snakemake metadata, so a run with ``--rerun-triggers params input code software-env`` (no mtime) keeps them;
so restore with CONFIG: a saved job whose measurement settings (repetitions, target, minimum duration, bursts)
or server flags differ from CONFIG's is left out and measured again.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))
from estimate_study import JOBS, stale, stale_load, why_stale  # noqa: E402, F401  (the saved-job format lives there)

from lorabench.io import gzip_writer, open_stored, stored  # noqa: E402

DIGITS = {"itl_s": 4, "start_s": 6, "end_s": 6, "ttft_s": 6, "latency_s": 6, "wall_start": 3}


def _compact(line: str) -> str:
    """A per-request record with its times rounded (inter-token latencies to 0.1 ms, the rest to 1 us): the
    measurements' own figures were computed at full precision and are kept as they are."""
    r = json.loads(line)
    for k, d in DIGITS.items():
        v = r.get(k)
        if isinstance(v, list):
            r[k] = [round(x, d) for x in v]
        elif isinstance(v, float) and v == v:
            r[k] = round(v, d)
    return json.dumps(r, separators=(",", ":"), sort_keys=True) + "\n"


def _finished(d: Path, plain: tuple[str, ...], records: str, facts: str) -> bool:
    if not all((d / f).exists() for f in (*plain, records)):
        return False
    return json.loads((d / facts).read_text()).get("status") == "ok"


def save(results: Path, study: Path) -> list[str]:
    saved = []
    for kind, (plain, packed, records, facts) in JOBS.items():
        for d in sorted((results / kind).glob("*")):
            if not d.is_dir() or not _finished(d, (*plain, *packed), records, facts):
                continue
            dst = study / kind / d.name
            dst.mkdir(parents=True, exist_ok=True)
            for f in plain:
                shutil.copy2(d / f, dst / f)
            for f in packed:
                with open(d / f, "rb") as src, gzip_writer(dst / (f + ".gz")) as out:
                    shutil.copyfileobj(src, out)
            with open(d / records) as src, gzip_writer(dst / (records + ".gz")) as gz:
                for line in src:
                    if line.strip():
                        gz.write(_compact(line).encode())
            for f in (*packed, records):
                (dst / f).unlink(missing_ok=True)  # a plain copy saved before would be read instead of NAME.gz
            saved.append(f"{kind}/{d.name}")
    return saved


LOG_LEFT_OUT = "# left out of the study archive (lorabench.archive): the facts hold what was parsed from it\n"


def restore(study: Path, results: Path, config: dict | None = None) -> list[str]:
    """The saved jobs of a study folder back into RESULTS; a published study's are read from its archive (its jobs
    come back with per-request ITL summaries instead of per-token lists, and a stand-in for each server log)."""
    if (study / "archive.tar.xz").exists():
        import tempfile

        from lorabench.archive import unpack_study

        with tempfile.TemporaryDirectory(prefix="restore-") as tmp:
            unpacked = unpack_study(study, Path(tmp))
            for kind in JOBS:
                for d in (unpacked / kind).glob("*"):
                    if not (d / "server.log").exists():
                        (d / "server.log").write_text(LOG_LEFT_OUT)
            return restore(unpacked, results, config)
    restored = []
    for kind, (plain, packed, records, facts_name) in JOBS.items():
        for d in sorted((study / kind).glob("*")):
            gz = [records, *packed]
            if not all((d / f).exists() for f in plain) or not all(stored(d / f).exists() for f in gz):
                continue
            saved = json.loads((d / facts_name).read_text())
            why = why_stale(kind, saved, config)
            if why:
                print(f"left out {kind}/{d.name}: {why}")
                continue
            dst = results / kind / d.name
            dst.mkdir(parents=True, exist_ok=True)
            for f in plain:
                shutil.copy2(d / f, dst / f)
            for f in gz:  # NAME.gz as saved, or NAME where a job was saved before it was kept gzipped
                with open_stored(d / f, "rb") as src, open(dst / f, "wb") as out:
                    shutil.copyfileobj(src, out)
            restored.append(f"{kind}/{d.name}")
    return restored


# What take copies out of meta.tgz (paths inside it -> under STUDY_DIR); the jobs' logs are taken per job.
META = {
    "results/envs/": "envs/",
    "results/model/manifest.json": "model/manifest.json",
    "results/adapters/": "adapters/",
}
LOG_RULES = {"servers": "server_loadtest", "runtime_load": "runtime_load", "prefix_cache": "prefix_cache",
             "rate_sweep": "rate_sweep"}  # fmt: skip


def take(poll: Path, study: Path, loan: str) -> list[str]:
    """One loan's packed jobs and records into a study folder (the module's docstring). A job archive holds one
    folder, the job as ``save`` keeps it; one that is not a job of a known kind, or holds anything else, stops it
    before anything is written."""
    import tarfile

    jobs = []
    for tgz in sorted(poll.glob("*.tgz")):
        if tgz.name == "meta.tgz":
            continue
        kind, _, name = tgz.name.removesuffix(".tgz").partition("-")
        with tarfile.open(tgz) as tar:
            members = tar.getmembers()
        if kind not in JOBS or not name or any(m.name.split("/")[0] != name or ".." in m.name for m in members):
            raise SystemExit(f"{tgz}: not a job archive of engine_stretch.sh pack (KIND-NAME.tgz holding NAME/)")
        jobs.append((kind, name, tgz))
    if not jobs:
        raise SystemExit(f"{poll}: no job archive (KIND-NAME.tgz) in it")
    for kind, name, tgz in jobs:
        dst = study / kind
        shutil.rmtree(dst / name, ignore_errors=True)
        dst.mkdir(parents=True, exist_ok=True)
        with tarfile.open(tgz) as tar:
            tar.extractall(dst, filter="data")
    meta = poll / "meta.tgz"
    if meta.exists():
        logs = {f"logs/{LOG_RULES[k]}/{n}.log" for k, n, _ in jobs}  # kept at the same path in the study
        with tarfile.open(meta) as tar:
            for m in tar.getmembers():
                if not m.isfile():
                    continue
                to = m.name if m.name in logs else None
                if m.name == "machine.txt":  # packed into meta.tgz since loan 14; a poll's own file wins below
                    to = f"machine-loan{loan}.txt"
                for inside, under in META.items():
                    if m.name.startswith(inside):
                        to = under + m.name[len(inside) :]
                if to is None:
                    continue
                out = study / to
                out.parent.mkdir(parents=True, exist_ok=True)
                with tar.extractfile(m) as src, open(out, "wb") as f:  # type: ignore[union-attr]
                    shutil.copyfileobj(src, f)
    if (poll / "machine.txt").exists():
        shutil.copy(poll / "machine.txt", study / f"machine-loan{loan}.txt")
    return [f"{k}/{n}" for k, n, _ in jobs]


def main(argv: list[str]) -> None:
    if len(argv) == 4 and argv[0] == "take":
        done = take(Path(argv[1]), Path(argv[2]), argv[3])
        print(f"take: {len(done)} job(s): {' '.join(done)}")
        return
    if len(argv) not in (3, 4) or argv[0] not in ("save", "restore"):
        raise SystemExit(__doc__)
    verb, a, b = argv[0], Path(argv[1]), Path(argv[2])
    config = None
    if len(argv) == 4:
        from lorabench.config import load_file

        config = load_file(argv[3])
    done = save(a, b) if verb == "save" else restore(a, b, config)
    print(f"{verb}: {len(done)} job(s): {' '.join(done) or '-'}")


if __name__ == "__main__":
    main(sys.argv[1:])
