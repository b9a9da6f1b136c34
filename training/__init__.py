"""Entry points: `python -m training.<name>`."""
