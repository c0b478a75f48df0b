"""Latin Square Task data: squares, rules, generation, splits, encoding and CSV files.

The rule and uniqueness checks here are written plainly (Python sets, own square enumeration) so they
test `trainers.tasks.lst` independently of its vectorised implementation.
"""

from __future__ import annotations

import itertools
import os
import time

import numpy as np
import pytest

from pe_probe.errors import InputError
from trainers.tasks.lst import (
    LEVELS,
    TARGET,
    PuzzleSet,
    classify,
    encode,
    generate,
    jaccard_distance,
    latin_squares,
    make_splits,
    read_puzzle_csv,
    solve_count,
    write_puzzle_csv,
)
from trainers.tasks.lst_generate import _far_from

RANGES = {"Binary": (6, 11), "Ternary": (5, 11), "Quaternary": (4, 9)}


# ---------------------------------------------------------------- plain, independent reference code
def plain_squares() -> np.ndarray:
    out = []
    for rows in itertools.product(itertools.permutations((1, 2, 3, 4)), repeat=4):
        if all(len({r[j] for r in rows}) == 4 for j in range(4)):
            out.append([v for r in rows for v in r])
    return np.array(out)


SQUARES = plain_squares()


def plain_answers(puzzle) -> set[int]:
    """Target shapes over every Latin square consistent with the givens."""
    p = np.asarray(puzzle)
    given = (p >= 1) & (p <= 4)
    ok = (SQUARES[:, given] == p[given]).all(1)
    return set(SQUARES[ok, int(np.argmax(p == TARGET))].tolist())


def plain_level(puzzle) -> tuple[str | None, int | None]:
    """The one-step rules of DESIGN.md section 6, written directly from their wording."""
    g = [list(map(int, puzzle[4 * i: 4 * i + 4])) for i in range(4)]
    t = list(map(int, puzzle)).index(TARGET)
    r, c = divmod(t, 4)

    def row(i):
        return {v for v in g[i] if 1 <= v <= 4}

    def col(j):
        return {g[i][j] for i in range(4) if 1 <= g[i][j] <= 4}

    shapes = {1, 2, 3, 4}
    R, C = row(r), col(c)
    if len(R | C) == 4:
        return None, None  # contradiction
    if len(R) == 3 or len(C) == 3:
        return "Binary", (shapes - R - C).pop()
    if len(R | C) == 3:
        return "Ternary", (shapes - R - C).pop()
    hidden = set()
    for s in shapes - R - C:
        others_in_row = [j for j in range(4) if j != c and g[r][j] == 0]
        others_in_col = [i for i in range(4) if i != r and g[i][c] == 0]
        if all(s in col(j) for j in others_in_row) or all(s in row(i) for i in others_in_col):
            hidden.add(s)
    if len(hidden) == 1:
        return "Quaternary", hidden.pop()
    return None, None


def random_puzzles(n: int, seed: int) -> np.ndarray:
    """Puzzles from random squares with a random target and random givens (any count 0-15)."""
    rng = np.random.default_rng(seed)
    out = np.zeros((n, 16), dtype=np.int8)
    for k in range(n):
        sq = SQUARES[rng.integers(len(SQUARES))]
        t = rng.integers(16)
        m = rng.random(16) < rng.uniform(0.2, 0.8)
        out[k] = np.where(m, sq, 0)
        out[k, t] = TARGET
    return out


def n_givens(p) -> int:
    return int(((np.asarray(p) >= 1) & (np.asarray(p) <= 4)).sum())


@pytest.fixture(scope="module")
def big():
    return generate(700, seed=11)


# ---------------------------------------------------------------- squares and rules
def test_576_latin_squares():
    sq = latin_squares()
    assert sq.shape == (576, 4, 4)
    assert set(np.unique(sq).tolist()) == {1, 2, 3, 4}
    for s in sq:
        assert all(sorted(s[i]) == [1, 2, 3, 4] and sorted(s[:, i]) == [1, 2, 3, 4] for i in range(4))
    assert len({s.tobytes() for s in sq}) == 576
    assert {s.tobytes() for s in sq.reshape(576, 16).astype(np.int64)} == {s.tobytes() for s in SQUARES}


def test_solve_count_matches_plain_brute_force():
    for p in random_puzzles(200, seed=3):
        n, answers = solve_count(p)
        given = (p >= 1) & (p <= 4)
        assert n == int((SQUARES[:, given] == p[given]).all(1).sum())
        assert answers == plain_answers(p)
    # an empty grid with a target: every square, every shape
    p = np.zeros(16, dtype=np.int8)
    p[5] = TARGET
    assert solve_count(p) == (576, {1, 2, 3, 4})


