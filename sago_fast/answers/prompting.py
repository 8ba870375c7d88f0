"""What the model reads: a variant's prompt, as plain text or inside the tokenizer's chat template.

``chat_template="none"`` (default, as lm-evaluation-harness by default): the rendered prompt is the model
input; an option or label is scored as the continuation " " + text after it (lm-eval conventions,
trailing whitespace of the context moved to the continuation).

``chat_template="auto"``: when the tokenizer has a chat template, the prompt is the user turn
(``tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)``), with a system
turn from the variant (the ``system_prompt`` family) or the run's ``system_prompt``; answers are scored
right after the assistant header (continuation = the text itself, no leading space, the header's
whitespace kept in the context). A tokenizer without a template falls back to plain text; a system prompt
is then shown as the prompt's first paragraph.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from sago_fast import defaults
from sago_fast.errors import InputError
from sago_fast.types import Dataset, Variant

log = logging.getLogger(__name__)

CHAT_TEMPLATE_CHOICES = ("auto", "none")

if TYPE_CHECKING:
    from sago_fast.answers.protocol import LanguageModel


@dataclass(frozen=True)
class PromptFormat:
    """chat_template: "auto" (the tokenizer's template when it has one) or "none" (plain text).
    system_prompt: the system turn of every prompt (None: the template's own default, if any)."""

    chat_template: str = defaults.CHAT_TEMPLATE
    system_prompt: str | None = None

    def __post_init__(self) -> None:
        if self.chat_template not in CHAT_TEMPLATE_CHOICES:
            raise InputError(
                f"chat_template must be one of {', '.join(CHAT_TEMPLATE_CHOICES)}, not {self.chat_template!r}"
            )
        if self.system_prompt is not None and not self.system_prompt.strip():
            raise InputError("system_prompt must not be empty")

    def uses_chat(self, tokenizer: Any) -> bool:
        """Whether prompts go through ``tokenizer``'s chat template."""
        return self.chat_template == "auto" and bool(getattr(tokenizer, "chat_template", None))


@dataclass(frozen=True)
class ModelPrompts:
    """The model inputs of a list of variants, and how answers continue them."""

    texts: tuple[str, ...]
    chat: bool  # True: continuations follow the assistant header directly
    keys: tuple[str, ...] = ()  # each prompt's example: prefixes are shared within one only (empty: any)
    heads: tuple[
        int, ...
    ] = ()  # each prompt's first tokens any prompt may share (:meth:`with_heads`; empty: none)

    @classmethod
    def plain(cls, variants: Sequence[Variant]) -> ModelPrompts:
        """Each variant's own prompt, as plain text."""
        return cls(tuple(v.prompt for v in variants), False, tuple(v.example_id for v in variants))

    def subset(self, rows: Sequence[int]) -> ModelPrompts:
        """The prompts at ``rows``, in that order."""
        keys = tuple(self.keys[i] for i in rows) if self.keys else ()
        heads = tuple(self.heads[i] for i in rows) if self.heads else ()
        return ModelPrompts(tuple(self.texts[i] for i in rows), self.chat, keys, heads)

    @property
    def share_keys(self) -> list[str] | None:
        """Which prompts may share a prefilled prefix (the same key), for the model's prefill."""
        return list(self.keys) if self.keys else None

    @property
    def delimiter(self) -> str:
        """Put before an option or label to make its continuation: " " for plain text, "" in chat."""
        return "" if self.chat else " "

    @property
    def add_special_tokens(self) -> bool:
        """A chat template writes its own special tokens (BOS included); plain text gets the tokenizer's."""
        return not self.chat

    def token_ids(self, tokenizer: Any) -> list[list[int]]:
        """The prompts' token ids, as the model reads them."""
        encoded = tokenizer(list(self.texts), add_special_tokens=self.add_special_tokens)["input_ids"]
        return [list(ids) for ids in encoded]

    def with_heads(
        self, tokenizer: Any, head_chars: Sequence[int], token_ids: Sequence[Sequence[int]]
    ) -> ModelPrompts:
        """These prompts with ``heads``: how many of each prompt's first tokens are its head
        (:attr:`Variant.head_chars`, the part that renderings of other examples may share), the tokens the
        prompt has in common with its head text alone; 0 without a head, and always in a chat template (its
        text is not the variant's prompt). The model decides which heads are worth a pass of their own
        (:meth:`SagoModel.prefill`)."""
        if self.chat or not any(head_chars):
            return replace(self, heads=(0,) * len(token_ids))
        wanted = sorted({self.texts[i][:h] for i, h in enumerate(head_chars) if h})
        encoded = tokenizer(wanted, add_special_tokens=self.add_special_tokens)["input_ids"]
        heads = dict(zip(wanted, encoded, strict=True))
        found = (
            _shared_tokens(token_ids[i], heads[self.texts[i][:h]]) if h else 0
            for i, h in enumerate(head_chars)
        )
        return replace(self, heads=tuple(found))

    @property
    def move_whitespace(self) -> bool:
        """lm-eval's rule (trailing context whitespace moves into the continuation) for plain text only."""
        return not self.chat


def chat_prompt(tokenizer: Any, text: str, system_prompt: str | None = None) -> str:
    """``text`` as the user turn of ``tokenizer``'s chat template, ending with the assistant header."""
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages.append({"role": "user", "content": text})
    try:
        return str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
    except Exception as exc:  # template errors (e.g. a template that refuses system turns)
        raise InputError(f"the tokenizer's chat template failed ({type(exc).__name__}: {exc})") from None


def _shared_tokens(a: Sequence[int], b: Sequence[int]) -> int:
    """How many first tokens ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def model_prompts(tokenizer: Any, variants: Sequence[Variant], fmt: PromptFormat) -> ModelPrompts:
    """The text the model reads for each variant under ``fmt``."""
    chat = fmt.uses_chat(tokenizer)
    texts = []
    for variant in variants:
        system = variant.system_prompt or fmt.system_prompt
        if chat:
            texts.append(chat_prompt(tokenizer, variant.prompt, system))
        else:
            texts.append(f"{system}\n\n{variant.prompt}" if system else variant.prompt)
    return ModelPrompts(tuple(texts), chat, tuple(v.example_id for v in variants))


def appended_bound(example: Any, max_new_tokens: int) -> int:
    """An upper bound on the tokens put after a prompt of ``example``: its longest option or label (a
    token covers at least one UTF-8 byte; one more for the delimiter), or the tokens it may generate and
    its longest reference."""
    if example.has_options:
        return max(len(o.encode()) for o in example.options) + 2
    return max(max_new_tokens, *(len(a.encode()) + 2 for a in example.answers))


def check_answers_fit(tokenizer: Any, data: Dataset, limit: int) -> None:
    """Before any work: an option or reference answer that leaves no room for its prompt in the model's
    ``limit`` positions is refused in one line naming its example (a prompt is cut to fit, an answer is
    not). Only texts that may not fit by a bound on bytes are tokenized."""
    for example in data.examples:
        kind = "option" if example.has_options else "reference answer"
        for j, text in enumerate(example.options if example.has_options else example.answers):
            if len((" " + text).encode()) < limit:  # a token covers at least one byte
                continue
            n_tokens = len(tokenizer(" " + text, add_special_tokens=False)["input_ids"])
            if n_tokens >= limit:
                raise InputError(
                    f"dataset {data.name!r}, example {example.example_id!r}: {kind} {j + 1} is {n_tokens} "
                    f"tokens, as long as the model's {limit} positions or longer (no room for its prompt); "
                    "shorten or remove that example, or use a model with a longer context"
                )


def check_some_fit(
    model: LanguageModel, data: Dataset, variants: Sequence[Variant], fmt: PromptFormat, max_new_tokens: int
) -> None:
    """Before any work: a dataset one of whose answers is longer than the model (:func:`check_answers_fit`)
    is refused in one line. Long prompts are cut from the left when answered, as lm-eval cuts them
    (:func:`sago_fast.answers.scoring.fit_to_context`; ``sago lm-eval`` does the same); when every
    canonical prompt is too long, a warning says so once, with what to change to read them whole.
    Prompts are rendered one at a time until one fits, and only those that may not fit by a bound on bytes
    are tokenized."""
    limit = model.max_positions
    canonical = [v for v in variants if v.is_canonical]
    if limit is None or not canonical:
        return
    check_answers_fit(model.tokenizer, data, limit)
    examples = {e.example_id: e for e in data.examples}
    longest = 0
    for variant in canonical:
        (text,) = model_prompts(model.tokenizer, [variant], fmt).texts
        need = appended_bound(examples[variant.example_id], max_new_tokens)
        if len(text.encode()) + need + 2 <= limit:  # +2: special tokens the tokenizer may add
            return
        n_tokens = len(model.tokenizer(text)["input_ids"])
        if n_tokens + need <= limit:
            return
        longest = max(longest, n_tokens + need)
    log.warning(
        "dataset %r: every prompt is longer than the model's %d positions (up to about %d tokens with its "
        "answer): each is cut from its left as lm-eval cuts it (outputs.prompt_tokens_cut); to read them "
        "whole, use a model with a longer context, fewer demonstrations (--num-fewshot) or a lower "
        "--max-new-tokens",
        data.name,
        limit,
        longest,
    )
