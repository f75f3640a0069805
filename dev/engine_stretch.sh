#!/usr/bin/env bash
# One engine's server jobs of a study, from scratch, in one loan of the lent GPU (dev/README.md): the inputs are
# built in the first call (while the engine kit's second chunk waits), the jobs run detached in a copy of the
# project outside the working tree (later calls re-lay the tree), and each finished job comes back as one archive.
#   bash dev/engine_stretch.sh prepare CONFIG         install .whl-snake, copy the tree, build model/adapters/requests
#   bash dev/engine_stretch.sh targets CONFIG ENGINE  here, before a loan: the jobs `start` would run, in order
#   bash dev/engine_stretch.sh start CONFIG ENGINE    detached: the engine's record, then its server jobs (LoRA off
#                                                     first, then by slot count); ONLY=REGEX keeps matching targets,
#                                                     LAST=REGEX puts matching ones last;
#                                                     RUNTIME=1 adds the engine's runtime-loading jobs, last;
#                                                     SWEEP=1 its rate sweeps (rate_sweep.servers), after them
#                                                     (SWEEP=first: before them);
#                                                     PREFIX=1 its prefix-caching jobs (prefix_cache.server), first
#   bash dev/engine_stretch.sh launch CONFIG ENGINE SECONDS OUTDIR [ES...]  the call that completes the kit: gives up at once
#                                                     (exit 8) when nothing is being prepared here; else starts
#                                                     CONFIG ENGINE detached once prepare has finished (a call cut
#                                                     at its limit still leaves the run started), then waits and
#                                                     packs as waitall, SECONDS in all (ES... after OUTDIR: the
#                                                     runs queued behind it with `after`: their inputs are built
#                                                     before the first job starts, and they are waited for too);
#                                                     again after a run has stopped: more jobs on the same inputs
#                                                     (exit 7 while one still runs); exit 6 at once where
#                                                     prepare failed or this start did (a config it cannot read)
#   bash dev/engine_stretch.sh after DIR CONFIG ENGINE  detached: once the run in DIR (another ES) has stopped and
#                                                     this ES is prepared, start CONFIG ENGINE here: one server on
#                                                     the GPU at a time, a second study queued behind the first
#   bash dev/engine_stretch.sh wait SECONDS [OUTDIR]  poll until the run stops or SECONDS pass, then status; with
#                                                     OUTDIR ($OUT), pack what has finished so far into it: every
#                                                     poll brings the finished jobs back, a lost machine loses only
#                                                     the job in flight (packed also as each job ends, for a call
#                                                     cut at the loan's end)
#   bash dev/engine_stretch.sh waitjob SECONDS OUTDIR the same, but back as soon as the next job starts: near the
#                                                     end of a loan, each finished job is packed when it finishes
#   bash dev/engine_stretch.sh waitall SECONDS OUTDIR ES...  the same for several runs on one machine (`after`):
#                                                     each in turn, each packed into OUTDIR/NAME of its folder
#   bash dev/engine_stretch.sh status                 steps so far and the last cycle lines
#   bash dev/engine_stretch.sh pack OUTDIR            one archive per finished job (records compressed), plus logs,
#                                                     the steps' times and machine.txt (boot id, GPU UUID: which
#                                                     machine, for sweeps of several loans compared in one table)
# ADAPTERS: at prepare, only these adapters (names) instead of every one of the config.
# SITE: the overlay naming the machine's engine installations (default dev/device-site.yaml). ES: the folder of this
# run (default /tmp/es; a second study on the same machine takes another, e.g. ES=/tmp/es2). SEED_FROM: at prepare,
# a work folder of another run whose model and adapters (the same config keys) are copied instead of built again.
set -u
S=${ES:-/tmp/es}
W=$S/w
SITE=${SITE:-dev/device-site.yaml}
export PYTHONPATH=/tmp/site:$W/workflow PYTHONUNBUFFERED=1
smk() { (cd "$W" && python3 -m snakemake --cores "${CORES:-1}" --scheduler greedy --rerun-incomplete --configfile "$1" "$SITE" --replace-workflow-config "${@:2}"); }
step() { echo "STEP $* $(date +%T)" | tee -a "$S/steps.log"; }

