"""A small synthetic conversational dataset, generated with a seed: JSONL, one request a line, as a workload's
``dataset`` reads it (lorabench/loadgen/dataset.py).

No model hub can be reached from where lorabench runs, so the test fixture ``tests/fixtures/chat-small.jsonl`` is
made here: conversations of one to four turns between a user and an assistant, in the plain words of the synthetic
tokenizer's corpus (one token a word there), each line the conversation so far as ``prompt`` and the length of the
assistant's next answer as ``output_tokens``. Some lines give only a prompt length (``prompt_tokens``), as a trace
of real traffic without its texts would. Lengths are skewed as chat traffic is: many short turns, a few long ones.

    python tools/make_dataset.py --seed 7 --lines 40 --out tests/fixtures/chat-small.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

from lorabench.model import CORPUS_WORDS  # noqa: E402


def _turn(rng: random.Random, median_words: int, most: int) -> str:
    n = min(most, max(3, round(rng.lognormvariate(math.log(median_words), 0.6))))
    return " ".join(rng.choice(CORPUS_WORDS) for _ in range(n))


def make_lines(seed: int, lines: int, length_only_every: int = 5) -> list[dict[str, object]]:
    """``lines`` requests: every ``length_only_every``-th gives its prompt as a length in tokens only."""
    rng = random.Random(seed)
    out: list[dict[str, object]] = []
    for i in range(lines):
        turns = rng.randint(1, 4)
        parts = []
        for t in range(turns):
            parts.append("User: " + _turn(rng, 14, 60))
            if t < turns - 1:
                parts.append("Assistant: " + _turn(rng, 30, 90))
        parts.append("Assistant:")
        output = min(64, max(8, round(rng.lognormvariate(math.log(24), 0.5))))
        line: dict[str, object] = {"id": f"chat-{seed}-{i:03d}", "turns": turns}
        if length_only_every and i % length_only_every == length_only_every - 1:
            line["prompt_tokens"] = min(300, max(8, round(rng.lognormvariate(math.log(80), 0.6))))
        else:
            line["prompt"] = "\n".join(parts)
        line["output_tokens"] = output
        out.append(line)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=7, help="seed of the conversations (default 7)")
    ap.add_argument("--lines", type=int, default=40, help="requests to write (default 40)")
    ap.add_argument("--out", type=Path, required=True, help="JSONL file to write")
    args = ap.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(x) + "\n" for x in make_lines(args.seed, args.lines)))
    print(f"{args.out}: {args.lines} requests, seed {args.seed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
