"""Grouping lm-eval's requests into sago passes, and one lm-eval command line per checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from sago_fast.errors import InputError
from sago_fast.lmeval.each import lmeval_argvs, split_model_args
from sago_fast.lmeval.requests import cut_pair, group_pairs, passes


def test_cut_pair_keeps_the_last_max_length_plus_one_tokens_as_lm_eval_hf():
    # hf reads (context + continuation)[-(max_length + 1):][:-1]: the cut comes off the context's left
    assert cut_pair([1, 2, 3, 4, 5], [6, 7], 4) == ([3, 4, 5], [6, 7])
    assert cut_pair([1, 2], [3], 8) == ([1, 2], [3])
    with pytest.raises(InputError, match="encodes to no tokens"):
        cut_pair([1], [], 8)
    with pytest.raises(InputError, match="does not fit the model's 2 positions"):
        cut_pair([1], [2, 3, 4], 2)


def test_group_pairs_puts_every_continuation_of_a_context_in_one_group_longest_first():
    pairs = [([1, 2], [5]), ([9], [6]), ([1, 2], [7, 8]), ([9], [6])]
    groups = group_pairs(pairs, 16)
    assert [g.context for g in groups] == [(1, 2), (9,)]
    assert groups[0].continuations == [[5], [7, 8]] and groups[0].pairs == [0, 2]
    assert groups[1].continuations == [[6], [6]] and groups[1].pairs == [1, 3]
    cut = group_pairs([([1, 2, 3], [4]), ([0, 2, 3], [4])], 2)  # both cut to (2, 3): one prefill
    assert [g.context for g in cut] == [(2, 3)] and cut[0].pairs == [0, 1]
    with pytest.raises(InputError, match="request 0: an empty context"):
        group_pairs([([], [1])], 8)
    assert [len(p) for p in passes(group_pairs([([i], [0]) for i in range(5)], 8), per_pass=2)] == [2, 2, 1]


def test_split_model_args():
    assert split_model_args("pretrained=./m,device=cpu") == ("./m", "device=cpu")
    assert split_model_args("dtype=float32,pretrained=/a/b") == ("/a/b", "dtype=float32")
    with pytest.raises(InputError, match="no pretrained=PATH"):
        split_model_args("device=cpu")


def test_a_training_run_folder_gives_one_lm_eval_command_per_checkpoint(tmp_path: Path):
    run = tmp_path / "run"
    for step in (20, 100, 3):
        (run / f"checkpoint-{step}").mkdir(parents=True)
        (run / f"checkpoint-{step}" / "config.json").write_text("{}")
    argvs = lmeval_argvs(
        ["--model_args", f"pretrained={run},dtype=float32", "--tasks", "t", "--output_path", "out"]
    )
    assert [Path(c).name for c, _ in argvs] == ["checkpoint-3", "checkpoint-20", "checkpoint-100"]
    checkpoint, argv = argvs[0]
    assert argv[:2] == ["--model", "sago"]  # the backend, unless another is named
    assert argv[argv.index("--model_args") + 1] == f"pretrained={checkpoint},dtype=float32"
    assert argv[argv.index("--output_path") + 1] == "out"  # lm-eval keeps checkpoints apart below it
    assert argv[argv.index("--device") + 1] == "auto"  # not lm-eval's default cuda:0
    one = lmeval_argvs(["--model", "hf", "--model_args=pretrained=./m", "--output_path=o"])
    assert one == [("./m", ["--model", "hf", "--model_args=pretrained=./m", "--output_path=o"])]
    with pytest.raises(InputError, match="--model_args pretrained=PATH is required"):
        lmeval_argvs(["--tasks", "t"])


def test_a_device_in_the_model_args_becomes_lm_evals_device_flag():
    ((_, argv),) = lmeval_argvs(["--model_args", "pretrained=./m,device=cuda,dtype=float16"])
    assert argv[argv.index("--model_args") + 1] == "pretrained=./m,dtype=float16"
    assert argv[argv.index("--device") + 1] == "cuda"


def test_the_task_index_is_built_once_for_many_checkpoints(tmp_path, monkeypatch):
    pytest.importorskip("lm_eval")
    from lm_eval.tasks import TaskManager, _index

    from sago_fast.lmeval.each import task_index_built_once

    (tmp_path / "t.yaml").write_text(
        "task: tiny_task\ndataset_path: json\noutput_type: multiple_choice\n"
        'doc_to_text: "{{q}}"\ndoc_to_choice: ["A", "B"]\ndoc_to_target: 0\n',
        encoding="utf-8",
    )
    reads = []
    real_load = _index.load_yaml
    monkeypatch.setattr(_index, "load_yaml", lambda *a, **k: reads.append(a[0]) or real_load(*a, **k))
    original = _index.TaskIndex.__dict__["build"]
    with task_index_built_once():
        first = TaskManager(include_path=str(tmp_path), include_defaults=False)
        second = TaskManager(include_path=str(tmp_path), include_defaults=False)
    assert len(reads) == 1  # the YAML was read for the first manager only
    assert first.all_tasks == second.all_tasks == ["tiny_task"]
    assert first.task_index is not second.task_index  # each run has its own copy
    assert _index.TaskIndex.__dict__["build"] is original  # put back
    TaskManager(include_path=str(tmp_path), include_defaults=False)
    assert len(reads) == 2  # outside: lm-eval's own behaviour again
