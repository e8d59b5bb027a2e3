"""A line diff whose work is bounded, for /memory history and /memory undo.

WHY not difflib: SequenceMatcher(autojunk=False) is quadratic or worse on many equal lines (an
8,008-line MEMORY.md of "- x" took 13 s), and with autojunk it calls such lines junk and
reports them all as changed, so a count made one way and a diff printed the other disagreed.
Here the common head and tail are cut first (most edits touch a few lines), then the middle is
diffed by Myers' O(ND) algorithm within a step budget; past the budget the middle is reported
as replaced whole. Either way the counts are those of the script that is printed.
"""

from __future__ import annotations

from dataclasses import dataclass

WORK_BUDGET = 100_000  # Myers steps (comparisons and diagonals): well under 0.1 s
EQUAL, REMOVED, ADDED = " ", "-", "+"


@dataclass(frozen=True)
class LineDiff:
    """An edit script: (EQUAL | REMOVED | ADDED, line) in order; `exact`: the shortest one was
    found (False: the changed middle is shown as removed, then added, whole)."""

    ops: list[tuple[str, str]]
    exact: bool

    @property
    def added(self) -> int:
        return sum(1 for tag, _ in self.ops if tag == ADDED)

    @property
    def removed(self) -> int:
        return sum(1 for tag, _ in self.ops if tag == REMOVED)


def diff_lines(old: list[str], new: list[str], budget: int = WORK_BUDGET) -> LineDiff:
    """The edit script from `old` to `new`, in at most about `budget` steps of work."""
    head = 0
    limit = min(len(old), len(new))
    while head < limit and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < limit - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    a, b = old[head : len(old) - tail], new[head : len(new) - tail]
    middle = _myers(a, b, budget)
    exact = middle is not None
    if middle is None:
        middle = [(REMOVED, line) for line in a] + [(ADDED, line) for line in b]
    ops = [(EQUAL, line) for line in old[:head]]
    ops += middle
    ops += [(EQUAL, line) for line in old[len(old) - tail :]]
    return LineDiff(ops, exact)


def _myers(a: list[str], b: list[str], budget: int) -> list[tuple[str, str]] | None:
    """A shortest edit script from `a` to `b`, or None when it costs more than `budget`."""
    n, m = len(a), len(b)
    if not n or not m:
        return [(REMOVED, line) for line in a] + [(ADDED, line) for line in b]
    offset = n + m + 1
    v = [0] * (2 * offset + 1)
    trace: list[list[int]] = []  # v's diagonals -d..d after each d, for the way back
    steps = 0
    for d in range(n + m + 1):
        for k in range(-d, d + 1, 2):
            if k == -d or (k != d and v[offset + k - 1] < v[offset + k + 1]):
                x = v[offset + k + 1]  # down: a line of b added
            else:
                x = v[offset + k - 1] + 1  # right: a line of a removed
            y = x - k
            start = x
            while x < n and y < m and a[x] == b[y]:
                x += 1
                y += 1
            steps += x - start + 1
            v[offset + k] = x
            if x >= n and y >= m:
                trace.append(v[offset - d : offset + d + 1])
                return _walk_back(a, b, trace)
        trace.append(v[offset - d : offset + d + 1])
        if steps > budget:
            return None
    return None  # not reached: d = n + m always ends


def _walk_back(a: list[str], b: list[str], trace: list[list[int]]) -> list[tuple[str, str]]:
    """The script read back from the furthest points of each d (trace[d][k + d])."""
    ops: list[tuple[str, str]] = []
    x, y = len(a), len(b)
    for d in range(len(trace) - 1, 0, -1):
        before = trace[d - 1]  # diagonals -(d-1)..(d-1)

        def at(k: int, row: list[int] = before, dd: int = d - 1) -> int:
            return row[k + dd]

        k = x - y
        if k == -d or (k != d and at(k - 1) < at(k + 1)):
            prev_k = k + 1
            prev_x = at(prev_k)
            prev_y = prev_x - prev_k
            mid_x, mid_y = prev_x, prev_y + 1
        else:
            prev_k = k - 1
            prev_x = at(prev_k)
            prev_y = prev_x - prev_k
            mid_x, mid_y = prev_x + 1, prev_y
        while x > mid_x and y > mid_y:
            x -= 1
            y -= 1
            ops.append((EQUAL, a[x]))
        if prev_k == k + 1:
            ops.append((ADDED, b[prev_y]))
        else:
            ops.append((REMOVED, a[prev_x]))
        x, y = prev_x, prev_y
    while x > 0 and y > 0:
        x -= 1
        y -= 1
        ops.append((EQUAL, a[x]))
    ops.reverse()
    return ops


def unified(diff: LineDiff, context: int = 1) -> list[str]:
    """The changed lines with `context` lines around them, under "@@ -a,b +c,d @@" headers."""
    ops = diff.ops
    changed = [i for i, (tag, _) in enumerate(ops) if tag != EQUAL]
    if not changed:
        return []
    hunks: list[tuple[int, int]] = []
    for i in changed:
        lo, hi = max(0, i - context), min(len(ops), i + context + 1)
        if hunks and lo <= hunks[-1][1]:
            hunks[-1] = (hunks[-1][0], max(hunks[-1][1], hi))
        else:
            hunks.append((lo, hi))
    old_at = [0] * (len(ops) + 1)  # line numbers before each op
    new_at = [0] * (len(ops) + 1)
    for i, (tag, _) in enumerate(ops):
        old_at[i + 1] = old_at[i] + (tag != ADDED)
        new_at[i + 1] = new_at[i] + (tag != REMOVED)
    lines = []
    for lo, hi in hunks:
        old_len, new_len = old_at[hi] - old_at[lo], new_at[hi] - new_at[lo]
        lines.append(f"@@ -{old_at[lo] + 1},{old_len} +{new_at[lo] + 1},{new_len} @@")
        lines += [tag + text for tag, text in ops[lo:hi]]
    return lines
