#!/usr/bin/env bash
# Runs a study's whole pipeline on a lent GPU machine (no network, no snakemake there) through the project's own
# Snakemake workflow. Used by the device calls documented in README.md ("GPU study").
#   bash dev/device_study.sh start CONFIG    install the snakemake wheels (.whl-snake), start snakemake detached
#   bash dev/device_study.sh prepare CONFIG  install the wheels, then build only the model, adapters and engine
#                                              environments (foreground; e.g. before benchmarks/fidelity.py)
#   bash dev/device_study.sh status          last lines of the run's log, and whether it is still running
#   bash dev/device_study.sh pack OUTDIR     results (no weights) + logs as OUTDIR/study-results.tar.gz
# A run resumed on a fresh machine (results/ carried back) first rebuilds the model and adapters, then runs
# without the mtime trigger, so finished server jobs are kept (their params, inputs and code are unchanged).
set -u
cd "$(dirname "$0")/.."
LOG=/tmp/lorabench-study.log
PIDF=/tmp/lorabench-study.pid
export PYTHONPATH=/tmp/site:$PWD/workflow PYTHONUNBUFFERED=1
SMK=(python3 -m snakemake --cores 1 --scheduler greedy --rerun-incomplete)
SITE=${SITE:-dev/device-site.yaml}   # the machine's engine installations (the lent H200's kits)
# The overlay's engines that the study has (an overlay engine the config lacks would be an incomplete engine).
site_for() { python3 -c "import sys,yaml; c=yaml.safe_load(open(sys.argv[1])); s=yaml.safe_load(open(sys.argv[2])); s['engines']={k: v for k, v in s['engines'].items() if k in c['engines']}; yaml.safe_dump(s, open(sys.argv[3], 'w'))" "$1" "$2" "$3"; }

install_snakemake() {
  if [ ! -f /tmp/site/.snake-ready ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl-snake/*.whl || exit 5
    touch /tmp/site/.snake-ready
  fi
  python3 -m snakemake --version || exit 6
}

case "${1:-}" in
  prepare)
    cfg=${2:?config file}
    install_snakemake
    site_for "$cfg" "$SITE" /tmp/lorabench-site.yaml
    "${SMK[@]}" --configfile "$cfg" /tmp/lorabench-site.yaml --replace-workflow-config results/model/manifest.json \
      $(python3 -c "import yaml;c=yaml.safe_load(open('$cfg'));print(' '.join(['results/adapters/%s.json'%a for a in c['adapters']]+['results/envs/%s.json'%e for e in c['engines']]))")
    ;;
  start)
    cfg=${2:?config file}
    install_snakemake
    site_for "$cfg" "$SITE" /tmp/lorabench-site.yaml
    args=(--configfile "$cfg" /tmp/lorabench-site.yaml --replace-workflow-config)
    setsid nohup bash -c "
      ${SMK[*]} ${args[*]} results/model/manifest.json results/workload/requests.json \
        \$(python3 -c \"import yaml;print(' '.join('results/adapters/%s.json'%a for a in yaml.safe_load(open('$cfg'))['adapters']))\") &&
      ${SMK[*]} ${args[*]} --rerun-triggers params input code software-env
      echo \"EXIT \$?\"" > "$LOG" 2>&1 < /dev/null &
    echo $! > "$PIDF"
    echo "started: $(cat $PIDF), log $LOG"
    ;;
  status)
    if [ -f "$PIDF" ] && kill -0 "$(cat $PIDF)" 2>/dev/null; then echo RUNNING; else echo STOPPED; fi
    grep -E "INFO lorabench|Error|error|EXIT|steps \(|Exiting" "$LOG" | tail -n "${2:-25}" | cut -c1-220
    ;;
  pack)
    out=${2:?output folder}
    tar --exclude='results/model/weights' --exclude='results/adapters/*/adapter_model.safetensors' \
        -czf "$out/study-results.tar.gz" results logs .snakemake/metadata 2>/dev/null
    cp "$LOG" "$out/study.log" 2>/dev/null
    ls -la "$out"
    ;;
  *) echo "usage: $0 prepare CONFIG | start CONFIG | status [N] | pack OUTDIR"; exit 2 ;;
esac
