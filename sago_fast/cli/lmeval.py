"""Run lm-evaluation-harness with sago as its model backend. Every argument goes to ``lm_eval run``
unchanged, with ``--model sago`` unless another model is named; ``--model_args pretrained=`` takes what
``sago run -m`` takes, and a training-run folder (or a glob, or a list file) is evaluated one checkpoint
after the other, on one export. `sago lm-eval -h` lists lm-eval's own flags. Example:
sago lm-eval --model_args pretrained=./ckpt,device=cpu --tasks mmlu_abstract_algebra --limit 20"""

from __future__ import annotations

import typer


def lmeval_command(ctx: typer.Context) -> None:
    from sago_fast.lmeval.each import run_lmeval_cli

    run_lmeval_cli(list(ctx.args))
