"""What a new user trips on, checked before any work: settings of the wrong type, flags that cannot go
together, environment variables, file names, statistics flags, few-shot draws, lm-eval arguments and
data folders. Each error is one line naming what to change."""

from __future__ import annotations

import json
import logging
import os
import re
import time

import pytest

from sago_fast.datasets.builtin import SUITES
from sago_fast.datasets.load import load_dataset
from sago_fast.errors import InputError, StoreError
from sago_fast.run import RunConfig
from sago_fast.run.plan import plan_run
from sago_fast.stats.settings import StatsConfig
from sago_fast.store import Store
from sago_fast.variants.generate import VariantConfig, draw_shots


def _yaml(tmp_path, text: str):
    path = tmp_path / "run.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("limit: three", r"run.yaml: limit must be a whole number, not 'three'"),
        ("families: 7", r"run.yaml: families must be a list of strings, not 7"),
        ("seed: 1.5", r"run.yaml: seed must be a whole number, not 1.5"),
        ("stats: maybe", r"run.yaml: stats must be true or false, not 'maybe'"),
        ("precision: [1]", r"run.yaml: precision must be a number, not \[1\]"),
    ],
)
def test_a_config_value_of_the_wrong_type_is_one_line_naming_the_field(tmp_path, line, message):
    path = _yaml(tmp_path, f"models: [m]\ndatasets: [capitals]\ndb: r.duckdb\n{line}\n")
    with pytest.raises(InputError, match=message):
        RunConfig.from_yaml(path)


def test_paths_and_lists_given_from_python_are_taken_as_such(tmp_path):
    config = RunConfig(models=["m"], datasets=["capitals"], db=str(tmp_path / "r.duckdb"))  # type: ignore[arg-type]
    assert config.models == ("m",) and config.db == tmp_path / "r.duckdb"


def test_shard_and_db_together_are_refused_and_a_config_db_gives_way_to_shard(tmp_path):
    with pytest.raises(InputError, match=r"--shard writes Parquet unit folders to --shard-dir, not to --db"):
        RunConfig(
            models=("m",), datasets=("capitals",), db=tmp_path / "r.duckdb", shard="0/2", shard_dir=tmp_path
        )
    path = _yaml(tmp_path, "models: [m]\ndatasets: [capitals]\ndb: r.duckdb\n")
    sharded = RunConfig.from_yaml(path, shard="0/2", shard_dir=tmp_path / "shards")
    assert sharded.db is None and sharded.shard == "0/2"


@pytest.mark.parametrize("value", ["99999999999", "-1", "two", "1025"])
def test_sago_threads_out_of_range_is_one_line(monkeypatch, value):
    from sago_fast.runtime.threads import default_threads

    monkeypatch.setenv("SAGO_THREADS", value)
    with pytest.raises(InputError, match=r"\$SAGO_THREADS must be a whole number of threads from 0 to 1024"):
        default_threads()


def test_sago_threads_above_the_cores_is_a_warning(monkeypatch, caplog):
    from sago_fast.runtime.threads import check_threads, usable_cores

    monkeypatch.setenv("SAGO_THREADS", str(usable_cores() + 1))
    with caplog.at_level(logging.WARNING):
        assert check_threads() == usable_cores() + 1
    assert "more than the" in caplog.text and "cores this process may use" in caplog.text
    caplog.clear()
    monkeypatch.setenv("SAGO_THREADS", "1")
    with caplog.at_level(logging.WARNING):
        check_threads()
    assert not caplog.text


def test_a_results_file_name_that_is_not_utf8_is_one_line(tmp_path):
    name = os.fsdecode(os.fsencode(str(tmp_path)) + b"/r\xffsults.duckdb")
    with pytest.raises(StoreError, match=r"r\\xffsults.duckdb: the results file's name is not valid UTF-8"):
        Store(name)
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"alpha": 2.0}, r"--alpha \(alpha\) must lie strictly between 0 and 1, not 2"),
        ({"confidence": 1.0}, r"--confidence \(confidence\) must lie strictly between 0 and 1"),
        ({"n_resamples": 0}, r"--resamples \(n_resamples\) must be at least 100, not 0"),
        ({"tolerance": -1.0}, r"--tolerance \(tolerance\) must be a share from 0 to below 1, not -1"),
    ],
)
def test_statistics_settings_name_their_flag(settings, message):
    with pytest.raises(InputError, match=message):
        StatsConfig(**settings)


