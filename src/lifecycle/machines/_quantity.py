"""Kubernetes resource quantities (``64Gi``, ``16000m``, ``1.5``, ``2e3``), parsed exactly.

Limits are compared as numbers, never as strings: ``64Gi == 65536Mi`` and ``16 == 16000m``.
The grammar is the one ``k8s.io/apimachinery/pkg/api/resource`` documents; values are exact
``Fraction``s, so no rounding ever makes two different limits equal.
"""

from __future__ import annotations

import re
from decimal import Decimal
from fractions import Fraction

from .._core.errors import LifecycleError, preview


class QuantityError(LifecycleError, ValueError):
    """A string that is not a Kubernetes resource quantity."""


_QUANTITY = re.compile(
    r"([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)|[eE]([+-]?[0-9]+))?"
)
_MULTIPLIERS: dict[str, Fraction] = {
    **{s: Fraction(1024**i) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"), 1)},
    "m": Fraction(1, 1000),
    **{s: Fraction(1000**i) for i, s in enumerate(("k", "M", "G", "T", "P", "E"), 1)},
}
_MAX_EXPONENT = 1000


def parse_quantity(text: str) -> Fraction:
    """A Kubernetes quantity (``64Gi``, ``16000m``, ``1.5``, ``2e3``) as an exact Fraction.

    ``64Gi == 65536Mi`` and ``16 == 16000m`` hold exactly. Anything else, including blanks,
    whitespace, unknown suffixes and absurd exponents, raises :class:`QuantityError`.

    Args:
        text: the quantity.

    Returns:
        Its exact value.

    Raises:
        QuantityError: ``text`` is not a quantity (a :class:`ValueError`).
    """
    if not isinstance(text, str):
        raise QuantityError(f"a quantity is a string, not {type(text).__name__}")
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise QuantityError(
            f"{preview(text)} is not a Kubernetes quantity (examples: 512Mi, 64Gi, 2, 500m, 1e3)"
        )
    sign, number, suffix, exponent = match.groups()
    value = Fraction(Decimal(number))
    if suffix:
        value *= _MULTIPLIERS[suffix]
    elif exponent is not None:
        power = int(exponent)
        if abs(power) > _MAX_EXPONENT:
            raise QuantityError(f"{preview(text)}: exponent {power} is out of range")
        value *= Fraction(10) ** power
    return -value if sign == "-" else value


def parse_limit(text: str) -> Fraction:
    """A resource limit: a quantity that is not negative.

    Args:
        text: the limit.

    Returns:
        Its exact value.

    Raises:
        QuantityError: ``text`` is not a quantity, or is negative.
    """
    value = parse_quantity(text)
    if value < 0:
        raise QuantityError(f"{preview(text)}: a limit must not be negative")
    return value
