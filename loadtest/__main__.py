"""`python -m loadtest ...`: the same as `classroom loadtest ...`."""

from loadtest.cli import app

app(prog_name="python -m loadtest")
