"""Money in API answers: exact decimal strings with the places costs are stored with (9).

Costs are stored exact to the nano-dollar (`telemetry.accounting.STORED_COST_PLACES`); every
answer writes them the same way, so a client that sums a session's turns gets the session's
total to the last digit. A computed amount (a premium, a saving) is rounded half up to the
same places, as a stored cost is. Pure: no Django.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from typing import Annotated, Final, overload

from pydantic import Field

from telemetry.accounting import STORED_COST_PLACES

_PLACE: Final = Decimal(1).scaleb(-STORED_COST_PLACES)

# What every `…_usd` field of every answer is: the one schema of money.
Money = Annotated[
    str,
    Field(
        pattern=rf"^-?[0-9]+\.[0-9]{{{STORED_COST_PLACES}}}$",
        description=f"US dollars, exact, with {STORED_COST_PLACES} decimals as stored",
        examples=["0.012345678"],
    ),
]


@overload
def money_text(value: Decimal | int) -> str: ...
@overload
def money_text(value: None) -> None: ...
@overload
def money_text(value: Decimal | int | None) -> str | None: ...


def money_text(value: Decimal | int | None) -> str | None:
    """`value` as `Money`: fixed point, exactly `STORED_COST_PLACES` decimals (None stays None).

    A stored cost comes back digit for digit; anything finer is rounded half up, as storing it
    would. Never scientific notation, never a float on the way.
    """
    if value is None:
        return None
    amount = Decimal(value).quantize(_PLACE, rounding=ROUND_HALF_UP)
    if amount.is_zero():
        amount = abs(amount)  # no "-0.000000000"
    return f"{amount:f}"
