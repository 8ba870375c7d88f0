"""lm-eval's torch seed and environment report without importing torch (sago_fast/lmeval/torch_left_out.py).

Each case runs in a fresh interpreter: the test process has torch imported already, where the context
changes nothing."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("lm_eval")
pytest.importorskip("torch")


def in_a_fresh_process(code: str) -> list[str]:
    """Run ``code`` after the light start of a command whose exports are cached (transformers told to
    leave torch alone); its stdout lines."""
    start = (
        "from sago_fast.runtime.light import tokenizers_without_torch\n"
        "assert tokenizers_without_torch()\n"
        # the report quotes lscpu, whose clock lines (CPU MHz, scaling) may move between two calls
        "def steady(report):\n"
        "    return [line for line in report.splitlines() if 'MHz' not in line]\n"
    )
    done = subprocess.run([sys.executable, "-c", start + code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


def test_the_seed_waits_for_torchs_import_and_the_report_is_torchs_own():
    """Inside the context lm-eval's seeding and environment report leave torch unimported; torch imported
    later starts from the seed's state; the report's torch part is what torch's ``collect_env`` says."""
    lines = in_a_fresh_process(
        "import sys\n"
        "import lm_eval.evaluator as ev\n"
        "from sago_fast.lmeval.torch_left_out import torch_left_out\n"
        "seed, report = ev.set_torch_seed, ev.add_env_info\n"
        "storage = {}\n"
        "with torch_left_out():\n"
        "    ev.set_torch_seed(99)\n"
        "    ev.set_torch_seed(1234)\n"
        "    ev.add_env_info(storage)\n"
        "    print('torch imported:', 'torch' in sys.modules)\n"
        "    import torch\n"
        "    drawn = torch.rand(4).tolist()\n"
        "print('put back:', ev.set_torch_seed is seed and ev.add_env_info is report)\n"
        "torch.manual_seed(1234)\n"
        "print('seeded:', drawn == torch.rand(4).tolist())\n"
        "from torch.utils.collect_env import get_pretty_env_info\n"
        "print('same report:', steady(storage['pretty_env_info']) == steady(get_pretty_env_info()))\n"
        "print('versions:', 'transformers_version' in storage and 'lm_eval_version' in storage)\n"
    )
    assert lines[-5:] == [
        "torch imported: False",
        "put back: True",
        "seeded: True",
        "same report: True",
        "versions: True",
    ]


@pytest.mark.parametrize(
    "breaking",
    [
        "left_out.REPORT_COMMAND = 'raise SystemExit(3)'",
        "left_out.subprocess = types.SimpleNamespace(**{**vars(subprocess), 'Popen': refuse})",
    ],
    ids=["fails", "cannot-start"],
)
def test_a_failed_child_leaves_the_report_to_lm_eval(breaking):
    """Where the child that gathers torch's report fails or cannot start, the report is gathered in the
    process."""
    lines = in_a_fresh_process(
        "import sys\n"
        "import lm_eval.evaluator as ev\n"
        "import subprocess, types\n"
        "import sago_fast.lmeval.torch_left_out as left_out\n"
        "def refuse(*args, **kwargs):\n"
        "    raise OSError('cannot start')\n"
        f"{breaking}\n"
        "storage = {}\n"
        "with left_out.torch_left_out():\n"
        "    ev.add_env_info(storage)\n"
        "from torch.utils.collect_env import get_pretty_env_info\n"
        "print('same report:', steady(storage['pretty_env_info']) == steady(get_pretty_env_info()))\n"
    )
    assert lines[-1] == "same report: True"
