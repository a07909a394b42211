"""The checks an operator's override of slots and/or rate passes before it is written, shared by
a fair-share group's (``controls.GroupControl.set_override``) and a job type's or downstream's
(``gates.Gates.set_override``): each raises its own error, in its own words, through
``checked_override``."""

from __future__ import annotations

from antre.engine.envelope import parse_rate
from antre.errors import InvalidJob

MAX_REVERT_S = 7 * 86400
MAX_REASON_CHARS = 2000


def checked_override(slots: int | None, rate: str | None, reason: str, max_slots: int,
                     revert_after_s: float | None, *, error: type[ValueError], holds: str,
                     hold: str, page: str) -> tuple[str, str]:
    """The override's rate as stored ('<n>/<window ms>', '' when the rate is not overridden)
    and its reason (trimmed, at most ``MAX_REASON_CHARS``), once the override is one to make:
    slots and/or rate given, the slots a whole number from 0 to ``max_slots``, the rate one
    ``parse_rate`` takes, a reason, ``revert_after_s`` (if given) from 1 s to
    ``MAX_REVERT_S``. Else ``error`` saying what to pass, with the caller's words for what 0
    slots does (``holds``: 'holds the group'; ``hold``: 'hold the group') and the ``page``
    that shows the reason ('Groups')."""
    if slots is None and not rate:
        raise error(f"pass slots (0 {holds}) or rate (e.g. '10/s'), or both")
    if slots is not None and (type(slots) is not int or not 0 <= slots <= max_slots):
        raise error(f"bad slots {slots!r}: an int from 0 ({hold}) to {max_slots}")
    rate_value = ""
    if rate:
        try:
            n, w = parse_rate(rate)
        except InvalidJob as exc:
            raise error(str(exc).replace("group_rate", "rate")) from exc
        rate_value = f"{n}/{w}"
    reason = (reason or "").strip()[:MAX_REASON_CHARS]
    if not reason:
        raise error(f"a reason is required: say why (it is shown on the {page} page)")
    if revert_after_s is not None and not 0 < float(revert_after_s) <= MAX_REVERT_S:
        raise error(f"revert_after_s must be from 1 to {MAX_REVERT_S} seconds, or left out "
                    "(until cleared)")
    return rate_value, reason
