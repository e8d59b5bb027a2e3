"""RAM of a /link merge whose HISTORY.md is large (issue 32, item 13).

Each measurement runs in a fresh Python process: two workspaces are written (the joining one
with a HISTORY.md of --mb megabytes, the other with a few entries interleaving by time), then
memory.control.link.merge joins them, as `/link confirm` does. The figure is the process's peak
RSS (ru_maxrss) during the merge minus its RSS just before (modules loaded, files written), the
median of --runs processes. A baseline in the same run merges a 1 MB HISTORY.md, so the ratio
(large / baseline) says whether the merge's RAM grows with the file.

Run: python bench/link_merge_bench.py                 (60 MB, 3 runs)
     python bench/link_merge_bench.py --staying       (the large file is the person's)
     python bench/link_merge_bench.py --mb 20 --runs 1
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ENTRY = "Talked about the garden, the bees and the weather in some detail; nothing urgent. " * 3


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def one(folder: Path, megabytes: float, staying: bool) -> dict[str, float]:
    """In this process: write, merge, and report the merge's RAM."""
    from memory.control.link import merge
    from memory.links import LinkTable
    from memory.workspace import Workspaces

    workspaces = Workspaces(folder)
    joining, small = workspaces.get("discord-77"), workspaces.get("telegram-42")
    if staying:  # the large HISTORY.md is the person's, the joining account's is small
        joining, small = small, joining
    size, n = 0, 0
    with open(joining.history_path, "w", encoding="utf-8") as out:
        while size < megabytes * 1_000_000:
            day, minute = divmod(n, 1440)
            text = f"[{2020 + day // 365:04d}-{day % 365 // 28 + 1:02d}-{day % 28 + 1:02d} "
            text += f"{minute // 60:02d}:{minute % 60:02d}] {ENTRY}{n}.\n\n"
            out.write(text)
            size += len(text)
            n += 1
    for k in range(20):
        small.memory.append_history(f"[2021-0{k % 9 + 1}-10 10:0{k % 10}] Staying entry {k}.")
    workspaces.forget_user("discord-77")
    workspaces.forget_user("telegram-42")
    before = _rss_kb()
    merged = merge(workspaces, LinkTable(folder), "discord-77", "telegram-42")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert merged.entries == (20 if staying else n), (merged.entries, n)
    return {"before_mb": before / 1024, "peak_mb": peak / 1024, "grew_mb": (peak - before) / 1024}


def measure(megabytes: float, staying: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        flag = ["--staying"] if staying else []
        out = subprocess.run(
            [sys.executable, __file__, "--child", folder, "--mb", str(megabytes), *flag],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=60.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--staying", action="store_true", help="the large HISTORY.md is the staying person's"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one(Path(args.child), args.mb, args.staying)))
        return
    base = [measure(1.0, args.staying) for _ in range(args.runs)]
    large = [measure(args.mb, args.staying) for _ in range(args.runs)]
    base_grew = statistics.median(r["grew_mb"] for r in base)
    grew = statistics.median(r["grew_mb"] for r in large)
    before = statistics.median(r["before_mb"] for r in large)
    peak = statistics.median(r["peak_mb"] for r in large)
    whose = "the staying person's" if args.staying else "the joining account's"
    print(f"merge of a {args.mb:g} MB HISTORY.md ({whose}), median of {args.runs} processes:")
    print(f"  RSS before the merge {before:.0f} MB, peak during it {peak:.0f} MB")
    print(f"  grew by {grew:.1f} MB (1 MB baseline: {base_grew:.1f} MB); "
          f"ratio {grew / max(base_grew, 0.1):.1f}x")  # fmt: skip


if __name__ == "__main__":
    main()
