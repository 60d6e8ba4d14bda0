"""Checks before step 1, so a broken input fails in one line at start-up and not hours into the run.

In:  the TrainConfig (--data, --phase2-data, --mix components, --init-from's source) and the Runtime.
Out: nothing, or a TrainError on every rank: rank 0 reads each manifest (types and paths are checked by
     schemas/manifest.py), checks that every shard is there with its listed size (one directory listing per
     manifest, also on gs:// and s3://) and that --phase2-data and the --mix components hold rows of --data's
     format (schemas.manifest.mixing_conflict), then tells the others. Reading every byte of every
     shard is `clozeforge inspect PAIRS` (sha256 and rows of each shard), for users who want it first.
"""

from __future__ import annotations

from schemas import ContractError, Manifest
from schemas.manifest import missing_shards, mixing_conflict
from trainer.config import TrainConfig, TrainError
from trainer.data.mixture_config import ComponentSpec
from trainer.run.runtime import Runtime


def data_urls(config: TrainConfig) -> list[str]:
    urls = [config.data] + ([config.phase2_data] if config.phase2_data else [])
    return urls + [ComponentSpec.parse(m).data for m in config.mix or ()]


def problem(config: TrainConfig) -> str | None:
    """The first thing wrong with the run's data, in one line, or None: a manifest that does not read, a shard
    missing or resized, rows of another format than --data's (NSP pairs beside packed rows)."""
    first = None
    for url in dict.fromkeys(data_urls(config)):
        try:
            manifest = Manifest.read(url)
            wrong = missing_shards(manifest)
        except (ContractError, ValueError) as e:
            return str(e)
        except OSError as e:  # an object store that stays unreachable after its client's retries
            return f"{url}: {e.strerror or type(e).__name__}"
        if wrong:
            more = f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
            return f"{manifest.directory}: {wrong[0]}{more}; was the prep output changed after prep?"
        first = first or manifest
        conflict = mixing_conflict(first, manifest)
        if conflict:
            return conflict
    if config.init_from:  # the source's files, shapes and vocabulary against --data's (a resume does not read it)
        from trainer.start.sources import source_problem

        return source_problem(config, Manifest.read(config.data))
    return None


def check(config: TrainConfig, rt: Runtime) -> None:
    """Rank 0 checks, every rank raises the same TrainError (printed once, by rank 0)."""
    found = problem(config) if rt.rank == 0 else None
    if rt.world_size > 1:
        import torch.distributed as dist

        box = [found]
        dist.broadcast_object_list(box, src=0)  # between our own ranks: one string
        found = box[0]
    if found:
        error = TrainError(found)
        error.quiet = rt.rank != 0
        raise error
