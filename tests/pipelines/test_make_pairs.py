"""MakeNspPairs + WriteShards on Beam at the statistics BERT's recipe promises (20,000+ pairs).

tests/pipelines/test_nsp.py checks the pure function with every other document as a partner; this runs the
Beam stages, where partners are only the documents of the same seeded bucket, and reads the rows back from
the written shards. Token ids encode (document, sentence, position), so a pair's provenance can be read back.
"""

from __future__ import annotations

import glob
import hashlib
import os

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that

from pipelines.documents.records import TokenizedDoc
from pipelines.outputs.attempts import Staged, commit
from pipelines.stages.accounting import NAMESPACE
from pipelines.stages.make_nsp_pairs import MakeNspPairs
from pipelines.stages.write_shards import WriteShards
from schemas import ShardInfo

pytestmark = pytest.mark.integration  # starts processes (CLI, Beam workers, DeepSpeed ranks, servers)

MAX_SEQ_LEN, SHORT_SEQ_PROB, VOCAB_SIZE = 128, 0.1, 100_000_000  # ids up to 6e7: uint32 columns
N_DOCS, SINGLE_SENTENCE_DOCS = 6000, 200


def synthetic_docs() -> list[TokenizedDoc]:
    """N_DOCS documents of 1-29 sentences (the first SINGLE_SENTENCE_DOCS of exactly one); id = d*1e4 + s*100 + t."""
    rng = np.random.default_rng(0)
    docs = []
    for d in range(N_DOCS):
        n = 1 if d < SINGLE_SENTENCE_DOCS else int(rng.integers(2, 30))
        sentences = tuple(tuple(d * 10_000 + s * 100 + t for t in range(int(rng.integers(3, 40)))) for s in range(n))
        docs.append(TokenizedDoc(source="web" if d % 3 else "books", path=f"f{d % 7}.jsonl", doc_id=f"doc{d:05d}",
                                 sentences=sentences))
    return docs


def run_stages(directory: str, *, dupe_factor: int) -> tuple[dict[str, pa.Table], dict[str, int]]:
    """The two stages over synthetic_docs(); returns the rows of each split (read from the shards) and the counters."""
    p = test_pipeline.TestPipeline(options=PipelineOptions(["--runner=FnApiRunner"]), blocking=False)
    vocab = p | "Vocab" >> beam.Create([{"size": VOCAB_SIZE}])
    made = p | beam.Create(synthetic_docs()) | MakeNspPairs(
        max_seq_len=MAX_SEQ_LEN, short_seq_prob=SHORT_SEQ_PROB, dupe_factor=dupe_factor, bucket_docs=300,
        validation_fraction=0.05, seed=11, vocab=vocab)
    shards = made["pairs"] | WriteShards(directory, rows_per_shard=5000, batch_rows=512, vocab=vocab)
    _ = shards | "Commit" >> beam.Map(lambda shard: commit(shard[1]))  # Finalize's part: the staged files into place
    result = p.run()
    result.wait_until_finish()
    counters = {c.key.metric.name: c.committed for c in result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]}
    tables = {}
    for split in ("train", "validation"):
        paths = sorted(glob.glob(os.path.join(directory, f"{split}-*.arrow")))
        tables[split] = pa.concat_tables(pa.ipc.open_file(path).read_all() for path in paths)
    return tables, counters


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    return run_stages(str(tmp_path_factory.mktemp("pairs")), dupe_factor=1)


def all_rows(tables: dict[str, pa.Table]) -> pa.Table:
    return pa.concat_tables(tables.values())


def test_enough_pairs_in_both_splits(made):
    tables, counters = made
    assert tables["validation"].num_rows > 0 and all_rows(tables).num_rows >= 20_000
    assert counters["pairs_random_next"] + counters["pairs_true_next"] == all_rows(tables).num_rows


def test_random_next_fraction_is_half(made):
    fraction = np.mean(all_rows(made[0]).column("is_random_next").to_numpy(zero_copy_only=False))
    assert abs(fraction - 0.5) <= 0.01, fraction


