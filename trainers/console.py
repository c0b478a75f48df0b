"""Progress lines on stdout that stay whole when several threads print them (ensemble groups side by side).

``print(s)`` writes the text and the newline as two writes, so two threads' lines could run together
("...ood_acc 0.241ensemble of 2 ..."); `print_line` writes each line under one lock.
"""

from __future__ import annotations

import sys
import threading
from typing import TextIO

_LOCK = threading.Lock()


def print_line(text: str, copy_to: TextIO | None = None) -> None:
    """Write ``text`` and a newline to stdout as one unit, then flush; with ``copy_to`` (a log file) the same
    line there too, under the same lock, so the log's lines stay whole and in stdout's order."""
    with _LOCK:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
        if copy_to is not None:
            copy_to.write(text + "\n")
            copy_to.flush()
