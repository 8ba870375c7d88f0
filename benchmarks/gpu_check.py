"""The GPU check: parity, throughput and the whole job on the device, in one process, phase by phase.

    python benchmarks/gpu_check.py OUT --device cuda [--mmlu DIR] [--tokenizer DIR]    # the lent GPU
    python benchmarks/gpu_check.py OUT --device cpu --dry-run                           # here, and in CI

Phases (each bounded, its error recorded and the next one run; everything measured goes to OUT as JSON,
``OUT/gpu_check.json``, and as text, ``OUT/gpu_check.txt``):
  environment  package versions, ONNX Runtime providers, whether CUDA really runs, the GPU
  parity       tiny Llama and Qwen2: fp32 CUDA EP against HF fp32 on the same device (TF32 off): next-token
               log-probs and pooled hidden states within 1e-4; fp16 against HF fp16 within 2e-2 of the
               largest value; greedy generation (IOBinding on CUDA) token-identical to HF's
  probe        a random Llama-style model (hidden 2048, 20 layers, GQA 16/8; ~1.07B parameters at a 32k
               vocabulary, more with the tokenizer's) in fp16: prompt tokens/s of sago's probe against HF
               fp16 SDPA on the same token ids over a batch x length grid, interleaved, medians
  job          the whole SAGO job (every family, k = 1, the four axes) on real MMLU items against the
               canonical-only log-likelihood pass lm-eval's HF backend makes (HF fp16, batch 32, the same
               items and prompts), wall time and peak device memory of both
The dry run does the same on a tiny model with small grids on the CPU, so the check's logic is tested
where no GPU is (``tests/integration/test_gpu_check.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import statistics
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from real_model import mmlu_sample  # noqa: E402  (the one sample of MMLU items every benchmark draws)

log = logging.getLogger("gpu_check")

FP32_TOL = 1e-4
FP16_RELATIVE = 2e-2
H200 = {"memory_bandwidth_tb_s": 4.3, "bf16_tflop_s": 790.0}  # measured on this workplace's H200s


@dataclass(frozen=True)
class Plan:
    """What one check runs: the device, the probe grid, the job's items and the model's size."""

    device: str
    batch_sizes: tuple[int, ...]
    seq_lens: tuple[int, ...]
    repeats: int
    items: int
    big: bool  # the ~1B model (else a tiny one)

    @classmethod
    def of(cls, device: str, dry_run: bool, items: int) -> Plan:
        if dry_run:
            return cls(device, (1, 4), (32,), 2, min(items, 6), False)
        return cls(device, (8, 32, 64), (128, 512), 5, items, True)


# -- bookkeeping -----------------------------------------------------------------------------------------
class Report:
    """Phase results, written to OUT after every phase so that a cut-off check still says what it found."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.data: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "phases": {}}
        self.lines: list[str] = []

    def say(self, text: str) -> None:
        line = f"[gpu_check {time.perf_counter() - START:6.1f}s] {text}"
        print(line, flush=True)
        self.lines.append(line)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[dict[str, Any]]:
        result: dict[str, Any] = {}
        self.data["phases"][name] = result
        began = time.perf_counter()
        self.say(f"{name}: start")
        try:
            yield result
            result["ok"] = result.get("ok", True)
        except Exception as exc:
            result["ok"] = False
            result["error"] = f"{type(exc).__name__}: {exc}"
            result["traceback"] = traceback.format_exc()[-4000:]
            self.say(f"{name}: FAILED {result['error']}")
        result["seconds"] = round(time.perf_counter() - began, 1)
        self.say(f"{name}: {'ok' if result['ok'] else 'failed'} in {result['seconds']} s")
        self.write()

    def write(self) -> None:
        (self.out / "gpu_check.json").write_text(
            json.dumps(self.data, indent=2, default=str), encoding="utf-8"
        )
        (self.out / "gpu_check.txt").write_text("\n".join(self.lines) + "\n", encoding="utf-8")


START = time.perf_counter()


