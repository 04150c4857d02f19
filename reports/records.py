"""The base of the report's typed section records: one dataclass per kind of row, its CSV line from its fields.

Every section of :class:`reports.report.Report` is a list of typed records
(:class:`reports.rows.Row` and :class:`reports.rows.Ratio` for the figures with
intervals, a :class:`Record` subclass per section for the rest); a record's
:meth:`Record.record` is its CSV line, and :mod:`reports.report` saves and loads
them through msgspec with their types. Numbers that come from the run's files
keep their JSON type (``int | float``: ``8`` stays ``8`` in every CSV).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Union

#: A number as a run's files hold it (an int stays an int), or nothing.
Number = Union[int, float, None]
#: Field metadata of what a saved report leaves out (the requests behind estimates, what a ratio compares: saved
#: as a reference, the run's raw data).
NOT_SAVED = {"saved": False}


@dataclass
class Record:
    """A typed row of a report section; subclasses whose CSV columns are not their fields override :meth:`record`."""

    def record(self) -> dict[str, Any]:
        """The row as its CSV's columns."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def get(self, column: str, default=None):
        """The value of one of :meth:`record`'s columns."""
        return self.record().get(column, default)
