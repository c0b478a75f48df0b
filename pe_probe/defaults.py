"""Defaults shared by the command line and the Python API, in a module light enough for the CLI's parser to
import (``pe_probe.compare`` pulls in numpy and more: 0.12 s on every ``--help``)."""

# Permutations and bootstrap resamples per source in `pe_probe.compare.compare` and `pe-probe compare`: fewer than
# one analysis's 1000, as many sources run
COMPARE_N_PERM = 200
COMPARE_N_BOOT = 200
