"""`python bench/run.py prep --scale`: prep on corpora of the size it exists for, with 2 Beam worker processes.

In:  `corpus` (a glob read by bench/_corpus.py, or None for the built-in docstring corpus): a pool of up to
     POOL_BYTES of its paragraphs. Two corpora are built from the pool with a seeded generator, so every
     document is distinct (a random draw of 2-12 paragraphs, in random order):
       - `bytes`: TEXT_BYTES of documents, as one 30% file and seven 10% files (a large file is read in
         --split-bytes ranges by several workers);
       - `words`: WORDS_BYTES of shorter documents, each with 60 random strings of 7-12 letters added (what
         ids, hashes and typos look like: millions of distinct words, most seen once).
     With `quick`, both are 1/20 the size.
Out: per corpus: MB of text, wall and CPU seconds of the whole process tree (os.wait4), MB/s per core (MB /
     CPU seconds) and wall, peak RSS of every process (sampled from /proc every 0.5 s: the launcher and each
     worker; their CPU time likewise), the peak disk use of the run files under OUT/.tmp-<id>/ (sampled every 2 s), the CPU time per
     stage (below), the
     vocabulary learner's word bound from report.json, and pairs written. MB = 10^6 bytes.
The prep process is `python -m bench._prep_scale child OUT.json PREP-FLAGS...`: prep.run's graph, run by the
same FnApiRunner, keeping the pipeline result so that the stage timings can be read from it. A stage's time
is Beam's execution-time metric: the time its steps were the running step in a worker (sampled by Beam's
state sampler; wall time, so it includes waiting for a core on a loaded machine), summed over workers.
"""

from __future__ import annotations

import collections
import json
import os
import random
import string
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench._corpus import read_texts

ROOT = Path(__file__).resolve().parents[1]
_TICKS = os.sysconf("SC_CLK_TCK")
POOL_BYTES = 40_000_000
TEXT_BYTES = 1_050_000_000
WORDS_BYTES = 300_000_000
SEED = 12345


def _pool(corpus: str | None, size: int) -> list[str]:
    paragraphs = [p.strip() for text in read_texts(corpus, size) for p in text.split("\n\n") if len(p.strip()) > 40]
    if len(paragraphs) < 100:
        raise SystemExit(f"bench prep --scale: too little text in {corpus or 'the built-in corpus'}")
    return paragraphs


def _write_corpus(directory: Path, pool: list[str], total: int, shares: list[float], *, paragraphs: tuple[int, int],
                  random_words: int) -> int:
    rng = random.Random(SEED + random_words)
    letters = string.ascii_lowercase
    written = 0
    directory.mkdir(parents=True)
    for index, share in enumerate(shares):
        goal, size = int(total * share), 0
        with open(directory / f"part-{index}.jsonl", "w", encoding="utf-8") as f:
            while size < goal:
                text = "\n\n".join(rng.sample(pool, rng.randint(*paragraphs)))
                if random_words:
                    noise = " ".join("".join(rng.choices(letters, k=rng.randint(7, 12))) for _ in range(random_words))
                    text += f"\n\nReference codes {noise}."
                f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
                size += len(text.encode())
        written += size
    return written


