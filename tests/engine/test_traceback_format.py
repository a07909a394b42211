"""A failed job's traceback is the standard text (chained exceptions included)
without Python 3.11's ``^^^^`` position lines, which cost most of a failure's worker CPU."""

from __future__ import annotations

import re
import traceback

from antre.engine.retry import format_traceback


def _gateway(order: int) -> None:
    try:
        {}["card"]
    except KeyError as exc:
        raise ValueError(f"card declined for order {order}") from exc


def _charge(order: int) -> None:
    _gateway(order)


def _context() -> None:
    try:
        raise OSError("socket closed")
    except OSError:
        _charge(7)


def _caught(fn) -> BaseException:
    try:
        fn()
    except Exception as exc:
        return exc
    raise AssertionError("no exception")


def _standard_without_carets(exc: BaseException) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return "".join(line for line in text.splitlines(keepends=True)
                   if not re.fullmatch(r"\s*[\^~]+\s*", line))


def test_the_text_is_the_standard_one_without_position_lines():
    for exc in (_caught(lambda: _charge(42)), _caught(_context)):
        got = format_traceback(exc)
        assert got == _standard_without_carets(exc)
        assert "^" not in got and "The above exception was the direct cause" in got
        assert got.rstrip().endswith("ValueError: card declined for order "
                                     f"{42 if 'order 42' in got else 7}")
    assert "During handling of the above exception" in format_traceback(_caught(_context))


def test_a_long_traceback_keeps_its_last_8000_characters():
    def deep(n: int) -> None:
        if n == 0:
            raise RuntimeError("bottom")
        deep(n - 1)
    got = format_traceback(_caught(lambda: deep(300)))
    assert len(got) == 8000 and got.endswith("RuntimeError: bottom\n")


def test_an_exception_group_keeps_the_standard_format():
    exc = _caught(lambda: (_ for _ in ()).throw(ExceptionGroup("two", [ValueError("a"),
                                                                        KeyError("b")])))
    assert "ExceptionGroup: two" in format_traceback(exc) and "ValueError: a" in \
        format_traceback(exc)


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")


class _Weird(Exception):
    __module__ = None  # type: ignore[assignment]


def test_the_last_line_is_the_standard_one_for_every_kind_of_exception():
    noted = ValueError("with a note")
    noted.add_note("first note\nsecond line")
    kinds = [ValueError("plain"), ValueError(""), KeyError("k"), OSError(2, "gone"),
             _Unprintable("x"), _Weird("odd module"), noted, ZeroDivisionError(),
             SyntaxError("bad", ("f.py", 3, 5, "x = = 1", 3, 6)), json_error()]
    for exc in kinds:
        got = format_traceback(_caught(lambda exc=exc: (_ for _ in ()).throw(exc)))
        last = "".join(traceback.format_exception_only(type(exc), exc))
        assert got.endswith(last), (exc, got, last)


def json_error() -> Exception:
    import json
    try:
        json.loads("{")
    except ValueError as exc:
        return exc
    raise AssertionError("no error")
