"""Deterministic variants: family × k for every example, each from its own random stream."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import sago_fast.variants.families  # noqa: F401  (registers the families)
from sago_fast.errors import InputError
from sago_fast.types import Example, Variant
from sago_fast.variants.base import FAMILIES, RenderSpec, derive_rng, spec_params
from sago_fast.variants.render import render_with_head

CANONICAL = "canonical"


@dataclass(frozen=True)
class VariantConfig:
    """families: registered names (None = all that apply; families that need a chat template only when
    ``chat``). k: variants per family per example. seed: stream seed. num_fewshot: demonstrations in every
    prompt, drawn per example (seeded, never the example itself) from ``fewshot_pool`` or, when that is
    empty, from the dataset. shot_answer: how demonstrations show their answer ("label" for letter answers,
    "text" for cloze answers). chat: a chat template is applied (enables the system_prompt family)."""

    families: tuple[str, ...] | None = None
    k: int = 2
    seed: int = 0
    num_fewshot: int = 0
    fewshot_pool: tuple[Example, ...] = ()
    shot_answer: str = "label"
    chat: bool = False

    def __post_init__(self) -> None:
        if self.num_fewshot < 0:
            raise InputError(f"num_fewshot must not be negative, not {self.num_fewshot}")
        if self.shot_answer not in ("label", "text"):
            raise InputError(f"shot_answer must be 'label' or 'text', not {self.shot_answer!r}")

    def family_names(self) -> tuple[str, ...]:
        if self.families is None:
            return tuple(n for n in FAMILIES.names() if self.chat or not FAMILIES.get(n).needs_chat)
        for name in self.families:
            family = FAMILIES.get(name)  # unknown names fail here with "did you mean"
            if family.needs_chat and not self.chat:
                raise InputError(f"family {name!r} needs a chat template (--chat-template auto)")
        return self.families


def draw_shots(
    example: Example, pool: Sequence[Example], config: VariantConfig, source: str
) -> tuple[Example, ...]:
    """``config.num_fewshot`` demonstrations for ``example`` from ``pool`` (same task type, never the
    example itself, never one that gives its answer away: :func:`gives_away`), from the example's own
    random stream: the same whatever the dataset's order."""
    n = config.num_fewshot
    if n == 0:
        return ()
    candidates = [
        e
        for e in pool
        if e.example_id != example.example_id
        and e.task_type == example.task_type
        and (e.question, e.options) != (example.question, example.options)
        and not gives_away(e, example)
    ]
    if len(candidates) < n:
        raise InputError(
            f"{source}: --num-fewshot {n} needs {n} other {example.task_type} examples, only "
            f"{len(candidates)} available for example {example.example_id!r}"
        )
    rng = derive_rng(config.seed, example.example_id, "fewshot", 0)
    return tuple(candidates[i] for i in rng.choice(len(candidates), size=n, replace=False))


MIN_ANSWER_CHARS = 3  # shorter answers ("A", "7") are too common to tell anything by matching


def _answers(example: Example) -> list[str]:
    """The example's gold answer texts."""
    if example.has_options and example.answer_index is not None:
        return [example.options[example.answer_index]]
    return list(example.answers)


def _mentions(text: str, answer: str) -> bool:
    """Whether ``answer`` stands in ``text`` as a whole word or phrase (case-insensitive)."""
    answer = answer.strip()
    if len(answer) < MIN_ANSWER_CHARS:
        return False
    return re.search(rf"(?<!\w){re.escape(answer)}(?!\w)", text, flags=re.IGNORECASE) is not None


def gives_away(shot: Example, example: Example) -> bool:
    """Whether demonstration ``shot`` shares its answer entity with ``example``: the example's answer in
    the shot's question or answer, or the shot's answer in the example's question ("Paris is the capital
    of which country?" shown before "What is the capital of France?")."""
    mine, theirs = _answers(example), _answers(shot)
    return any(_mentions(shot.question, a) or any(_mentions(t, a) for t in theirs) for a in mine) or any(
        _mentions(example.question, t) for t in theirs
    )


def make_variant(
    example: Example, family: str, k: int, spec: RenderSpec, base: RenderSpec, preserving: bool
) -> Variant:
    prompt, head = render_with_head(spec)
    return Variant(
        example_id=example.example_id,
        variant_id=f"{example.example_id}/{family}/{k}",
        family=family,
        k=k,
        params=json.dumps(spec_params(spec, base), sort_keys=True),
        is_canonical=family == CANONICAL,
        meaning_preserving=preserving,
        prompt=prompt,
        option_order=spec.option_order,
        hint_index=spec.hint_index,
        option_labels=spec.option_labels,
        system_prompt=spec.system_prompt,
        head_chars=head,
    )


def variants_for(example: Example, config: VariantConfig, shots: tuple[Example, ...] = ()) -> list[Variant]:
    """The canonical variant (with ``shots`` as its demonstrations), then k variants of each applicable
    family (duplicates of the prompt kept)."""
    base = RenderSpec.canonical(example, shots, config.shot_answer)
    out = [make_variant(example, CANONICAL, 0, base, base, True)]
    for family in config.family_names():
        perturbation = FAMILIES.get(family)()
        if not perturbation.applies_to(example):
            continue
        for k in range(config.k):
            spec = perturbation.perturb(base, derive_rng(config.seed, example.example_id, family, k))
            out.append(make_variant(example, family, k, spec, base, perturbation.meaning_preserving))
    return out


def generate_variants(
    examples: Iterable[Example], config: VariantConfig = VariantConfig(), source: str = "dataset"
) -> list[Variant]:
    """Variants of every example; with ``config.num_fewshot``, demonstrations come from
    ``config.fewshot_pool`` or else from ``examples`` themselves (``source`` names them in errors)."""
    examples = list(examples)
    pool = config.fewshot_pool or tuple(examples)
    out: list[Variant] = []
    for example in examples:
        out.extend(variants_for(example, config, draw_shots(example, pool, config, source)))
    return out


def variants_to_jsonl(variants: Sequence[Variant]) -> str:
    """Stable JSONL: one object per variant, keys sorted."""
    from dataclasses import asdict

    return "".join(json.dumps(asdict(v), sort_keys=True, ensure_ascii=False) + "\n" for v in variants)
