"""A fine-tuning job: its models (arms), the splits encoded for each tokenizer, and every (arm, lr, seed) run.

In:  a FinetuneConfig, its task (tasks/, prepared on the read splits), the arms: the pretrained model (or each
     checkpoint of a sweep) and the baseline (scratch, or another model), each with its own lr grid and epochs.
Out: per arm an `ArmResult`: the results.json record (each lr's validation mean ± SE, the chosen lr, its runs
     per seed with validation and test metrics), the chosen lr's per-seed scores and predictions on the scored
     split (what the gain and its bootstrap need), and its best seed's weights (what model/ is saved from).

The job is a plan of runs, (arm, lr, seed); `one_run` turns one into a JSON record (so runs can be spread over
processes and gathered), `summary` makes an arm of its records (selection is protocol.py's: the lr with the best
mean validation score over seeds, and that lr's best seed, never a run of another lr), `run_arms` runs the plan in
one process and drops the weights of an (arm, lr) as soon as it cannot be the one model/ is saved from, and `save`
writes the chosen arm's best run as model/. `build_model` puts the task's transformers head on an arm's export.
`Progress` prints the job's epoch lines (loop.train reports each epoch to it) with the ETA of all its runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist

from downstream.finetune import data as data_mod
from downstream.finetune import loop, models, output, protocol, tasks
from downstream.finetune.data import Split
from downstream.finetune.models import Arm
from downstream.finetune.loop import Place
from downstream.finetune.tasks import Features, Task
from downstream.stats import mean_and_se
from trainer.model.families import spelling_of_model_type


def run_task(config, place: Place, dirs: models.ModelDirs) -> int:
    """One --task job, end to end on MODEL's and MODEL2's export directories: the splits read, the arms resolved, every run, the
    gains, and (rank 0) model/ saved and the staged output written and swapped in; then the summary."""
    started = time.time()
    writes = place.rank == 0  # the other ranks compute runs and hand them to rank 0
    with (output.staged_output(config.output, config.overwrite) if writes else contextlib.nullcontext()) as out:
        task = tasks.make(config.task, config)
        splits = data_mod.read_splits(config, task, quiet=not writes)
        arms = models.Models.resolve(config, dirs)
        job = Job(config, task, splits, arms.max_len)
        done = job.run_arms(arms.everything, place=place)
        if not writes:
            return 0
        points, baseline = done[:len(arms.arms)], done[-1] if arms.baseline else None
        chosen = max(points, key=lambda p: p.validation_mean)  # the first of equals, as run_arms keeps it
        predictions = job.save(chosen, os.path.join(out, "model"))
        points = job.with_gains(points, baseline)
        said = output.write(out, config, job, points, baseline, chosen, predictions, arms, place, time.time() - started)
    output.summary(config, *said, task.metric, job.scored_on)
    return 0


@dataclasses.dataclass
class ArmResult:
    arm: Arm
    record: dict
    """Its part of results.json."""
    scores: list[float]
    """The chosen lr's score per seed on the scored split, in points."""
    predictions: list[list]
    """The chosen lr's predictions per seed on the scored split."""
    best: dict
    """The chosen lr's best seed: {seed, epoch, validation (a fraction), calibration, state (None where
    another process ran it, or the arm is not saved)}."""

    @property
    def validation_mean(self) -> float:
        return self.record["per_lr"][f"{self.record['lr']:g}"]["validation_mean"]


def _points(metrics: dict, keep: tuple[str, ...] = ()) -> dict:
    return {k: (v if k in keep else round(100 * v, 4)) for k, v in metrics.items()}


