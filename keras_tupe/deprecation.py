"""The one warning of a public name kept for a release after it moved or retired."""

import warnings


def warn_deprecated(name, instead, stacklevel=2):
    """Warns (`DeprecationWarning`) that `name` goes in the next release; `instead` says what
    to use. `stacklevel` counts as `warnings.warn`'s does from the deprecated function, so
    the default points at the line that called it."""
    warnings.warn(f"{name} is deprecated and will be removed in the next release; {instead}",
                  DeprecationWarning, stacklevel=stacklevel + 1)
