"""WordNet's gloss examples → a sense-labelled resource for `clozeforge senses`: train.jsonl, test.jsonl, split.json.

In:  WordNet 3.0's database as Debian's `wordnet-base` installs it (/usr/share/wordnet: data.noun/.verb/.adj/.adv,
     index.*, the *.exc exception lists; Princeton's WordNet 3.0 licence, /usr/share/doc/wordnet-base/copyright).
Out: rows of `text` (a usage example), `start`/`end` (where the lemma occurs in it), `lemma` ("bank.n": the word and
     its part of speech), `sense` ("bank.n.02": WordNet's sense number of that lemma, 1 its most frequent sense in
     the SemCor counts WordNet orders senses by); split.json says how many of each, the source files' sha256 and the
     rule below; texts.txt holds the training texts, one a line (a --reference for standardisation).

The instances: a synset's gloss is its definition, then its usage examples, each a quoted part after a ';'. An
example is an instance of each of the synset's lemmas it mentions, found by WordNet's own morphology (morphy: the
exception lists, then its suffix rules) on the example's words, first occurrence. Only lemmas of which at least two
senses have an instance are kept (a word with one sense has nothing to disambiguate).

The split is by example text, so no example is in both: for every sense with two or more example texts, the text
whose sha256 is smallest is a test text; an example text is in test when any sense chose it (all its instances go
to test with it), else in train. A test instance whose sense is left with no training instance (its every text was
chosen by some sense) is not written, and counted in split.json. The same files give the same rows.
`python -m downstream.contextual.wordnet DIR [--lemma bank.n ...]` writes them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re

ROOT = "/usr/share/wordnet"
POS = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
# WordNet's detachment rules (morph.c): suffix → replacement, per part of speech
RULES = {"n": (("s", ""), ("ses", "s"), ("xes", "x"), ("zes", "z"), ("ches", "ch"), ("shes", "sh"), ("men", "man"),
               ("ies", "y")),
         "v": (("s", ""), ("ies", "y"), ("es", "e"), ("es", ""), ("ed", "e"), ("ed", ""), ("ing", "e"), ("ing", "")),
         "a": (("er", ""), ("est", ""), ("er", "e"), ("est", "e")), "r": ()}
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'-]*")
_EXAMPLE = re.compile(r'^\s*"([^"]+)"')


def _missing() -> LookupError:
    return LookupError(f"{ROOT}: no WordNet database (Debian: apt-get install wordnet-base)")


def read_exceptions(pos: str) -> dict[str, set[str]]:
    """{inflected form: its base forms} from WordNet's POS.exc."""
    found: dict[str, set[str]] = {}
    with open(os.path.join(ROOT, f"{POS[pos]}.exc"), encoding="utf-8") as f:
        for line in f:
            form, *bases = line.split()
            found.setdefault(form, set()).update(bases)
    return found


def base_forms(word: str, pos: str, exceptions: dict[str, set[str]]) -> set[str]:
    """The forms WordNet's morphy may reduce `word` to (the word itself included)."""
    word = word.lower()
    forms = {word} | exceptions.get(word, set())
    forms |= {word[: -len(suffix)] + end for suffix, end in RULES[pos] if word.endswith(suffix) and len(word) > len(suffix)}
    return forms


def read_index(pos: str) -> dict[tuple[str, str], int]:
    """{(lemma, synset offset): sense number} from index.POS (senses are listed most frequent first)."""
    numbers = {}
    with open(os.path.join(ROOT, f"index.{POS[pos]}"), encoding="utf-8") as f:
        for line in f:
            if line.startswith(" "):
                continue
            fields = line.split()
            synsets = int(fields[2])
            for number, offset in enumerate(fields[-synsets:], 1):
                numbers[(fields[0], offset)] = number
    return numbers


def synsets(pos: str):
    """(offset, lemmas, examples) of each synset of data.POS that has usage examples."""
    with open(os.path.join(ROOT, f"data.{POS[pos]}"), encoding="utf-8") as f:
        for line in f:
            if line.startswith(" ") or "|" not in line:
                continue
            head, gloss = line.split("|", 1)
            fields = head.split()
            count = int(fields[3], 16)
            lemmas = [re.sub(r"\(.*\)$", "", w).lower() for w in fields[4 : 4 + 2 * count : 2]]  # adj. markers (a) (p)
            examples = [m.group(1).strip() for part in gloss.split(";") if (m := _EXAMPLE.match(part))]
            if examples:
                yield fields[0], lemmas, examples