# The server jobs (and prefix, load and sweep jobs) `start` runs for CONFIG ENGINE, in its order, read in folder DIR
# with the workflow's own readings of runtime_load.server, prefix_cache.server and rate_sweep (lorabench.config).
run_targets() {  # DIR CONFIG ENGINE
    (cd "$1" && "${PY:-python3}" -c "
from lorabench.config import load_file, prefix_cache_servers, rate_sweep_mixes, runtime_load_servers
c = load_file('$2')
srv = [s for s, v in c['servers'].items() if v['engine'] == '$3']
srv.sort(key=lambda s: (c['servers'][s]['lora'], c['servers'][s].get('max_loras') or 0, s))
def on(flag, names, path):
    return [path % s for s in srv if s in names] if flag == '1' else []
first = on('${PREFIX:-0}', prefix_cache_servers(c), 'results/prefix_cache/%s/prefix.json')
extra = on('${RUNTIME:-0}', runtime_load_servers(c), 'results/runtime_load/%s/load.json')
sweeps = on('1' if '${SWEEP:-0}' in ('1', 'first') else '0', rate_sweep_mixes(c), 'results/rate_sweep/%s/sweep.json')
first, extra = (first + sweeps, extra) if '${SWEEP:-0}' == 'first' else (first, extra + sweeps)
import os, re
keep = os.environ.get('ONLY') or '.'
ts = [t for t in first + ['results/servers/%s/facts.json' % s for s in srv] + extra if re.search(keep, t)]
last = os.environ.get('LAST')
ts = [t for t in ts if not (last and re.search(last, t))] + [t for t in ts if last and re.search(last, t)]
print(' '.join(ts))")
}

case "${1:-}" in
  prepare)
    cfg=${2:?config}
    mkdir -p "$S"; rm -rf "$W"; mkdir -p "$W"
    tar --exclude=./.kit --exclude=./.kit-sglang --exclude=./.kit-vllm --exclude=./.whl-snake --exclude=./results --exclude=./.git -cf - . | tar -xf - -C "$W"
    if [ ! -f /tmp/site/.snake-ready ]; then
      # the wheels as carried, or as joined from pieces (`carry_pieces.py join .pieces-snake /tmp/snake`) when the
      # tree leaves no room for them in one call
      whl=.whl-snake; [ -d "$whl" ] || whl=/tmp/snake/.whl-snake
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$whl"/*.whl || exit 5
      touch /tmp/site/.snake-ready
    fi
    step prepare "$cfg"
    # which machine this loan ran on: sweeps from two loans compared in one table are from two machines
    { echo "utc $(date -u +%FT%TZ)"; echo "boot_id $(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"
      echo "host $(hostname) $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
      nvidia-smi --query-gpu=index,name,uuid,serial,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/gpu /'
    } > "$S/machine.txt"
    if [ -n "${SEED_FROM:-}" ]; then
      # newer than the tree just laid, so that no input looks changed; without Snakemake's records nothing else triggers
      mkdir -p "$W/results" && cp -a "$SEED_FROM/results/model" "$SEED_FROM/results/adapters" "$W/results/" \
        && find "$W/results" -exec touch {} + || exit 6
    fi
    # every adapter, families' members included (the config as the workflow reads it); ADAPTERS="r8 a": only those
    # (a loan that runs some of the servers builds only their adapters)
    if [ -n "${ADAPTERS:-}" ]; then adapters=$(for a in $ADAPTERS; do printf 'results/adapters/%s.json ' "$a"; done)
    else adapters=$(cd "$W" && python3 -c "from lorabench.config import load_file
print(' '.join('results/adapters/%s.json' % a for a in load_file('$cfg')['adapters']))") || exit 6
    fi
    # what pack brings back of the adapters: this config's, not a seeded study's others (loan 14 took 128 of them)
    echo "$adapters" > "$S/adapters.txt"
    # the inputs are CPU jobs: every core of the host (many adapters build side by side, not one after another)
    CORES=$(nproc) smk "$cfg" results/model/manifest.json results/workload/requests.json $adapters > "$S/prepare.log" 2>&1 \
      || { step FAILED prepare; grep -E "Error|error" "$S/prepare.log" | tail -5 | cut -c1-200; exit 6; }
    step prepared
    ;;
  targets)
    # here, in this checkout, before a loan: what `start` would run, in order (check a recipe's ONLY and LAST)
    ts=$(PYTHONPATH=$PWD/workflow PY=${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )} \
      run_targets . "${2:?config}" "${3:?engine id}") || exit 6
    echo "$ts" | tr ' ' '\n'
    ;;
  start)
    cfg=${2:?config}; engine=${3:?engine id}
    # a config that does not load starts nothing, and says so where `launch` looks (it stops waiting at once)
    targets=$(run_targets "$W" "$cfg" "$engine") || { step FAILED start "$cfg" "$engine"; exit 6; }
    setsid nohup bash -c "
      cd '$W'
      echo \"STEP env $engine \$(date +%T)\" >> '$S/steps.log'
      python3 -m snakemake --cores 1 --scheduler greedy --configfile '$cfg' '$SITE' --replace-workflow-config results/envs/$engine.json >> '$S/study.log' 2>&1
      for t in $targets; do
        echo \"STEP server \$t \$(date +%T)\" >> '$S/steps.log'
        python3 -m snakemake --cores 1 --scheduler greedy --rerun-incomplete --configfile '$cfg' '$SITE' --replace-workflow-config \"\$t\" >> '$S/study.log' 2>&1 \
          || echo \"STEP FAILED \$t \$(date +%T)\" >> '$S/steps.log'
      done
      echo \"STEP DONE \$(date +%T)\" >> '$S/steps.log'" > "$S/driver.log" 2>&1 < /dev/null &
    echo $! > "$S/driver.pid"; echo "started $(cat "$S/driver.pid"): $targets"
    ;;
  launch)
    cfg=${2:?config}; engine=${3:?engine id}; end=$(( $(date +%s) + ${4:?seconds} )); out=${5:?output folder}
    # a first call that got no machine leaves nothing prepared on this one: waiting for inputs would burn the call
    [ -f "$S/steps.log" ] || { echo "nothing is being prepared in $S (did the prepare call reach this machine?)"; exit 8; }
    # a second launch on a warm machine (inputs built, the first run done) starts more jobs of the same study; while
    # the first still runs it starts nothing, and the first run's pid is not taken for the new one's
    if [ -f "$S/driver.pid" ]; then
      kill -0 "$(cat "$S/driver.pid")" 2>/dev/null && { echo "a run is still going in $S: waitall, not launch"; exit 7; }
      rm -f "$S/driver.pid"
    fi
    me=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
    # a failed prepare (once per folder) or a start of this launch that failed: a first run's failed job is no reason
    seen=$(wc -l < "$S/steps.log")
    failed() { grep -qs 'FAILED prepare' "$S/steps.log" || tail -n +$((seen + 1)) "$S/steps.log" | grep -qs 'FAILED start'; }
    # the runs queued behind this one build their inputs first too: no build shares the host with a measurement
    setsid nohup bash -c "
      while :; do
        grep -qs 'FAILED prepare' '$S/steps.log' && { echo 'prepare failed: nothing started'; exit 6; }
        ready=1; for d in '$S' ${*:6}; do grep -qsE 'prepared|FAILED' \$d/steps.log || ready=0; done
        [ \$ready = 1 ] && break; sleep 2
      done
      bash '$me' start '$cfg' '$engine'" > "$S/launch.log" 2>&1 < /dev/null &
    while [ ! -f "$S/driver.pid" ] && ! failed && [ "$(date +%s)" -lt "$end" ]; do sleep 2; done
    sleep 1; cut -c1-300 "$S/launch.log"; cat "$S/steps.log"
    failed && exit 6
    left=$(( end - $(date +%s) )); [ "$left" -gt 0 ] || left=1
    bash "$me" waitall "$left" "$out" "$S" "${@:6}"
    ;;
  after)
    prev=${2:?folder of the run to wait for}; cfg=${3:?config}; engine=${4:?engine id}
    # queued before this run's own prepare has begun (loan 13: it starts once the first study's inputs are built),
    # its folder does not exist yet: the queue's log goes there all the same
    mkdir -p "$S"
    setsid nohup bash -c "
      sleep 5
      # the run before may not have started yet (queued before a launch): wait for it to start or to fail first
      while [ ! -f '$prev/driver.pid' ] && ! grep -qs 'FAILED prepare' '$prev/steps.log'; do sleep 3; done
      while kill -0 \$(cat '$prev/driver.pid' 2>/dev/null) 2>/dev/null; do sleep 3; done
      while ! grep -qE 'prepared|FAILED' '$S/steps.log' 2>/dev/null; do sleep 3; done
      grep -q 'FAILED prepare' '$S/steps.log' && exit 6
      cd '$W' && bash dev/engine_stretch.sh start '$cfg' '$engine'" > "$S/after.log" 2>&1 < /dev/null &
    echo "queued behind $prev: $cfg $engine (log $S/after.log)"
    ;;
  status)
    if [ -f "$S/driver.pid" ] && kill -0 "$(cat "$S/driver.pid")" 2>/dev/null; then echo RUNNING; else echo STOPPED; fi
    tail -n 8 "$S/steps.log" 2>/dev/null
    grep -hE "cycles stop|cycle [0-9]+ done|Error|error|ready after" "$W"/logs/server_loadtest/*.log "$W"/logs/group_loadtest/*.log 2>/dev/null | tail -n 4 | cut -c1-230
    ;;
  wait|waitjob)
    end=$(( $(date +%s) + ${2:-500} )); steps=$(wc -l < "$S/steps.log" 2>/dev/null || echo 0)
    while [ "$(date +%s)" -lt "$end" ]; do
      kill -0 "$(cat "$S/driver.pid" 2>/dev/null)" 2>/dev/null || break
      if [ "$(wc -l < "$S/steps.log")" -gt "$steps" ]; then
        # a job finished (the next one started): waitjob comes back now; wait packs it now and goes on, so that
        # a call cut short by the loan's end still brings back every job finished before the cut
        [ "$1" = waitjob ] && break
        steps=$(wc -l < "$S/steps.log"); [ -n "${3:-}" ] && bash "$0" pack "$3" > /dev/null
      fi
      sleep 5
    done
    bash "$0" status
    [ -n "${3:-}" ] && bash "$0" pack "$3" > /dev/null && ls "$3"
    ;;
  waitall)
    # several runs on one machine (a second study queued with `after`, its own ES): poll each in turn until it
    # stops or the SECONDS run out, packing each into OUTDIR/NAME (NAME: its folder's name), so every poll brings
    # back every run's finished jobs
    end=$(( $(date +%s) + ${2:?seconds} )); out=${3:?output folder}; shift 3
    for d in "$@"; do
      mkdir -p "$out/$(basename "$d")"
      # a run queued behind the one before starts a few seconds after that one stops
      for _ in $(seq 1 10); do { [ -f "$d/driver.pid" ] || [ ! -f "$d/after.log" ]; } && break; sleep 3; done
      left=$(( end - $(date +%s) )); [ "$left" -gt 0 ] || left=1
      ES=$d bash "$0" wait "$left" "$out/$(basename "$d")" > /dev/null
      echo "== $d"; ES=$d bash "$0" status
    done
    ;;
  pack)
    out=${2:?output folder}
    rm -rf "$S/save"
    (cd "$W" && python3 dev/study_results.py save results "$S/save" > /dev/null)
    for d in "$S"/save/servers/* "$S"/save/runtime_load/* "$S"/save/prefix_cache/* "$S"/save/rate_sweep/*; do
      # written aside, then moved: a call cut while packing leaves the archive of the poll before, not half of one
      [ -d "$d" ] && tar -czf "$out/.packing.tgz" -C "$(dirname "$d")" "$(basename "$d")" \
        && mv "$out/.packing.tgz" "$out/$(basename "$(dirname "$d")")-$(basename "$d").tgz"
    done
    # what the engines compiled and cached on this machine (a fresh machine starts SGLang in 120-161 s, a warm one in
    # 68-75 s): where it lies and how big, for carrying a warm cache to the next loan
    du -sh ~/.cache/* ~/.triton /tmp/torchinductor_* 2>/dev/null | sort -h > "$S/caches.txt"
    # the records, the machine, the steps and the caches in one archive beside the jobs': a call brings back at most
    # 8 files, and a waitall of two runs with a job each came to 10 with them apart (loan 14 fetched one run again)
    adapters=$(cat "$S/adapters.txt" 2>/dev/null) || adapters='results/adapters/*.json'
    # a co-resident group's own record (its cycles' orders) beside its members' jobs
    groups=$(cd "$W" && ls results/groups/*/group.json 2>/dev/null)
    # shellcheck disable=SC2086  # a list of paths, or the pattern
    (cd "$W" && tar -czf "$out/meta.tgz" results/envs results/model/manifest.json $adapters $groups results/workload logs \
      -C "$S" machine.txt steps.log caches.txt 2>/dev/null)
    ls -la "$out"
    ;;
  *) echo "usage: $0 prepare CONFIG | start CONFIG ENGINE | after DIR CONFIG ENGINE | status | wait[job] SECONDS [OUTDIR] | waitall SECONDS OUTDIR ES... | pack OUTDIR"; exit 2 ;;
esac
