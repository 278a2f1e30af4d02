"""The shared retry helpers: reading a server's requested wait, and backoff with reset."""

from __future__ import annotations

import email.utils
from datetime import timedelta
from itertools import cycle

import httpx
import pytest

from botd.retry import Backoff, retry_after, retry_wait

NOW = 1_700_000_000.0


def clock() -> float:
    return NOW


# --- retry_after -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"Retry-After": "1.5"}, 1.5),
        ({"RETRY-AFTER": "3"}, 3.0),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"Retry-After-Ms": "nonsense", "Retry-After": "2"}, 2.0),
        ({"retry-after": ["4"]}, 4.0),  # slack_sdk may give a header as a list
        ({"retry-after": "-3"}, 0.0),
        ({}, None),
        ({"retry-after": ""}, None),
        ({"retry-after": "soon"}, None),
        ({"content-type": "application/json"}, None),
    ],
)
def test_headers_in_any_case_and_form(headers: dict[str, object], expected: float | None) -> None:
    assert retry_after(headers, now=clock) == expected


def test_an_http_date_is_the_time_until_it() -> None:
    later = email.utils.formatdate(NOW + 30, usegmt=True)
    assert retry_after({"Retry-After": later}, now=clock) == pytest.approx(30.0)
    earlier = email.utils.formatdate(NOW - 30, usegmt=True)
    assert retry_after({"retry-after": earlier}, now=clock) == 0.0


def test_httpx_headers_and_pairs_are_read_too() -> None:
    assert retry_after(httpx.Headers({"Retry-After": "5"})) == 5.0
    assert retry_after([("x-other", "1"), ("Retry-After-MS", "1500")]) == 1.5


def test_sdk_values_int_float_or_timedelta() -> None:
    assert retry_after(12) == 12.0
    assert retry_after(0.5) == 0.5
    assert retry_after(timedelta(seconds=90)) == 90.0
    assert retry_after(None) is None


def test_the_cap_bounds_every_form() -> None:
    assert retry_after({"retry-after": "3600"}, cap=60) == 60.0
    assert retry_after(timedelta(hours=1), cap=60) == 60.0
    assert retry_after(10, cap=60) == 10.0
    assert retry_after({}, cap=60) is None


# --- Backoff -----------------------------------------------------------------------------


def test_delays_grow_by_the_factor_up_to_the_cap() -> None:
    backoff = Backoff(1.0, factor=2.0, cap=5.0, jitter=0.0)
    assert [backoff.next_delay() for _ in range(5)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert backoff.failures == 5


def test_reset_starts_over_at_the_first_delay() -> None:
    backoff = Backoff(0.5, factor=3.0, cap=100.0, jitter=0.0)
    assert [backoff.next_delay() for _ in range(3)] == [0.5, 1.5, 4.5]
    backoff.reset()
    assert backoff.failures == 0
    assert backoff.next_delay() == 0.5


def test_jitter_scales_each_delay_down_by_at_most_its_fraction() -> None:
    draws = cycle([0.0, 0.5, 0.999])
    backoff = Backoff(8.0, factor=1.0, cap=8.0, jitter=0.5, rand=lambda: next(draws))
    assert [backoff.next_delay() for _ in range(3)] == pytest.approx([8.0, 6.0, 4.004])


def test_a_first_delay_above_the_cap_is_capped() -> None:
    assert Backoff(10.0, cap=3.0, jitter=0.0).next_delay() == 3.0


@pytest.mark.parametrize(
    "kwargs", [{"first": -1.0}, {"factor": 0.5}, {"jitter": 1.5}, {"cap": -2.0}]
)
def test_nonsense_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        Backoff(**kwargs)


def test_retry_wait_prefers_a_positive_hint_and_caps_it() -> None:
    backoff = Backoff(1.0, factor=2.0, cap=30.0, jitter=0.0)
    assert retry_wait(backoff, 7.0, max_wait=60.0) == 7.0
    assert retry_wait(backoff, None, max_wait=60.0) == 2.0  # the backoff advanced meanwhile
    assert retry_wait(backoff, 0.0, max_wait=60.0) == 4.0
    assert retry_wait(backoff, 600.0, max_wait=60.0) == 60.0
    assert retry_wait(backoff, None, max_wait=1.0) == 1.0