def test_classify_hand_examples():
    # Binary: the row shows 1, 2, 3 -> 4
    assert classify(np.array([5, 1, 2, 3] + [0] * 12)) == "Binary"
    # Ternary: row {1, 2}, column {3} -> 4, neither alone has three
    assert classify(np.array([5, 1, 2, 0, 3] + [0] * 11)) == "Ternary"
    # Quaternary: target (0,0); row 0 = 5 1 _ _; shape 2 sits in columns 2 and 3 -> only (0,0) left
    p = np.zeros(16, dtype=np.int8)
    p[[0, 1, 6, 11]] = [5, 1, 2, 2]
    assert classify(p) == "Quaternary" and solve_count(p)[1] == {2}
    # the same via the column: target (0,0); column 0 = 5 1 _ _; shape 2 sits in rows 2 and 3
    assert classify(p.reshape(4, 4).T.reshape(-1)) == "Quaternary"
    # nothing deducible in one step
    assert classify(np.array([5] + [0] * 15)) is None
    # accepts a 4x4 grid too
    assert classify(np.array([5, 1, 2, 3] + [0] * 12).reshape(4, 4)) == "Binary"


def test_classify_agrees_with_plain_checker_on_random_puzzles():
    puzzles = random_puzzles(2000, seed=5)
    seen_levels = set()
    for p in puzzles:
        level, answer = plain_level(p)
        assert classify(p) == level, p.reshape(4, 4)
        seen_levels.add(level)
        if level is not None:  # the one-step rules are sound: the answer is forced
            assert plain_answers(p) == {answer}
    assert seen_levels == {None, *LEVELS}


# ---------------------------------------------------------------- generation
def test_generated_puzzles_are_valid(big):
    assert len(big) == 3 * 700
    assert np.bincount(big.levels, minlength=3).tolist() == [700, 700, 700]
    assert big.puzzles.dtype == np.int8 and big.solutions.dtype == np.int8 and big.levels.dtype == np.int8
    assert np.all((big.puzzles == TARGET).sum(1) == 1)
    assert len({p.tobytes() for p in big.puzzles}) == len(big)  # no duplicates
    for p, s, lev in zip(big.puzzles, big.solutions, big.levels):
        name = LEVELS[lev]
        assert plain_answers(p) == {int(s)}  # exactly one consistent answer, and it is the label
        assert plain_level(p) == (name, int(s))  # class label by the independent rule checker
        lo, hi = RANGES[name]
        assert lo <= n_givens(p) <= hi


def test_givens_span_ranges_and_targets_span_grid(big):
    for i, name in enumerate(LEVELS):
        counts = {n_givens(p) for p in big.puzzles[big.levels == i]}
        assert counts == set(range(RANGES[name][0], RANGES[name][1] + 1))
    assert set(np.argmax(big.puzzles == TARGET, axis=1).tolist()) == set(range(16))
    assert set(big.solutions.tolist()) == {1, 2, 3, 4}


def test_generation_is_seeded():
    a, b, c = generate(40, seed=1), generate(40, seed=1), generate(40, seed=2)
    assert np.array_equal(a.puzzles, b.puzzles) and np.array_equal(a.solutions, b.solutions)
    assert not np.array_equal(a.puzzles, c.puzzles)


def test_custom_givens_and_bad_arguments():
    ps = generate(30, seed=0, givens={"Quaternary": (4, 4)})
    q = ps.puzzles[ps.levels == 2]
    assert len(q) == 30 and all(n_givens(p) == 4 for p in q)
    with pytest.raises(InputError, match="unknown level"):
        generate(5, givens={"Easy": (1, 2)})
    with pytest.raises(InputError, match="givens"):
        generate(5, givens={"Binary": (9, 3)})
    with pytest.raises(InputError, match="could not generate"):
        generate(5, givens={"Binary": (0, 2)})  # Binary needs three givens in a line
    with pytest.raises(InputError):
        generate(-1)


