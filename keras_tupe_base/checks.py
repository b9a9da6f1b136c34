"""The argument checks every level shares (layers, models, data, fine-tuning, the commands'
flags): one `ValueError` line naming the argument, what it must be and what it received."""

import numbers


# NumPy's generators take seeds 0 .. 2**32 - 1 (`np.random.RandomState`, the data order).
SEED_MAXIMUM = 2**32 - 1


def check_int(name, value, minimum, maximum=None):
    """Refuses an argument `name` that is not an int >= `minimum` (and <= `maximum`, where
    given; NumPy's ints are ints)."""
    if (isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum
            or maximum is not None and value > maximum):
        bounds = f">= {minimum}" + ("" if maximum is None else f" and <= {maximum}")
        raise ValueError(f"`{name}` must be an int {bounds}. Received: {name}={value!r}")


def check_seed(name, value):
    """Refuses a seed `name` outside NumPy's 0 .. 2**32 - 1."""
    check_int(name, value, 0, SEED_MAXIMUM)


def check_rate(name, value):
    """Refuses an argument `name` that is not a number in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value <= 1:
        raise ValueError(f"`{name}` must be a number in [0, 1]. Received: {name}={value!r}")


def check_choice(name, value, choices):
    """Refuses a `value` of the argument `name` that is not one of `choices`."""
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {choices}. Received: {name}={value!r}")


def merge_repeats(name, values):
    """`values` without repeats (the first order kept), and a note naming each repeat, or None.

    A task, learning rate or seed is one point of a grid however often it is listed: run
    once and counted once. `name` is how the user listed them: a flag (`--seeds`) or an
    argument (`seeds=`); the note says it the same way.
    """
    values = list(values)
    unique = list(dict.fromkeys(values))
    if len(unique) == len(values):
        return unique, None

    def shown(value):
        return f"{value:g}" if isinstance(value, float) else str(value)

    counts = {value: values.count(value) for value in unique if values.count(value) > 1}
    named = ", ".join(shown(value) for value in counts)
    times = ", ".join(f"{n} times" for n in counts.values())
    listed = (f"{name} {' '.join(map(shown, unique))}" if name.startswith("--") else
              f"{name}[{', '.join(map(shown, unique))}]")
    return unique, f"{name} lists {named} more than once ({times}); each runs once: {listed}"
