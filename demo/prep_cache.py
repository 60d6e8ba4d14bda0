"""The demo's prep, skipped when it is already done: a rerun of the demo does not redo about a minute of identical work.

In:  the demo's work directory, the corpus glob and prep's flags.
Out: WORKDIR/prep as `clozeforge prep` writes it, and WORKDIR/.prep-fingerprint.json: the digest of the corpus bytes,
     the flags and prep's code (pipelines/outputs/fingerprint.py) beside the sizes of the files prep wrote. Prep runs
     again unless the recorded digest is this run's and the files are as they were.
"""

from __future__ import annotations

import os

from demo.supervisor import run_stage, stage_command


def prep(work: str, corpus: str, flags: list[str]) -> None:
    """Run prep, unless WORKDIR/prep is already what it would write (see the module docstring)."""
    from pipelines.outputs import fingerprint  # no Beam import

    stamp, prep_dir = os.path.join(work, ".prep-fingerprint.json"), flags[flags.index("--output") + 1]
    digest = fingerprint.inputs_fingerprint([corpus], flags)
    why = fingerprint.stale(stamp, prep_dir, digest)
    if why is None:
        print(f"\n== prep: reusing {prep_dir} (the same corpus, settings and code as its finished run, fingerprint "
              f"{digest[:12]}; its files verified)", flush=True)
        return
    if os.path.exists(stamp) or os.path.exists(prep_dir):
        print(f"\n== prep: running again ({why})", flush=True)
    fingerprint.forget(stamp)
    run_stage("prep", [*stage_command("pipelines.prep"), *flags])
    fingerprint.record(stamp, prep_dir, digest)
