"""Language identification of documents and the language codes prep accepts (no Beam import).

In:  a document's text, and the run's LanguageConfig (prep --identify-languages, --keep-language, --language-min-prob).
Out: `Identifier.identify(text) -> (code, probability)`: one of IDENTIFIED's codes, or UND when the identifier is
     less sure than --language-min-prob; `check_code` for a code a user typed (--parallel's): one line naming it when
     it is no language code.

Why py3langid: the issue asks for a maintained package from the registry that ships its model inside the wheel.
py3langid (a maintained fork of langid.py, Lui & Baldwin 2012: a byte n-gram naive Bayes classifier) keeps its model
in the wheel as an LZMA-compressed numpy archive (npz, no pickle), so identification needs no download and
unpickles nothing (STYLE.md 16), and it is deterministic: the same text gives the same code on every worker. NeMo
Curator and datatrove use fastText's lid.176 instead, which is a separate 126 MB download; lingua is more accurate on
short text but its models are hundreds of MB. py3langid is an optional dependency (`pip install
'clozeforge[languages]'`), imported only when a run identifies languages. Its model names the IDENTIFIED codes (ISO
639-1 where one exists, else ISO 639-3, and `zxx`, no linguistic content). Only the first IDENTIFY_CHARS characters
of a document are scored: the cost is linear in the text, and a page's language shows in its first paragraphs.
"""

from __future__ import annotations

import dataclasses
import re

from pipelines.errors import PrepError
from schemas.config import Config, flag

UND = "und"
"""ISO 639-2's code for an undetermined language: a document the identifier is unsure of, or one never identified
(read errors are accounted under it)."""

IDENTIFY_CHARS = 2000
"""Characters of a document the identifier reads (its start)."""

ISO_639_1 = frozenset("""
aa ab ae af ak am an ar as av ay az ba be bg bh bi bm bn bo br bs ca ce ch co cr cs cu cv cy da de dv dz ee el en eo es
et eu fa ff fi fj fo fr fy ga gd gl gn gu gv ha he hi ho hr ht hu hy hz ia id ie ig ii ik io is it iu ja jv ka kg ki kj
kk kl km kn ko kr ks ku kv kw ky la lb lg li ln lo lt lu lv mg mh mi mk ml mn mr ms mt my na nb nd ne ng nl nn no nr nv
ny oc oj om or os pa pi pl ps pt qu rm rn ro ru rw sa sc sd se sg si sk sl sm sn so sq sr ss st su sv sw ta te tg th ti
tk tl tn to tr ts tt tw ty ug uk ur uz ve vi vo wa wo xh yi yo za zh zu
""".split())
"""Every two-letter ISO 639-1 code."""

IDENTIFIED = frozenset("""
ace af am an ar ary arz as az ba bcl be bg bn br bs ca crh cs cy da de dz el en eo es et eu ext fa fi fo fr fuv fy ga gcf
gcr gd gl gom grc gu gug guw ha hbo he hi hr ht hu hy id ig is it ja jv ka kab kik kk km kn ko ku ky la lb lg lij ln lo
lt ltg lv mg mk ml mn mr ms mt my ne nl nn no nso oc om or pa pcm pl ps pt qu ro ru rw sa sdh se si sk sl sn so sq sr st
sv sw ta te tg th tk tl tr tt ug uk ur uz uzs vec vi vo wa wuu xh yo yue zh zu zxx
""".split())
"""The codes py3langid's model can name (its classes; a test keeps this list equal to the installed model's), which
--keep-language accepts, with UND."""

_CODE_RE = re.compile(r"^([a-z]{2,3})(?:[_-]([A-Z]{2}|[0-9]{3}|[A-Z][a-z]{3}))?(?:@([A-Za-z]+))?$")
"""A language code as gettext writes it: `pt`, `pt_BR`, `zh_TW`, `sr@latin`, `sr@Latn`, `zh-Hant`, `ast`."""


def base_language(code: str) -> str | None:
    """The language part of a code (`pt` of `pt_BR`), or None when `code` is no language code: a two-letter base
    must be ISO 639-1's; a three-letter one (ISO 639-2/3: `ast`, `ckb`, `yue`) is taken on trust, its table of
    some 7,900 codes not being shipped."""
    match = _CODE_RE.match(code)
    if not match:
        return None
    base = match.group(1)
    return base if len(base) == 3 or base in ISO_639_1 else None


def check_code(code: str, where: str) -> str:
    """`code`, or a PrepError naming `where` (a flag, a file) when it is no language code."""
    if base_language(code) is None:
        raise PrepError(f"{where}: unknown language code {code!r} (expected ISO 639-1 such as en, fr, zh, optionally "
                        f"with a region as gettext writes it: pt_BR, zh_TW, sr@latin)")
    return code


@dataclasses.dataclass(frozen=True, kw_only=True)
class LanguageConfig(Config):
    """Language identification (prep --identify-languages)"""

    identify_languages: bool = False
    """Tag every document with its language (py3langid: `pip install 'clozeforge[languages]'`): report.json then
    accounts read, kept and dropped documents per language, gives each language's vocabulary figures on its held-out
    text (pieces per word, unknown-token rate), and a row's `source` is its language code, so that `train
    --sample-languages` samples languages by temperature (multilingual BERT's alpha 0.7, XLM-R's 0.3)."""
    keep_languages: tuple[str, ...] = flag((), name="--keep-language", metavar="CODE")
    """With --identify-languages: keep only documents identified as this language (repeat for several; `und` keeps
    the undetermined ones); the others are dropped as `language_not_kept`."""
    language_min_prob: float = flag(0.5, metavar="P")
    """With --identify-languages: a document whose most likely language has a lower probability is `und`."""

    def __post_init__(self) -> None:
        if self.keep_languages and not self.identify_languages:
            raise PrepError("--keep-language needs --identify-languages")
        for code in self.keep_languages:
            if code not in IDENTIFIED and code != UND:
                raise PrepError(f"--keep-language: the identifier cannot name {code!r}: give one of its codes (ISO 639-1 "
                                f"such as en, fr, zh, without a region; {UND} for the undetermined)")
        if not 0.0 <= self.language_min_prob <= 1.0:
            raise PrepError(f"--language-min-prob must be in [0, 1], got {self.language_min_prob}")


class Identifier:
    """py3langid's model, loaded once (a few seconds: DoFn.setup), as text → (code, probability)."""

    def __init__(self, min_prob: float):
        try:
            from py3langid.langid import MODEL_FILE, LanguageIdentifier
        except ImportError:
            raise PrepError("--identify-languages needs py3langid: pip install 'clozeforge[languages]'") from None
        self.model = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        self.min_prob = min_prob

    def identify(self, text: str) -> tuple[str, float]:
        head = text[:IDENTIFY_CHARS]
        if not any(c.isalpha() for c in head):
            return UND, 0.0
        code, prob = self.model.classify(head)
        return (code, prob) if prob >= self.min_prob else (UND, prob)
