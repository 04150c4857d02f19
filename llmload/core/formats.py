"""The format version of the files llmload writes, in one place.

:data:`FORMAT_VERSION` is recorded in every line of the raw per-request log
(``RequestResult.format_version``), in ``run.json`` (``format_version``) and in a
run's typed report (``report.json``, :mod:`reports.report`). A reader takes any
version up to its own and refuses a newer one with one line
(:func:`version_problem`): its fields may mean something this code does not know.
"""

from __future__ import annotations

#: Raise it when a file's fields change meaning or shape (a new field with a default does not need it).
FORMAT_VERSION = 1


def version_problem(found, what: str) -> str | None:
    """Why a file of format version ``found`` cannot be read here (None: it can); ``what`` names the file."""
    if found is None:
        return None  # written before versions were recorded: version 0, read as it is
    if isinstance(found, bool) or not isinstance(found, int) or found < 0:
        return f"{what}: unknown format version {found!r}"
    if found > FORMAT_VERSION:
        return (f"{what}: format version {found} is newer than this llmload reads ({FORMAT_VERSION}): "
                "update llmload")
    return None
