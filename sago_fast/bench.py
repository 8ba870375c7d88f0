"""``sago bench``: probe and generation throughput of sago's ORT path against HF transformers eager doing
the same job, interleaved repeat by repeat in one process, medians and ratios, written as JSON.

probe       per (batch size, sequence length): pooled hidden states of every layer + next-token log-probs
            for ``batch`` prompts of exactly ``seq_len`` tokens (random ids); tokens/s and variants/s
generation  greedy decoding of ``gen_tokens`` new tokens for ``batch`` prompts of ``seq_len`` tokens
            (eos ignored, so both engines generate every token); new tokens/s
Both engines run the same token ids; outputs are checked to agree before anything is timed. HF runs in
``inference_mode`` with TF32 off on CUDA (the reference), fp16 on CUDA and fp32 on CPU like sago's export.
``torch.compile`` joins on CUDA when available (``--compile``).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import platform
import resource
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sago_fast.errors import InputError
from sago_fast.runinfo import package_versions

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from sago_fast.runtime.model import SagoModel
SCHEMA = "sago-bench/1"


@dataclass(frozen=True)
class BenchConfig:
    batch_sizes: tuple[int, ...] = (1, 8)
    seq_lens: tuple[int, ...] = (64,)
    gen_tokens: int = 16
    gen_batch_sizes: tuple[int, ...] = (8,)
    repeats: int = 3
    device: str = "cpu"
    seed: int = 0
    compile: bool = False


@dataclass
class Measurement:
    job: str  # "probe" | "generation"
    batch_size: int
    seq_len: int
    tokens: int  # tokens processed per repeat (prompt tokens for probe, new tokens for generation)
    variants: int  # prompts per repeat
    seconds: dict[str, list[float]] = field(default_factory=dict)  # engine -> per-repeat wall times
    greedy_agreement: float | None = None  # generation: share of rows token-identical to HF

    def summary(self) -> dict[str, Any]:
        medians = {e: statistics.median(s) for e, s in self.seconds.items()}
        engines = {
            e: {
                "median_s": m,
                "tokens_per_s": self.tokens / m,
                "variants_per_s": self.variants / m,
                "repeats_s": self.seconds[e],
            }
            for e, m in medians.items()
        }
        ratios = {f"sago_vs_{e}": medians[e] / medians["sago"] for e in medians if e != "sago"}
        return {
            **{k: v for k, v in asdict(self).items() if k != "seconds"},
            "engines": engines,
            "ratios": ratios,
        }


def hardware(device: str) -> dict[str, Any]:
    info: dict[str, Any] = {
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "processor": platform.processor(),
    }
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            names = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")]
        info["cpu_model"] = names[0] if names else None
    except OSError:
        info["cpu_model"] = None
    if device == "cuda":
        import torch

        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            info["gpu"] = props.name
            info["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
    return info


def _timed(fn: Callable[[], Any], device: str) -> float:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if device == "cuda":
        import torch

        torch.cuda.synchronize()
    return time.perf_counter() - start


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _current_rss_mib() -> float:
    """Resident memory now (Linux /proc; the peak where that is unavailable)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return _peak_rss_mib()


def export_facts(model: SagoModel, load_seconds: float, session_rss_mib: float) -> dict[str, Any]:
    """Export/load time, cache bytes against the weight bytes at the export dtype, resident memory.

    A re-weighted entry's hard link to its checkpoint's safetensors file is counted apart
    (``linked_bytes``): it writes no bytes to the disk."""
    entry = model.exported.path
    linked = set(model.exported.manifest.get("linked", {}))
    files = [f for f in entry.iterdir() if f.is_file() and f.name not in linked]
    graph = model.exported.model_path
    bytes_per_value = 2 if model.exported.manifest["dtype"] == "fp16" else 4
    import onnx

    n_values = sum(
        int(np.prod(init.dims)) for init in onnx.load(str(graph), load_external_data=False).graph.initializer
    )
    weight_bytes = n_values * bytes_per_value
    cache_bytes = sum(f.stat().st_size for f in files)
    return {
        "load_seconds": load_seconds,  # export included unless reused
        "reused": model.exported.reused,
        "reweighted": model.exported.reweighted,
        "cache_bytes": cache_bytes,
        "linked_bytes": sum((entry / name).stat().st_size for name in linked),
        "weight_bytes": weight_bytes,
        "cache_to_weights": cache_bytes / weight_bytes,
        "session_rss_mib": session_rss_mib,
        "session_rss_to_weights": session_rss_mib * 2**20 / weight_bytes,
    }


