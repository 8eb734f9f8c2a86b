"""One look for every figure: ``drawn``, a decorator light enough to import where matplotlib is not (it is imported
when a figure is first drawn)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def drawn(style: str | None = "whitegrid", math: bool = True) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorator for a function that draws and saves a figure: it draws on matplotlib's defaults with seaborn's
    ``style`` at paper scale (None: matplotlib's defaults alone), whatever the process drew or set before, and leaves
    the process's settings as it found them. The same data give the same bytes in ``face evaluate`` and in a later
    ``face report``; a theme set once for the process (seaborn's ``set_theme``) made a figure's look depend on which
    figure happened to be drawn first. ``math=False``: every text as written (a ``$`` in a name is a dollar sign, not
    mathtext), for figures whose labels are names a user chose."""
    def wrap(draw: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(draw)
        def inner(*args: P.args, **kwargs: P.kwargs) -> R:
            import matplotlib.pyplot as plt
            import seaborn as sns

            with plt.style.context(["default", {"text.parse_math": math}]):  # every setting restored on the way out
                if style is not None:
                    sns.set_theme(style=style, context="paper")
                return draw(*args, **kwargs)
        return inner
    return wrap