def test_a_negative_number_of_unstable_examples_is_refused_before_the_file_is_read(tmp_path):
    from sago_fast.report import write_report

    with pytest.raises(InputError, match=r"--unstable \(n_unstable\) must be a whole number >= 0, not -5"):
        write_report(tmp_path / "absent.duckdb", tmp_path / "r.html", n_unstable=-5)


def _answer(example) -> str:
    return example.options[example.answer_index]


def _shares_the_answer(shot, example) -> bool:
    """Independently of the rule in the code: the example's answer named in the shot, or the shot's answer
    named in the example's question (whole words, any case)."""

    def names(text: str, answer: str) -> bool:
        return re.search(rf"\b{re.escape(answer)}\b", text, flags=re.IGNORECASE) is not None

    return (
        names(shot.question, _answer(example))
        or names(_answer(shot), _answer(example))
        or names(example.question, _answer(shot))
    )


def test_few_shot_demonstrations_never_give_the_answer_away():
    examples = SUITES.get("capitals").build(120)
    config = VariantConfig(num_fewshot=3)
    by_question = {e.question: e for e in examples}
    france = by_question["What is the capital of France?"]
    reverse = by_question["Paris is the capital of which country?"]
    drawn = 0
    for example in examples:
        shots = draw_shots(example, examples, config, "capitals")
        assert len(shots) == 3
        assert not any(_shares_the_answer(shot, example) for shot in shots), example.example_id
        drawn += len(shots)
    assert drawn == 360
    for seed in range(40):  # the reverse question is never a demonstration of its own question
        shots = draw_shots(france, examples, VariantConfig(num_fewshot=5, seed=seed), "capitals")
        assert reverse not in shots


def test_field_mappings_on_datasets_that_have_no_fields_are_refused(tmp_path):
    with pytest.raises(InputError, match=r"--field question=nope: field mappings apply to data files"):
        plan_run(
            RunConfig(
                models=("m",), datasets=("capitals",), db=tmp_path / "r.duckdb", fields=("question=nope",)
            )
        )


