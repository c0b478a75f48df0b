"""The Latin Square Task of Ito et al. (arXiv 2406.08272): puzzles, difficulty, splits, CSV files.

The task
--------
A 4x4 grid, four shapes (tokens 1..4), blanks (0) and one target cell "?" (token 5). The rule: each
shape at most once per row and per column (a Latin square, no Sudoku boxes). The answer is the
target's shape; a puzzle is valid only if exactly one shape is possible there, checked by brute force
over all 576 order-4 Latin squares (`solve_count`). The rest of the grid need not be unique.

Difficulty (`classify`): the easiest level whose rule determines the target in ONE step from the
givens; puzzles that need several steps are rejected (``None``). With R the shapes in the target's
row and C those in its column:

Binary
    R alone or C alone already holds the other three shapes (|R| = 3 or |C| = 3).
Ternary
    Not Binary, but R and C together exclude three shapes (|R u C| = 3).
Quaternary (hidden single)
    Not Binary or Ternary, but one shape s, in neither R nor C, has no other place in the target's
    row: every other blank cell of that row already has s in its own column. Or the same with row and
    column swapped (every other blank cell of the target's column has s in its own row). Exactly one
    such s must exist.

Givens besides the target: Binary 6-11, Ternary 5-11, Quaternary 4-9 (the study's ranges).

The data
--------
`generate` draws balanced, deduplicated sets by rejection sampling; `make_splits` builds the study's
train / test / OOD split (OOD first; every train and test puzzle at Jaccard distance >= 0.8 from every
OOD puzzle); `encode` gives the model inputs (16 tokens x 5-channel one-hot); `read_puzzle_csv` and
`write_puzzle_csv` handle the study's CSV format. This module only re-exports: the code lives in
`lst_puzzles` (container, squares, rules), `lst_generate` (sampling, splits) and `lst_csv` (files).
"""

from trainers.tasks.lst_csv import read_puzzle_csv, write_puzzle_csv
from trainers.tasks.lst_generate import generate, make_splits
from trainers.tasks.lst_puzzles import (
    GIVENS_RANGE,
    LEVELS,
    TARGET,
    PuzzleSet,
    classify,
    classify_batch,
    encode,
    jaccard_distance,
    latin_squares,
    n_givens,
    solve_count,
    target_answers,
)

__all__ = [
    "GIVENS_RANGE",
    "LEVELS",
    "TARGET",
    "PuzzleSet",
    "classify",
    "classify_batch",
    "encode",
    "generate",
    "jaccard_distance",
    "latin_squares",
    "make_splits",
    "n_givens",
    "read_puzzle_csv",
    "solve_count",
    "target_answers",
    "write_puzzle_csv",
]
