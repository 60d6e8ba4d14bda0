"""The word lists the filters and their config share: Gopher's stop words and each language's function words.

Data only, so that filters/config.py (which validates against them) and the rules that use them import it,
and neither imports the other.
"""

GOPHER_STOP_WORDS = ("the", "be", "to", "of", "and", "that", "have", "with")
"""Gopher App. A.1.1: a document must contain at least two of these."""

# A few of each language's most frequent function words, lower case; enough to tell these languages apart.
_STOP_WORDS = {
    "en": "the of and to in is that it for was on are with as be this by at from or an have not but which",
    "de": "der die und das ist nicht ein eine zu den mit sich des auf für im dem auch es wird von sie bei",
    "fr": "le la les et des est un une du en que qui dans pour pas sur au ce il elle sont avec",
    "es": "el la los las y de que en un una es por con para se del al lo como más",
    "it": "il la che di e un una per non sono del della le gli con si è",
    "pt": "o a os as e de que um uma para com não do da em se por mais",
    "nl": "de het een en van is dat op te in zijn niet met voor er ook",
}
STOP_SETS = {lang: frozenset(words.split()) for lang, words in _STOP_WORDS.items()}
"""{language code: its function words}."""
LANGUAGES = tuple(_STOP_WORDS)
