"""XLM end to end, as a user runs it (issue 44): prep of monolingual text in two languages (inputs named by their
language), prep --packing tlm of gettext catalogs with that vocabulary, `train --family xlm` on a 1:1 --mix of both
with real DeepSpeed (ZeRO 2, two CPU ranks), export, and transformers' XLMWithLMHeadModel reloading it with the
trainer's logits on TLM rows (languages and restarted positions) within 1e-5."""

from __future__ import annotations

import glob
import gzip
import json
import os
import shutil

import numpy as np
import pyarrow as pa
import pytest
import torch

transformers = pytest.importorskip("transformers")

from tests.helpers import run_cli  # noqa: E402

pytestmark = pytest.mark.integration  # starts processes (prep's Beam workers, DeepSpeed ranks)
QUICK = ("--batch-size", "8", "--log-every", "2", "--eval-every", "4", "--eval-batches", "2", "--num-workers", "0",
         "--precision", "fp32", "--save-every", "4", "--max-steps", "4", "--model", "tiny")


def _german_man_pages(path: str, pages: int = 12) -> int:
    from downstream.finetune.builtin.man_sections import paragraphs

    docs = []
    for page in sorted(glob.glob("/usr/share/man/de/man1/*.gz"))[:pages]:
        with gzip.open(page, "rt", encoding="utf-8") as f:
            text = "\n".join(paragraphs(f.read(), min_words=3))
        if text:
            docs.append(text)
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": d}, ensure_ascii=False) + "\n" for d in docs)
    return len(docs)


@pytest.fixture(scope="module")
def xlm_data(corpus_dir, tmp_path_factory) -> dict[str, str]:
    work = tmp_path_factory.mktemp("xlm")
    if _german_man_pages(str(work / "de.jsonl")) < 5 or len(glob.glob("/usr/share/locale/de/LC_MESSAGES/*.mo")) < 2:
        pytest.skip("this machine lacks German man pages or catalogs")
    mono, tlm = str(work / "mono"), str(work / "tlm")
    result = run_cli("prep", "--input", f"en={corpus_dir}/part-0.jsonl", "--input", f"de={work}/de.jsonl", "--output", mono,
                     "--packing", "full-sentences", "--cased", "--vocab-size", "1500", "--max-seq-len", "64",
                     "--validation-fraction", "0.1")
    assert result.returncode == 0, result.stderr[-3000:]
    catalogs = work / "catalogs"
    for language in ("de", "fr"):
        os.makedirs(catalogs / language)
        for path in sorted(glob.glob(f"/usr/share/locale/{language}/LC_MESSAGES/*.mo"))[:2]:
            shutil.copyfile(path, catalogs / language / os.path.basename(path))
    result = run_cli("prep", "--parallel", f"{catalogs}/*/*.mo", "--packing", "tlm", "--vocab", f"{mono}/vocab", "--output", tlm,
                     "--max-seq-len", "64", "--validation-fraction", "0.1")
    assert result.returncode == 0, result.stderr[-3000:]
    return {"mono": os.path.join(mono, "pairs"), "tlm": os.path.join(tlm, "pairs")}


def test_xlm_trains_on_mlm_and_tlm_and_exports_an_xlm_with_the_trainers_logits(xlm_data, tmp_path):
    from downstream.export import load_run_model
    from schemas import Manifest
    from trainer.data.collate import ROW_COLLATORS

    run, hf = str(tmp_path / "run"), str(tmp_path / "hf")
    result = run_cli("train", "--data", xlm_data["mono"], "--mix", f"mono={xlm_data['mono']},weight=1", "--mix",
                     f"tlm={xlm_data['tlm']},weight=1", "--family", "xlm", "--output", run, "--zero-stage", "2",
                     "--nproc-per-node", "2", *QUICK)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "family: xlm (mlm; languages: de, en, fr (--data's and --mix's); TLM on tlm's translation pairs)" in result.stdout
    assert "mixture: mono p=0.500, tlm p=0.500" in result.stdout
    exported = run_cli("export", run, "--output", hf, "--verify")
    assert exported.returncode == 0, exported.stdout + exported.stderr
    config = json.load(open(os.path.join(hf, "config.json")))
    assert (config["model_type"], config["architectures"], config["lang2id"]) == ("xlm", ["XLMWithLMHeadModel"], {"de": 0, "en": 1, "fr": 2})

    ours, _, _, _ = load_run_model(run)
    theirs = transformers.XLMWithLMHeadModel.from_pretrained(hf).eval()
    manifest = Manifest.read(xlm_data["tlm"])
    with open(manifest.resolve(manifest.split_shards("train")[0].path), "rb") as f:
        rows = pa.ipc.open_file(pa.BufferReader(f.read())).read_all().slice(0, 8).combine_chunks().to_batches()[0]
    arrays = ROW_COLLATORS["tlm_pairs"]([(rows, np.arange(rows.num_rows))], manifest, 1, {"de": 0, "en": 1, "fr": 2})
    batch = {k: torch.from_numpy(v) for k, v in arrays.items() if k != "special_mask"}
    assert (batch["position_ids"] < torch.arange(batch["input_ids"].shape[1])).any()  # positions restart at B
    assert set(batch["token_type_ids"][batch["attention_mask"].bool()].tolist()) >= {1, 0} or \
        set(batch["token_type_ids"][batch["attention_mask"].bool()].tolist()) >= {1, 2}  # English and a translation
    with torch.no_grad():
        sequence, _, _ = ours.encode(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                                     position_ids=batch["position_ids"])
        out = theirs(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], langs=batch["token_type_ids"],
                     position_ids=batch["position_ids"])
    difference = (ours.dense_mlm_logits(sequence) - out.logits)[batch["attention_mask"].bool()]
    assert difference.abs().max().item() <= 1e-5
    fill = transformers.pipeline("fill-mask", model=hf)
    assert len(fill("Die Datei wurde [MASK].", top_k=3)) == 3