class _Sampler:
    """Peak RSS per process of a process tree, and peak bytes under the run files' directory."""

    def __init__(self, root_pid: int, output: Path):
        self.root, self.output = root_pid, output
        self.rss: dict[int, tuple[int, str]] = {}
        self.cpu: dict[int, float] = {}  # utime + stime, seconds, as last seen
        self.scratch_peak = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _tree(self) -> list[int]:
        children = collections.defaultdict(list)
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                children[ppid].append(int(entry))
        tree, todo = [], [self.root]
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo.extend(children[pid])
        return tree

    def _loop(self) -> None:
        tick = 0
        while not self.done.wait(0.5):
            for pid in self._tree():
                try:
                    with open(f"/proc/{pid}/status") as f:
                        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
                    with open(f"/proc/{pid}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                    self.cpu[pid] = (int(fields[11]) + int(fields[12])) / _TICKS
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
                except (OSError, StopIteration):
                    continue
                role = "worker" if "sdk_worker" in cmd or "worker_pool" in cmd else "launcher" if pid == self.root else "other"
                if rss > self.rss.get(pid, (0, ""))[0]:
                    self.rss[pid] = (rss, role)
            tick += 1
            if tick % 4 == 0:
                self.scratch_peak = max(self.scratch_peak, _tree_bytes(self.output, ".tmp-"))

    def stop(self) -> None:
        self.done.set()
        self.thread.join()


def _tree_bytes(root: Path, prefix: str) -> int:
    total = 0
    try:
        tops = [root / name for name in os.listdir(root) if name.startswith(prefix)]
    except OSError:
        return 0
    for top in tops:
        for folder, _, files in os.walk(top):
            for name in files:
                try:
                    total += os.path.getsize(os.path.join(folder, name))
                except OSError:
                    pass
    return total


def _run_prep(inputs: str, output: Path, text_bytes: int, extra: list[str]) -> dict:
    timings = output.with_suffix(".stages.json")
    argv = [sys.executable, "-m", "bench._prep_scale", "child", str(timings), "--input", inputs, "--output", str(output),
            "--vocab-size", "30522", "--direct_num_workers", "2", "--direct_running_mode", "multi_processing", *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
    started = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        child = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
        sampler = _Sampler(child.pid, output)
        _, status, usage = os.wait4(child.pid, 0)
        sampler.stop()
        wall = time.perf_counter() - started
        if os.waitstatus_to_exitcode(status) != 0:
            err.seek(0)
            raise SystemExit(f"bench prep --scale: prep failed:\n{err.read().decode(errors='replace')[-3000:]}")
    # NOTE: wait4's rusage leaves out Beam's worker processes (not waited for by their parent), so the CPU time
    # is the sum over the tree's processes of their last sampled utime + stime (at most 0.5 s late each).
    cpu = max(sum(sampler.cpu.values()), usage.ru_utime + usage.ru_stime)
    report = json.loads((output / "report.json").read_text())
    mb = text_bytes / 1e6
    rss = sorted(((kb / 1024, role) for kb, role in sampler.rss.values()), reverse=True)
    return {
        "mb": round(mb, 1),
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "mb_s_per_core": round(mb / cpu, 3),
        "mb_s_wall": round(mb / wall, 3),
        "peak_rss_mb_per_process": [{"role": role, "mb": round(m, 1)} for m, role in rss if m > 50],
        "peak_rss_mb_max": round(rss[0][0], 1) if rss else None,
        "run_files_peak_mb": round(sampler.scratch_peak / 1e6, 1),
        "stage_busy_s": json.loads(timings.read_text()),
        "vocab_words": {k: v for k, v in report["vocab"].items() if k.startswith("words_")},
        "docs_kept": report["total"]["kept"],
        "pairs": sum(split.get("rows", 0) for split in report["pairs"].values()),
    }


def main(corpus: str | None, quick: bool) -> dict:
    shrink = 20 if quick else 1
    pool = _pool(corpus, POOL_BYTES // shrink)
    figures = {}
    with tempfile.TemporaryDirectory(prefix="bench-prep-scale-") as tmp:
        directory = Path(tmp)
        text_bytes = _write_corpus(directory / "bytes", pool, TEXT_BYTES // shrink, [0.3] + [0.1] * 7,
                                   paragraphs=(2, 12), random_words=0)
        figures["bytes"] = _run_prep(str(directory / "bytes" / "*.jsonl"), directory / "out-bytes", text_bytes, [])
        print(json.dumps({"bytes": figures["bytes"]}), file=sys.stderr, flush=True)  # a long run: keep it if cut
        _remove(directory / "bytes", directory / "out-bytes")
        text_bytes = _write_corpus(directory / "words", pool, WORDS_BYTES // shrink, [1.0], paragraphs=(1, 3),
                                   random_words=60)
        figures["words"] = _run_prep(str(directory / "words" / "*.jsonl"), directory / "out-words", text_bytes, [])
    return {
        "corpus": f"{corpus or 'built-in docstrings'}: {len(pool)} paragraphs, drawn into distinct documents",
        "runner": "FnApiRunner, --direct_num_workers 2 --direct_running_mode multi_processing",
        **figures,
    }


def _remove(*paths: Path) -> None:
    import shutil

    for path in paths:
        shutil.rmtree(path, ignore_errors=True)


def child(timings: str, argv: list[str]) -> None:
    """prep.run, keeping the pipeline result: seconds per top-level stage go to `timings`."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines import config as prep_config
    from pipelines import prep

    args, beam_args = prep.parser().parse_known_args(argv)
    config = prep_config.from_args(args)
    prep.check_output(config.output)
    pipeline = beam.Pipeline(options=PipelineOptions(["--runner=FnApiRunner", *beam_args]))
    prep.build(pipeline, config)
    result = pipeline.run()
    result.wait_until_finish()
    per_stage: collections.Counter = collections.Counter()
    for counter in result.monitoring_metrics().query()["counters"]:
        if counter.key.metric.name.endswith("ptransform_execution_time:total_msecs:v1") and counter.key.step:
            per_stage[counter.key.step.split("/")[0]] += counter.committed / 1000
    with open(timings, "w") as f:
        json.dump({k: round(v, 1) for k, v in per_stage.most_common() if v >= 0.05}, f)


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "child":
        child(sys.argv[2], sys.argv[3:])
    else:
        sys.exit("usage: python bench/run.py prep --scale [--quick]")