def test_shortfall_names_command_line_fixes(monkeypatch):
    import trainers.tasks.lst_generate as gen

    monkeypatch.setattr(gen, "_MAX_EMPTY_BATCHES", 2)  # give up fast
    ood = generate(36, seed=5)
    # every cell is some held-out puzzle's target, so every candidate shares that (cell, 5) pair with
    # one of them: distance 1.0 is out of reach
    assert set(np.argmax(ood.puzzles == TARGET, axis=1).tolist()) == set(range(16))
    with pytest.raises(InputError) as info:
        generate(50, seed=0, exclude=ood, min_jaccard=1.0)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith("could not generate 50 Binary puzzles at Jaccard distance >= 1.0 from all 108 held-out")
    assert "found 0" in msg and "lower --min-jaccard (default 0.8)" in msg
    # no option that does not exist on the command line, and no fix that cannot help (none were found)
    assert "givens" not in msg and "min_jaccard" not in msg and "--n-per-level" not in msg
    # when some were found, asking for fewer is offered too
    msg = gen._shortfall_message(0, 50, 23, 6, 11, ood, 0.84)
    assert msg.endswith("lower --min-jaccard (default 0.8), or ask for fewer puzzles per level with --n-per-level")
    assert "found 23" in msg
    # from Python with a custom givens range and no held-out set: the range is the fix
    with pytest.raises(InputError, match=r"found 0.*widen the givens range \(0-2 now, default 6-11\)$"):
        generate(5, givens={"Binary": (0, 2)})


def test_9000_puzzles_generate_fast():
    t0 = time.perf_counter()
    ps = generate(3000, seed=0)
    dt = time.perf_counter() - t0
    print(f"\ngenerate(3000 per level) = {len(ps)} puzzles in {dt:.2f} s")
    assert len(ps) == 9000 and np.bincount(ps.levels).tolist() == [3000] * 3
    assert dt < 60


# ---------------------------------------------------------------- Jaccard and splits
def plain_jaccard(p, q) -> float:
    a = {(i, int(v)) for i, v in enumerate(p) if v}
    b = {(i, int(v)) for i, v in enumerate(q) if v}
    return 1 - len(a & b) / len(a | b)


def test_jaccard_distance():
    a = np.array([5, 1] + [0] * 14)
    b = np.array([5, 2] + [0] * 14)
    d = jaccard_distance(a[None], np.stack([a, b]))
    assert d.shape == (1, 2) and d[0, 0] == 0.0 and d[0, 1] == pytest.approx(2 / 3)
    ps = PuzzleSet(random_puzzles(30, seed=8), np.ones(30), np.zeros(30))
    qs = random_puzzles(20, seed=9)
    d = jaccard_distance(ps, qs)
    assert d.shape == (30, 20) and d.dtype == np.float64
    for i in range(30):
        for j in range(20):
            assert d[i, j] == pytest.approx(plain_jaccard(ps.puzzles[i], qs[j]), abs=1e-12)
    # exactly 4/5 compares equal to the literal threshold
    x = np.array([5, 1, 0, 0, 0, 0, 0, 0, 2, 3, 4, 1, 2, 0, 0, 0])  # 7 pairs
    y = np.array([5, 1, 4, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2])  # 6 pairs, 2 shared -> 2/11
    z = np.array([5, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 3, 2])  # 5 pairs, 2 shared -> 2/10
    assert jaccard_distance(x[None], z[None])[0, 0] == 0.8
    assert jaccard_distance(x[None], y[None])[0, 0] > 0.8


def test_exclude_larger_than_one_block():
    # The exclusion runs in blocks of 2,048 puzzles. Fill the first block with a puzzle that is far
    # from everything (only the target) and put the unfiltered result in the second block.
    free = generate(10, seed=8)
    lone = np.zeros((2048, 16), dtype=np.int8)
    lone[:, 0] = TARGET
    exclude = PuzzleSet.concat([PuzzleSet(lone, np.ones(2048), np.zeros(2048)), free])
    ps = generate(10, seed=8, exclude=exclude, min_jaccard=0.8)
    assert jaccard_distance(ps, exclude).min() >= 0.8
    assert not {p.tobytes() for p in ps.puzzles} & {p.tobytes() for p in free.puzzles}


@pytest.fixture(scope="module")
def splits():
    return make_splits(n_per_level=300, n_ood_per_level=12, seed=4)


def test_make_splits_sizes_and_stratification(splits):
    train, test, ood = splits["train"], splits["test"], splits["ood"]
    assert np.bincount(train.levels).tolist() == [270] * 3
    assert np.bincount(test.levels).tolist() == [30] * 3
    assert np.bincount(ood.levels).tolist() == [12] * 3
    keys = lambda ps: {p.tobytes() for p in ps.puzzles}  # noqa: E731
    assert not keys(train) & keys(test) and not keys(train) & keys(ood) and not keys(test) & keys(ood)


