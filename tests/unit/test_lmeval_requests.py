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
    assert argv[argv.index("--batch_size") + 1] == "auto"  # sago's token budget, not lm-eval's 1
    one = lmeval_argvs(["--model", "hf", "--model_args=pretrained=./m", "--output_path=o"])
    assert one == [("./m", ["--model", "hf", "--model_args=pretrained=./m", "--output_path=o"])]
    with pytest.raises(InputError, match="--model_args pretrained=PATH is required"):
        lmeval_argvs(["--tasks", "t"])


def test_a_device_in_the_model_args_becomes_lm_evals_device_flag():
    ((_, argv),) = lmeval_argvs(["--model_args", "pretrained=./m,device=cuda,dtype=float16"])
    assert argv[argv.index("--model_args") + 1] == "pretrained=./m,dtype=float16"
    assert argv[argv.index("--device") + 1] == "cuda"


def test_a_batch_size_given_either_way_is_kept():
    for given in (["--batch_size", "1"], ["--batch_size=8"]):
        ((_, argv),) = lmeval_argvs(["--model_args", "pretrained=./m", *given])
        assert [w for w in argv if w.startswith("--batch_size")] == given[:1] and given[-1] in argv
    ((_, argv),) = lmeval_argvs(
        ["--model_args", "pretrained=./m,batch_size=4"]
    )  # lm-eval passes its flag too:
    assert argv[argv.index("--batch_size") + 1] == "4"  # one value, given once
    assert argv[argv.index("--model_args") + 1] == "pretrained=./m"


TINY_TASK = (
    "task: {name}\ndataset_path: json\noutput_type: multiple_choice\n"
    'doc_to_text: "{text}"\ndoc_to_choice: ["A", "B"]\ndoc_to_target: 0\n'
)


def tiny_task(folder: Path, name: str, text: str = "{{q}}") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(TINY_TASK.format(name=name, text=text), encoding="utf-8")
    return path


def counted_reads(monkeypatch) -> list[Path]:
    from lm_eval.tasks import _index

    reads: list[Path] = []
    real_load = _index.load_yaml
    monkeypatch.setattr(_index, "load_yaml", lambda *a, **k: reads.append(Path(a[0])) or real_load(*a, **k))
    return reads


def test_the_environment_report_is_gathered_once_for_many_runs(monkeypatch):
    pytest.importorskip("lm_eval")
    import lm_eval.evaluator as evaluator

    from sago_fast.lmeval.environment import environment_report_reused

    calls = []

    def report(storage):
        calls.append(1)
        storage.update({"pretty_env_info": f"report {len(calls)}", "versions": {"torch": "x"}})

    monkeypatch.setattr(evaluator, "add_env_info", report)
    runs = [{"results": i} for i in range(3)]
    with environment_report_reused():
        for run in runs:
            evaluator.add_env_info(run)
    assert len(calls) == 1
    assert [r["pretty_env_info"] for r in runs] == ["report 1"] * 3
    assert [r["results"] for r in runs] == [0, 1, 2]  # the run's own fields are kept
    runs[0]["versions"]["torch"] = "changed"
    assert runs[1]["versions"] == {"torch": "x"}  # each run has its own copy
    assert evaluator.add_env_info is report  # put back
    evaluator.add_env_info({})
    assert len(calls) == 2


def test_the_task_index_is_built_once_for_many_checkpoints(tmp_path, monkeypatch):
    pytest.importorskip("lm_eval")
    from lm_eval.tasks import TaskManager, _index

    from sago_fast.lmeval.task_index import task_index_reused

    tiny_task(tmp_path / "tasks", "tiny_task")
    reads = counted_reads(monkeypatch)
    original = _index.TaskIndex.__dict__["build"]
    with task_index_reused(tmp_path / "store"):
        first = TaskManager(include_path=str(tmp_path / "tasks"), include_defaults=False)
        second = TaskManager(include_path=str(tmp_path / "tasks"), include_defaults=False)
    assert len(reads) == 1  # the YAML was read for the first manager only
    assert first.all_tasks == second.all_tasks == ["tiny_task"]
    assert first.task_index is not second.task_index  # each run has its own copy
    assert _index.TaskIndex.__dict__["build"] is original  # put back
    TaskManager(include_path=str(tmp_path / "tasks"), include_defaults=False)
    assert len(reads) == 2  # outside: lm-eval's own behaviour again


