"""Finalize: the last step of prep, once every shard is written: token counts, the manifest, the report.

In:  the ShardInfo of every pair shard, the clean/ shards' URLs, the vocabulary summary, the accounting
     tallies, the pair statistics and the summed token counts (all side inputs), the run's PrepConfig and
     the leftovers its start removed (pipelines/outputs/ownership.py).
Out: (run once, on one worker) vocab/token_counts.txt, pairs/manifest.json (written last among the pair files: its
     presence marks pairs/ complete) and report.json (with the --decontaminate files and their sha256); the
     shuffles' temporary directory is removed, and so is every file under clean/, vocab/ and pairs/ that this
     run did not write.
"""

from __future__ import annotations

import json
import posixpath

import apache_beam as beam
import fsspec

from pipelines import config as prep_config
from pipelines.documents.decontaminate import NGRAM
from pipelines.outputs.atomic import put_atomically
from pipelines.outputs.ownership import Leftovers, sweep
from pipelines.outputs.report import build_report
from pipelines.stages.make_nsp_pairs import merge_stats, split_warnings
from schemas import Manifest
from schemas import vocab as vocab_files
from schemas.manifest import MANIFEST_NAME
from schemas.tokenizer_formats import FORMATS


def finalize(_, *, config: prep_config.PrepConfig, temp: str, leftovers: Leftovers, shards, vocab, tallies, stats,
             token_counts, clean_shards, eval_files=()) -> dict:
    """Write token counts, the manifest (last: its presence marks pairs/ complete) and the report; remove
    the shuffles' temporary directory (its run files are gone already, directories may remain) and every
    file under clean/, vocab/ and pairs/ that this run did not write (an earlier run's, under --overwrite)."""
    out = config.output
    fs, temp_path = fsspec.core.url_to_fs(temp)
    if fs.exists(temp_path):
        fs.rm(temp_path, recursive=True)
    vocab_dir = posixpath.join(out, "vocab")
    put_atomically(posixpath.join(vocab_dir, vocab_files.TOKEN_COUNTS_FILE), "".join(f"{c}\n" for c in token_counts.tolist()).encode())
    tokens = vocab_files.read_tokens(vocab_dir, sha256=vocab["sha256"], size=vocab["size"])
    kind = FORMATS[vocab.get("tokenizer", "wordpiece")]
    shards = sorted(shards, key=lambda s: s.path)
    manifest = Manifest(
        vocab={
            "file": f"../vocab/{vocab_files.VOCAB_FILE}",
            "sha256": vocab["sha256"],
            "size": vocab["size"],
            "lowercase": vocab["lowercase"],
            "token_counts": "../vocab/token_counts.txt",
        },
        special_tokens=kind.special_ids(tokens),
        tokenizer=kind.name,
        max_seq_len=config.max_seq_len,
        shards=tuple(shards),
        seed=config.seed,
        # where it went and how it was shuffled are not what it is; what it was decontaminated against is, by content
        config={**config.settings(), "decontamination": _decontamination(eval_files)},
    )
    manifest.write(posixpath.join(out, "pairs"))
    written = [posixpath.join("pairs", MANIFEST_NAME), *(posixpath.join("pairs", s.path) for s in shards),
               *(posixpath.join("clean", posixpath.basename(url)) for url in clean_shards)]
    replaced = sweep(out, written)
    report = build_report(sorted(tallies), pairs=merge_stats(stats), shards=shards, vocab=vocab, config=config.to_dict())
    report["warnings"] = split_warnings(report["pairs"], fraction=config.validation_fraction,
                                        min_docs=config.validation_min_docs, min_pairs=config.validation_min_pairs)
    report["decontamination"] = _decontamination(eval_files)
    report["output"] = {"leftovers_removed": list(leftovers.paths), "leftover_bytes": leftovers.bytes,
                        "replaced_files_removed": replaced}
    put_atomically(posixpath.join(out, "report.json"), (json.dumps(report, indent=2) + "\n").encode())
    return report


def _decontamination(eval_files) -> dict:
    """What finetune compares with the files it scores on (by sha256): were they kept out of this corpus?"""
    files = [{"url": f.url, "sha256": f.sha256, "long_texts": f.long_texts} for f in eval_files]
    return {"ngram": NGRAM, "files": files}


class Finalize(beam.PTransform):
    """PBegin → the report (a singleton), once every input below is complete."""

    def __init__(self, config: prep_config.PrepConfig, temp: str, *, leftovers: Leftovers, shards, vocab, tallies, stats,
                 token_counts, clean_shards, eval_files=()):
        super().__init__()
        self.config, self.temp, self.leftovers, self.eval_files = config, temp, leftovers, tuple(eval_files)
        self.inputs = {"shards": shards, "vocab": vocab, "tallies": tallies, "stats": stats, "token_counts": token_counts,
                           "clean_shards": clean_shards}

    def expand(self, pbegin):
        config, temp, leftovers, inputs, eval_files = self.config, self.temp, self.leftovers, self.inputs, self.eval_files
        return (
            pbegin
            | "Trigger" >> beam.Create([None])
            | "Write" >> beam.Map(
                lambda _, **kw: finalize(_, config=config, temp=temp, leftovers=leftovers, eval_files=eval_files, **kw),
                shards=beam.pvalue.AsList(inputs["shards"]),
                vocab=beam.pvalue.AsSingleton(inputs["vocab"]),
                tallies=beam.pvalue.AsList(inputs["tallies"]),
                stats=beam.pvalue.AsList(inputs["stats"]),
                token_counts=beam.pvalue.AsSingleton(inputs["token_counts"]),
                clean_shards=beam.pvalue.AsList(inputs["clean_shards"]),
            )
        )
