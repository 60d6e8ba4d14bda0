"""Arrow IPC files read as documents: the `data-*.arrow` files of a `datasets` save_to_disk directory, one a row.

In:  an Arrow IPC stream (what `datasets` writes) or file, and --text-field / --id-field naming its columns.
Out: a RawDoc per row (`line`: its row number; its id from the row number, and the --id-field value when there is
     one), a Drop per row whose text is null (`null_text`), not a string (`non_string_text`) or blank (`empty_text`).
     A file without the text column is a PrepError (one line naming the columns). Batches are read one at a time
     (pyarrow, no `datasets` import). read_corpus.py reads a save_to_disk directory as its .arrow files.
"""

from __future__ import annotations

from pipelines.documents.line_stream import UnreadableFile, open_input
from pipelines.documents.records import Drop, RawDoc, make_doc_id
from pipelines.errors import PrepError


def _batches(f, path: str):
    import pyarrow as pa

    try:
        return pa.ipc.open_stream(f)
    except (pa.ArrowInvalid, OSError):
        f.seek(0)
        try:
            return pa.ipc.open_file(f)
        except (pa.ArrowInvalid, OSError) as e:
            raise UnreadableFile(f"not an Arrow IPC stream or file ({e})") from None


def read(source: str, path: str, ids: str, config, split=None):  # whole files: `split` is always None
    import pyarrow as pa

    with open_input(path) as f:
        reader = _batches(f, path)
        names = reader.schema.names
        if config.text_field not in names:
            raise PrepError(f"{path}: no column {config.text_field!r} (columns: {', '.join(names)}; name yours with --text-field)")
        has_id = config.id_field in names
        row = 0
        batches = iter(reader) if hasattr(reader, "__iter__") else (reader.get_batch(i) for i in range(reader.num_record_batches))
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                break
            except (pa.ArrowInvalid, OSError) as e:
                raise UnreadableFile(f"after row {row}: {e}") from None
            texts = batch.column(names.index(config.text_field)).to_pylist()
            user_ids = batch.column(names.index(config.id_field)).to_pylist() if has_id else [None] * len(texts)
            for text, user_id in zip(texts, user_ids):
                row += 1
                if text is None:
                    yield Drop(path, "null_text", row)
                elif not isinstance(text, str):
                    yield Drop(path, "non_string_text", row, repr(text)[:80])
                elif not text.strip():
                    yield Drop(path, "empty_text", row)
                else:
                    key = f"{row}:{user_id}" if user_id is not None else row
                    yield RawDoc(source=source, path=path, line=row, doc_id=make_doc_id(ids, key), text=text)
