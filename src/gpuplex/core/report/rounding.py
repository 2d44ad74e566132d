"""Money to cents without losing a cent: round the total once, then share the cents out by largest
remainder, so rounded parts always add up to the rounded whole."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import ROUND_FLOOR, ROUND_HALF_UP, Context, Decimal

CENT = Decimal("0.01")

#: Enough digits that sums of exact prices x seconds keep every cent (Decimal's default is 28).
MONEY_CONTEXT = Context(prec=50, rounding=ROUND_HALF_UP)


def to_cents(amount: Decimal) -> Decimal:
    """Half up to the cent: 0.125 -> 0.13, -0.125 -> -0.13."""
    return amount.quantize(CENT, rounding=ROUND_HALF_UP)


def apportion_cents(amounts: Sequence[Decimal], total_cents: Decimal) -> list[Decimal]:
    """Each amount rounded to cents so that they add up to `total_cents` exactly.

    Every amount is first rounded down; the cents still missing go one each to the amounts that lost
    the most (the largest remainders; ties to the earlier amount). Given amounts whose exact sum
    rounds to `total_cents`, each result is within one cent of its amount.
    """
    if not amounts:
        if total_cents != 0:
            raise ValueError(f"cannot share {total_cents} among no amounts")
        return []
    floors = [amount.quantize(CENT, rounding=ROUND_FLOOR) for amount in amounts]
    remainders = [amount - floor for amount, floor in zip(amounts, floors, strict=True)]
    missing = int((total_cents - sum(floors, Decimal(0))) / CENT)
    order = sorted(range(len(amounts)), key=lambda i: (-remainders[i], i))
    if missing < 0:
        order.reverse()
    rounds, extra = divmod(abs(missing), len(amounts))
    step = CENT if missing >= 0 else -CENT
    result = [floor + step * rounds for floor in floors]
    for index in order[:extra]:
        result[index] += step
    return result


def hours(seconds: Decimal) -> Decimal:
    return seconds / 3600


DISPLAY = Decimal("0.000001")


def for_display(value: Decimal) -> Decimal:
    """Quantities and unit prices as shown on a statement: six decimals, half up."""
    return value.quantize(DISPLAY, rounding=ROUND_HALF_UP)
