"""Scripts of a checkout: `python -m training.<name>` runs the command `keras_tupe_cli.<name>`
(the console script `keras-tupe-<name>`); the code lives in `keras_tupe_cli/`."""
