"""Every prep graph builds with Beam's pipeline type check on, and every GroupByKey in it is fed a typed key.

In:  prep's flags for each graph variant (each tokenizer, each packing, --parallel, --identify-languages, near
     dedup, --decontaminate), in both shuffle modes (run files, the runner's GroupByKey).
Out: the graph, built (not run) by pipelines/graph.py into a pipeline with `pipeline_type_check` and
     `type_check_additional=all`; then a walk over every GroupByKey (CombinePerKey's included), whose input must
     be a (key, value) tuple with a key type Beam can code deterministically (no Any in it).

Why: Beam checks the types it can see when a transform is applied, and tightens what it reads from annotations
between releases. Beam 2.78 read `_count_newlines(...) -> tuple` as Tuple[Any, ...], which a GroupByKey refuses, and
every prep failed at construction; a step whose main output mixes TaggedOutputs was typed as their union. A
precise type on every element that reaches a grouping makes the next tightening fail here, not on a user's machine.
"""

from __future__ import annotations

import json
import typing

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.pipeline import PipelineVisitor
from apache_beam.typehints import typehints

from pipelines import prep

VARIANTS = {
    "wordpiece-nsp": [],
    "bpe-full-sentences": ["--tokenizer", "bpe", "--packing", "full-sentences"],
    "unigram-doc-sentences": ["--tokenizer", "unigram", "--packing", "doc-sentences"],
    "near-dedup-decontaminate": ["--dedup", "near", "--decontaminate", "{eval}"],
    "identify-languages": ["--identify-languages", "--tokenizer", "unigram", "--packing", "full-sentences"],
    "parallel": ["--parallel", "en-fr={tsv}"],
    "tlm": ["--parallel", "en-fr={tsv}", "--packing", "tlm", "--cased"],
    "no-dedup": ["--dedup", "none"],
}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, str]:
    """A documents file, an evaluation file and a TSV of translation pairs: the graph needs files its globs match."""
    from pipelines.documents.builtin_corpus import iter_documents

    folder = tmp_path_factory.mktemp("graph-inputs")
    docs = [d["text"] for d in iter_documents(max_bytes=60_000)][:12]
    (folder / "docs.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
    (folder / "eval.txt").write_text(docs[0][:500])
    (folder / "pairs.tsv").write_text("Save the file\tEnregistrer le fichier\nOpen a new window\tOuvrir une nouvelle fenêtre\n"
                                      "Quit the program\tQuitter le programme\n")
    return {"docs": str(folder / "docs.jsonl"), "eval": str(folder / "eval.txt"), "tsv": str(folder / "pairs.tsv"),
            "output": str(folder / "out")}


def built(inputs: dict[str, str], flags: list[str], shuffle: str) -> beam.Pipeline:
    argv = ["--input", inputs["docs"], "--output", inputs["output"], "--shuffle", shuffle,
            *(f.format(**inputs) for f in flags)]
    config, beam_args = prep.parse(argv)
    assert not beam_args
    options = PipelineOptions(["--runner=FnApiRunner", "--pipeline_type_check", "--type_check_additional=all"])
    p = beam.Pipeline(options=options)
    prep.build(p, config)  # applying each transform checks its input's type against its hints
    return p


def concrete(hint) -> bool:
    """Whether a key type hint names what it holds all the way down (no Any, no type variable)."""
    if hint is typing.Any or isinstance(hint, (typehints.AnyTypeConstraint, typehints.TypeVariable)):
        return False
    if isinstance(hint, typehints.TupleConstraint):
        return all(concrete(t) for t in hint.tuple_types)
    if isinstance(hint, typehints.TupleSequenceConstraint):
        return concrete(hint.inner_type)
    if isinstance(hint, typehints.UnionConstraint):
        return all(concrete(t) for t in hint.union_types)
    return hint is None or isinstance(hint, type)


def untyped_groupings(p: beam.Pipeline) -> list[str]:
    """'label: input type' for every GroupByKey whose input is not (key, value) with a concrete key."""
    found = []

    class Groupings(PipelineVisitor):
        def visit_transform(self, node):
            if not isinstance(node.transform, beam.GroupByKey):
                return
            for pcoll in node.inputs:
                hint = pcoll.element_type
                kinds = hint.union_types if isinstance(hint, typehints.UnionConstraint) else [hint]
                if not all(isinstance(k, typehints.TupleConstraint) and len(k.tuple_types) == 2 and concrete(k.tuple_types[0])
                           for k in kinds):
                    found.append(f"{node.full_label}: {hint}")

    p.visit(Groupings())
    return found


@pytest.mark.parametrize("shuffle", ["files", "runner"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_prep_graph_builds_type_checked_with_typed_keys(inputs, variant, shuffle):
    if variant == "identify-languages":
        pytest.importorskip("py3langid")
    p = built(inputs, VARIANTS[variant], shuffle)
    assert untyped_groupings(p) == []


def test_the_walk_finds_an_untyped_grouping(inputs):
    """The check above can fail: a key Beam cannot infer (a field of a record) feeding a GroupByKey is reported."""
    records = [{"key": "a", "n": 1}, {"key": "a", "n": 2}]
    p = beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner"]))
    _ = p | beam.Create(records) | "Key" >> beam.Map(lambda r: (r["key"], r)) | "Group" >> beam.GroupByKey()
    typed = beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner"]))
    _ = (typed | beam.Create(records) | "Key" >> beam.Map(lambda r: (r["key"], r)).with_output_types(tuple[str, typing.Any])
         | beam.GroupByKey())
    assert [line.split(":")[0] for line in untyped_groupings(p)] == ["Group"] and untyped_groupings(typed) == []


@pytest.mark.integration
@pytest.mark.parametrize(("shuffle", "variant"), [("runner", "identify-languages"), ("runner", "near-dedup-decontaminate"),
                                                  ("files", "tlm")])
def test_the_declared_types_hold_at_run_time(inputs, tmp_path, shuffle, variant):
    """A type declared for the checks above is what the step emits: prep runs with Beam's runtime type check (every
    element checked against its step's hints) and, through the runner's GroupByKey, each key in its declared coder."""
    if variant == "identify-languages":
        pytest.importorskip("py3langid")
    argv = ["--input", inputs["docs"], "--output", str(tmp_path / "out"), "--shuffle", shuffle, "--vocab-size", "300",
            "--max-seq-len", "64", "--validation-fraction", "0.2", "--progress", "never", "--runtime_type_check",
            *(f.format(**inputs) for f in VARIANTS[variant])]
    report = prep.run(argv)
    assert report["total"]["kept"] > 0 and report["unbalanced"] == []
