# Device side: `source .kit-sglang/bin/env.sh` after stage.sh printed KIT READY (dev/device-site.yaml holds the same).
# /tmp/sglang-site first on the path: its transformers/tokenizers (SGLang's pins) shadow the image's for SGLang only.
export PYTHONPATH=/tmp/sglang-site${PYTHONPATH:+:$PYTHONPATH} TVM_FFI_CACHE_DIR=/tmp/sgl-jit \
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 DO_NOT_TRACK=1 PYTHONUNBUFFERED=1 \
  CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