def scoring_facts(
    model: SagoModel, vocab: int, seed: int, prompt_len: int = 64, options: int = 4
) -> dict[str, Any]:
    """Tokens through the model per 4-option multiple-choice variant (3-token options) with one prefill
    per prompt, against the prompt length (each (prompt, option) pair as a whole sequence: 1 + options)."""
    rng = np.random.default_rng(seed)
    prompts = rng.integers(3, vocab, size=(8, prompt_len)).tolist()
    conts = [[rng.integers(3, vocab, size=3).tolist() for _ in range(options)] for _ in prompts]
    processed = model.prefill(prompts, conts).tokens_processed / len(prompts)
    return {
        "prompt_len": prompt_len,
        "options": options,
        "option_tokens": 3,
        "tokens_per_variant": processed,
        "ratio_to_prompt": processed / prompt_len,
        "whole_sequences_ratio_to_prompt": (prompt_len + options * (prompt_len + 3)) / prompt_len,
    }


def run_bench(
    checkpoint: str | os.PathLike[str], config: BenchConfig = BenchConfig(), cache_dir: Any = None
) -> dict[str, Any]:
    """Measure and return the JSON-ready result (schema ``sago-bench/1``)."""
    import torch
    from transformers import AutoModelForCausalLM

    import sago_fast

    rss_before = _current_rss_mib()
    started = time.perf_counter()
    sago = sago_fast.load_model(checkpoint, device=config.device, cache_dir=cache_dir)
    load_seconds = time.perf_counter() - started
    session_rss = _current_rss_mib() - rss_before
    export = export_facts(sago, load_seconds, session_rss)
    cuda = sago.device == "cuda"
    if cuda:  # the reference runs without TF32
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    dtype = torch.float16 if sago.exported.manifest["dtype"] == "fp16" else torch.float32
    hf = (
        AutoModelForCausalLM.from_pretrained(sago.checkpoint.path, dtype=dtype)
        .eval()
        .to("cuda" if cuda else "cpu")
    )
    engines: dict[str, Any] = {"hf_eager": hf}
    if config.compile and cuda and hasattr(torch, "compile"):
        engines["hf_compile"] = torch.compile(hf)
    bench = _Bench(
        sago, hf, engines, config, np.random.default_rng(config.seed), "cuda" if cuda else "cpu", dtype
    )
    limit = sago.max_positions or 10**9
    results: list[Measurement] = []
    for seq_len in config.seq_lens:
        if seq_len + config.gen_tokens > limit:
            raise ValueError(
                f"seq_len {seq_len} + {config.gen_tokens} new tokens exceeds the model's {limit} positions"
            )
        results += [bench.probe(batch, seq_len) for batch in config.batch_sizes]
        results += [bench.generation(batch, seq_len) for batch in config.gen_batch_sizes]
    out = _summary(sago, hf, config, export, results)
    sago.close()
    return out


LOW_ID = 3  # random prompts skip the special ids