def test_make_splits_ood_filter_holds(splits):
    for part in ("train", "test"):
        d = jaccard_distance(splits[part], splits["ood"])
        assert d.min() >= 0.8
    # the filter is not vacuous: unfiltered puzzles do come closer than 0.8 to the OOD set
    assert jaccard_distance(generate(300, seed=99), splits["ood"]).min() < 0.8


def test_make_splits_uses_user_ood_set():
    user = generate(5, seed=123)
    sp = make_splits(n_per_level=60, ood=user, min_jaccard=0.75, seed=1)
    assert sp["ood"] is user
    assert jaccard_distance(PuzzleSet.concat([sp["train"], sp["test"]]), user).min() >= 0.75
    with pytest.raises(InputError):
        make_splits(n_per_level=10, ood=user.puzzles)


# ---------------------------------------------------------------- encoding
def test_encode():
    ps = generate(20, seed=3)
    x, y = encode(ps)
    assert x.shape == (60, 16, 5) and x.dtype == np.float32
    assert y.shape == (60,) and y.dtype == np.int64
    assert np.array_equal(y, ps.solutions.astype(np.int64) - 1) and set(y.tolist()) <= {0, 1, 2, 3}
    for xi, p in zip(x, ps.puzzles):
        for cell, v in enumerate(p):
            expected = np.zeros(5, dtype=np.float32)
            if v:
                expected[v - 1] = 1.0
            assert np.array_equal(xi[cell], expected)
    assert np.all(x[:, :, 4].sum(1) == 1)


def test_puzzleset_helpers_and_validation():
    ps = generate(4, seed=0)
    sub = ps.subset([0, 5, 9])
    assert len(sub) == 3 and np.array_equal(sub.puzzles, ps.puzzles[[0, 5, 9]])
    both = PuzzleSet.concat([ps, sub])
    assert len(both) == 15 and np.array_equal(both.levels[12:], sub.levels)
    assert len(PuzzleSet.concat([])) == 0
    with pytest.raises(ValueError):
        PuzzleSet(np.zeros((2, 16)), np.ones(2), np.zeros(2))  # no target
    with pytest.raises(InputError):
        PuzzleSet(ps.puzzles, ps.solutions[:3], ps.levels)
    with pytest.raises(InputError, match="shape"):
        PuzzleSet(np.zeros((16, 15)), np.ones(16), np.zeros(16))
    grids = PuzzleSet(ps.puzzles.reshape(-1, 4, 4), ps.solutions, ps.levels)
    assert np.array_equal(grids.puzzles, ps.puzzles)


# ---------------------------------------------------------------- CSV
def test_csv_round_trip(tmp_path):
    ps = generate(10, seed=7)
    path = tmp_path / "sub" / "puzzles.csv"
    write_puzzle_csv(ps, path)
    assert os.listdir(path.parent) == ["puzzles.csv"]  # no temporary file left behind
    assert path.read_text().splitlines()[0] == "puzzles,solutions,condition"
    back = read_puzzle_csv(path)
    assert np.array_equal(back.puzzles, ps.puzzles)
    assert np.array_equal(back.solutions, ps.solutions)
    assert np.array_equal(back.levels, ps.levels)


def test_csv_lenient_formats(tmp_path):
    path = tmp_path / "study.csv"
    path.write_text(
        "id,Puzzles,solutions,Condition,notes\n"
        "1,512300000000000,3,quaternary,lost one leading zero\n"  # 3 has no other place in row 1
        '2,"5123000000000000",4,BINARY,quoted\n'
        "\n"
        "3,5123000000000000.0,4.0, Binary ,spreadsheet floats\n"
        '4,"[5, 1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]",4,Binary,list\n'
    )
    ps = read_puzzle_csv(path)
    assert len(ps) == 4
    assert "".join(map(str, ps.puzzles[0])) == "0512300000000000"
    assert np.all(ps.puzzles[1:] == np.array([5, 1, 2, 3] + [0] * 12))
    assert ps.solutions.tolist() == [3, 4, 4, 4] and ps.levels.tolist() == [2, 0, 0, 0]


GOOD = "5123000000000000"