class Job:
    """The splits (encoded once per tokenizer) and every (arm, lr, seed) run over them."""

    def __init__(self, config, task: Task, splits: dict[str, Split], max_len: int) -> None:
        self.config, self.task, self.splits, self.max_len = config, task, splits, max_len
        self.scored_on = "test" if "test" in splits else "validation"
        self._features: dict[str, dict[str, Features]] = {}
        self.kept: dict[tuple[int, float], dict] = {}
        """(arm, lr) → {seed, score, state} of its best seed so far (see one_run)."""

    def features(self, tokenizer) -> dict[str, Features]:
        """The splits encoded by `tokenizer` (once per distinct tokenizer: a baseline model may bring its own)."""
        backend = getattr(tokenizer, "backend_tokenizer", None)  # a fast tokenizer: its whole definition
        key = hashlib.sha256(backend.to_str().encode("utf-8")).hexdigest() if backend else tokenizer.name_or_path
        if key not in self._features:
            self._features[key] = {name: self.task.encode(s.examples, tokenizer, max_len=self.max_len)
                                   for name, s in self.splits.items()}
        return self._features[key]

    def plan(self, arms: list[Arm], rates: dict[int, list[float]] | None = None) -> list[tuple[int, float, int]]:
        """The runs (arm index, lr, seed) of `rates` ({arm: its new rates}; default: every arm's starting grid), in
        the order one process runs them."""
        rates = {a: list(arm.lrs) for a, arm in enumerate(arms)} if rates is None else rates
        return [(a, lr, seed) for a, lrs in rates.items() for lr in lrs for seed in range(self.config.seeds)]

    def means(self, records: list[dict], a: int) -> dict[float, float]:
        """Arm `a`'s mean validation score per lr over its seeds, from the records so far."""
        per_lr: dict[float, list[float]] = {}
        for r in records:
            if r["spec"][0] == a:
                per_lr.setdefault(r["spec"][1], []).append(r["run"]["validation"]["score"])
        return {lr: float(np.mean(v)) for lr, v in per_lr.items()}

    def recipe_of(self, arm: Arm) -> loop.Recipe:
        """The recipe each run of `arm` trains by: the command's, at the arm's own epoch budget."""
        return dataclasses.replace(self.config.recipe, epochs=arm.epochs)

    def one_run(self, arms: list[Arm], spec: tuple[int, float, int], progress: Progress,
                place: Place = Place()) -> dict:
        """One run → its record (JSON: what results.json keeps, its validation score, its predictions on the
        scored split). Weights stay here: per (arm, lr), those of its best seed so far, for arms that can be
        saved (`Arm.saved`): the only run of an (arm, lr) model/ can come from."""
        a, lr, seed = spec
        arm, c, task = arms[a], self.config, self.task
        features = self.features(arm.tokenizer)
        model = build_model(task, arm.model_dir, c.dropout, seed, arm.pretrained)
        result = loop.train(task, model, features["train"], features["validation"], self.splits["validation"].examples,
                              self.recipe_of(arm), lr=lr, seed=seed, progress=progress,
                              label=f"[{arm.name}] lr {lr:g} seed {seed}", place=place)
        run = {"seed": seed, "epoch": result.epoch, "validation": _points(result.metrics),
               "history": [_points(h, keep=("epoch",)) for h in result.history]}
        if result.calibration:
            run["calibration"] = result.calibration
        model.load_state_dict(result.state)
        evaluation = loop.evaluate(task, model, features[self.scored_on], self.splits[self.scored_on].examples,
                                     result.calibration, place=place)
        if self.scored_on == "test":
            run["test"] = _points(evaluation.metrics)
        kept, score = self.kept.get((a, lr)), run["validation"]["score"]  # the points `summary` picks the seed by
        if arm.saved and (kept is None or score > kept["score"]):
            self.kept[(a, lr)] = {"seed": seed, "score": score, "state": result.state}
        return {"spec": [a, lr, seed], "run": run, "predictions": evaluation.predictions}

    def summary(self, arms: list[Arm], a: int, records: list[dict], search: protocol.Search) -> ArmResult:
        """One arm from its runs' records: each lr's validation mean ± SE (lowest lr first), the chosen lr and its
        best seed, and how its grid grew."""
        arm = arms[a]
        mine = [r for r in records if r["spec"][0] == a]
        rates = sorted({r["spec"][1] for r in mine})
        per_lr = {lr: sorted((r for r in mine if r["spec"][1] == lr), key=lambda r: r["spec"][2]) for lr in rates}
        lr, table = protocol.select({k: [r["run"]["validation"]["score"] for r in v] for k, v in per_lr.items()})
        runs = [r["run"] for r in per_lr[lr]]
        best = runs[protocol.best_seed([r["validation"]["score"] for r in runs])]
        scores = [r[self.scored_on]["score"] for r in runs]
        mean, se = mean_and_se(scores)
        floor = self.recipe_of(arm).first_stop if self.config.patience else None  # None: every epoch, the last kept
        record = {"lr": lr, "mean": round(mean, 4), "se": round(se, 4), "scores": scores, "runs": runs,
                  "per_lr": {f"{k:g}": {"validation_mean": round(m, 4), "validation_se": round(s, 4)}
                             for k, (m, s) in table.items()},
                  "grid": {"lrs": rates, "from": arm.grid, "epochs": arm.epochs, "min_epochs": floor,
                           "search": search.record()},
                  "best_seed": best["seed"]}
        kept = self.kept.get((a, lr))
        return ArmResult(arm, record, scores, [r["predictions"] for r in per_lr[lr]],
                         {"seed": best["seed"], "epoch": best["epoch"], "validation": best["validation"]["score"] / 100,
                          "calibration": best.get("calibration"),
                          "state": kept["state"] if kept and kept["seed"] == best["seed"] else None})

    def run_arms(self, arms: list[Arm], progress: Progress | None = None, place: Place = Place()) -> list[ArmResult]:
        """Every run of every arm, in one process (or by all ranks together, --data-parallel): an arm's grid, then
        the rates its search adds (protocol.Search), before the next arm; weights of an (arm, lr) that lost are
        dropped as soon as its arm is done, so the job holds one (arm, lr)'s best weights per lr of the arm in
        progress and of the best saved arm so far, besides the model training."""
        if progress is None:
            progress = job_progress(self.plan(arms), [a.epochs for a in arms], place)
        if place.world_size > 1 and not place.data_parallel:
            return self.run_spread(arms, progress, place)
        results, records, leader = [], [], None
        for a, arm in enumerate(arms):
            search, rates = protocol.Search(arm.lrs, arm.extend), list(arm.lrs)
            while rates:
                records += [self.one_run(arms, spec, progress, place) for spec in self.plan(arms, {a: rates})]
                rates = search.next(self.means(records, a))
                progress.add(len(rates) * self.config.seeds * arm.epochs)
            results.append(self.summary(arms, a, records, search))  # the arm's last run: its lr is chosen now
            if arm.saved and (leader is None or results[-1].validation_mean > results[leader].validation_mean):
                leader = a
            keep = {(leader, results[leader].record["lr"])} if leader is not None else set()
            self.kept = {k: v for k, v in self.kept.items() if k in keep}
        return results

    def run_spread(self, arms: list[Arm], progress: Progress, place: Place) -> list[ArmResult]:
        """run_arms' results with each run computed on one rank (`spread`, below), in rounds: every arm's grid, then
        the rates each arm's search adds, all arms at once. Every rank gets every record and makes the same choice;
        the rank that ran a saved arm's chosen seed sends its weights to rank 0 (on the other ranks
        `best["state"]` is None). Until every rank is done, a rank keeps its best seed per (arm, lr): that
        seed is the chosen one wherever it is the first best of its (arm, lr), which only the rank that ran
        it can know."""
        searches = [protocol.Search(arm.lrs, arm.extend) for arm in arms]
        rates = {a: list(arm.lrs) for a, arm in enumerate(arms)}
        records, owners = [], {}
        while rates:
            plan = self.plan(arms, rates)
            owners.update({tuple(spec): owner(i, place) for i, spec in enumerate(plan)})
            records += spread(plan, lambda spec: self.one_run(arms, spec, progress, place), place)
            rates = {a: new for a in rates if (new := searches[a].next(self.means(records, a)))}
            mine = [spec for i, spec in enumerate(self.plan(arms, rates)) if owner(i, place) == place.rank]
            progress.add(sum(arms[spec[0]].epochs for spec in mine))  # this rank's share of the next round
        results = [self.summary(arms, a, records, searches[a]) for a in range(len(arms))]
        for a, result in enumerate(results):
            if arms[a].saved:
                source = owners[(a, result.record["lr"], result.best["seed"])]
                result.best["state"] = fetch_state(result.best["state"], source, place)
        self.kept = {}
        return results

    def with_gains(self, points: list[ArmResult], baseline: ArmResult | None) -> list[ArmResult]:
        """MODEL's arms with their gain over the baseline in their records: the paired difference over seeds and a
        bootstrap interval over the scored split's examples (protocol.gain)."""
        if baseline:
            gold = self.task.gold(self.splits[self.scored_on].examples)
            for p in points:
                p.record["gain"] = protocol.gain(self.task, gold, p.scores, p.predictions, baseline.scores,
                                                 baseline.predictions, resamples=self.config.bootstrap, split=self.scored_on)
        return points

    def save(self, result: ArmResult, directory: str) -> list[dict]:
        """Write an arm's best run as a HuggingFace directory (model/, with its tokenizer); its test prediction
        records (none without --test)."""
        best = result.best
        model = build_model(self.task, result.arm.model_dir, self.config.dropout, best["seed"], True)
        model.load_state_dict(best["state"])
        model.save_pretrained(directory)
        result.arm.tokenizer.save_pretrained(directory)
        if self.scored_on != "test":
            return []
        return self.task.records(self.splits["test"].examples, result.predictions[best["seed"]])


