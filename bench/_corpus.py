"""The text every benchmark reads: --corpus files (fsspec glob; .jsonl "text" fields or blank-line
separated plain text, compression inferred) or, without --corpus, the built-in docstring corpus."""

from __future__ import annotations

import json
from collections.abc import Iterator


def read_texts(corpus: str | None, max_bytes: int) -> Iterator[str]:
    """Documents until `max_bytes` of UTF-8 text have been yielded."""
    if corpus is None:
        from pipelines.documents.builtin_corpus import iter_documents

        yield from (doc["text"] for doc in iter_documents(max_bytes))
        return
    import fsspec

    total = 0
    for handle in fsspec.open_files(corpus, mode="rt", compression="infer", encoding="utf-8"):
        with handle as f:
            if ".jsonl" in handle.path:
                texts = (json.loads(line)["text"] for line in f if line.strip())
            else:
                texts = iter(f.read().split("\n\n"))
            for text in texts:
                yield text
                total += len(text.encode("utf-8"))
                if total >= max_bytes:
                    return
