"""prep's command line (pipelines/arguments.py): a prep flag, a Beam pipeline option, or a one-line error."""

from __future__ import annotations

import pytest

from pipelines import prep
from pipelines.errors import PrepError
from tests.helpers import HANG_S, run_cli

BASE = ["--input", "data/a.jsonl", "--output", "out"]


def test_a_shell_expanded_glob_is_an_error_that_says_to_quote_it():
    with pytest.raises(PrepError, match=r"unexpected argument 'data/b.jsonl'.*quote it"):
        prep.parse(["--input", "data/a.jsonl", "data/b.jsonl", "data/c.jsonl", "--output", "out"])


@pytest.mark.parametrize(("typed", "meant"), [("--vocabsize", "--vocab-size"), ("--vocab_size", "--vocab-size"),
                                              ("--direct_num_worker", "--direct_num_workers"),
                                              ("--validation-fraktion", "--validation-fraction")])
def test_a_mistyped_flag_is_an_error_with_did_you_mean(typed, meant):
    with pytest.raises(PrepError, match=rf"unknown flag {typed} \(did you mean {meant}\?\)"):
        prep.parse([*BASE, typed, "5"])


def test_a_flag_like_nothing_known_gets_no_suggestion():
    with pytest.raises(PrepError, match=r"^unknown flag --zzz \(not a prep flag"):
        prep.parse([*BASE, "--zzz=1"])


def test_a_prefix_of_a_flag_is_not_that_flag():
    with pytest.raises(PrepError, match="unknown flag --vocab-si"):
        prep.parse([*BASE, "--vocab-si", "500"])


def test_beam_and_dataflow_options_pass_through():
    dataflow = ["--runner", "DataflowRunner", "--project", "p", "--region", "us-central1",
                "--temp_location=gs://b/tmp", "--experiments", "use_runner_v2", "--max_num_workers", "4",
                "--direct_num_workers", "2", "--direct_running_mode", "multi_processing", "--save_main_session"]
    config, beam_args = prep.parse([*BASE, "--vocab-size", "500", *dataflow])
    assert config.wordpiece.vocab_size == 500 and beam_args == dataflow


def test_a_bad_value_is_one_line_for_either_kind_of_flag():
    with pytest.raises(PrepError, match="--direct_num_workers: invalid int value: 'x'"):
        prep.parse([*BASE, "--direct_num_workers", "x"])
    with pytest.raises(PrepError, match="--filters: invalid choice"):
        prep.parse([*BASE, "--filters", "nope"])


@pytest.mark.integration  # starts the CLI
def test_cli_unquoted_glob_exits_2_with_one_line_and_reads_nothing(tmp_path):
    files = []
    for i in range(3):
        path = tmp_path / f"part-{i}.jsonl"
        path.write_text('{"text": "A sentence. Another one."}\n')
        files.append(str(path))
    out = tmp_path / "out"
    done = run_cli("prep", "--input", *files, "--output", str(out), timeout=HANG_S)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        (f"clozeforge prep: error: unexpected argument '{files[1]}': each --input takes one file or glob; if the shell "
        "expanded a glob, quote it (--input 'data/*.jsonl') or repeat --input for each file")]
    assert not out.exists()
    typo = run_cli("prep", "--input", files[0], "--output", str(out), "--vocabsize", "5000", timeout=HANG_S)
    assert typo.returncode == 2 and typo.stderr.strip().splitlines() == [
        ("clozeforge prep: error: unknown flag --vocabsize (did you mean --vocab-size?) (not a prep flag nor a Beam "
        "pipeline option; see clozeforge prep --help)")]


@pytest.mark.parametrize("spelling", ["--text-field", "--text-column"])
def test_text_column_is_another_spelling_of_text_field(spelling):
    config, _ = prep.parse([*BASE, spelling, "body"])
    assert config.read.text_field == "body"
