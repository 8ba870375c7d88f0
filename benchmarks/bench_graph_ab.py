"""Two exported graphs of one model on the same passes over real MMLU prompts, alternating: what an export
change does to a pass.

The prompts are lm-eval's MMLU prompt (subject line, question, options A-D, "Answer:") of a seeded sample of
real MMLU test items (``../shared/data/mmlu``), tokenised with the export's tokenizer. The passes:

- a prefill of 8 prompts, and of 16, left-padded to the longest;
- a continued pass: the 8 prompts' KV cache, then 20 new tokens a row (the start of the row's four
  option texts), scored (an option-block-like pass);
- a decode step: one token on each of the 16 prompts' caches.

It prints the largest difference between the two graphs' next-token log-probs on the first prefill, then
the times. Both graphs are opened as sago opens a graph on CPU (``open_session``, default ``SessionOptions``); each
pass runs once to warm up, then ``--repeats`` times per graph, the graphs alternating; medians.

The graph of another export format comes from the code that made it, e.g. a git worktree of the earlier
commit with its own cache:

    git worktree add /tmp/before HEAD~1
    (cd /tmp/before && SAGO_CACHE_DIR=/tmp/cache-before python -m sago_fast.cli.app export -m FOLDER)
    SAGO_CACHE_DIR=/tmp/cache-after python -m sago_fast.cli.app export -m FOLDER
    python benchmarks/bench_graph_ab.py /tmp/cache-before/exports/*/model.onnx /tmp/cache-after/exports/*/model.onnx
"""

from __future__ import annotations

import argparse
import csv
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from real_model import mmlu_sample

from sago_fast.runtime.batching import left_pad
from sago_fast.runtime.decode import continue_feeds, past_input_names, prefill_feeds
from sago_fast.runtime.session import open_session

NEW_TOKENS = 20  # the continued pass's new tokens a row


def mmlu_prompts(n: int) -> list[tuple[str, str]]:
    """(lm-eval's MMLU prompt, the four option texts joined) of ``n`` real items across subjects."""
    prompts = []
    with tempfile.TemporaryDirectory() as work:
        folder = mmlu_sample(Path(work) / "mmlu", n)
        for file in sorted(folder.glob("*_test.csv")):
            subject = file.name.removesuffix("_test.csv").replace("_", " ")
            with file.open(newline="", encoding="utf-8") as handle:
                for question, *choices, _ in csv.reader(handle):
                    options = "".join(
                        f"\n{label}. {text}" for label, text in zip("ABCD", choices, strict=True)
                    )
                    prompt = (
                        f"The following are multiple choice questions (with answers) about {subject}.\n\n"
                        f"{question.strip()}{options}\nAnswer:"
                    )
                    prompts.append((prompt, " " + " ".join(choices)))
    return prompts[:n]


def scored(feeds: dict[str, np.ndarray], targets: int) -> dict[str, np.ndarray]:
    """``feeds`` with their last ``targets`` new tokens as the tokens scored (an option-block-like pass)."""
    ids = feeds["input_ids"]
    feeds["target_ids"] = np.ascontiguousarray(ids[:, ids.shape[1] - targets :])
    return feeds


def cache_of(session: Any, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The KV cache a pass leaves, keyed by the past input names it goes back in as."""
    names = [o.name for o in session.get_outputs() if o.name.startswith("present.")]
    return dict(zip(past_input_names(names), session.run(names, feeds), strict=True))


def passes(session: Any, tokenizer: Any, prompts: list[tuple[str, str]]) -> dict[str, dict[str, np.ndarray]]:
    """The four passes' feeds for one graph (its own caches)."""
    pad = tokenizer.token_to_id("<|endoftext|>") or 0
    encoded = [tokenizer.encode(prompt).ids for prompt, _ in prompts]
    options = [tokenizer.encode(text).ids[:NEW_TOKENS] for _, text in prompts]
    padded = {rows: left_pad(encoded[:rows], pad) for rows in (8, 16)}  # (ids, mask) of the first rows
    prefills = {rows: prefill_feeds(session, ids, mask) for rows, (ids, mask) in padded.items()}
    out = {
        f"prefill of {rows} prompts ({int(padded[rows][1].sum())} tokens)": feeds
        for rows, feeds in prefills.items()
    }
    mask = padded[8][1]
    new = np.array([row + [pad] * (NEW_TOKENS - len(row)) for row in options[:8]], dtype=np.int64)
    mask_new = np.concatenate([mask, np.ones_like(new)], axis=1)
    past = cache_of(session, prefills[8])
    out[f"8 x {NEW_TOKENS} on their prompts' cache"] = scored(
        continue_feeds(session, new, mask_new, past), NEW_TOKENS - 1
    )
    ids, mask = padded[16]
    step = ids[:, -1:].copy()
    mask_step = np.concatenate([mask, np.ones_like(step)], axis=1)
    out["decode step of 16 rows"] = continue_feeds(session, step, mask_step, cache_of(session, prefills[16]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(args.after.parent / "tokenizer.json"))
    prompts = mmlu_prompts(16)
    sessions = [open_session(path, "cpu")[0] for path in (args.before, args.after)]
    feeds = [passes(session, tokenizer, prompts) for session in sessions]
    names = [[o.name for o in s.get_outputs() if not o.name.startswith("present.")] for s in sessions]
    first = next(iter(feeds[0]))
    logprobs = [s.run(["next_logprobs"], f[first])[0] for s, f in zip(sessions, feeds, strict=True)]
    print(
        f"largest |after - before| next-token log-prob, {first}: {np.abs(logprobs[1] - logprobs[0]).max():.2e}"
    )
    print(f"{'pass':>42}  {'before':>9}  {'after':>9}  after/before")
    for shape in feeds[0]:
        times: list[list[float]] = [[], []]
        for repeat in range(args.repeats + 1):
            for i, session in enumerate(sessions):
                start = time.perf_counter()
                session.run(names[i], feeds[i][shape])
                if repeat:  # the first round warms up
                    times[i].append(time.perf_counter() - start)
        before, after = (statistics.median(t) for t in times)
        print(f"{shape:>42}  {before * 1e3:7.1f} ms  {after * 1e3:7.1f} ms  {after / before:.3f}")


if __name__ == "__main__":
    main()