def find(lemma: str, text: str, pos: str, exceptions: dict[str, set[str]]) -> tuple[int, int] | None:
    """[start, end) of the first occurrence of `lemma` (words joined by _) in `text`, any inflection."""
    parts = lemma.split("_")
    tokens = list(_WORD.finditer(text))
    for i in range(len(tokens) - len(parts) + 1):
        window = tokens[i : i + len(parts)]
        if all(part in base_forms(t.group(0), pos, exceptions) for part, t in zip(parts, window)):
            return window[0].start(), window[-1].end()
    return None


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def instances(parts_of_speech: tuple[str, ...] = tuple(POS), only: set[str] | None = None) -> tuple[list[dict], dict]:
    """Every instance of a polysemous lemma (see the module docstring) and the counts of what was found."""
    rows, counts = [], {"examples": 0, "examples_with_no_instance": 0}
    for pos in parts_of_speech:
        exceptions, numbers = read_exceptions(pos), read_index(pos)
        for offset, lemmas, examples in synsets(pos):
            for text in examples:
                counts["examples"] += 1
                found = 0
                for lemma in dict.fromkeys(lemmas):
                    key = f"{lemma}.{pos}"
                    if (lemma, offset) not in numbers or (only is not None and key not in only):
                        continue
                    span = find(lemma, text, pos, exceptions)
                    if span:
                        found += 1
                        rows.append({"text": text, "start": span[0], "end": span[1], "lemma": key,
                                     "sense": f"{key}.{numbers[(lemma, offset)]:02d}"})
                counts["examples_with_no_instance"] += not found
    senses_of: dict[str, set[str]] = {}
    for row in rows:
        senses_of.setdefault(row["lemma"], set()).add(row["sense"])
    kept = [r for r in rows if len(senses_of[r["lemma"]]) >= 2]
    counts.update(instances_found=len(rows), monosemous_dropped=len(rows) - len(kept))
    return kept, counts


def split(rows: list[dict]) -> tuple[list[dict], list[dict], dict]:
    """(train, test, counts): the split by example text of the module docstring."""
    texts_of: dict[str, set[str]] = {}
    for row in rows:
        texts_of.setdefault(row["sense"], set()).add(row["text"])
    test_texts = {min(texts, key=_sha) for texts in texts_of.values() if len(texts) >= 2}
    train = [r for r in rows if r["text"] not in test_texts]
    trained = {r["sense"] for r in train}
    test = [r for r in rows if r["text"] in test_texts and r["sense"] in trained]
    assert not {r["text"] for r in train} & {r["text"] for r in test}  # no example in both, by construction
    counts = {"train_instances": len(train), "test_instances": len(test), "train_texts": len({r["text"] for r in train}),
              "test_texts": len(test_texts), "test_dropped_sense_without_train": sum(
                  r["text"] in test_texts and r["sense"] not in trained for r in rows),
              "lemmas": len({r["lemma"] for r in rows}), "senses": len(texts_of)}
    return train, test, counts


def write(directory: str, parts_of_speech: tuple[str, ...] = tuple(POS), only: set[str] | None = None) -> dict:
    """train.jsonl, test.jsonl, texts.txt and split.json under `directory`; returns split.json's content."""
    if not os.path.exists(os.path.join(ROOT, "data.noun")):
        raise _missing()
    rows, counts = instances(parts_of_speech, only)
    train, test, split_counts = split(rows)
    os.makedirs(directory, exist_ok=True)
    for name, part in (("train", train), ("test", test)):
        with open(os.path.join(directory, f"{name}.jsonl"), "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in part)
    with open(os.path.join(directory, "texts.txt"), "w", encoding="utf-8") as f:
        f.writelines(text + "\n" for text in dict.fromkeys(r["text"] for r in train))
    sources = sorted(f"{kind}.{POS[p]}" for p in parts_of_speech for kind in ("data", "index")) + \
        sorted(f"{POS[p]}.exc" for p in parts_of_speech)
    record = {"source": f"WordNet 3.0, {ROOT} (Debian wordnet-base; Princeton's WordNet 3.0 licence)",
              "files": {name: _sha_file(os.path.join(ROOT, name)) for name in sources},
              "parts_of_speech": list(parts_of_speech), "only": sorted(only) if only else None,
              "rule": "split by example text: per sense with >= 2 example texts, the text with the smallest sha256 "
                      "is a test text; a text is in test when any sense chose it, else in train",
              **counts, **split_counts}
    with open(os.path.join(directory, "split.json"), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    return record


def _sha_file(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m downstream.contextual.wordnet", description=__doc__.split("\n\n")[0])
    ap.add_argument("directory")
    ap.add_argument("--pos", action="append", choices=tuple(POS), help="parts of speech (repeat; default: all)")
    ap.add_argument("--lemma", action="append", metavar="WORD.POS", help="only these lemmas (repeat), e.g. bank.n")
    args = ap.parse_args(argv)
    try:
        record = write(args.directory, tuple(args.pos or POS), set(args.lemma) if args.lemma else None)
    except LookupError as e:
        print(f"wordnet: error: {e}", flush=True)
        return 2
    print(json.dumps({k: v for k, v in record.items() if k != "files"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
