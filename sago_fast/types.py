"""Frozen records passed between stages, with array shapes written down."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sago_fast.errors import InputError


@dataclass(frozen=True)
class ProbeResult:
    """What one forward pass over a list of prompts returns, in the order the texts were given.

    Layer index 0 is the embedding output and the last index is after the final norm: exactly the
    ``output_hidden_states`` convention of HF transformers.
    """

    hidden_last: np.ndarray  # (n_layers + 1, batch, d_model) float32: hidden state at the last prompt token
    hidden_mean: np.ndarray  # (n_layers + 1, batch, d_model) float32: attention-mask mean over the prompt
    next_logprobs: np.ndarray  # (batch, vocab) float32: log-softmax of the next-token logits
    n_tokens: np.ndarray  # (batch,) int64: prompt length in tokens (as prefilled: after any cut)
    n_cut: np.ndarray | None = None  # (batch,) int64: tokens cut from the prompt's left to fit (None: 0)

    @property
    def batch_size(self) -> int:
        return int(self.next_logprobs.shape[0])

    @classmethod
    def in_order(cls, parts: Sequence[tuple[Sequence[int], ProbeResult]], n: int) -> ProbeResult:
        """One result in prompt order from the results of disjoint row groups (``parts``: rows, result); a
        single group already in order is returned as is, without a copy of its (n, vocab) arrays."""
        if len(parts) == 1 and list(parts[0][0]) == list(range(n)):
            return parts[0][1]
        first = parts[0][1]
        hidden_last = np.empty((first.hidden_last.shape[0], n, first.hidden_last.shape[2]), dtype=np.float32)
        hidden_mean = np.empty_like(hidden_last)
        next_logprobs = np.empty((n, first.next_logprobs.shape[1]), dtype=np.float32)
        n_tokens = np.empty(n, dtype=np.int64)
        n_cut = np.zeros(n, dtype=np.int64)
        for rows, probe in parts:
            hidden_last[:, rows] = probe.hidden_last
            hidden_mean[:, rows] = probe.hidden_mean
            next_logprobs[rows] = probe.next_logprobs
            n_tokens[rows] = probe.n_tokens
            n_cut[rows] = probe.cut_tokens
        return cls(hidden_last, hidden_mean, next_logprobs, n_tokens, n_cut)

    @property
    def cut_tokens(self) -> np.ndarray:
        """(batch,) int64: tokens cut from each prompt's left so that it fits the model (0: none)."""
        return self.n_cut if self.n_cut is not None else np.zeros(len(self.n_tokens), dtype=np.int64)

    @property
    def n_layers(self) -> int:
        """Number of transformer blocks (the hidden arrays hold n_layers + 1 entries)."""
        return int(self.hidden_last.shape[0]) - 1


@dataclass(frozen=True)
class ExportSettings:
    """How a checkpoint is exported. Part of the export cache key.

    dtype: "fp32" (reference, CPU default) or "fp16" (GPU). Pooled outputs are always float32.
    opset: ONNX opset; None lets Optimum pick the architecture's default.
    """

    dtype: str = "fp32"
    opset: int | None = None

    def __post_init__(self) -> None:
        if self.dtype not in ("fp32", "fp16"):
            raise InputError(f"dtype must be 'fp32' or 'fp16', not {self.dtype!r}")

    @classmethod
    def for_device(cls, device: str, dtype: str | None = None) -> ExportSettings:
        """``dtype``, or the default of a resolved ``device``: fp16 on CUDA, fp32 on CPU."""
        return cls(dtype=dtype or ("fp16" if device == "cuda" else "fp32"))


TASK_TYPES = ("multiple_choice", "generation", "pairwise")
# the pooled outputs every exported graph has (besides the greedy step and the KV cache)
POOLED_OUTPUTS = ("hidden_last", "hidden_mean", "next_logprobs", "target_logprobs", "target_best")


@dataclass(frozen=True)
class PromptLayout:
    """A benchmark's own prompt for one example, taken apart (``lmeval:`` tasks): ``text`` is the prompt
    exactly as the benchmark renders it; ``question`` is where the question stands in it, ``options``
    where each option's text stands (empty when the prompt does not list them) and ``labels`` where each
    option's label ("A") stands (empty when unlabelled); ``fields`` where each field name stands, each
    followed by ``:`` ("Question", "Answer", the demonstrations' too); ``instruction`` the task's
    description before everything else ((0, 0): none); ``shots`` each demonstration block, its trailing
    delimiter included (empty in a 0-shot prompt); ``shot_labels`` the demonstrations' letters ("A" of
    their option lines and of their answers), where ``labels`` are letters. Spans are (start, end)
    character offsets, in order; those of one kind are disjoint, and every span but ``shots`` lies outside
    the others. See :mod:`sago_fast.lmeval.prompt_parts` and
    :func:`sago_fast.variants.render.render_layout`."""

    text: str
    question: tuple[int, int]
    options: tuple[tuple[int, int], ...] = ()
    labels: tuple[tuple[int, int], ...] = ()
    fields: tuple[tuple[int, int], ...] = ()
    instruction: tuple[int, int] = (0, 0)
    shots: tuple[tuple[int, int], ...] = ()
    shot_labels: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class Example:
    """One benchmark item.

    multiple_choice: ``question``, ``options``, gold ``answer_index``.
    pairwise: ``question`` and two ``options`` (items a, b); ``answer_index`` 0 = "a", 1 = "b".
    generation: ``question`` is the prompt, ``answers`` the accepted reference answers.
    """

    example_id: str
    task_type: str
    question: str
    options: tuple[str, ...] = ()
    answer_index: int | None = None
    answers: tuple[str, ...] = ()
    answer_type: str = "text"  # generation: "text" (first line, normalised) or "number" (last number, GSM8K)
    layout: PromptLayout | None = None  # the benchmark's own canonical prompt (lmeval: tasks), else sago's

    @property
    def has_options(self) -> bool:
        return self.task_type in ("multiple_choice", "pairwise")


@dataclass(frozen=True)
class Dataset:
    """The examples of one ``--dataset``, read and validated (``datasets.resolve.load_dataset``)."""

    dataset_id: str  # suite name, or file stem + content hash prefix
    name: str
    source: str  # "built-in" or the file path
    examples: tuple[Example, ...]
    reader: str = "builtin"  # "builtin", "sago" (the SPEC schema), or a published format (mmlu, arc, ...)

    @property
    def task_types(self) -> tuple[str, ...]:
        return tuple(sorted({e.task_type for e in self.examples}))


@dataclass(frozen=True)
class Variant:
    """One rendering of an example.

    option_order[j] is the original option index shown at position j, so a displayed answer at position
    j means option content ``example.options[option_order[j]]``.
    """

    example_id: str
    variant_id: str
    family: str
    k: int
    params: str  # JSON of the perturbation's parameters
    is_canonical: bool
    meaning_preserving: bool
    prompt: str
    option_order: tuple[int, ...] = ()
    hint_index: int | None = None  # original option index named by an injected hint
    option_labels: tuple[str, ...] = ()  # answer label of each displayed position ("A", "B", ...)
    system_prompt: str | None = None  # system turn used under a chat template (system_prompt family)
    head_chars: int = 0  # the prompt's first characters that other examples' renderings may share by design
    inclusion: float = 1.0  # probability that the design renders this variant's cell (1: the full design)
