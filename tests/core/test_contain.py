"""The one mechanism for what must catch everything (``toolkit.core.contain``): a value or an
exception carried to whoever waits on it, and optional refinements that never hide a bug."""

from __future__ import annotations

import threading

import pytest

from toolkit.core.contain import carried, optional



def test_carried_keeps_the_value_or_the_exception_for_whoever_waits():
    assert carried(lambda x: x + 1, 1).get() == 2
    got = carried(lambda: {}["missing"])
    assert isinstance(got.error, KeyError)
    with pytest.raises(KeyError):
        got.get()
    box = []
    thread = threading.Thread(target=lambda: box.append(carried(lambda: 1 / 0)))
    thread.start()
    thread.join()
    with pytest.raises(ZeroDivisionError):
        box[0].get()


def test_carried_lets_through_what_it_is_not_asked_to_catch():
    def interrupted():
        raise KeyboardInterrupt

    assert isinstance(carried(interrupted).error, KeyboardInterrupt)
    with pytest.raises(KeyboardInterrupt):
        carried(interrupted, catching=Exception)


def test_optional_gives_the_default_for_a_library_failure_and_raises_a_bug():
    def library_failure():
        return int("not a number")  # (ValueError from the int type: a library's refusal)

    assert optional(library_failure, default=7) == 7
    assert optional(lambda: [].pop(), default=7) == 7  # (IndexError raised by list.pop, in C: a "library")

    from toolkit.core.meta import normalize_dtype

    with pytest.raises(AttributeError):  # (None.strip() in toolkit's own code: a bug)
        optional(normalize_dtype, None, default=7)
    with pytest.raises(KeyboardInterrupt):
        optional(lambda: (_ for _ in ()).throw(KeyboardInterrupt()), default=7)
