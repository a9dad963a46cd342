"""`classroom loadtest quality ...`."""

import typer

quality_app = typer.Typer(help="Quality: rubric scores, original-vs-FP8 agreement, lm-eval.", no_args_is_help=True)