def test_duplicate_options_are_warned_about(tmp_path, caplog):
    data = tmp_path / "dup.jsonl"
    rows = [
        {"id": "a", "question": "2 + 2?", "options": ["4", "5", "4"], "answer": 2},
        {"id": "b", "question": "3 + 3?", "options": ["6", "7"], "answer": 0},
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        dataset = load_dataset(str(data))
    assert len(dataset.examples) == 2
    assert "1 example(s) list the same option twice (first: a)" in caplog.text


def test_a_folder_with_a_broken_mmlu_csv_names_the_file_and_line(tmp_path):
    folder = tmp_path / "mmlu"
    folder.mkdir()
    (folder / "anatomy_test.csv").write_text("What is it?,a,b,c,d,A\nBroken row,a,b\n", encoding="utf-8")
    with pytest.raises(InputError) as err:
        load_dataset(str(folder))
    assert "anatomy_test.csv:2" in str(err.value) and "save_to_disk" not in str(err.value)


def test_an_lm_eval_task_on_the_hub_is_refused_at_once(tmp_path):
    pytest.importorskip("lm_eval")
    import yaml

    task = {
        "task": "hub_task",
        "dataset_path": "cais/mmlu",
        "dataset_name": "anatomy",
        "test_split": "test",
        "output_type": "multiple_choice",
        "doc_to_text": "{{question}}",
        "doc_to_choice": "{{choices}}",
        "doc_to_target": "answer",
    }
    path = tmp_path / "hub.yaml"
    path.write_text(yaml.safe_dump(task), encoding="utf-8")
    start = time.monotonic()
    with pytest.raises(InputError, match=r"hub.yaml: field 'dataset_path': 'cais/mmlu' is not a local file"):
        load_dataset(f"lmeval:{path}")
    assert time.monotonic() - start < 20  # no download and its retries (26 s before)


def test_batch_size_in_model_args_goes_to_lm_evals_flag(tmp_path):
    from sago_fast.lmeval.each import check_before_work, lmeval_argvs

    ((_, argv),) = lmeval_argvs(["--model_args", "pretrained=m,batch_size=4", "--tasks", "t"])
    assert argv[argv.index("--batch_size") + 1] == "4" and "batch_size=4" not in " ".join(argv)
    with pytest.raises(InputError, match=r"model_args batch_size=4 and --batch_size 8 disagree"):
        lmeval_argvs(["--model_args", "pretrained=m,batch_size=4", "--batch_size", "8"])
    for bad in ("abc", "0", "auto:x"):
        ((_, argv),) = lmeval_argvs(["--model_args", "pretrained=m", "--tasks", "t"])
        argv[argv.index("--batch_size") + 1] = bad
        with pytest.raises(InputError, match=rf"--batch_size '{re.escape(bad)}': the sago backend takes"):
            check_before_work(argv)
    with pytest.raises(InputError, match=r"--batch_size 'abc'"):
        lmeval_argvs(["--model_args", "pretrained=m", "--batch_size", "abc"])


def test_lm_eval_arguments_are_checked_before_lm_eval_starts(tmp_path):
    import duckdb

    from sago_fast.lmeval.each import check_before_work

    foreign = tmp_path / "theirs.duckdb"
    con = duckdb.connect(str(foreign))
    con.execute("CREATE TABLE t (a INTEGER)")
    con.close()
    before = foreign.read_bytes()
    argv = ["--model", "sago", "--model_args", f"pretrained=m,sago_db={foreign}", "--batch_size", "auto"]
    with pytest.raises(StoreError, match=r"theirs.duckdb: not a sago results file"):
        check_before_work(argv)
    assert foreign.read_bytes() == before
    a_file = tmp_path / "not-a-folder"
    a_file.write_text("x")
    argv = ["--model", "sago", "--model_args", f"pretrained=m,cache_dir={a_file}"]
    with pytest.raises(InputError, match=r"model_args cache_dir .*not-a-folder: is a file, not a folder"):
        check_before_work(argv)


def test_a_run_option_declared_once_is_a_flag_a_yaml_key_and_a_field(tmp_path, monkeypatch):
    """One field with its flags and help: the command line, the YAML file and the config all have it."""
    from dataclasses import dataclass

    import typer
    from typer.testing import CliRunner

    import sago_fast.cli.run as cli_run
    from sago_fast.run.config import option

    @dataclass(frozen=True)
    class Wider(RunConfig):
        temperature: float = option(0.0, "--temperature", help="Sampling temperature (a new option).")

    app = typer.Typer()
    app.command("run")(cli_run.run_command_for(Wider))
    app.command("other")(lambda: None)
    shown = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "240", "TERMINAL_WIDTH": "240"})
    assert "--temperature" in shown.output and "Sampling temperature (a new option)." in shown.output
    ran: list[RunConfig] = []
    monkeypatch.setattr(cli_run, "_run", ran.append)
    given = ["run", "-m", "m", "-d", "capitals", "--db", str(tmp_path / "r.duckdb"), "--temperature", "0.7"]
    assert CliRunner().invoke(app, given).exit_code == 0
    assert ran[-1].temperature == 0.7 and ran[-1].models == ("m",)
    path = _yaml(tmp_path, "models: [m]\ndatasets: [capitals]\ndb: r.duckdb\ntemperature: 0.25\n")
    assert Wider.from_yaml(path).temperature == 0.25
    assert CliRunner().invoke(app, ["run", "--config", str(path), "--temperature", "0.5"]).exit_code == 0
    assert ran[-1].temperature == 0.5  # the command line overrides the file
    with pytest.raises(InputError, match=r"run.yaml: temperature must be a number, not 'hot'"):
        Wider.from_yaml(
            _yaml(tmp_path, "models: [m]\ndatasets: [capitals]\ndb: r.duckdb\ntemperature: hot\n")
        )
