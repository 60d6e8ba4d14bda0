"""Finalize: the last step of prep, once every shard is written: commit, token counts, the manifest, the report.

In:  the (ShardInfo, Staged) of every pair shard, the Staged clean/ shards, the vocabulary summary (with its
     Staged files), the accounting tallies, the pair statistics and the summed token counts (all side inputs),
     the run's PrepConfig and the leftovers its start removed (pipelines/outputs/ownership.py).
Out: (run once, on one worker) the committed attempts' files renamed into vocab/, clean/ and pairs/
     (pipelines/outputs/attempts.py), vocab/token_counts.txt, pairs/manifest.json (written last among the pair
     files: its presence marks pairs/ complete) and report.json (with the --decontaminate files and their
     sha256); every file under clean/, vocab/ and pairs/ that this run did not write is removed, and so is the
     run's temporary directory (run files, staged files of failed or duplicate attempts).

A runner may retry this step, or run it twice at once: every write here goes through a temporary name of the
attempt's own (outputs/atomic.py), a rename done by an earlier try is found in place and skipped, and the sweep
leaves other attempts' temporaries alone.
"""

from __future__ import annotations

import json
import posixpath

import apache_beam as beam
import fsspec

from pipelines import config as prep_config
from pipelines.documents.decontaminate import NGRAM
from pipelines.errors import PrepError
from pipelines.outputs.atomic import put_atomically
from pipelines.outputs.attempts import commit_all
from pipelines.outputs.ownership import Leftovers, sweep
from pipelines.outputs.report import (
    build_report,
    is_balanced,
    language_report,
    parallel_report,
    tlm_unbalanced,
)
from pipelines.stages.language_vocab_stats import vocab_figures
from pipelines.stages.make_nsp_pairs import merge_stats, split_warnings
from pipelines.stages.make_packed_rows import packing_record
from pipelines.stages.make_tlm_rows import check_tlm_languages
from schemas import Manifest
from schemas import vocab as vocab_files
from schemas.manifest import MANIFEST_NAME
from schemas.pairs import PACKINGS, TLM_PAIRS
from schemas.tokenizer_formats import TOKENIZER_FORMATS


def finalize(_, *, config: prep_config.PrepConfig, temp: str, leftovers: Leftovers, shards, vocab, tallies, stats,
             token_counts, clean_shards, eval_files=(), scripts=None, language_tallies=None, language_vocab=None,
             parallel_shards=None, parallel_tallies=None, row_languages=None) -> dict:
    """Commit the staged files, write token counts, the manifest (last: its presence marks pairs/ complete) and the
    report; remove every file under clean/, vocab/ and pairs/ that this run did not write (an earlier run's, under
    --overwrite) and the run's temporary directory."""
    out = config.output
    vocab_dir = posixpath.join(out, "vocab")
    shards = one_each(shards, lambda s: s[0].path, "pair shards")
    clean_shards = one_each(clean_shards, lambda s: s.final, "clean shards")
    tallies, stats = one_each(tallies, lambda t: t[0], "tallies"), one_each(stats, lambda t: t[0], "pair statistics")
    parallel_shards = sorted(one_each(parallel_shards or [], lambda s: s.final, "parallel shards"), key=lambda s: s.final)
    tlm = PACKINGS[config.packing].row_format == TLM_PAIRS
    parallel = parallel_report(one_each(parallel_tallies, lambda t: t[0], "parallel tallies"),
                               len(parallel_shards)) if parallel_tallies is not None else None
    if tlm:
        check_tlm_languages(sorted(set(row_languages or ())), parallel["total"])
    commit_all([*vocab["staged"], *clean_shards, *(staged for _, staged in shards), *parallel_shards])
    put_atomically(posixpath.join(vocab_dir, vocab_files.TOKEN_COUNTS_FILE), "".join(f"{c}\n" for c in token_counts.tolist()).encode())
    tokens = vocab_files.read_tokens(vocab_dir, sha256=vocab["sha256"], size=vocab["size"])
    kind = TOKENIZER_FORMATS[vocab.get("tokenizer", "wordpiece")]
    shards = sorted((info for info, _ in shards), key=lambda s: s.path)
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
        packing=packing_record(config.packing, vocab_dir, row_languages),  # committed: the attempt's files are in vocab/ now
        # where it went and how it was shuffled are not what it is; what it was decontaminated against is, by content
        config={**config.settings(), "decontamination": _decontamination(eval_files)},
    )
    # NOTE: not Manifest.write, whose temporary name (manifest.json.tmp) two attempts of this step would share
    put_atomically(posixpath.join(out, "pairs", MANIFEST_NAME), manifest.to_json().encode())
    written = [posixpath.join("pairs", MANIFEST_NAME), *(posixpath.join("pairs", s.path) for s in shards),
               *(posixpath.join("clean", posixpath.basename(staged.final)) for staged in clean_shards),
               *(posixpath.join("parallel", posixpath.basename(staged.final)) for staged in parallel_shards)]
    replaced = sweep(out, written)
    fs, temp_path = fsspec.core.url_to_fs(temp)
    if fs.exists(temp_path):
        fs.rm(temp_path, recursive=True)
    report = build_report(sorted(tallies), pairs=merge_stats(stats), shards=shards, vocab=vocab, config=config.to_dict())
    report["warnings"] = split_warnings(report["pairs"], fraction=config.validation_fraction,
                                        min_docs=config.validation_min_docs, min_pairs=config.validation_min_pairs,
                                        unit=("translation_pairs", "translation pairs") if tlm else ("docs", "documents"))
    if scripts is not None:
        report["scripts"] = scripts["scripts"]
        if scripts["warning"]:
            report["warnings"].append(scripts["warning"])
    if language_tallies is not None:
        languages = language_report(one_each(language_tallies, lambda t: t[0], "language tallies"),
                                    vocab_figures(one_each(language_vocab, lambda t: t[0], "language statistics")))
        report["languages"] = languages
        report["unbalanced"] += [f"language {code}" for code, entry in languages.items() if not is_balanced(entry)]
    if parallel is not None:
        report["parallel"] = parallel
        report["unbalanced"] += [f"parallel {name}" for name in report["parallel"]["unbalanced"]]
    if tlm:  # every kept translation pair is a row or a counted drop, in the split its coin chose
        report["unbalanced"] += tlm_unbalanced(report["pairs"], parallel["total"]["kept"])
    report["decontamination"] = _decontamination(eval_files)
    report["packing"] = manifest.packing
    report["output"] = {"leftovers_removed": list(leftovers.paths), "leftover_bytes": leftovers.bytes,
                        "replaced_files_removed": replaced}
    put_atomically(posixpath.join(out, "report.json"), (json.dumps(report, indent=2) + "\n").encode())
    return report


