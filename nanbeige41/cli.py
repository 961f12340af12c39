"""argparse types shared by the command-line scripts, so a bad count or rate is refused where it is typed.

`--group-size 0` or `--temperature -1` used to reach the training loop and fail there (a division by zero, a NaN
advantage, a traceback from deep inside sampling) or, worse, run and learn nothing. With these as `type=`, argparse
prints the usual usage line and `argument --group-size: expected an integer >= 1, got '0'`. Floats must be finite
as well: `float("nan")` parses, and every comparison with NaN is false, so a NaN limit would silently disable it.
"""

import argparse
import math


def _parse(text, convert, ok, what):
    try:
        value = convert(text)
    except ValueError:
        value = None
    if value is None or not ok(value):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


def positive_int(text):
    """Counts that must be at least one: steps, group size, batch sizes, tokens per row, workers."""
    return _parse(text, int, lambda v: v >= 1, "an integer >= 1")


def non_negative_int(text):
    """Counts where 0 means "none" or "off": warm-up steps, top-k, --eval-every 0."""
    return _parse(text, int, lambda v: v >= 0, "an integer >= 0")


def positive_float(text):
    """Finite and > 0: learning rate, sampling temperature in training, time limits."""
    return _parse(text, float, lambda v: math.isfinite(v) and v > 0, "a finite number > 0")


def non_negative_float(text):
    """Finite and >= 0: weight decay, KL coefficient, clip ranges; temperature 0 (greedy) at inference."""
    return _parse(text, float, lambda v: math.isfinite(v) and v >= 0, "a finite number >= 0")


def finite_float(text):
    """Any finite number: reward weights and penalties, whose sign is the user's choice."""
    return _parse(text, float, math.isfinite, "a finite number")
