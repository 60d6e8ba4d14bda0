"""The contracts between clozeforge's two halves.

Prep (Beam) writes these; the trainer (torch) reads them. Both import the schemas and the manifest from
here and nowhere else, so a field name is declared exactly once. Only pyarrow and the standard library
are imported, so either half can depend on this package without pulling in the other's stack. Beside the
contracts, the plain pieces every command reads live here for the same reason: jsonl.py (a user's JSON lines),
tables.py (a user's tables, every record counted: finetune's and embed's reader), config.py (flags from configs).

Change log
  pairs v1   tokens_a, tokens_b (uint16 when the vocabulary fits, else uint32), is_random_next,
             num_tokens, source, doc_id.
  pairs v2   packed_rows added beside them (prep --packing full-sentences | doc-sentences): tokens,
             num_tokens, source, doc_id; see schemas/pairs.py.
  clean v1   doc_id, source, path, sentences. v2 + language (prep --identify-languages). v3 + meta (a map; only
             when an input's format keeps per-document metadata: WARC/WET URL and language, wiki title and id).
  parallel v1 source_language, target_language, source, target, path, line (prep --parallel): schemas/parallel.py.
  manifest 2 + tokenizer (wordpiece | bpe | unigram) and packing (nsp | full-sentences | doc-sentences); version 1
             still reads, as wordpiece NSP pairs; see schemas/manifest.py.
  vocab/     which tokenizer kind a vocabulary directory holds, its special tokens and word marks:
             schemas/tokenizer_formats.py; RoBERTa's and XLM-R's tokenizer files: schemas/hf_tokenizers.py.
"""

from schemas.clean import CLEAN_DOC_SCHEMA, clean_doc_schema
from schemas.errors import ContractError
from schemas.manifest import MANIFEST_NAME, Manifest, ShardInfo, file_sha256
from schemas.pairs import (
    PAIRS_FORMAT_VERSION,
    pairs_schema,
    token_type,
    validate_pairs_schema,
)

__all__ = [
    "CLEAN_DOC_SCHEMA",
    "ContractError",
    "MANIFEST_NAME",
    "Manifest",
    "PAIRS_FORMAT_VERSION",
    "ShardInfo",
    "clean_doc_schema",
    "file_sha256",
    "pairs_schema",
    "token_type",
    "validate_pairs_schema",
]
