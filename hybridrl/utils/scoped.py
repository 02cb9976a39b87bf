"""A process-wide setting changed for the length of a `with` block, then put back."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

T = TypeVar("T")


@contextmanager
def temporarily(get: Callable[[], T], set_: Callable[[T], object], value: T) -> Iterator[None]:
    """`set_(value)` inside the block, the value `get()` returned before it afterwards (also on an exception)."""
    previous = get()
    set_(value)
    try:
        yield
    finally:
        set_(previous)
