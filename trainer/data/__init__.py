"""The trainer's input: pair shards (any fsspec URL) → masked batches, exactly resumable.

    layout.py          which rows a rank reads in an epoch, and in which order, from the manifest alone
    reader.py          ShardReader: one worker's shards, read whole (checked) ahead of their use
    collate.py         rows → padded batches as their row format says (NSP pairs, packed rows), whole-batch numpy
    stream.py          ShardStream: layout + reader + collate + masking → batches; the DataLoader around it
    device.py          DeviceBatches: the loader's batches sent to the device one ahead of use; LoaderBatches, their loader
                       as a context (workers shut down at its end, switched to phase 2's stream)
    mixture_config.py  MixtureConfig: the components of a mixture and their weights
    choice.py          which component each step draws from, a pure function of (seed, step)
    source_stream.py   SourceStream: one named input of a prep run as a component
    mixture.py         MixtureStream: several components → one batch stream
"""

from trainer.data.collate import gather_segments
from trainer.data.device import DeviceBatches
from trainer.data.stream import Cursor, ShardStream, default_workers, loader, shutdown

__all__ = ["Cursor", "DeviceBatches", "ShardStream", "default_workers", "gather_segments", "loader", "shutdown"]
