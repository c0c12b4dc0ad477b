"""The worked examples of SPEC.md, through the Python binding, with every
expected field computed by hand from SPEC's formulas."""

from __future__ import annotations

import math

import pytest
from conftest import MINUTE, SECOND, T0

import ratecell
from ratecell import NEVER, Decision


def test_sliding_window_admits_the_rate_limiting_algorithms_example(make):
    # 100/min, prev 88, cur 12, 15 s in: 88*45/60 + 12 + 1 = 79 <= 100.
    lim = make("sliding_window", 100, MINUTE)
    assert lim.check(0, 88, at=T0 - MINUTE + 5 * SECOND).allowed
    assert lim.check(0, 12, at=T0 + SECOND).allowed
    d = lim.check(0, 1, at=T0 + 15 * SECOND)
    assert d.allowed
    assert d.limit == 100
    # remaining = floor((L*P - prev*(P - e) - cur*P) / P) = 100 - 66 - 13
    assert d.remaining == 21
    assert d.retry_after_ns == 0
    # cur > 0: the key is fresh once this window's counts have slid out.
    assert d.reset_after_ns == 2 * MINUTE - 15 * SECOND
    assert d.wait_ns == 0


def test_sliding_window_denies_the_rate_limiting_part_1_example(make):
    # 10/min, prev 9, cur 5, 25 % in: 9*0.75 + 5 + 1 = 12.75 > 10.
    lim = make("sliding_window", 10, MINUTE)
    assert lim.check(0, 9, at=T0 - MINUTE).allowed
    # Five more fit only once half the previous window has slid out
    # (9*0.5 + 5 = 9.5); the question is then asked back at 25 %.
    assert lim.check(0, 5, at=T0 + 30 * SECOND).allowed
    d = lim.check(0, 1, at=T0 + 15 * SECOND)
    assert not d.allowed
    assert d.limit == 10
    assert d.remaining == 0  # max(0, floor((600 - 9*45 - 5*60) / 60)) = 0
    # Least e with 9*(P - e) + 6*P <= 10*P is e = ceil(5P/9).
    assert d.retry_after_ns == -(-5 * MINUTE // 9) - 15 * SECOND
    assert d.reset_after_ns == 2 * MINUTE - 15 * SECOND


def test_gcra_burst_counts_every_request_admitted_at_once(make):
    # The GCRA seed's "burst of 5" is burst = 6 here. 10/s: T = 100 ms.
    lim = make(ratecell.Algorithm.GCRA, 10, SECOND, burst=6)
    t = T0 + 123
    for k in range(1, 7):
        d = lim.check(0, 1, at=t)
        assert d == Decision(True, 6, 6 - k, 0, k * 100_000_000, 0)
    d = lim.check(0, 1, at=t)
    # new = tat + T = t + 700 ms; retry = new - B*T - t = 100 ms.
    assert d == Decision(False, 6, 0, 100_000_000, 600_000_000, 0)
    # One T later exactly one more fits.
    assert lim.check(0, 1, at=t + 100_000_000).allowed
    assert not lim.check(0, 1, at=t + 100_000_000).allowed


def test_gcra_emission_interval_rounds_up(make):
    # P/L = 1e9/3 is not whole: T = ceil(P/L) = 333_333_334 ns.
    lim = make("gcra", 3, SECOND, burst=1)
    assert lim.check(0, 1, at=T0).reset_after_ns == 333_333_334
    d = lim.check(0, 1, at=T0 + 333_333_333)
    assert not d.allowed and d.retry_after_ns == 1


def test_leaky_bucket_queues_with_waits(make):
    # 5/s: T = 200 ms; a queue of 3.
    lim = make("leaky_bucket", 5, SECOND, burst=3)
    waits = [lim.check(0, 1, at=T0).wait_ns for _ in range(3)]
    assert waits == [0, 200_000_000, 400_000_000]
    d = lim.check(0, 1, at=T0)
    assert not d.allowed and d.wait_ns == 0
    assert d.retry_after_ns == 200_000_000
    assert d.wait == 0.0


def test_token_bucket_refills_a_whole_interval_at_a_time(make):
    lim = make("token_bucket", 5, SECOND)
    t = T0 + 250_000_000
    assert [lim.check(0, 1, at=t).remaining for _ in range(5)] == [4, 3, 2, 1, 0]
    d = lim.check(0, 1, at=t + SECOND - 1)
    # The refill clock started at the first take: last = t.
    assert d == Decision(False, 5, 0, 1, 1, 0)
    d = lim.check(0, 2, at=t + SECOND)
    assert d == Decision(True, 5, 3, 0, SECOND, 0)


def test_fixed_window_resets_on_the_period_boundary(make):
    lim = make("fixed_window", 3, 10 * SECOND)
    t = T0 + 2 * SECOND
    assert [lim.check(0, 1, at=t).allowed for _ in range(4)] == [True, True, True, False]
    d = lim.check(0, 1, at=t)
    assert d.retry_after_ns == d.reset_after_ns == 8 * SECOND
    assert d.retry_after == pytest.approx(8.0)
    assert lim.check(0, 3, at=T0 + 10 * SECOND).allowed


def test_bucketed_window_per_minute_counters_of_an_hour(make):
    # Seed "Rate Limiter2": 500/hour with one counter per minute.
    lim = make("bucketed_window", 500, 60 * MINUTE, sub_windows=60)
    assert lim.check(0, 300, at=T0).allowed
    assert lim.check(0, 200, at=T0 + 30 * MINUTE).allowed
    d = lim.check(0, 1, at=T0 + 45 * MINUTE)
    assert not d.allowed
    assert d.remaining == 0
    # Minute 0 leaves at 0 + 60 min; minute 30 (the newest) at 90 min.
    assert d.retry_after_ns == 15 * MINUTE
    assert d.reset_after_ns == 45 * MINUTE
    assert lim.check(0, 300, at=T0 + 60 * MINUTE).allowed


def test_sliding_log_is_exact(make):
    lim = make("sliding_log", 3, SECOND)
    for i in range(3):
        assert lim.check(0, 1, at=T0 + i * 100_000_000).allowed
    d = lim.check(0, 1, at=T0 + 300_000_000)
    assert not d.allowed
    assert d.retry_after_ns == 700_000_000  # the entry at T0 leaves at T0 + P
    assert d.reset_after_ns == 900_000_000  # the newest leaves at T0 + 200 ms + P
    assert lim.check(0, 1, at=T0 + SECOND).allowed


def test_a_peek_stores_nothing(make):
    lim = make("fixed_window", 2, SECOND)
    for _ in range(5):
        d = lim.check(0, 0, at=T0)
        assert d.allowed and d.remaining == 2 and d.reset_after_ns == 0
    assert lim.check(0, 2, at=T0).allowed
    assert not lim.check(0, 0, at=T0).allowed


def test_denied_requests_are_not_counted(make):
    lim = make("sliding_log", 2, SECOND)
    assert lim.check(0, 2, at=T0).allowed
    for i in range(10):
        assert not lim.check(0, 1, at=T0 + i).allowed
    # Had the denials been logged they would still be in the window.
    assert lim.check(0, 2, at=T0 + SECOND).allowed


@pytest.mark.parametrize("algorithm", list(ratecell.Algorithm))
def test_a_cost_above_the_limit_can_never_be_admitted(make, algorithm):
    lim = make(algorithm, 4, SECOND)
    d = lim.check(0, 5, at=T0)
    assert not d.allowed
    assert d.retry_after_ns == NEVER
    assert d.retry_after == math.inf
    assert lim.check(0, 4, at=T0).allowed


def test_time_going_back_never_admits_more(make):
    lim = make("fixed_window", 2, SECOND)
    assert lim.check(0, 2, at=T0 + SECOND).allowed
    # The stored window is in the future: it is kept, and measured from t.
    d = lim.check(0, 1, at=T0 + 500_000_000)
    assert not d.allowed
    assert d.retry_after_ns == 1_500_000_000
