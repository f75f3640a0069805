#!/usr/bin/env bash
# Device side: does an engine kit built from the pinned closure (dev/build_kit.py) serve? After its stage.sh said
# KIT READY: builds the tiny synthetic Qwen3 of the default study (seconds), starts the engine on it with LoRA on
# and one adapter, waits until it answers, sends one non-streamed and one streamed completion (base and adapter),
# prints what came back and the engine's version, and stops the server.
#   bash dev/kit_smoke.sh vllm
set -u
engine=${1:?engine (vllm)}
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD/workflow PYTHONUNBUFFERED=1
W=/tmp/kit-smoke; rm -rf "$W"; mkdir -p "$W"
python3 - "$W" <<'PY' || exit 6
import sys
from pathlib import Path
from lorabench.adapters import build_adapter
from lorabench.model import build_synthetic
w = Path(sys.argv[1])
info = build_synthetic(Path("config/models/tiny-qwen3.json"), w / "model", "bfloat16", 0)
spec = {"rank": 8, "alpha": 16, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"], "init_lora_b_std": 0.02,
        "seed": 1}
build_adapter(w / "model", "a", spec, w / "a", int(info.get("parameters") or 0))
print("built", w)
PY
source ".kit-$engine/bin/env.sh"
python3 -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__, torch.cuda.get_device_name(0))"
python3 -m vllm.entrypoints.openai.api_server --model "$W/model" --served-model-name tiny --port 8123 \
  --max-model-len 512 --enforce-eager --enable-lora --max-loras 1 --max-lora-rank 8 --lora-modules "a=$W/a" \
  > "$W/server.log" 2>&1 &
pid=$!
t0=$(date +%s)
until curl -sf localhost:8123/v1/models > /dev/null; do
  kill -0 $pid 2>/dev/null || { echo "server exited"; tail -5 "$W/server.log" | cut -c1-200; exit 7; }
  [ $(( $(date +%s) - t0 )) -gt 300 ] && { echo "not ready after 300 s"; kill $pid; exit 8; }
  sleep 2
done
echo "ready after $(( $(date +%s) - t0 )) s"
for model in tiny a; do
  curl -s localhost:8123/v1/completions -H 'Content-Type: application/json' \
    -d "{\"model\": \"$model\", \"prompt\": \"Hello\", \"max_tokens\": 8, \"temperature\": 0, \"ignore_eos\": true}" | cut -c1-300; echo
done
curl -sN localhost:8123/v1/completions -H 'Content-Type: application/json' \
  -d '{"model": "a", "prompt": "Hello", "max_tokens": 4, "stream": true, "stream_options": {"include_usage": true}}' | tail -c 300; echo
kill $pid; wait $pid 2>/dev/null; echo "stopped"