def build_model(task: Task, model_dir: str, dropout: float, seed: int, pretrained: bool):
    """The task's transformers model on the export's encoder (or the same architecture, randomly initialised)."""
    import transformers

    torch.manual_seed(seed)  # the new head's initialisation (and the whole model's, from scratch)
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:  # the export's: its dropouts' names
        names = spelling_of_model_type(json.load(f).get("model_type")).hf_dropout
    overrides = {**task.head_config(), **dict.fromkeys(names, dropout)}
    cls = task.model_class()
    if pretrained:
        # a fine-tuned model's head may not fit this task (MNLI's 3 classes under RTE's 2): it is initialised anew
        return cls.from_pretrained(model_dir, ignore_mismatched_sizes=True, **overrides)
    return cls.from_config(transformers.AutoConfig.from_pretrained(model_dir, **overrides))


# -- the job's progress: one line per epoch of any of its runs -------------------------------------------------------

class Progress:
    """One line per epoch, with the ETA of the whole job from the mean epoch time so far."""

    def __init__(self, total_epochs: int, print_fn=print) -> None:
        self.total, self.done, self.started, self.print = total_epochs, 0, time.time(), print_fn

    def add(self, epochs: int) -> None:
        """More epochs to come (a grid that grew: protocol.Search)."""
        self.total += epochs

    def epoch(self, label: str, epoch: int, epochs: int, loss: float, metrics: dict[str, float], best: float,
              seconds: float, skipped: int = 0) -> None:
        self.done += 1
        self.total -= skipped  # a run that stopped early will not spend its remaining epochs
        rate = (time.time() - self.started) / self.done
        eta = max(self.total - self.done, 0) * rate
        self.print(f"{label} epoch {epoch}/{epochs}  loss {loss:.4f}  valid score {100 * metrics['score']:.2f} "
                   f"(best {100 * best:.2f})  {seconds:.1f} s  ETA {eta:.0f} s", flush=True)



