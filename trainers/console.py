"""Progress lines on stdout that stay whole when several threads print them (ensemble groups side by side).

``print(s)`` writes the text and the newline as two writes, so two threads' lines could run together
("...ood_acc 0.241ensemble of 2 ..."); `print_line` writes each line under one lock.
"""

from __future__ import annotations

import sys
import threading

_LOCK = threading.Lock()


def print_line(text: str) -> None:
    """Write ``text`` and a newline to stdout as one unit, then flush."""
    with _LOCK:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
