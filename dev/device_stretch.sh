#!/usr/bin/env bash
# One stretch of GPU time for a study that needs several: the stability benchmark on each engine, then the study
# itself, SGLang servers first, resumed from the results committed under studies/STUDY/ (finished server jobs are
# restored and not run again). Runs detached in a copy of the project outside the working tree, so later calls
# (which re-lay the tree) cannot touch it.
#   bash dev/device_stretch.sh start CONFIG STUDY_DIR [stability]   copy to /tmp/stretch/w, start detached
#   bash dev/device_stretch.sh status                               steps so far, last lines of the current one
#   bash dev/device_stretch.sh pack OUTDIR                          finished jobs (one archive each: servers-X.tgz,
#                                                                     runtime_load-X.tgz, prefix_cache-X.tgz), manifests, logs
#   bash dev/device_stretch.sh wait SECONDS [OUTDIR]                poll until the driver stops or SECONDS pass;
#                                                                     with OUTDIR ($OUT), pack what has finished
# With "stability": benchmarks/stability.py first, on each server of STAB_SERVERS (default: the 2-slot LoRA
# servers), cell STAB_CONDITION x STAB_BURST (ab x 48), STAB_ROUNDS rounds (6) of STAB_MIN_S seconds (2.5),
# STAB_VARIANTS (default: the benchmark's own).
# ENGINES="vllm" (engine ids of the config) restricts the stretch to those engines' server and runtime-loading
# jobs; the report is then rebuilt from the saved jobs (tools/rebuild_study.py) instead of on the device.
# ONLY=PATTERN (grep -E on the job targets, e.g. runtime_load) keeps only the matching jobs of that list.
# STRETCH_MIN=M: minutes the driver may use from its start; a job whose high estimate (tools/estimate_study.py)
# would outlast them is skipped and left for the next stretch rather than cut halfway.
# SITE: the overlay naming the machine's engine installations (default dev/device-site.yaml, the lent H200's).
# Needs the kits of those engines staged (/tmp/vllm-site, /tmp/sglang-site) and the Snakemake wheels either
# installed in /tmp/site or carried as .whl-snake in the start call.
set -u
S=/tmp/stretch
W=$S/w
SITE=${SITE:-dev/device-site.yaml}
# The overlay's engines that the study has (an overlay engine the config lacks would be an incomplete engine).
site_for() { python3 -c "import sys,yaml; c=yaml.safe_load(open(sys.argv[1])); s=yaml.safe_load(open(sys.argv[2])); s['engines']={k: v for k, v in s['engines'].items() if k in c['engines']}; yaml.safe_dump(s, open(sys.argv[3], 'w'))" "$1" "$2" "$3"; }
mkdir -p "$S"