@pytest.mark.parametrize(
    "row, match",
    [
        ("51a3000000000000,4,Binary", "'puzzles' must be 16 digits"),
        ("51230000000000000,4,Binary", "'puzzles' must be 16 digits"),  # 17 digits
        ("5123000000000005,4,Binary", "exactly one 5"),
        ("0123000000000000,4,Binary", "exactly one 5"),
        ("5123600000000000,4,Binary", "16 digits 0-5"),
        (f"{GOOD},0,Binary", "'solutions' must be a shape 1-4"),
        (f"{GOOD},x,Binary", "'solutions'"),
        (f"{GOOD},4,Hard", "'condition' must be one of"),
        (f"{GOOD},2,Binary", "solution 2 is impossible"),
        ("5120010000000000,3,Binary", "column 2"),  # shape 1 twice in column 2
        ("5110000000000000,3,Binary", "row 1"),
        ("5100002000020000,3,Quaternary", "no 4x4 Latin square completes.*only shape 2"),  # 2 is forced
        (f"{GOOD},4", "expected 3 fields"),
        # the answer must be unique: squares completing these givens put 1, 2 or 3 at the target
        ("1234000000000005,1,Binary", "not unique.*shape 1, 2 or 3"),
        ("5000000000000000,3,Ternary", "not unique.*shape 1, 2, 3 or 4"),
        # givens that no Latin square completes, whatever the target (row 1 needs 4 in column 4, which has one)
        ("1230000400005000,2,Binary", "no 4x4 Latin square completes this puzzle's givens"),
        # 'condition' must be the level the one-step rules give (the generator's classifier)
        (f"{GOOD},4,Ternary", "'condition' is Ternary, but the puzzle is Binary: the target's row or column alone"),
        (f"{GOOD},4,Quaternary", "'condition' is Quaternary, but the puzzle is Binary"),
        ("0512300000000000,3,Binary", "'condition' is Binary, but the puzzle is Quaternary.*hidden single"),
        ("5120300000000000,4,Binary", "'condition' is Binary, but the puzzle is Ternary"),
        # a unique answer that takes several steps: no level
        ("4000021001000050,3,Quaternary", "no single rule.*several steps"),
    ],
)
def test_csv_malformed_rows_name_file_and_line(tmp_path, row, match):
    path = tmp_path / "puzzles.csv"
    path.write_text(f"puzzles,solutions,condition\n{GOOD},4,Binary\n\n{row}\n")
    with pytest.raises(InputError, match=match) as info:
        read_puzzle_csv(path)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(f"{path} line 4:"), msg


def test_csv_refusals_say_how_to_fix(tmp_path):
    path = tmp_path / "p.csv"
    for row, fix in [
        ("1234000000000005,1,Binary", "add givens until only 1 fits"),
        (f"{GOOD},4,Ternary", "write Binary in 'condition'"),
    ]:
        path.write_text(f"puzzles,solutions,condition\n{row}\n")
        with pytest.raises(InputError, match=fix):
            read_puzzle_csv(path)


def test_csv_first_bad_line_wins(tmp_path):
    # The answer checks run over all rows at once after reading; a format error further down must not
    # hide a bad answer above it.
    path = tmp_path / "p.csv"
    path.write_text(f"puzzles,solutions,condition\n{GOOD},4,Binary\n1234000000000005,1,Binary\n{GOOD},x,Binary\n")
    with pytest.raises(InputError, match=f"^{path} line 3: the answer is not unique"):
        read_puzzle_csv(path)
    path.write_text(f"puzzles,solutions,condition\n{GOOD},x,Binary\n1234000000000005,1,Binary\n")
    with pytest.raises(InputError, match=f"^{path} line 2: 'solutions'"):
        read_puzzle_csv(path)


def test_csv_accepts_every_generated_puzzle(big, tmp_path):
    # The reader's uniqueness and level checks are the generator's: all of its puzzles load back.
    path = tmp_path / "big.csv"
    write_puzzle_csv(big, path)
    back = read_puzzle_csv(path)
    assert np.array_equal(back.puzzles, big.puzzles) and np.array_equal(back.levels, big.levels)
    assert np.array_equal(back.solutions, big.solutions)


