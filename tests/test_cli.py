"""The command line as a user meets it: every flag of every command explained in --help, the flag spellings users
already type still parse to the same settings, and `clozeforge --version`."""

from __future__ import annotations

import argparse
import re

import pytest

from demo.command import demo_parser
from downstream import embed, export, fill_mask, score
from downstream.contextual import retrieve_command, senses_command, similarity
from downstream.finetune import command as finetune
from pipelines import prep
from pipelines.commands import inspect, tokenize
from tests.helpers import run_cli
from trainer import pretrain
from trainer.config import TrainConfig



def action_parser(action: str) -> argparse.ArgumentParser:
    """The parser of one `clozeforge senses` action (`clozeforge senses fit --help`)."""
    parser = senses_command.senses_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[action]


PARSERS = {
    "prep": prep.parser,
    "tokenize": tokenize.parser,
    "inspect": inspect.parser,
    "train": pretrain.parser,
    "export": export.export_parser,
    "fill-mask": fill_mask.fill_mask_parser,
    "embed": embed.embed_parser,
    "score": score.score_parser,
    "finetune": finetune.finetune_parser,
    "senses": senses_command.senses_parser,
    **{f"senses {action}": (lambda action=action: action_parser(action)) for action in senses_command.ACTIONS},
    "similarity": similarity.similarity_parser,
    "retrieve": retrieve_command.retrieve_parser,
    "demo": demo_parser,
}

# Every flag `prep --help` and `train --help` listed before their flags were generated from the configs.
PREP_FLAGS_BEFORE = [
    "--batch-rows", "--bucket-docs", "--bytes-per-shard", "--cased", "--dedup", "--dupe-factor", "--filters",
    "--html-to-text", "--id-field", "--input", "--invalid-utf8", "--language", "--max-record-bytes", "--max-seq-len",
    "--min-frequency", "--near-threshold", "--num-unused", "--output", "--rows-per-shard", "--seed", "--short-seq-prob",
    "--spill-mb", "--strict", "--text-field", "--txt-mode", "--unicode-form", "--validation-fraction", "--vocab",
    "--vocab-size", "--word-cache",
]
TRAIN_FLAGS_BEFORE = [
    "--batch-size", "--cache-dir", "--data", "--deepspeed-config", "--eval-batches", "--eval-every", "--grad-accum",
    "--grad-clip", "--keep-last", "--length-buckets", "--local-rank", "--local_rank", "--log-every", "--lr",
    "--mask-prob", "--masking", "--max-steps", "--mix", "--mix-alpha", "--mlm-weight", "--model",
    "--no-verify-checksums", "--nsp-weight", "--num-workers", "--optimizer", "--output", "--pad-to-multiple-of",
    "--phase2-batch-size", "--phase2-data", "--phase2-start", "--pre-layernorm", "--precision", "--random-token-dist",
    "--save-every", "--sbo-weight", "--schedule", "--seed", "--shuffle-window", "--stop-after", "--warmup-steps",
    "--weight-decay", "--zero-stage",
]


def explained(action: argparse.Action) -> bool:
    """Help that says more than a default: some words once '(default: ...)' is taken away."""
    text = re.sub(r"\(default: [^)]*\)", "", action.help or "")
    return len(re.findall(r"[A-Za-z]{3,}", text)) >= 2


@pytest.mark.parametrize("command", sorted(PARSERS))
def test_every_flag_is_explained_in_help(command):
    parser = PARSERS[command]()
    shown = [a for a in parser._actions if a.help != argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)]
    assert shown, command
    unexplained = [a.option_strings or a.dest for a in shown if not explained(a)]
    assert unexplained == [], f"clozeforge {command}: flags without an explanation: {unexplained}"
    text = parser.format_help()
    for action in shown:
        for option in action.option_strings:
            assert option in text


def test_train_help_lists_the_launcher_flag():
    assert "--nproc-per-node" in pretrain.parser().format_help()


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def test_old_flag_spellings_are_all_still_there():
    assert set(PREP_FLAGS_BEFORE) <= _options(prep.parser())
    assert set(TRAIN_FLAGS_BEFORE) <= _options(pretrain.parser())


