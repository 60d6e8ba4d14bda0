"""Was a model's pretraining corpus decontaminated against the files a suite scores it on?

In:  the `decontamination` record of the prep run behind the model ({"ngram", "files": [{"url", "sha256"}]}, in
     its report.json and in pairs/manifest.json's config; None when that run is unknown) and a task's files
     ({split: {"url", "sha256"}}, SuiteTask.files, or finetune's own --validation/--test files).
Out: {"decontaminated": true | false | null, "ngram": n, "files": {split: true | false}} for results.json:
     true when every scored file was among prep's --decontaminate files, compared by content (sha256), so that a
     copy of the benchmark in another folder or bucket still counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def against(record: Mapping[str, Any] | None, files: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
    if record is None:
        return {"decontaminated": None, "files": {split: None for split in files},
                "note": "the prep run of this model's data is unknown"}
    known = {f["sha256"] for f in record.get("files", [])}
    per_split = {split: f["sha256"] in known for split, f in files.items()}
    return {"decontaminated": bool(per_split) and all(per_split.values()), "ngram": record.get("ngram"),
            "files": per_split}
