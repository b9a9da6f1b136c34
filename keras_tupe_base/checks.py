"""The argument checks every level shares (layers, models, data, fine-tuning, the commands'
flags): one `ValueError` line naming the argument, what it must be and what it received."""

import numbers


def check_int(name, value, minimum):
    """Refuses an argument `name` that is not an int >= `minimum` (NumPy's ints are ints)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"`{name}` must be an int >= {minimum}. Received: {name}={value!r}")


def check_rate(name, value):
    """Refuses an argument `name` that is not a number in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value <= 1:
        raise ValueError(f"`{name}` must be a number in [0, 1]. Received: {name}={value!r}")


def check_choice(name, value, choices):
    """Refuses a `value` of the argument `name` that is not one of `choices`."""
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {choices}. Received: {name}={value!r}")
