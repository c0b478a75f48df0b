"""Progress lines printed by several threads stay whole (regression guard: the ensemble's worker threads
once printed "...ood_acc 0.241ensemble of 2 ..." on one line)."""

import threading

from trainers.console import print_line


def test_lines_from_two_threads_stay_whole(capsys):
    def write(tag):
        for i in range(2000):
            print_line(f"{tag} {i} " + "x" * 40)

    threads = [threading.Thread(target=write, args=(tag,)) for tag in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4000
    assert all(len(line.split()) == 3 and line.endswith("x" * 40) for line in lines)