@dataclass
class _Bench:
    """The engines under test and what every measurement shares (the seeded prompt generator)."""

    sago: Any
    hf: Any
    engines: dict[str, Any]
    config: BenchConfig
    rng: np.random.Generator
    torch_device: str
    dtype: Any

    @property
    def vocab(self) -> int:
        return int(self.sago.exported.manifest["vocab_size"])

    def probe(self, batch: int, seq_len: int) -> Measurement:
        """One probe shape: sago's outputs checked against HF's, then both timed."""
        import torch

        from sago_fast.exporters.unified import pooled_forward
        from sago_fast.runtime.batching import BatchPolicy

        config = self.config
        sago = self.sago.configured(batch_policy=BatchPolicy(token_budget=batch * seq_len, max_batch=batch))
        ids = self.rng.integers(LOW_ID, self.vocab, size=(batch, seq_len)).tolist()
        m = Measurement("probe", batch, seq_len, batch * seq_len, batch)
        tensor = torch.tensor(ids, device=self.torch_device)
        mask = torch.ones_like(tensor)

        def sago_probe(ids=ids):
            return sago.probe_ids(ids)

        def hf_probe(engine, tensor=tensor, mask=mask):
            with torch.inference_mode():
                return pooled_forward(engine, tensor, mask)

        ref = hf_probe(self.hf)["next_logprobs"].float().cpu().numpy()
        got = sago_probe().next_logprobs
        tol = 5e-2 if self.dtype == torch.float16 else 1e-3
        if not np.allclose(got, ref, atol=tol):
            raise RuntimeError(
                f"probe outputs disagree (max |diff| {np.abs(got - ref).max():.3g}); not timing"
            )
        for _ in range(config.repeats):
            m.seconds.setdefault("sago", []).append(_timed(sago_probe, self.torch_device))
            for name, engine in self.engines.items():
                m.seconds.setdefault(name, []).append(
                    _timed(functools.partial(hf_probe, engine), self.torch_device)
                )
        return m

    def generation(self, batch: int, seq_len: int) -> Measurement:
        """One generation shape: greedy tokens checked against HF's, then both timed."""
        import torch

        from sago_fast.runtime.batching import BatchPolicy
        from sago_fast.runtime.decode import GenerationSettings

        config, hf = self.config, self.hf
        policy = BatchPolicy(token_budget=batch * (seq_len + config.gen_tokens), max_batch=batch)
        sago = self.sago.configured(batch_policy=policy)
        ids = self.rng.integers(LOW_ID, self.vocab, size=(batch, seq_len)).tolist()
        m = Measurement("generation", batch, seq_len, batch * config.gen_tokens, batch)
        settings = GenerationSettings(max_new_tokens=config.gen_tokens, stop=(), stop_at_eos=False)
        tensor = torch.tensor(ids, device=self.torch_device)

        def sago_generate(ids=ids, settings=settings):
            return sago.generate_ids(ids, settings)

        def hf_generate(engine, tensor=tensor, **extra):
            with torch.inference_mode():
                return engine.generate(
                    input_ids=tensor,
                    attention_mask=torch.ones_like(tensor),
                    do_sample=False,
                    max_new_tokens=config.gen_tokens,
                    min_new_tokens=config.gen_tokens,
                    pad_token_id=sago.pad_id,
                    **extra,
                )

        ours = [list(g.token_ids) for g in sago_generate()]
        checked = hf_generate(hf, output_scores=True, return_dict_in_generate=True)
        theirs = checked.sequences[:, seq_len:].cpu().tolist()
        step_logprobs = torch.log_softmax(torch.stack(checked.scores, dim=1).float(), dim=-1).cpu().numpy()
        agree = greedy_agreement(ours, theirs, sago.exported.manifest.get("eos_token_ids", []), step_logprobs)
        if agree < 1.0 and self.dtype != torch.float16:  # fp16 may flip near-ties; fp32 must not
            raise RuntimeError(
                f"greedy generations disagree with HF on {1 - agree:.0%} of the prompts (batch {batch}); not timing"
            )
        for _ in range(config.repeats):
            m.seconds.setdefault("sago", []).append(_timed(sago_generate, self.torch_device))
            m.seconds.setdefault("hf_eager", []).append(_timed(lambda: hf_generate(hf), self.torch_device))
        m.greedy_agreement = agree  # fp32: 1.0 expected; fp16 may differ on near-ties
        return m


def _summary(
    sago: Any, hf: Any, config: BenchConfig, export: dict[str, Any], results: list[Measurement]
) -> dict[str, Any]:
    """The JSON-ready result (schema ``sago-bench/1``)."""
    import torch

    cuda = sago.device == "cuda"
    return {
        "schema": SCHEMA,
        "checkpoint": str(sago.checkpoint.path),
        "model": {
            "model_type": sago.exported.manifest["model_type"],
            "parameters": sum(p.numel() for p in hf.parameters()),
            "n_layers": sago.n_layers,
            "d_model": sago.d_model,
            "vocab_size": int(sago.exported.manifest["vocab_size"]),
            "dtype": sago.exported.manifest["dtype"],
        },
        "device": sago.device,
        "provider": sago.provider,
        "hardware": hardware(sago.device),
        "versions": package_versions(),
        "config": asdict(config),
        "peak_memory": {
            "host_rss_mib": _peak_rss_mib(),
            "cuda_torch_mib": (torch.cuda.max_memory_allocated() / 2**20) if cuda else None,
        },
        "export": export,
        "scoring": scoring_facts(sago, int(sago.exported.manifest["vocab_size"]), config.seed),
        "results": [m.summary() for m in results],
    }


