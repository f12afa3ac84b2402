"""The default evidence boundary of receipt/v1: the one statement per phase that a receiptsite
appends to every receipt's `not_observed`. One source: the site imports it, and this client's
hand-off block shows it for receipts the site has not stored yet."""

from __future__ import annotations

from typing import Final

_END_BOUNDARY: Final = (
    "This records what the agent runtime reported to this site. It does not show that any "
    "effect outside that report happened (an email received, a payment settled, a write "
    "accepted)."
)

BOUNDARY: Final[dict[str, str]] = {
    "start": "A start record shows that the step was invoked. It cannot show its result.",
    "end": _END_BOUNDARY,
    "completion": _END_BOUNDARY,
    "confirmation": (
        "This records the confirmation the runtime observed from the provider; it does not "
        "show anything the provider did not confirm."
    ),
    "handoff": (
        "This records what was handed over and when. It does not show that the recipient "
        "reviewed or accepted it."
    ),
}
