"""The one error type a contract violation raises, so callers can turn it into a one-line message."""


class ContractError(ValueError):
    """Data on disk does not match what this version of clozeforge expects (schema, version, checksum)."""
