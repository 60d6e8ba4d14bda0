import pyarrow as pa, os, json, sys, collections
from tests.pipelines import test_runners as T
from pipelines.shuffle import runs
from pipelines.stages import write_shards
LOG = []
def test_dbg(default_run, paragraphs_dir, tmp_path, monkeypatch):
    real = runs.merge_range
    def mr(rs, lo, hi):
        rs = list(rs)
        LOG.append((len(rs), len({r.path for r in rs}), sorted({r.stream for r in rs}), [r.rows for r in rs]))
        return real(rs, lo, hi)
    monkeypatch.setattr(runs, "merge_range", mr)
    real_ws = write_shards.write_shard
    try:
        T.test_bundles_split_while_they_run_give_the_same_bytes(default_run, paragraphs_dir, tmp_path, monkeypatch)
    except AssertionError as e:
        pass
    for l in LOG: print(l)