def test_csv_level_and_answer_checks_match_plain_checker(tmp_path):
    # Random puzzles, labelled with the square's shape and a random level: the reader accepts exactly
    # those the independent checker finds unique, one-step and of that level.
    rng = np.random.default_rng(17)
    rows, expect = [], []
    for p in random_puzzles(400, seed=21):
        answers = plain_answers(p)
        level, _ = plain_level(p)
        if not answers:
            continue
        sol = min(answers)
        # skip rows the per-row rule check refuses (a shape in the target's row/column is a format error)
        t = int(np.argmax(p == TARGET))
        if sol in p.reshape(4, 4)[t // 4] or sol in p.reshape(4, 4)[:, t % 4]:
            continue
        label = level if level is not None and rng.random() < 0.5 else LEVELS[rng.integers(3)]
        rows.append(("".join(map(str, p)), sol, label))
        expect.append(answers == {sol} and level == label)
    assert any(expect) and not all(expect)
    path = tmp_path / "one.csv"
    for (puzzle, sol, label), ok in zip(rows, expect):
        path.write_text(f"puzzles,solutions,condition\n{puzzle},{sol},{label}\n")
        if ok:
            assert len(read_puzzle_csv(path)) == 1
        else:
            with pytest.raises(InputError, match=f"^{path} line 2: "):
                read_puzzle_csv(path)


def test_csv_bad_files(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        read_puzzle_csv(tmp_path / "missing.csv")
    p = tmp_path / "cols.csv"
    p.write_text("puzzle,solution\n5123000000000000,4\n")
    with pytest.raises(InputError, match="missing column"):
        read_puzzle_csv(p)
    p.write_text("puzzles,solutions,condition\n")
    with pytest.raises(InputError, match="no puzzles"):
        read_puzzle_csv(p)
    p.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(InputError):
        read_puzzle_csv(p)


def test_csv_rows_and_paths_that_were_taken_or_misnamed(tmp_path):
    """Review: extra non-empty fields and a repeated header column were read silently, /dev/zero and a folder
    were 'no such file'."""
    path = tmp_path / "ok.csv"
    write_puzzle_csv(generate(3, seed=1), path)
    header, row = path.read_text().splitlines()[:2]
    p = tmp_path / "p.csv"
    p.write_text(f"{header}\n{row},,\n")  # empty cells past the header (trailing commas): read
    assert len(read_puzzle_csv(p)) == 1
    p.write_text(f"{header}\n{row},oops\n")
    with pytest.raises(InputError, match="line 2: expected 3 fields as in the header, got 4; give every row"):
        read_puzzle_csv(p)
    p.write_text(f"{header},puzzles\n{row},{row.split(',')[0]}\n")
    with pytest.raises(InputError, match="column puzzles appears twice in the header"):
        read_puzzle_csv(p)
    with pytest.raises(InputError, match="not a regular file"):
        read_puzzle_csv("/dev/zero")
    with pytest.raises(InputError, match="is a folder"):
        read_puzzle_csv(tmp_path)


@pytest.mark.parametrize("n", [6, 17])
def test_each_levels_test_share_is_the_rounded_fraction_the_config_check_counts(n):
    """Kills: n_test floored instead of rounded (trainers.config.validate counts round(n * test_frac): with
    n = 6 it accepts the config, a floored split would then hold no test puzzle)."""
    sp = make_splits(n_per_level=n, test_frac=0.1, n_ood_per_level=2, min_jaccard=0.5, seed=2)
    assert np.bincount(sp["test"].levels, minlength=3).tolist() == [round(n * 0.1)] * 3
    assert np.bincount(sp["train"].levels, minlength=3).tolist() == [n - round(n * 0.1)] * 3


def test_a_candidate_at_exactly_the_minimum_jaccard_distance_is_kept():
    """Kills: the OOD filter's ">= min_jaccard" made strict."""
    a = np.array([[5, 1, 2] + [0] * 13], dtype=np.int8)  # pairs: (0, ?), (1, 1), (2, 2)
    b = np.array([[5, 0, 0, 3, 4] + [0] * 11], dtype=np.int8)  # pairs: (0, ?), (3, 3), (4, 4)
    assert jaccard_distance(a, b)[0, 0] == 0.8  # |A & B| = 1, |A | B| = 5
    excluded = PuzzleSet(b, [1], [0])
    assert _far_from(a, excluded, 0.8).tolist() == [True]
    assert _far_from(a, excluded, 0.81).tolist() == [False]


def test_make_splits_follows_its_seed():
    """Kills: make_splits ignoring data.seed."""
    kw = dict(n_per_level=10, n_ood_per_level=2, min_jaccard=0.5)
    a, b, c = make_splits(seed=1, **kw), make_splits(seed=1, **kw), make_splits(seed=2, **kw)
    assert all(np.array_equal(a[k].puzzles, b[k].puzzles) for k in a)
    assert not np.array_equal(a["train"].puzzles, c["train"].puzzles)