class PeakDeviceMemory:
    """Peak device memory in use (NVML, sampled every 20 ms) above what was in use at the start: ORT's
    arena and torch's allocator alike. None on the CPU or without NVML."""

    def __init__(self, device: str) -> None:
        self.handle: Any = None
        if device == "cuda":
            with contextlib.suppress(Exception):
                import pynvml

                pynvml.nvmlInit()
                self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        self.peak = 0
        self._stop = threading.Event()

    def _used(self) -> int:
        import pynvml

        return int(pynvml.nvmlDeviceGetMemoryInfo(self.handle).used)

    def __enter__(self) -> PeakDeviceMemory:
        if self.handle is not None:
            self.base = self._used()
            self.peak = self.base
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self._used())

    def __exit__(self, *exc: object) -> None:
        if self.handle is not None:
            self._stop.set()
            self._thread.join()
            self.peak = max(self.peak, self._used())

    @property
    def mib(self) -> float | None:
        return None if self.handle is None else round((self.peak - self.base) / 2**20, 1)


def release_device_memory(device: str) -> None:
    """Between phases: what a phase's models held goes back to the device (torch's cache included)."""
    import gc

    gc.collect()
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()


def synchronize(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


# -- phases ----------------------------------------------------------------------------------------------
def environment(result: dict[str, Any], device: str) -> None:
    import onnxruntime as ort
    import torch

    from sago_fast.runinfo import package_versions
    from sago_fast.runtime.session import cuda_runs

    result["versions"] = package_versions()
    result["python"] = sys.version.split()[0]
    result["ort_providers"] = ort.get_available_providers()
    result["cuda_runs"] = list(cuda_runs())
    result["torch_cuda"] = torch.cuda.is_available()
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        result["gpu"] = props.name
        result["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
    if device == "cuda" and not result["cuda_runs"][0]:
        raise RuntimeError(f"CUDA does not run in ONNX Runtime: {result['cuda_runs'][1]}")


TEXTS = ["What is 12 + 7?", "a", "Options: A. red B. green C. blue. The sky is", "Reverse the word 'stone'."]


def parity(result: dict[str, Any], device: str, work: Path) -> None:
    """sago's export on ``device`` against HF on the same device, fp32 and (on CUDA) fp16."""
    import torch
    from transformers import AutoModelForCausalLM

    import sago_fast
    from sago_fast.checkpoints.tiny import TinySize, build_tiny_checkpoint, train_tokenizer
    from sago_fast.exporters.unified import pooled_forward
    from sago_fast.runtime.batching import left_pad
    from sago_fast.runtime.decode import GenerationSettings

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    tokenizer = train_tokenizer()
    size = TinySize(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128)
    dtypes = ("fp32", "fp16") if device == "cuda" else ("fp32",)
    checks = []
    for arch in ("llama", "qwen2"):
        folder = build_tiny_checkpoint(arch, work / f"tiny-{arch}", size, seed=3, tokenizer=tokenizer)
        for dtype in dtypes:
            torch_dtype = torch.float32 if dtype == "fp32" else torch.float16
            with sago_fast.load_model(
                folder, device=device, dtype=dtype, cache_dir=work / "exports"
            ) as model:
                ids = model.tokenize(TEXTS)
                got = model.probe_ids(ids)
                hf = AutoModelForCausalLM.from_pretrained(
                    folder, dtype=torch_dtype, attn_implementation="eager"
                )
                hf = hf.to(device).eval()
                padded, mask = left_pad(ids, model.pad_id)
                with torch.inference_mode():
                    ref = pooled_forward(
                        hf, torch.from_numpy(padded).to(device), torch.from_numpy(mask).to(device)
                    )
                ref = {k: v.float().cpu().numpy() for k, v in ref.items()}
                diffs = {
                    name: float(np.abs(getattr(got, name) - ref[name]).max())
                    for name in ("next_logprobs", "hidden_last", "hidden_mean")
                }
                scales = {name: float(np.abs(ref[name]).max()) for name in diffs}
                limit = {n: FP32_TOL if dtype == "fp32" else FP16_RELATIVE * scales[n] for n in diffs}
                check: dict[str, Any] = {
                    "arch": arch,
                    "dtype": dtype,
                    "provider": model.provider,
                    "io_binding": model.engine.io_binding_device,
                    "max_abs_diff": diffs,
                    "limit": limit,
                    "within": all(diffs[n] <= limit[n] for n in diffs),
                }
                if dtype == "fp32":
                    settings = GenerationSettings(max_new_tokens=8, stop=(), stop_at_eos=False)
                    ours = [list(g.token_ids) for g in model.generate_ids(ids, settings)]
                    theirs = []
                    for row in ids:
                        prompt = torch.tensor([row], device=device)
                        with torch.inference_mode():
                            out = hf.generate(
                                prompt,
                                attention_mask=torch.ones_like(prompt),
                                do_sample=False,
                                max_new_tokens=8,
                                min_new_tokens=8,
                                pad_token_id=model.pad_id,
                            )
                        theirs.append(out[0, len(row) :].tolist())
                    check["generation_equal"] = ours == theirs
                checks.append(check)
                del hf
    result["checks"] = checks
    result["ok"] = all(c["within"] and c.get("generation_equal", True) for c in checks)


def big_checkpoint(work: Path, plan: Plan, tokenizer_dir: Path | None) -> Path:
    """The probe/job model: ~1B Llama-style (random weights) with the given tokenizer, or a tiny one."""
    from sago_fast.checkpoints.tiny import TinySize, build_tiny_checkpoint

    tokenizer = None
    if tokenizer_dir is not None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        tokenizer.padding_side = "left"
    tiny = TinySize(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, max_positions=4096)
    size = TinySize.bench_1b() if plan.big else tiny
    folder = work / ("llama-1b" if plan.big else "llama-tiny")
    if not (folder / "config.json").is_file():
        build_tiny_checkpoint("llama", folder, size, seed=0, tokenizer=tokenizer)
    return folder


def probe(result: dict[str, Any], plan: Plan, folder: Path, work: Path) -> None:
    """sago's probe against HF SDPA on the same ids: prompt tokens/s per (batch, length), medians."""
    import torch
    from transformers import AutoModelForCausalLM

    import sago_fast
    from sago_fast.exporters.unified import pooled_forward
    from sago_fast.runtime.batching import BatchPolicy

    dtype = "fp16" if plan.device == "cuda" else "fp32"
    torch_dtype = torch.float16 if dtype == "fp16" else torch.float32
    started = time.perf_counter()
    model = sago_fast.load_model(folder, device=plan.device, dtype=dtype, cache_dir=work / "exports")
    result["load_seconds"] = round(time.perf_counter() - started, 1)
    result["provider"] = model.provider
    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch_dtype, attn_implementation="sdpa")
    hf = hf.to(plan.device).eval()
    result["parameters"] = sum(p.numel() for p in hf.parameters())
    result["hf_attention"] = "sdpa"
    vocab = int(model.exported.manifest["vocab_size"])
    rng = np.random.default_rng(0)
    grid = []
    for seq_len in plan.seq_lens:
        for batch in plan.batch_sizes:
            ids = rng.integers(3, vocab, size=(batch, seq_len)).tolist()
            sized = model.configured(batch_policy=BatchPolicy(token_budget=batch * seq_len, max_batch=batch))
            tensor = torch.tensor(ids, device=plan.device)
            mask = torch.ones_like(tensor)

            def ours(ids: list[list[int]] = ids, sized: Any = sized) -> Any:
                return sized.probe_ids(ids)

            def theirs(tensor: Any = tensor, mask: Any = mask) -> Any:
                with torch.inference_mode():
                    return pooled_forward(hf, tensor, mask)

            reference = theirs()["next_logprobs"].float().cpu().numpy()
            got = ours().next_logprobs
            agreement = float(np.abs(got - reference).max())
            times: dict[str, list[float]] = {"sago": [], "hf_sdpa": []}
            for _ in range(plan.repeats):  # interleaved
                for name, fn in (("sago", ours), ("hf_sdpa", theirs)):
                    synchronize(plan.device)
                    t0 = time.perf_counter()
                    fn()
                    synchronize(plan.device)
                    times[name].append(time.perf_counter() - t0)
            medians = {k: statistics.median(v) for k, v in times.items()}
            tokens = batch * seq_len
            row = {
                "batch": batch,
                "seq_len": seq_len,
                "max_abs_logprob_diff": agreement,
                "sago_tokens_per_s": tokens / medians["sago"],
                "hf_sdpa_tokens_per_s": tokens / medians["hf_sdpa"],
                "sago_vs_hf": medians["hf_sdpa"] / medians["sago"],
                "seconds": times,
            }
            flops = 2 * result["parameters"] * tokens  # forward matmul FLOPs, attention aside
            row["sago_tflop_s"] = flops / medians["sago"] / 1e12
            grid.append(row)
            log.info(
                "probe %d x %d: sago %.0f tok/s, HF %.0f tok/s",
                batch,
                seq_len,
                row["sago_tokens_per_s"],
                row["hf_sdpa_tokens_per_s"],
            )
    result["grid"] = grid
    best = max(grid, key=lambda r: r["sago_tokens_per_s"])
    result["best"] = {
        k: best[k]
        for k in (
            "batch",
            "seq_len",
            "sago_tokens_per_s",
            "hf_sdpa_tokens_per_s",
            "sago_vs_hf",
            "sago_tflop_s",
        )
    }
    if plan.device == "cuda":
        result["share_of_bf16_peak"] = best["sago_tflop_s"] / H200["bf16_tflop_s"]
    model.close()


def job(result: dict[str, Any], plan: Plan, folder: Path, mmlu: Path, work: Path) -> None:
    """The whole SAGO job against the canonical-only HF pass on the same items; wall time, peak memory."""
    from sago_fast.run import RunConfig, run
    from sago_fast.store import Store

    data = mmlu_sample(work / "mmlu-sample", plan.items, 0, source=mmlu)
    dtype_note = "fp16" if plan.device == "cuda" else "fp32"
    db = work / "job.duckdb"
    db.unlink(missing_ok=True)  # a rerun evaluates again rather than finding every unit done
    config = RunConfig(
        models=(str(folder),),
        datasets=(f"mmlu:{data}",),
        db=db,
        variants_per_family=1,
        device=plan.device,
        cache_dir=work / "exports",
        stats=False,  # as benchmarks/bench_lmeval.py: the evaluation, not `sago stats`
    )
    synchronize(plan.device)
    with PeakDeviceMemory(plan.device) as memory:
        t0 = time.perf_counter()
        outcome = run(config, progress=False)
        synchronize(plan.device)
        sago_seconds = time.perf_counter() - t0
    with Store(db, read_only=True) as store:
        _, counts = store.query("SELECT count(*) FROM variants")
        _, rows = store.query(
            "SELECT v.prompt, e.options, m.option_scores FROM variants v JOIN examples e USING (dataset_id, example_id) "
            "JOIN mode_answers m ON m.variant_id = v.variant_id AND m.replicate = 0 AND m.answer_mode = 'cloze' "
            "WHERE v.is_canonical ORDER BY v.example_id"
        )
    result.update(
        items=plan.items,
        renderings=counts[0][0],
        dtype=dtype_note,
        provider=outcome.provider,
        sago_seconds=round(sago_seconds, 2),
        sago_peak_device_mib=memory.mib,
    )
    with PeakDeviceMemory(plan.device) as memory:
        hf_seconds, logliks = hf_canonical_pass(folder, rows, plan.device)
    result["hf_seconds"] = round(hf_seconds, 2)
    result["hf_peak_device_mib"] = memory.mib
    result["sago_vs_hf_time"] = sago_seconds / hf_seconds
    ours = np.array([s for r in rows for s in r[2]], dtype=np.float64)
    theirs = np.array([s for row in logliks for s in row], dtype=np.float64)
    result["canonical_loglik_max_abs_diff"] = float(np.abs(ours - theirs).max())
    result["canonical_answers_equal"] = [int(np.argmax(r[2])) for r in rows] == [
        int(np.argmax(x)) for x in logliks
    ]


def hf_canonical_pass(
    folder: Path, rows: list[tuple[str, list[str], list[float]]], device: str
) -> tuple[float, list[list[float]]]:
    """What lm-eval's HF backend does for the canonical prompts: every (context, " option") pair as one
    sequence, longest first, batches of 32, log P(continuation | context) summed; the model load included."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    synchronize(device)
    t0 = time.perf_counter()
    dtype = torch.float16 if device == "cuda" else torch.float32
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = (
        AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation="sdpa")
        .to(device)
        .eval()
    )
    requests = []
    for r, (prompt, options, _) in enumerate(rows):
        context = tokenizer(prompt)["input_ids"]
        for o, option in enumerate(options):
            continuation = tokenizer(prompt + " " + option)["input_ids"][len(context) :]
            requests.append((r, o, context, continuation))
    requests.sort(key=lambda q: -(len(q[2]) + len(q[3])))
    out = [[0.0] * len(row[1]) for row in rows]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    for start in range(0, len(requests), 32):
        batch = requests[start : start + 32]
        seqs = [(c + k)[:-1] for _, _, c, k in batch]
        width = max(map(len, seqs))
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        for i, s in enumerate(seqs):  # right padding, as lm-eval
            ids[i, : len(s)] = torch.tensor(s)
        with torch.inference_mode():
            logp = torch.log_softmax(model(ids.to(device)).logits.float(), dim=-1)
        for i, (r, o, c, k) in enumerate(batch):
            positions = torch.arange(len(c) - 1, len(c) + len(k) - 1, device=device)
            targets = torch.tensor(k, device=device)
            out[r][o] = float(logp[i, positions, targets].sum())
    synchronize(device)
    seconds = time.perf_counter() - t0
    del model
    return seconds, out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out", type=Path)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--dry-run", action="store_true", help="a tiny model and small grids (CPU, CI)")
    parser.add_argument("--mmlu", type=Path, default=ROOT.parent / "shared" / "data" / "mmlu" / "test")
    parser.add_argument("--tokenizer", type=Path, default=None, help="tokenizer folder of the probe model")
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--phases", default="environment,parity,probe,job")
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    log.setLevel(logging.INFO)
    args.out.mkdir(parents=True, exist_ok=True)
    plan = Plan.of(args.device, args.dry_run, args.items)
    report = Report(args.out)
    report.data["plan"] = plan.__dict__
    report.data["device_limits"] = H200 if args.device == "cuda" else None
    work = args.work or Path(tempfile.mkdtemp(prefix="sago-gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    wanted = set(args.phases.split(","))
    runs: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
        ("environment", lambda r: environment(r, args.device)),
        ("parity", lambda r: parity(r, args.device, work)),
    ]
    folder: list[Path] = []

    def model_folder() -> Path:
        if not folder:
            folder.append(big_checkpoint(work, plan, args.tokenizer))
        return folder[0]

    runs += [
        ("probe", lambda r: probe(r, plan, model_folder(), work)),
        ("job", lambda r: job(r, plan, model_folder(), args.mmlu, work)),
    ]
    for name, fn in runs:
        if name in wanted:
            with report.phase(name) as result:
                fn(result)
            release_device_memory(args.device)
    phases = report.data["phases"]
    report.data["ok"] = all(p.get("ok") for p in phases.values())
    report.write()
    summary(report)
    sys.exit(0 if report.data["ok"] else 1)


def summary(report: Report) -> None:
    phases = report.data["phases"]
    if "probe" in phases and "grid" in phases["probe"]:
        report.say("probe: batch x len  sago tok/s  hf_sdpa tok/s  ratio")
        for row in phases["probe"]["grid"]:
            report.say(
                f"probe: {row['batch']:>4} x {row['seq_len']:<4} {row['sago_tokens_per_s']:>11.0f} "
                f"{row['hf_sdpa_tokens_per_s']:>13.0f}  {row['sago_vs_hf']:.2f}x"
            )
    if "job" in phases and "sago_seconds" in phases["job"]:
        j = phases["job"]
        report.say(
            f"job: {j['items']} items, {j['renderings']} renderings: sago {j['sago_seconds']} s "
            f"(peak {j['sago_peak_device_mib']} MiB), HF canonical {j.get('hf_seconds')} s "
            f"(peak {j.get('hf_peak_device_mib')} MiB): {j.get('sago_vs_hf_time', float('nan')):.2f}x"
        )
    report.say("phases: " + ", ".join(f"{k} {'ok' if v.get('ok') else 'FAILED'}" for k, v in phases.items()))
    report.write()


if __name__ == "__main__":
    main()
