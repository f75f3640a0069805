# Device side: `source .kit-vllm/bin/env.sh` after stage.sh printed KIT READY (dev/device-site.yaml holds the same).
export PYTHONPATH=/tmp/vllm-site${PYTHONPATH:+:$PYTHONPATH} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 PYTHONUNBUFFERED=1 \
  VLLM_USE_FLASHINFER_SAMPLER=0   # flashinfer is not in the kit; greedy sampling does not need it