def write_json(result: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    from sago_fast.atomic import atomic_path

    target = Path(path)
    with atomic_path(target) as tmp:
        tmp.write_text(json.dumps(result, indent=2), encoding="utf-8")
    return target


def format_table(result: dict[str, Any]) -> list[str]:
    lines = [
        f"{result['model']['model_type']} {result['model']['parameters'] / 1e6:.1f}M params, {result['model']['dtype']}, "
        f"{result['provider']} ({result['hardware'].get('gpu') or result['hardware'].get('cpu_model')})",
        f"load {result['export']['load_seconds']:.1f} s ({'reused' if result['export']['reused'] else 'exported'}), "
        f"cache {result['export']['cache_bytes'] / 2**20:.0f} MiB = {result['export']['cache_to_weights']:.2f}x "
        f"the weights, session {result['export']['session_rss_mib']:.0f} MiB resident; "
        f"{result['scoring']['ratio_to_prompt']:.2f}x the prompt's tokens per 4-option variant "
        f"(whole sequences: {result['scoring']['whole_sequences_ratio_to_prompt']:.2f}x)",
        f"{'job':<10} {'batch':>5} {'seq':>5} {'sago tok/s':>12} {'hf tok/s':>12} {'sago/hf':>8} {'agree':>6}",
    ]
    for r in result["results"]:
        sago_tps = r["engines"]["sago"]["tokens_per_s"]
        hf_tps = r["engines"]["hf_eager"]["tokens_per_s"]
        agree = r.get("greedy_agreement")
        lines.append(
            f"{r['job']:<10} {r['batch_size']:>5} {r['seq_len']:>5} {sago_tps:>12.0f} {hf_tps:>12.0f} "
            f"{r['ratios']['sago_vs_hf_eager']:>7.2f}x {'' if agree is None else f'{agree:.2f}':>6}"
        )
    return lines


NEAR_TIE = 1e-4  # log-prob gap under which two greedy choices are the same choice up to float noise


def greedy_agreement(
    ours: list[list[int]],
    theirs: list[list[int]],
    eos_ids: Sequence[int],
    hf_logprobs: np.ndarray | None = None,
) -> float:
    """Share of prompts whose greedy tokens equal HF's, like for like.

    sago decodes on through an end-of-sequence token (``stop_at_eos=False``) while HF, held to the same
    length by ``min_new_tokens``, may not emit one: rows are compared up to the first end-of-sequence token
    either engine emitted. Where they first differ, a near-tie in HF's own step distribution
    (``hf_logprobs`` (batch, steps, vocab): both tokens within ``NEAR_TIE`` of each other) is float noise
    between two engines, not disagreement: the row counts as agreeing."""
    eos = set(eos_ids)
    same = []
    for row, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        end = next((i for i, t in enumerate(a) if t in eos), len(a))
        end = min(end, next((i for i, t in enumerate(b) if t in eos), len(b)))
        first = next((i for i in range(end) if a[i] != b[i]), None)
        if first is None:
            same.append(True)
        elif hf_logprobs is not None:
            step = hf_logprobs[row, first]
            same.append(bool(abs(float(step[a[first]]) - float(step[b[first]])) <= NEAR_TIE))
        else:
            same.append(False)
    return float(np.mean(same)) if same else float("nan")


def parse_ints(values: Sequence[str] | None, default: tuple[int, ...], flag: str) -> tuple[int, ...]:
    """Positive integers from repeated and/or comma-separated option values (``--batch-sizes 1,8``)."""
    if not values:
        return default
    out = []
    for part in values:
        for text in str(part).split(","):
            text = text.strip()
            if not text:
                continue
            try:
                value = int(text)
            except ValueError:
                raise InputError(
                    f"{flag}: {text!r} is not a whole number (expected e.g. {flag} 1,8)"
                ) from None
            if value < 1:
                raise InputError(f"{flag}: sizes must be at least 1, not {value}")
            out.append(value)
    if not out:
        raise InputError(f"{flag}: no sizes given")
    return tuple(out)
