"""User-facing errors of prep: raised for bad flags or (in --strict mode) bad input; printed as one line."""


class PrepError(Exception):
    """A problem the user can fix (a flag, a path, a malformed record under --strict). Printed without traceback."""
