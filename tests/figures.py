"""Figures the tests measured on the real parts, printed at the end of the run (and so in CI's log) by conftest.py's
pytest_terminal_summary."""

import json

FIGURES: dict[str, str] = {}


def report(name: str, value: object) -> None:
    FIGURES[name] = value if isinstance(value, str) else json.dumps(value)