# -- a job's runs shared out between ranks, and gathered back -------------------------------------------------------

def owner(index: int, place: Place) -> int:
    """The rank that computes run `index` of a plan: round robin (a job's runs cost about the same), or rank 0's
    copy when every rank computes every run."""
    return 0 if place.data_parallel or place.world_size == 1 else index % place.world_size


def job_progress(plan: list, epochs: list[int], place: Place) -> Progress:
    """The epoch lines of this rank's share of `plan` ((arm, lr, seed) runs; `epochs` per arm): prefixed with the
    rank when the runs are spread, rank 0's only when every rank computes every run."""
    share = [spec for i, spec in enumerate(plan) if place.data_parallel or owner(i, place) == place.rank]
    if place.data_parallel and place.rank != 0:
        return Progress(1, print_fn=lambda *a, **k: None)
    prefix = f"rank {place.rank}: " if place.world_size > 1 and not place.data_parallel else ""
    return Progress(sum(epochs[spec[0]] for spec in share), print_fn=lambda line, **k: print(prefix + line, **k))


def spread(plan: list, run_one, place: Place) -> list[dict]:
    """[run_one(spec) for spec in plan], each computed on its `owner` rank (every rank with --data-parallel); every
    rank gets the whole list. A record is a JSON object (what results.json holds of a run)."""
    mine = {i: run_one(spec) for i, spec in enumerate(plan) if place.data_parallel or owner(i, place) == place.rank}
    if place.world_size == 1 or place.data_parallel:
        return [mine[i] for i in range(len(plan))]
    gathered: dict[int, dict] = {}
    for part in _all_gather_json({str(i): record for i, record in mine.items()}):
        gathered.update({int(i): record for i, record in part.items()})
    return [gathered[i] for i in range(len(plan))]


def _all_gather_json(value) -> list:
    """Every rank's JSON value, in rank order, on every rank (bytes in host tensors over gloo)."""
    data = torch.from_numpy(np.frombuffer(json.dumps(value).encode(), dtype=np.uint8).copy())
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, torch.tensor([data.numel()], dtype=torch.int64))
    width = int(max(s.item() for s in sizes))
    parts = [torch.zeros(width, dtype=torch.uint8) for _ in sizes]
    dist.all_gather(parts, torch.nn.functional.pad(data, (0, width - data.numel())))
    return [json.loads(bytes(p[:int(n.item())].numpy()).decode()) for p, n in zip(parts, sizes)]


def fetch_state(state: dict[str, torch.Tensor] | None, source: int, place: Place) -> dict[str, torch.Tensor] | None:
    """On rank 0: the weights `state` held by rank `source` (host tensors); on the other ranks None. Every rank
    calls it; `source` passes its state, the others None."""
    if place.world_size == 1 or source == 0:
        return state if place.rank == 0 else None
    if place.rank == source:
        meta = [[k, list(v.shape), str(v.dtype).removeprefix("torch.")] for k, v in state.items()]
        blob = torch.from_numpy(np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8).copy())
        dist.send(torch.tensor([blob.numel()], dtype=torch.int64), 0)
        dist.send(blob, 0)
        for v in state.values():
            dist.send(v.contiguous(), 0)
        return None
    if place.rank != 0:
        return None
    size = torch.zeros(1, dtype=torch.int64)
    dist.recv(size, source)
    blob = torch.zeros(int(size.item()), dtype=torch.uint8)
    dist.recv(blob, source)
    received = {}
    for key, shape, dtype in json.loads(bytes(blob.numpy()).decode()):
        received[key] = torch.empty(shape, dtype=getattr(torch, dtype))
        dist.recv(received[key], source)
    return received
