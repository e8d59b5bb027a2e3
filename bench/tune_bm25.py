"""Choose the ranking's parameters on the tuning half of bench/recall_life.py, check the rest.

Grid: BM25's k1 (how fast repeats of a word stop counting) and b (how much a long entry is
discounted), then the weights of another form of a word and of a word inside a longer one
(memory/search/stems.py), then whether entries holding more keywords (or all) come first. Each
setting is scored by MRR (then recall@5) on the tuning questions only; the chosen one is then
scored on the held-out questions and on bench/recall_eval.py's older set, which the tuning
never saw. The values chosen are the ones written in memory/search/engine.py and
memory/search/stems.py.

Run: python bench/tune_bm25.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import recall_eval
import recall_life

from memory.search import engine as search
from memory.search import stems

K1 = [0.6, 0.9, 1.2, 1.5, 2.0, 3.0]
B = [0.0, 0.1, 0.25, 0.5, 0.75]
FORMS = [0.5, 0.6, 0.7, 0.8, 0.9]  # below 1: the word itself must outrank its other forms
PARTS = [0.2, 0.35, 0.5, 0.7]


def measure(path: Path, questions: list[recall_life.Question]) -> tuple[float, float, float]:
    total, _ = recall_life.score(recall_life.ranked(path), questions)
    n = max(total.n, 1)
    return total.rr / n, total.top5 / n, total.top1 / n


def apply(k1: float, b: float, form: float, part: float, all_first: str) -> None:
    search.BM25_K1, search.BM25_B, search.WORDS_TIER = k1, b, all_first
    stems.FORM, stems.PART = form, part


def main() -> None:
    life = recall_life.build()
    tune = recall_life.split(life.questions, "tune")
    held = recall_life.split(life.questions, "held")
    chosen = [search.BM25_K1, search.BM25_B, stems.FORM, stems.PART, search.WORDS_TIER]
    with tempfile.TemporaryDirectory(prefix="lightgrep-tune-") as tmp:
        path = recall_life.write(Path(tmp), life)
        print(f"Tuning on {len(tune)} questions, checking on {len(held)} held-out ones")
        print(f"  now in the code: k1={chosen[0]} b={chosen[1]} form={chosen[2]} part={chosen[3]}"
              f" keywords-held-first={chosen[4]}")  # fmt: skip
        print("  MRR on the tuning half, k1 (rows) x b (columns):")
        print("        " + "".join(f"  b={b:<5}" for b in B))
        best = (-1.0, 0.0, 0.0, 0.0, 0.0)
        for k1 in K1:
            cells = []
            for b in B:
                apply(k1, b, chosen[2], chosen[3], chosen[4])
                mrr, top5, _ = measure(path, tune)
                cells.append(f"  {mrr:.4f} ")
                # ties go to the setting nearest the one in the code: change only what helps
                near = -abs(k1 - chosen[0]) - abs(b - chosen[1])
                best = max(best, (mrr, top5, near, k1, b))
            print(f"  k1={k1:<4}" + "".join(cells))
        k1, b = best[3], best[4]
        print(f"  best: k1={k1} b={b} (MRR {best[0]:.4f}, recall@5 {best[1]:.1%})")
        print("  MRR on the tuning half, form weight (rows) x part weight (columns):")
        print("          " + "".join(f"  part={p:<4}" for p in PARTS))
        best_w = (-1.0, 0.0, 0.0, 0.0, 0.0)
        for form in FORMS:
            cells = []
            for part in PARTS:
                apply(k1, b, form, part, chosen[4])
                mrr, top5, _ = measure(path, tune)
                cells.append(f"  {mrr:.4f}   ")
                near = -abs(form - chosen[2]) - abs(part - chosen[3])
                best_w = max(best_w, (mrr, top5, near, form, part))
            print(f"  form={form:<4}" + "".join(cells))
        form, part = best_w[3], best_w[4]
        print(f"  best: form={form} part={part} (MRR {best_w[0]:.4f})")
        flags = {}
        for all_first in ("count", "all", "none"):
            apply(k1, b, form, part, all_first)
            flags[all_first] = measure(path, tune)
            print(f"  keywords held first = {all_first}: MRR {flags[all_first][0]:.4f}")
        all_first = max(flags, key=lambda f: (flags[f], f == chosen[4]))
        for label, values in (("in the code", chosen), ("tuned", [k1, b, form, part, all_first])):
            apply(*values)
            mrr, top5, top1 = measure(path, held)
            print(
                f"  {label:12} k1={values[0]} b={values[1]} form={values[2]} part={values[3]} "
                f"held-first={values[4]}: held-out recall@1 {top1:.1%}, recall@5 {top5:.1%}, "
                f"MRR {mrr:.3f}"
            )
    for label, values in (("in the code", chosen), ("tuned", [k1, b, form, part, all_first])):
        apply(*values)
        print(f"  recall_eval.py set with the values {label}:")
        with tempfile.TemporaryDirectory(prefix="lightgrep-tune-") as tmp:
            recall_eval.evaluate(Path(tmp), show=0)
    apply(*chosen)


if __name__ == "__main__":
    main()