def one_each(items, key, what: str) -> list:
    """`items` with one element per key (a shard's path, a tally's (file, key)), in their order.

    NOTE: each of Finalize's side inputs holds one element per key, but a runner may hand one over twice: Beam's
    FnApiRunner gives a side input the elements of a stage that ran in several bundles (a split, a checkpoint)
    once per later bundle (fn_runner.py's commit_side_inputs_to_state appends the whole buffer after each one);
    counted twice, a tally would unbalance the report, and a shard would be listed twice in the manifest. Equal
    copies are one element; two different ones for a key (two committed attempts that differ) are an error."""
    seen: dict = {}
    for item in items:
        k = key(item)
        if k in seen and seen[k] != item:
            raise PrepError(f"the runner committed two different {what} for {k}: {seen[k]} and {item}; its outputs "
                            "cannot be trusted, run again")
        seen.setdefault(k, item)
    return list(seen.values())


def _decontamination(eval_files) -> dict:
    """What finetune compares with the files it scores on (by sha256): were they kept out of this corpus?"""
    files = [{"url": f.url, "sha256": f.sha256, "long_texts": f.long_texts} for f in eval_files]
    return {"ngram": NGRAM, "files": files}


class Finalize(beam.PTransform):
    """PBegin → the report (a singleton), once every input below is complete; the step that commits the run."""

    def __init__(self, config: prep_config.PrepConfig, temp: str, *, leftovers: Leftovers, shards, vocab, tallies, stats,
                 token_counts, clean_shards, eval_files=(), scripts=None, languages=None, parallel=None, row_languages=None):
        super().__init__()
        self.config, self.temp, self.leftovers, self.eval_files = config, temp, leftovers, tuple(eval_files)
        self.inputs = {"shards": shards, "vocab": vocab, "tallies": tallies, "stats": stats, "token_counts": token_counts,
                           "clean_shards": clean_shards}
        self.optional = {}  # side inputs of some runs only: the scripts table, the per-language tallies
        if scripts is not None:
            self.optional["scripts"] = beam.pvalue.AsSingleton(scripts)
        if languages is not None:
            self.optional["language_tallies"] = beam.pvalue.AsList(languages["tallies"])
            self.optional["language_vocab"] = beam.pvalue.AsList(languages["vocab"])
        if parallel is not None:
            self.optional["parallel_shards"] = beam.pvalue.AsList(parallel["staged"])
            self.optional["parallel_tallies"] = beam.pvalue.AsList(parallel["tallies"])
        if row_languages is not None:  # --packing tlm: the languages of its rows, for the manifest
            self.optional["row_languages"] = beam.pvalue.AsList(row_languages)

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
                **self.optional,
            )
        )