case "${1:-}" in
  start)
    cfg=${2:?config}; sdir=${3:?study dir under studies/}; stab=${4:-}
    rm -rf "$W"; mkdir -p "$W"
    (cd "$(dirname "$0")/.." && tar --exclude=./.kit --exclude=./.kit-sglang --exclude='./.pieces-*' --exclude=./results --exclude=./.git -cf - .) | tar -xf - -C "$W"
    cd "$W"
    setsid nohup bash dev/device_stretch.sh _run "$cfg" "$sdir" "$stab" > "$S/driver.log" 2>&1 < /dev/null &
    echo $! > "$S/driver.pid"; echo "started $(cat $S/driver.pid)"
    ;;
  _run)
    cfg=$2; sdir=$3; stab=$4; cd "$W"; T0=$(date +%s)
    export PYTHONPATH=/tmp/site:$W/workflow PYTHONUNBUFFERED=1
    step() { echo "STEP $* $(date +%T)" | tee -a "$S/steps.log"; }
    site_for "$cfg" "$SITE" "$S/site.yaml"
    SMK=(python3 -m snakemake --cores 1 --scheduler greedy --rerun-incomplete --configfile "$cfg" "$S/site.yaml" --replace-workflow-config)
    step install-snakemake
    if ! PYTHONPATH=/tmp/site python3 -c "import snakemake" 2>/dev/null; then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl-snake/*.whl || { step FAILED pip; exit 5; }
    fi
    step restore "$sdir"
    python3 dev/study_results.py restore "$sdir" results "$cfg" | tail -8
    engines=${ENGINES:-$(python3 -c "import yaml;print(' '.join(yaml.safe_load(open('$cfg'))['engines']))")}
    step wait-kits $engines
    for i in $(seq 1 60); do
      ok=1; for e in $engines; do [ -f /tmp/$e-site/.kit-ready ] || ok=0; done
      [ $ok = 1 ] && break; sleep 5
    done
    step prepare
    adapters=$(python3 -c "import yaml;print(' '.join('results/adapters/%s.json'%a for a in yaml.safe_load(open('$cfg'))['adapters']))")
    "${SMK[@]}" results/model/manifest.json results/workload/requests.json $adapters \
      $(for e in $engines; do echo results/envs/$e.json; done) > "$S/prepare.log" 2>&1 || { step FAILED prepare; tail -5 "$S/prepare.log"; exit 6; }
    if [ -n "$stab" ]; then
      servers=${STAB_SERVERS:-$(python3 -c "import yaml;c=yaml.safe_load(open('$cfg'));print(' '.join(s for s,v in c['servers'].items() if v['lora'] and v.get('max_loras')==2))")}
      for srv in $servers; do
        step stability "$srv"
        python3 benchmarks/stability.py --config "$cfg" --server "$srv" --condition "${STAB_CONDITION:-ab}" \
          --burst "${STAB_BURST:-48}" --rounds "${STAB_ROUNDS:-6}" --min-s "${STAB_MIN_S:-2.5}" \
          ${STAB_VARIANTS:+--variants "$STAB_VARIANTS"} \
          --json "$S/stability-$srv.json" > "$S/stability-$srv.log" 2>&1 || step FAILED stability "$srv"
      done
    fi
    # The jobs not saved yet in stretch order (SGLang first; per engine LoRA off, then by slot count; a side job
    # right after the server it copies), each with its high estimate from the jobs saved so far. With STRETCH_MIN,
    # a job that would end past that many minutes after the driver started is skipped, not started and cut.
    targets=$(python3 tools/estimate_study.py "$cfg" --from "$sdir" --left "$sdir" --engines $engines --targets) \
      || { step FAILED estimate; exit 7; }
    skipped=0
    while read -r t need <&3; do
      [ -n "$t" ] || continue
      if [ -n "${ONLY:-}" ] && ! grep -qE "$ONLY" <<< "$t"; then step skip "$t" "not in ONLY=$ONLY"; continue; fi
      if [ -n "${STRETCH_MIN:-}" ]; then
        left=$(( STRETCH_MIN * 60 - ($(date +%s) - T0) ))
        if [ "$need" -gt "$left" ]; then step skip "$t" "needs ${need}s, ${left}s left"; skipped=1; continue; fi
      fi
      step server "$t"
      "${SMK[@]}" "$t" --rerun-triggers params input code software-env >> "$S/study.log" 2>&1 || step FAILED "$t"
    done 3<<< "$targets"
    if [ -z "${ENGINES:-}" ] && [ "$skipped" = 1 ]; then
      step skip study-rest "jobs were skipped: the report is rebuilt from the saved jobs instead"
    elif [ -z "${ENGINES:-}" ]; then
      step study-rest
      "${SMK[@]}" --rerun-triggers params input code software-env >> "$S/study.log" 2>&1 || step FAILED study-rest
    fi
    step DONE
    ;;
  status)
    if [ -f "$S/driver.pid" ] && kill -0 "$(cat "$S/driver.pid")" 2>/dev/null; then echo RUNNING; else echo STOPPED; fi
    cat "$S/steps.log" 2>/dev/null | tail -n 12
    for f in "$S"/stability-*.log "$S/study.log"; do [ -f "$f" ] && { echo "-- $(basename "$f")"; grep -E "^round|variant|^all|^gc|^metrics|^unpinned|^smi|INFO lorabench.loadtest: \[|Error|error" "$f" | tail -n 6 | cut -c1-160; }; done
    ;;
  wait)
    end=$(( $(date +%s) + ${2:-500} ))
    while [ "$(date +%s)" -lt "$end" ]; do
      if ! kill -0 "$(cat "$S/driver.pid" 2>/dev/null)" 2>/dev/null; then break; fi
      sleep 10
    done
    bash "$0" status
    [ -n "${3:-}" ] && bash "$0" pack "$3" > /dev/null && ls "$3"
    ;;
  pack)
    # One archive per finished job (records compressed by study_results.py), each well under the 16 MiB a file
    # that comes back may have, plus the small manifests and logs; weights and the compile cache stay behind.
    out=${2:?output folder}
    rm -rf "$S/save"
    (cd "$W" && python3 dev/study_results.py save results "$S/save" > /dev/null)
    for d in "$S"/save/servers/* "$S"/save/runtime_load/* "$S"/save/prefix_cache/* "$S"/save/rate_sweep/*; do
      [ -d "$d" ] && tar -czf "$out/$(basename "$(dirname "$d")")-$(basename "$d").tgz" -C "$(dirname "$d")" "$(basename "$d")"
    done
    (cd "$W" && tar -czf "$out/meta.tgz" results/envs results/model/manifest.json results/adapters/*.json \
      results/workload logs 2>/dev/null)
    tar -czf "$out/stretch-logs.tar.gz" -C "$S" --exclude=w --exclude=save . 2>/dev/null
    ls -la "$out"
    ;;
  *) echo "usage: $0 start CONFIG STUDY_DIR [stability] | status | wait SECONDS | pack OUTDIR"; exit 2 ;;
esac
