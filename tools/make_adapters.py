"""Save PEFT LoRA adapters for a model architecture, with deterministic non-zero weights (no training, no
download): adapters to give by path (``adapters.NAME.path``), for config/studies/own-adapters-cpu.yaml and the
tests. Each adapter's weights differ (a pattern set by its place in the list), so each changes the model's answers
in its own way, as trained adapters do.

usage: .venv/bin/python tools/make_adapters.py OUT_DIR NAME [NAME ...]
           [--architecture config/models/tiny-qwen3.json] [--rank 8] [--targets q_proj,k_proj,v_proj,o_proj]

writes OUT_DIR/NAME/{adapter_config.json, adapter_model.safetensors, README.md} for each NAME.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "config" / "models" / "tiny-qwen3.json"


def make_adapter(
    out: Path,
    architecture: Path | dict[str, Any] = TINY,
    *,
    rank: int = 8,
    targets: list[str] | None = None,
    index: int = 0,
    alpha: int = 16,
    base_name: str = "tiny-qwen3",
    scale: float = 0.05,
    rank_pattern: dict[str, int] | None = None,
) -> Path:
    """Save one PEFT LoRA adapter for ``architecture`` (a Hugging Face config.json, as a file or a dict) into
    ``out``. lora_A and lora_B hold a deterministic pattern (a sine over the tensor, its frequency and phase set
    by ``index``) scaled by ``scale``, never zero as PEFT's untrained lora_B is. ``rank_pattern`` gives some
    targets another rank than ``rank`` (PEFT's own key of that name)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    arch = json.loads(Path(architecture).read_text()) if isinstance(architecture, Path) else dict(architecture)
    cfg = AutoConfig.for_model(**arch)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    lora = LoraConfig(
        r=rank,
        rank_pattern=dict(rank_pattern or {}),
        lora_alpha=alpha,
        target_modules=list(targets or ["q_proj", "k_proj", "v_proj", "o_proj"]),
        lora_dropout=0.0,
        bias="none",
        task_type="CAUSAL_LM",
    )
    peft_model = get_peft_model(model, lora)
    freq = 0.37 + 0.11 * index
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_" in name:
                pos = torch.arange(p.numel(), dtype=torch.float64)
                p.copy_(
                    (torch.sin(pos * freq + index + (math.pi / 4 if "lora_B" in name else 0.0)) * scale).view(p.shape)
                )
    peft_model.peft_config["default"].base_model_name_or_path = base_name
    out.mkdir(parents=True, exist_ok=True)
    peft_model.save_pretrained(str(out), safe_serialization=True, save_embedding_layers=False)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="folder to write the adapter folders into")
    ap.add_argument("names", nargs="+", help="one adapter folder per name")
    ap.add_argument("--architecture", type=Path, default=TINY, help="Hugging Face config.json of the base model")
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--targets", default="q_proj,k_proj,v_proj,o_proj", help="comma-separated target modules")
    args = ap.parse_args(argv)
    for i, name in enumerate(args.names):
        path = make_adapter(
            args.out / name, args.architecture, rank=args.rank, targets=args.targets.split(","), index=i + 1
        )
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
