"""Progress inside a unit: every pass reports its total and every batch, with the tokens it processed."""

from __future__ import annotations

import io

import sago_fast
from sago_fast.datasets.load import load_dataset
from sago_fast.runtime.batching import BatchPolicy
from sago_fast.runtime.progress import TqdmPasses
from sago_fast.units.driver import evaluate_unit
from sago_fast.variants import VariantConfig, generate_variants


class Recorder:
    def __init__(self):
        self.passes = []  # [stage, total, unit, items done, tokens]

    def start(self, stage, total, unit):
        self.passes.append([stage, total, unit, 0, 0])

    def advance(self, n_items, n_tokens):
        self.passes[-1][3] += n_items
        self.passes[-1][4] += n_tokens

    def close(self):
        pass


def test_every_pass_reports_all_its_items(checkpoints, cache_dir):
    model = sago_fast.load_model(checkpoints["llama"], cache_dir=cache_dir, batch_policy=BatchPolicy(512, 4))
    model.engine.progress = recorder = Recorder()
    mc = load_dataset("capitals", limit=3)
    variants = generate_variants(mc.examples, VariantConfig(families=("typo",), k=1))
    evaluate_unit(model, mc, variants)
    gen = load_dataset("letters", limit=2)
    evaluate_unit(model, gen, generate_variants(gen.examples, VariantConfig(families=("typo",), k=1)))
    stages = [p[0] for p in recorder.passes]
    # one prefill pass over every prompt (options scored on its cache), then the replicate's; generation
    # tasks: one generate pass (prefill + decoding)
    assert stages[:2] == ["prefill", "prefill"] and "generate" in stages
    for stage, total, _unit, done, tokens in recorder.passes:
        assert done == total and tokens >= total, stage
    prefill = recorder.passes[0]
    assert prefill[1] == len(variants) and prefill[2] == "prompt"


def test_tqdm_bar_shows_items_and_tokens_per_second():
    out = io.StringIO()
    bar = TqdmPasses("m × d", disable=False, file=out)
    bar.start("probe", 10, "prompt")
    bar.advance(4, 400)
    bar.advance(6, 600)
    bar._bar.refresh()  # tqdm redraws at most every 0.1 s by itself
    bar.close()
    text = out.getvalue()
    assert "m × d probe" in text and "10/10" in text and "tok/s" in text


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_lines_instead_of_bars_when_not_on_a_terminal():
    """In a log (CI, `make demo > log`) a pass writes a line at most every interval seconds."""
    from sago_fast.runtime.progress import LinePasses

    out, clock = io.StringIO(), FakeClock()
    lines = LinePasses("step-01200 × capitals", interval=30, file=out, clock=clock)
    lines.start("prefill", 100, "prompt")
    for _ in range(10):
        clock.now += 10
        lines.advance(10, 1000)
    written = out.getvalue().splitlines()
    assert len(written) == 3  # at 30, 60 and 90 seconds
    assert written[0] == "sago: step-01200 × capitals prefill: 30/100 prompts, 100 tok/s, 30 s"
    assert written[-1].startswith("sago: step-01200 × capitals prefill: 90/100 prompts")


def test_the_run_names_the_unit_in_progress(tmp_path, checkpoints, cache_dir):
    """Lines mode: each unit's start names it before its passes run, and its end says how it went."""
    from sago_fast.run import RunConfig
    from sago_fast.run.checkpoint import ChunkOutcome
    from sago_fast.run.executors import Work, local_outcomes
    from sago_fast.run.plan import plan_run
    from sago_fast.run.progress import RunProgress

    config = RunConfig(
        models=(str(checkpoints["llama"]),),
        datasets=("capitals", "comparison"),
        db=tmp_path / "r.duckdb",
        limit=2,
        variants_per_family=1,
        families=("typo",),
        cache_dir=cache_dir,
    )
    plan = plan_run(config)
    out = io.StringIO()
    progress = RunProgress(len(plan.units), 0, "lines", file=out)
    seen = []
    for outcome in local_outcomes(Work(plan, plan.units, config, progress)):
        if isinstance(outcome, ChunkOutcome):
            progress.examples(outcome.checkpoint, outcome.n_examples, 2, outcome.unit_id)
            continue
        seen.append(out.getvalue().splitlines()[-2:])  # the lines before this unit finished
        progress.unit_finished(outcome.checkpoint, outcome.error, outcome.seconds, outcome.unit_id)
    assert seen[0][0] == "sago: unit 1/2 started: llama × capitals"
    assert seen[1][0] == "sago: unit 2/2 started: llama × comparison"
    assert seen[1][1].endswith("2/2 examples committed")
    assert out.getvalue().splitlines()[-1].startswith("sago: unit 2/2 done in ")


def test_lines_number_units_as_they_started_and_end_with_the_examples_used():
    """Two units in lockstep: each line names its own unit's number (not "1/2" for both), and a unit that
    stopped early (sequential) says how many of its examples it used when it ends."""
    from sago_fast.run.progress import RunProgress

    out = io.StringIO()
    progress = RunProgress(2, 0, "lines", interval=0, file=out)
    progress.unit_started("a × capitals", "u-a")
    progress.unit_started("b × capitals", "u-b")
    progress.examples("a × capitals", 10, 60, "u-a")
    progress.examples("b × capitals", 10, 60, "u-b")
    progress.examples("b × capitals", 20, 60, "u-b")
    progress.unit_finished("b × capitals", None, 1.0, "u-b")
    progress.unit_finished("a × capitals", None, 1.0, "u-a")
    lines = out.getvalue().splitlines()
    assert "unit 2/2 b × capitals: 10/60 examples committed" in lines[3]
    assert "unit 1/2 a × capitals: 10/60 examples committed" in lines[2]
    assert lines[5].startswith("sago: unit 2/2 done in 1.0 s: b × capitals, 20/60 examples")
    assert lines[6].startswith("sago: unit 1/2 done in 1.0 s: a × capitals, 10/60 examples")
