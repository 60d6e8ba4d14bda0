"""Finalize: the last step of prep, once every shard is written: token counts, the manifest, the report.

In:  the ShardInfo of every pair shard, the vocabulary summary, the accounting tallies, the pair statistics
     and the summed token counts (all side inputs), and the run's PrepConfig.
Out: (run once, on one worker) vocab/token_counts.txt, pairs/manifest.json (written last among the pair files: its presence marks
     pairs/ complete) and report.json; the shuffles' temporary directory is removed.
"""

from __future__ import annotations

import json
import posixpath

import apache_beam as beam
import fsspec

from pipelines import config as prep_config
from pipelines.outputs.atomic import put_atomically
from pipelines.outputs.report import build_report
from pipelines.stages.make_nsp_pairs import merge_stats
from schemas import Manifest
from schemas import vocab as vocab_files


def finalize(_, *, config: prep_config.PrepConfig, temp: str, shards, vocab, tallies, stats, token_counts) -> dict:
    """Write token counts, the manifest (last: its presence marks pairs/ complete) and the report; remove
    the shuffles' temporary directory (its run files are gone already, directories may remain)."""
    out = config.output
    fs, temp_path = fsspec.core.url_to_fs(temp)
    if fs.exists(temp_path):
        fs.rm(temp_path, recursive=True)
    vocab_dir = posixpath.join(out, "vocab")
    put_atomically(posixpath.join(vocab_dir, vocab_files.TOKEN_COUNTS_FILE), "".join(f"{c}\n" for c in token_counts.tolist()).encode())
    tokens = vocab_files.read_tokens(vocab_dir, sha256=vocab["sha256"], size=vocab["size"])
    shards = sorted(shards, key=lambda s: s.path)
    manifest = Manifest(
        vocab={
            "file": "../vocab/vocab.txt",
            "sha256": vocab["sha256"],
            "size": vocab["size"],
            "lowercase": vocab["lowercase"],
            "token_counts": "../vocab/token_counts.txt",
        },
        special_tokens=vocab_files.special_token_ids(tokens),
        max_seq_len=config.max_seq_len,
        shards=tuple(shards),
        seed=config.seed,
        # where it went and how it was shuffled are not what it is
        config={k: v for k, v in config.to_dict().items() if k not in ("output", "shuffle")},
    )
    manifest.write(posixpath.join(out, "pairs"))
    report = build_report(sorted(tallies), pairs=merge_stats(stats), shards=shards, vocab=vocab, config=config.to_dict())
    put_atomically(posixpath.join(out, "report.json"), (json.dumps(report, indent=2) + "\n").encode())
    return report


class Finalize(beam.PTransform):
    """PBegin → the report (a singleton), once every input below is complete."""

    def __init__(self, config: prep_config.PrepConfig, temp: str, *, shards, vocab, tallies, stats, token_counts):
        super().__init__()
        self.config, self.temp = config, temp
        self.inputs = dict(shards=shards, vocab=vocab, tallies=tallies, stats=stats, token_counts=token_counts)

    def expand(self, pbegin):
        config, temp, inputs = self.config, self.temp, self.inputs
        return (
            pbegin
            | "Trigger" >> beam.Create([None])
            | "Write" >> beam.Map(
                lambda _, **kw: finalize(_, config=config, temp=temp, **kw),
                shards=beam.pvalue.AsList(inputs["shards"]),
                vocab=beam.pvalue.AsSingleton(inputs["vocab"]),
                tallies=beam.pvalue.AsList(inputs["tallies"]),
                stats=beam.pvalue.AsList(inputs["stats"]),
                token_counts=beam.pvalue.AsSingleton(inputs["token_counts"]),
            )
        )
