"""Tiny assets for the finetune tests: labelled splits for the four tasks, and a tiny export made by the real path.

The export is a 2-layer, 32-wide BertForPretraining (random weights: these tests check plumbing and
determinism, not what pretraining buys) over a vocabulary the project's WordPiece learner builds from the
splits' own words, written by `downstream.export.export_hf`, as `clozeforge export` writes it.
"""

from __future__ import annotations

import json
import os
from collections import Counter

TOPICS = {
    "sport": ["the team won the match", "a goal in the final minute", "the players trained all week",
              "the coach praised the striker", "fans cheered the home side", "the league title was decided"],
    "food": ["the soup was hot and salty", "bake the bread for an hour", "fresh apples and cheese",
             "the chef cooked rice with beans", "a cake with cream on top", "the pasta needs more garlic"],
    "tech": ["the server crashed at night", "install the new driver first", "the laptop has a fast disk",
             "update the phone software", "the network cable is broken", "the code compiles without errors"],
}
ENTITIES = [(["Alice", "lives", "in", "Paris"], ["B-PER", "O", "O", "B-LOC"]),
            (["Bob", "Smith", "visited", "Rome"], ["B-PER", "I-PER", "O", "B-LOC"]),
            (["The", "river", "flows", "through", "Berlin"], ["O", "O", "O", "O", "B-LOC"]),
            (["Carol", "met", "Dave", "in", "New", "York"], ["B-PER", "O", "B-PER", "O", "B-LOC", "I-LOC"])]
CONTEXTS = [("Paris is the capital of France and its largest city.", "What is the capital of France?", "Paris"),
            ("The river Thames flows through London.", "Which river flows through London?", "Thames"),
            ("Mount Everest is the highest mountain on Earth.", "What is the highest mountain?", "Mount Everest"),
            ("Water boils at one hundred degrees at sea level.", "At how many degrees does water boil?", "one hundred")]


def write_jsonl(path, rows) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return str(path)


def classify_rows(repeat: int = 1) -> list[dict]:
    return [{"text": t, "label": topic} for _ in range(repeat) for topic, texts in TOPICS.items() for t in texts]


def pair_rows() -> list[dict]:
    rows = []
    for topic, texts in TOPICS.items():
        others = [t for k, ts in TOPICS.items() if k != topic for t in ts]
        for i, t in enumerate(texts):
            rows.append({"text": t, "text_pair": texts[(i + 1) % len(texts)], "label": 1})
            rows.append({"text": t, "text_pair": others[i], "label": 0})
    return rows


def tag_rows() -> list[dict]:
    return [{"tokens": tokens, "tags": tags} for tokens, tags in ENTITIES]


def span_rows() -> list[dict]:
    return [{"question": q, "context": c, "answers": {"text": [a], "answer_start": [c.index(a)]}} for c, q, a in CONTEXTS]


def all_words() -> list[str]:
    texts = [r["text"] + " " + r.get("text_pair", "") for r in classify_rows() + pair_rows()]
    texts += [" ".join(t) for t, _ in ENTITIES] + [c + " " + q for c, q, _ in CONTEXTS]
    return texts


def tiny_export(directory) -> str:
    """A tiny random-weight model exported through the real export path; returns the HF directory."""
    import torch

    from downstream.export import export_hf
    from pipelines.wordpiece import (
        VocabConfig,
        basic_words,
        learn_wordpiece,
        write_vocab,
    )
    from trainer.model import BertForPretraining, ModelConfig

    vocab_dir = os.path.join(directory, "vocab")
    config = VocabConfig(vocab_size=400, lowercase=True)
    counts = Counter(w for s in all_words() * 3 for w in basic_words(s, lowercase=True))
    write_vocab(vocab_dir, learn_wordpiece(counts.items(), config), config)
    with open(os.path.join(vocab_dir, "vocab.txt"), encoding="utf-8") as f:
        vocab_size = sum(1 for _ in f)
    torch.manual_seed(0)
    model_config = ModelConfig(vocab_size=vocab_size, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                               max_position_embeddings=64)
    model = BertForPretraining(model_config)
    hf_dir = os.path.join(directory, "hf")
    export_hf(model.state_dict(), model_config, vocab_dir, hf_dir)
    return hf_dir


def scripted_runs(monkeypatch, validation: dict, seeds: int):
    """Fine-tuning runs without a model: loop.train scores (lr, seed) as `validation` says and keeps [lr, seed]
    as its weights, loop.evaluate scores half that on test and predicts "lr/seed". Returns (config, splits)
    for a classify Job over one-row splits; call `scripted_features(job, splits)` on each Job built from them."""
    import torch

    from downstream.finetune import job as job_mod
    from downstream.finetune import loop, tasks
    from downstream.finetune.config import FinetuneConfig
    from downstream.finetune.data import Split
    from schemas.tables import Account

    class Model:
        def load_state_dict(self, state):
            self.state = state

    def train(task, model, *args, lr, seed, **kwargs):
        return loop.RunResult({"score": validation[(lr, seed)]}, 1, {"w": torch.tensor([lr, seed], dtype=torch.float64)}, [])

    def evaluate(task, model, features, examples, calibration=None, place=None):
        lr, seed = model.state["w"].tolist()
        return tasks.Evaluation({"score": validation[(lr, int(seed))] / 2}, [f"{lr:g}/{int(seed)}"])

    monkeypatch.setattr(job_mod, "build_model", lambda *args: Model())
    monkeypatch.setattr(loop, "train", train)
    monkeypatch.setattr(loop, "evaluate", evaluate)
    config = FinetuneConfig(task="classify", train="t", validation="v", test="s", output="o", seeds=seeds)
    splits = {name: Split(url=name, sha256="", examples=[{"text": "x", "label": 0, "line": 1}],
                          account=Account("jsonl", read=1))
              for name in ("train", "validation", "test")}
    return config, splits


def scripted_job(monkeypatch, config, splits):
    """A classify Job over scripted_runs' splits, with no tokenizer to encode them."""
    from downstream.finetune import job as job_mod
    from downstream.finetune import tasks

    job = job_mod.Job(config, tasks.of("classify"), splits, 64)
    monkeypatch.setattr(job, "features", lambda tokenizer: dict.fromkeys(splits))
    return job