def test_old_prep_spellings_parse_to_the_same_settings():
    from pipelines import config as prep_config

    argv = ["--input", "wiki=data/*.jsonl", "--input", "more/*.txt", "--output", "gs://b/out", "--text-field", "body",
            "--id-field", "key", "--txt-mode", "paragraph", "--invalid-utf8", "drop", "--strict", "--max-record-bytes", "4096",
            "--unicode-form", "NFKC", "--html-to-text", "--filters", "c4", "--language", "de", "--dedup", "near",
            "--near-threshold", "0.7", "--vocab", "gs://b/vocab", "--vocab-size", "5000", "--cased", "--num-unused", "7",
            "--min-frequency", "3", "--max-seq-len", "256", "--short-seq-prob", "0.2", "--dupe-factor", "2",
            "--bucket-docs", "50", "--validation-fraction", "0.05", "--rows-per-shard", "999", "--bytes-per-shard", "4096",
            "--batch-rows", "128", "--seed", "9", "--spill-mb", "8", "--word-cache", "1000"]
    config = prep_config.from_args(prep.parser().parse_args(argv))
    assert config.inputs == (("wiki", "data/*.jsonl"), ("input1", "more/*.txt"))
    assert config.output == "gs://b/out" and config.vocab == "gs://b/vocab"
    r = config.read
    assert (r.text_field, r.id_field, r.txt_mode, r.invalid_utf8, r.strict, r.max_record_bytes) == ("body", "key", "paragraph", "drop", True, 4096)
    assert (config.unicode_form, config.html_to_text, config.filters, config.language, config.dedup) == ("NFKC", True, "c4", "de", "near")
    assert (config.near_threshold, config.wordpiece.vocab_size, config.wordpiece.lowercase, config.wordpiece.num_unused, config.wordpiece.min_frequency) == (0.7, 5000, False, 7, 3)
    assert (config.max_seq_len, config.short_seq_prob, config.dupe_factor, config.bucket_docs) == (256, 0.2, 2, 50)
    assert (config.validation_fraction, config.rows_per_shard, config.bytes_per_shard, config.batch_rows) == (0.05, 999, 4096, 128)
    assert (config.seed, config.spill_mb, config.word_cache) == (9, 8, 1000)
    defaults = prep_config.from_args(prep.parser().parse_args(["--input", "x.txt", "--output", "gs://b/o"]))
    assert defaults.wordpiece.lowercase is True and defaults.read.strict is False and defaults.vocab is None


def test_old_train_spellings_parse_to_the_same_settings():
    argv = ["--data", "gs://b/pairs", "--output", "runs/x", "--model", "mini", "--pre-layernorm", "--max-steps", "77",
            "--batch-size", "8", "--grad-accum", "3", "--lr", "0.002", "--warmup-steps", "5", "--schedule", "polynomial",
            "--weight-decay", "0.1", "--optimizer", "adamw", "--grad-clip", "0.5", "--zero-stage", "3", "--precision", "fp32",
            "--masking", "span", "--mask-prob", "0.3", "--random-token-dist", "unigram", "--mlm-weight", "2", "--nsp-weight", "0",
            "--sbo-weight", "0.5", "--seed", "5", "--num-workers", "0", "--mix", "a=gs://b/a,weight=1", "--mix", "gs://b/c,weight=2",
            "--log-every", "3", "--eval-every", "0", "--eval-batches", "4", "--save-every", "9", "--keep-last", "3",
            "--deepspeed-config", "ds.json", "--cache-dir", "/tmp/c", "--no-verify-checksums", "--shuffle-window", "2",
            "--length-buckets", "4", "--pad-to-multiple-of", "8", "--stop-after", "11", "--local_rank", "0"]
    c = pretrain.config_from_args(pretrain.parser().parse_args(argv))
    assert (c.data, c.output, c.model, c.pre_layernorm, c.max_steps, c.batch_size, c.grad_accum) == ("gs://b/pairs", "runs/x", "mini", True, 77, 8, 3)
    assert (c.lr, c.warmup_steps, c.schedule, c.weight_decay, c.optimizer, c.grad_clip) == (0.002, 5, "polynomial", 0.1, "adamw", 0.5)
    assert (c.zero_stage, c.precision, c.masking.strategy, c.masking.mask_prob, c.masking.random_token_dist) == (3, "fp32", "span", 0.3, "unigram")
    assert (c.mlm_weight, c.nsp_weight, c.sbo_weight, c.seed, c.num_workers) == (2.0, 0.0, 0.5, 5, 0)
    assert c.mix == ("a=gs://b/a,weight=1", "gs://b/c,weight=2")
    assert (c.log_every, c.eval_every, c.eval_batches, c.save_every, c.keep_last) == (3, 0, 4, 9, 3)
    assert (c.deepspeed_config, c.cache_dir, c.verify_checksums, c.shuffle_window) == ("ds.json", "/tmp/c", False, 2)
    assert (c.length_buckets, c.pad_to_multiple_of, c.stop_after) == (4, 8, 11)
    # a config recorded in a run (train_config.json) reads back to the same settings
    assert TrainConfig.from_dict(c.to_dict()) == c


def test_phase_and_mixture_flags_parse():
    c = pretrain.config_from_args(pretrain.parser().parse_args(
        ["--data", "d", "--output", "o", "--phase2-data", "p2", "--phase2-start", "10", "--phase2-batch-size", "4", "--max-steps", "20"]))
    assert (c.phase2_data, c.phase2_start, c.phase2_batch_size) == ("p2", 10, 4)
    c = pretrain.config_from_args(pretrain.parser().parse_args(["--data", "d", "--output", "o", "--mix", "gs://a", "--mix-alpha", "0.7"]))
    assert c.mix == ("gs://a",) and c.mix_alpha == 0.7


def test_version_and_usage():
    result = run_cli("--version")
    assert result.returncode == 0 and re.fullmatch(r"clozeforge \S+\n", result.stdout), result.stdout
    result = run_cli("--help")
    assert result.returncode == 0 and "clozeforge --version" in result.stdout and "demo" in result.stdout
