#!/usr/bin/env python
"""Pre-train the decoder minis of paper B offline: mini-gpt2 (APE), mini-pythia (RoPE), mini-bloom (ALiBi)
(recipe: lengthx/minis/decoders.py).

    python scripts/train_mini_decoders.py                  # all three families
    python scripts/train_mini_decoders.py --families pythia --steps 200 --work /tmp/minis --out /tmp/ckpt
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lengthx.minis.decoders import main  # noqa: E402

if __name__ == "__main__":
    main()
