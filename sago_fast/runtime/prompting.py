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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sago_fast import defaults
from sago_fast.errors import InputError
from sago_fast.types import Dataset, Variant

CHAT_TEMPLATE_CHOICES = ("auto", "none")


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
    return ModelPrompts(tuple(texts), chat)


def check_prompts_fit(
    model: Any,
    data: Dataset,
    variants: Sequence[Variant],
    fmt: PromptFormat,
    max_new_tokens: int,
    batch: int = 4096,
) -> None:
    """Every variant's prompt plus what is appended to it (the longest option, or the generated tokens and
    the longest reference) must fit the model's positions; characters bound tokens from above. Prompts
    are tokenized ``batch`` at a time and only their lengths kept."""
    limit = model.max_positions
    if limit is None:
        return
    examples = {e.example_id: e for e in data.examples}
    for start in range(0, len(variants), batch):
        part = variants[start : start + batch]
        token_ids = model_prompts(model.tokenizer, part, fmt).token_ids(model.tokenizer)
        for variant, ids in zip(part, token_ids, strict=True):
            example = examples[variant.example_id]
            if example.has_options:
                extra = max(len(o) for o in example.options)
            else:
                extra = max(max_new_tokens, *(len(a) + 1 for a in example.answers))
            if len(ids) + extra > limit:
                raise InputError(
                    f"dataset {data.name!r}: variant {variant.variant_id} needs about {len(ids) + extra} tokens, "
                    f"more than the model's {limit} positions (drop long families such as fewshot_order, lower "
                    "--max-new-tokens, or use a model with a longer context)"
                )
