"""`python -m loadtest ...`: the same as `classroom loadtest ...`."""

from loadtest.cli import app
from service.cli import run_cli

run_cli(lambda: app(prog_name="python -m loadtest"))