def test_the_shipped_tasks_index_is_stored_and_built_again_when_a_yaml_changes(tmp_path, monkeypatch):
    """The shipped folder's index comes from the store in a later command; include folders are read
    afresh and override shipped tasks of the same name; an edited shipped YAML builds it again."""
    pytest.importorskip("lm_eval")
    from lm_eval.tasks import _index

    from sago_fast.lmeval import task_index

    shipped, mine, store = tmp_path / "shipped", tmp_path / "mine", tmp_path / "store"
    tiny_task(shipped, "shipped_a")
    edited = tiny_task(shipped, "shipped_b")
    tiny_task(mine, "shipped_a", text="mine: {{q}}")  # overrides the shipped task of that name
    monkeypatch.setattr(task_index, "shipped_tasks_folder", lambda: shipped)
    reads = counted_reads(monkeypatch)
    fresh = _index.TaskIndex.build([shipped, mine])
    assert len(reads) == 3
    for command in range(3):
        if command == 2:
            tiny_task(shipped, "shipped_b", text="edited: {{q}}")
            fresh = _index.TaskIndex.build([shipped, mine])
        del reads[:]
        with task_index.task_index_reused(store):  # one command
            index = _index.TaskIndex.build([shipped, mine])
        assert {name: (e.yaml_path, e.cfg) for name, e in index.items()} == {
            name: (e.yaml_path, e.cfg) for name, e in fresh.items()
        }
        assert index["shipped_a"].cfg["doc_to_text"] == "mine: {{q}}"
        # the first command builds and stores the shipped index, the second reads it, the third rebuilds it
        expected = (
            [*shipped.glob("*.yaml"), mine / "shipped_a.yaml"] if command != 1 else [mine / "shipped_a.yaml"]
        )
        assert sorted(reads) == sorted(expected)
    assert index["shipped_b"].cfg["doc_to_text"] == "edited: {{q}}" and edited.is_file()
    assert len(list(store.glob("*.pickle"))) == 2  # one per version of the shipped YAMLs


def test_lm_evals_own_tasks_come_from_the_store_in_a_later_command(tmp_path, monkeypatch):
    """With lm-eval's real shipped tasks: a later command reads only the include folder's YAML, and sees
    the same tasks."""
    pytest.importorskip("lm_eval")
    from lm_eval.tasks import TaskManager

    from sago_fast.lmeval.task_index import task_index_reused

    tiny_task(tmp_path / "tasks", "tiny_task")
    with task_index_reused(tmp_path / "store"):
        first = TaskManager(include_path=str(tmp_path / "tasks"))
    reads = counted_reads(monkeypatch)
    with task_index_reused(tmp_path / "store"):
        later = TaskManager(include_path=str(tmp_path / "tasks"))
    assert reads == [tmp_path / "tasks" / "tiny_task.yaml"]
    assert later.all_tasks == first.all_tasks
    assert {"mmlu", "tiny_task"} <= set(later.all_tasks)


def test_a_store_that_cannot_be_written_still_gives_the_index(tmp_path, monkeypatch, caplog):
    pytest.importorskip("lm_eval")
    from lm_eval.tasks import _index

    from sago_fast.lmeval import task_index

    shipped = tmp_path / "shipped"
    tiny_task(shipped, "shipped_a")
    monkeypatch.setattr(task_index, "shipped_tasks_folder", lambda: shipped)
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder", encoding="utf-8")
    with task_index.task_index_reused(blocked):
        index = _index.TaskIndex.build([shipped])
    assert list(index) == ["shipped_a"]
    assert "lm-eval task index not stored" in caplog.text


def test_a_cached_sago_lm_eval_command_starts_its_tokenizers_without_torch(tmp_path, monkeypatch):
    """``sago lm-eval`` asks for the light start (tokenizers without torch) with the checkpoints, device
    and cache its runs use; another model, an adapter's base, a dtype other than the device's default or a
    checkpoint that does not resolve leave it alone."""
    pytest.importorskip("lm_eval")
    import sago_fast.checkpoints.resolve as resolve
    import sago_fast.runtime.light as light
    from sago_fast.errors import InputError
    from sago_fast.lmeval.each import start_light_if_cached

    asked = []
    monkeypatch.setattr(light, "start_without_torch_if_exported", lambda *a: asked.append(a) or True)
    monkeypatch.setattr(resolve, "resolve_checkpoint", lambda path: f"resolved {path}")
    cache = tmp_path / "exports"
    common = ["--tasks", "t", "--device", "cpu"]
    runs = lmeval_argvs(["--model_args", f"pretrained=./m,cache_dir={cache},dtype=float32", *common])
    assert start_light_if_cached(runs)
    assert asked == [(["resolved ./m"], "cpu", str(cache))]
    for other in (
        ["--model", "hf", "--model_args", "pretrained=./m", *common],
        ["--model_args", "pretrained=./adapter,base=./m", *common],
        ["--model_args", "pretrained=./m,dtype=float16", *common],
    ):
        assert not start_light_if_cached(lmeval_argvs(other))

    def missing(path):
        raise InputError(f"{path}: no such checkpoint")

    monkeypatch.setattr(resolve, "resolve_checkpoint", missing)
    assert not start_light_if_cached(lmeval_argvs(["--model_args", "pretrained=./m", *common]))
    assert len(asked) == 1
