#!/usr/bin/env python
"""Train mini-t5, the retrieval stand-in (recipe: lengthx/minis/retrieval.py; docs/mini-t5-study.md).

    python scripts/train_mini_t5.py --help
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lengthx.minis.retrieval import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