def test_random_next_b_comes_from_another_document_of_the_bucket(made):
    rows = all_rows(made[0]).to_pydict()
    for doc_id, a, b, random_next in zip(rows["doc_id"], rows["tokens_a"], rows["tokens_b"], rows["is_random_next"]):
        own = int(doc_id[3:])
        assert {t // 10_000 for t in a} == {own}
        docs_in_b = {t // 10_000 for t in b}
        assert (own not in docs_in_b) if random_next else (docs_in_b == {own}), (doc_id, random_next, docs_in_b)


def test_no_pair_over_max_seq_len_and_num_tokens_is_exact(made):
    rows = all_rows(made[0])
    lengths = pc.add(pc.list_value_length(rows.column("tokens_a")),
                             pc.list_value_length(rows.column("tokens_b"))).to_numpy() + 3
    assert (lengths == rows.column("num_tokens").to_numpy()).all() and lengths.max() <= MAX_SEQ_LEN


def test_short_target_fraction_close_to_the_flag(made):
    _, counters = made
    pairs = counters["pairs_random_next"] + counters["pairs_true_next"]
    assert abs(counters["pairs_short_target"] / pairs - SHORT_SEQ_PROB) <= 0.01


def test_validation_and_train_share_no_document(made):
    tables, _ = made
    train, validation = (set(tables[s].column("doc_id").to_pylist()) for s in ("train", "validation"))
    assert validation and not train & validation


def test_single_sentence_documents_make_no_pair_and_are_counted_once(tmp_path, made):
    tables, counters = made
    assert counters["pairs_single_sentence_docs"] == SINGLE_SENTENCE_DOCS
    assert not {f"doc{d:05d}" for d in range(SINGLE_SENTENCE_DOCS)} & set(all_rows(tables).column("doc_id").to_pylist())
    doubled, counters2 = run_stages(str(tmp_path), dupe_factor=2)
    assert counters2["pairs_single_sentence_docs"] == SINGLE_SENTENCE_DOCS  # a property of the document, not of a pass
    assert all_rows(doubled).num_rows > 1.9 * all_rows(tables).num_rows  # a second, differently seeded pass


def test_shard_infos_describe_the_files(tmp_path):
    p = test_pipeline.TestPipeline(options=PipelineOptions(["--runner=FnApiRunner"]))
    vocab = p | "Vocab" >> beam.Create([{"size": VOCAB_SIZE}])
    docs = synthetic_docs()[SINGLE_SENTENCE_DOCS:SINGLE_SENTENCE_DOCS + 300]
    made = p | beam.Create(docs) | MakeNspPairs(max_seq_len=MAX_SEQ_LEN, short_seq_prob=SHORT_SEQ_PROB, dupe_factor=1,
                                                 bucket_docs=100, validation_fraction=0.0, seed=1, vocab=vocab)
    infos = made["pairs"] | WriteShards(str(tmp_path), rows_per_shard=400, batch_rows=64, vocab=vocab)
    def check(written: list[tuple[ShardInfo, Staged]]):
        shards = [info for info, _ in written]
        assert sorted(s.path for s in shards) == [f"train-{i:05d}-of-{len(shards):05d}.arrow" for i in range(len(shards))]
        assert not list(tmp_path.iterdir())  # nothing under the final names before the final step commits
        for s, staged in written:
            assert staged.final == str(tmp_path / s.path) and (staged.bytes, staged.sha256) == (s.bytes, s.sha256)
            with open(staged.attempt, "rb") as f:
                data = f.read()
            table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
            assert table.num_rows == s.rows and len(data) == s.bytes and hashlib.sha256(data).hexdigest() == s.sha256
            assert s.source_rows == dict(sorted(zip(*np.unique(table.column("source").to_pylist(), return_counts=True))))

    assert_that(infos | beam.combiners.ToList(), lambda lists: check(lists[0]))


def test_validation_share_holds_out_enough_documents_of_a_small_corpus():
    from pipelines.stages.make_nsp_pairs import VALIDATION_MAX_SHARE, validation_share

    assert validation_share(0.01, 100, 1_000_000) == 0.01  # a large corpus: the fraction alone
    assert validation_share(0.01, 100, 2000) == 100 / 2000  # raised to min_docs documents
    assert validation_share(0.01, 100, 300) == VALIDATION_MAX_SHARE  # but never past the cap
    assert validation_share(0.3, 100, 300) == 0.3  # unless the fraction itself asks for more
    assert validation_share(0.0, 100, 300) == 0.0  # 0: no validation split


def test_split_warnings_name_what_is_too_small():
    from pipelines.stages.make_nsp_pairs import split_warnings

    pairs = {"train": {"docs": 400, "random_next": 5000, "true_next": 5000},
             "validation": {"docs": 1, "rows": 44, "random_next": 0, "true_next": 44, "no_random_partner": 20}}
    warnings = split_warnings(pairs, fraction=0.01, min_docs=100, min_pairs=1000)
    assert [w.split(":")[0] for w in warnings] == ["validation split"] * 3
    assert "1 documents, fewer than --validation-min-docs 100" in warnings[0]
    assert "44 pairs, fewer than --validation-min-pairs 1000; an accuracy on it has a standard error up to 0.075" in warnings[1]
    assert "random-next share 0.000 over 44 pairs" in warnings[2] and "20 chunks had no other document" in warnings[2]
    fine = {"train": {"random_next": 5000, "true_next": 5000}, "validation": {"docs": 100, "rows": 2000, "random_next": 990,
                                                                             "true_next": 1010}}
    assert split_warnings(fine, fraction=0.01, min_docs=100, min_pairs=1000) == []
