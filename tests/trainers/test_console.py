"""Progress lines printed by several threads stay whole (the ensemble's worker threads once printed
"...ood_acc 0.241ensemble of 2 ..." on one line), in stdout and in a log file that copies them. A race:
with plain print in place of print_line the test failed 3 of 4 runs here, so it guards most of the time."""

import io
import sys
import threading

import pytest

from trainers.console import print_line


@pytest.fixture
def eager_thread_switches():
    """Threads switch every microsecond (Python's default: 5 ms), so that print's two writes, the text and the
    newline, do get separated by another thread's line within the test."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def test_lines_from_two_threads_stay_whole(capsys, eager_thread_switches):
    log = io.StringIO()

    def write(tag):
        for i in range(5000):
            print_line(f"{tag} {i} " + "x" * 40, copy_to=log)

    threads = [threading.Thread(target=write, args=(tag,)) for tag in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 10000
    assert all(len(line.split()) == 3 and line.endswith("x" * 40) for line in lines)
    assert log.getvalue().splitlines() == lines  # the copy holds the same lines in the same order
