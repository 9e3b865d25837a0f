"""The constrained values that the typed models of files crossing a boundary share.

Each is a pydantic `Annotated` type, declared once, so that a run folder, a device step's
results and a database import refuse the same bad value with the same words.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

NonEmpty = Annotated[str, Field(min_length=1)]
# A SHA-256 digest as hexadecimal text.
Sha256Digest = Annotated[str, Field(min_length=64, max_length=64)]
Positive = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]
# A finite amount that cannot be negative (infinity and NaN refused too).
NonNegativeFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Seconds = NonNegativeFloat
Milliseconds = NonNegativeFloat
