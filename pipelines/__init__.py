"""clozeforge prep: Beam stages (one PTransform per module) and their pure per-record logic."""

import logging


class _QuietBeamImport(logging.Filter):
    # NOTE: apache_beam logs this warning on import whenever the optional GCP client libraries are absent,
    # which is every local run; it says nothing about the user's job.
    def filter(self, record: logging.LogRecord) -> bool:
        return "apitools not found" not in record.getMessage()


logging.getLogger().addFilter(_QuietBeamImport())
