"""Time as milliseconds since the epoch, injectable so tests never sleep for a timeout."""

from __future__ import annotations

import time
from typing import Callable

Clock = Callable[[], int]


def system_ms() -> int:
    return int(time.time() * 1000)


class ManualClock:
    """A clock tests move by hand: ``clock.advance(30_000)``."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = start_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> int:
        self.now_ms += int(ms)
        return self.now_ms
