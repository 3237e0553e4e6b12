from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
WORKERS = os.path.dirname(HERE)
REPO = os.path.dirname(WORKERS)
for p in (WORKERS, HERE):
    if p not in sys.path:
        sys.path.insert(0, p)
