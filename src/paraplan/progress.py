"""How long work tells its progress: a callback given (units done, units in all, a label), called as units finish
(or begin). The command line turns the calls into a bar on a terminal or periodic lines in a log, with
the time spent and an estimate of the time left (`paraplan.cli.progress`); the library never prints."""

from __future__ import annotations

from collections.abc import Callable

StepCallback = Callable[[int, int, str], None]
"""`callback(done, total, label)`: `done` of `total` units finished; `label` names the unit just finished or begun."""
