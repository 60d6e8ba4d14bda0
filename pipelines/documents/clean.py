"""The cleaning of one document: normalize, quality-filter, split into sentences (no Beam import).

In:  a RawDoc and the NormalizeConfig and FilterConfig of the run.
Out: a Doc (its sentences) or a Drop with the filter's reason (or "no_sentences") and a sample of the text.
"""

from __future__ import annotations

from pipelines.documents.normalize import NormalizeConfig, normalize_text
from pipelines.documents.records import Doc, Drop, RawDoc
from pipelines.documents.sentences import split_sentences
from pipelines.filters import FilterConfig, filter_document

_SAMPLE_CHARS = 80


def clean_one(raw: RawDoc, normalize: NormalizeConfig, filters: FilterConfig) -> Doc | Drop:
    """The whole cleaning of one document, as a plain function (tested without Beam)."""
    text = normalize_text(raw.text, normalize)
    kept, reason = filter_document(text, filters)
    if kept is None:
        return Drop(raw.path, reason or "filtered", raw.line, text[:_SAMPLE_CHARS], raw.language)
    sentences = tuple(s for s in split_sentences(kept) if s.strip())
    if not sentences:
        return Drop(raw.path, "no_sentences", raw.line, text[:_SAMPLE_CHARS], raw.language)
    return Doc(source=raw.source, path=raw.path, doc_id=raw.doc_id, sentences=sentences, language=raw.language,
               meta=raw.meta)
