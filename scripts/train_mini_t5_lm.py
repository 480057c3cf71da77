#!/usr/bin/env python
"""Train mini-t5-lm, the T5-LM / CodeT5+ stand-in (recipe: lengthx/minis/t5_lm.py; docs/mini-t5-lm.md).

    python scripts/train_mini_t5_lm.py --out runs/mini-t5-lm --export lengthx/checkpoints/mini-t5-lm
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lengthx.minis.t5_lm import main  # noqa: E402

if __name__ == "__main__":
    main()
