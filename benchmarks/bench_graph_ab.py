"""Two exported graphs of one model on the same feeds, alternating: what an export change does to a pass.

Both graphs are opened as sago opens a graph on CPU (``open_session`` with the default ``SessionOptions``);
each shape (prefill, an option-block-like pass on a cache, a decode step) runs once to warm up, then
``--repeats`` times per graph, the graphs alternating; medians. Random token ids, no padding.

The graph of another export format comes from the code that made it, e.g. from a git worktree of the
earlier commit with its own ``--cache-dir``:

    git worktree add /tmp/before HEAD~1
    (cd /tmp/before && python -m sago_fast.cli.app export -m FOLDER --cache-dir /tmp/cache-before)
    python -m sago_fast.cli.app export -m FOLDER --cache-dir /tmp/cache-after
    python benchmarks/bench_graph_ab.py /tmp/cache-before/exports/*/model.onnx /tmp/cache-after/exports/*/model.onnx
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from profile_ort_ops import prefill_feeds

from sago_fast.runtime.session import open_session

SHAPES = ((8, 110, 0), (4, 100, 0), (8, 20, 110), (16, 1, 120))  # (batch, new tokens, cached positions)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--vocab", type=int, default=49152, help="token ids are drawn below it")
    args = parser.parse_args()
    sessions = [open_session(path, "cpu")[0] for path in (args.before, args.after)]
    print(f"{'shape':>22}  {'before':>9}  {'after':>9}  after/before")
    for batch, tokens, past in SHAPES:
        feeds = [prefill_feeds(s, batch, tokens, args.vocab, past) for s in sessions]
        names = [[o.name for o in s.get_outputs() if not o.name.startswith("present.")] for s in sessions]
        times: list[list[float]] = [[], []]
        for repeat in range(args.repeats + 1):
            for i, session in enumerate(sessions):
                start = time.perf_counter()
                session.run(names[i], feeds[i])
                if repeat:  # the first round warms up
                    times[i].append(time.perf_counter() - start)
        before, after = (statistics.median(t) for t in times)
        shape = f"{batch} x {tokens} on {past}"
        print(f"{shape:>22}  {before * 1e3:7.1f} ms  {after * 1e3:7.1f} ms  {after / before:.3f}")


if __name__ == "__main__":
    main()
