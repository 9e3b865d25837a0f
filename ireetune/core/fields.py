"""The constrained values that the typed models of files crossing a boundary share.

Each is a pydantic `Annotated` type, declared once, so that a run folder, a device step's
results and a database import refuse the same bad value with the same words.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from ireetune.core.options import check_number

NonEmpty = Annotated[str, Field(min_length=1)]
# A SHA-256 digest as hexadecimal text.
Sha256Digest = Annotated[str, Field(min_length=64, max_length=64)]
Positive = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]
# A finite amount that cannot be negative (infinity and NaN refused too).
NonNegativeFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Seconds = NonNegativeFloat
Milliseconds = NonNegativeFloat


def bounded_as(value_type: Callable[[str], Any]) -> AfterValidator:
    """Check a file's number with the argument type of the option it stands for
    (`core/arguments.py`): the same bounds as on the command line, in the same words."""

    def check(value: Any) -> Any:
        reason = check_number(value, value_type)
        if reason is not None:
            # The file's reader adds the value itself.
            raise ValueError(reason.rpartition(", got ")[0] or reason)
        return value

    return AfterValidator(check)
