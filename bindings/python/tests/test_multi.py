"""Several limits checked as one (``MultiLimiter``)."""

from __future__ import annotations

import pytest
from conftest import MINUTE, SECOND, T0

import ratecell


@pytest.mark.parametrize("capacity", [0, 100])
def test_the_tighter_limit_decides_and_each_reports(capacity: int) -> None:
    limits = [
        ratecell.Limit("gcra", 10, period_ns=SECOND, name="per-second"),
        ratecell.Limit("fixed_window", 3, period=60.0, name="per-minute"),
    ]
    with ratecell.MultiLimiter(limits, capacity=capacity) as lim:
        for left in (2, 1, 0):
            m = lim.check_each(7, 1, at=T0)
            assert m.decision.allowed and m.decision.remaining == left
            assert m.denied_by is None and len(m.limits) == 2
            assert m.limits[0].remaining == 7 + left
        m = lim.check_each(7, 1, at=T0)
        assert not m
        assert (m.denied_by, m.denied_name) == (1, "per-minute")
        assert m.limits[0].allowed and m.limits[0].remaining == 7, "nothing spent"
        assert m.decision.retry_after_ns == m.limits[1].retry_after_ns
        assert m.decision.retry_after_ns == MINUTE - T0 % MINUTE
        assert not lim.check(7, 1, at=T0).allowed, "check gives the combined decision"
        assert lim.check_each(b"other", 1, at=T0).decision.allowed == (capacity > 0)
        assert lim.names == ("per-second", "per-minute")


@pytest.mark.parametrize("capacity", [0, 100])
def test_check_each_works_on_any_limiter(capacity: int) -> None:
    # As in C and Rust: a limiter of one limit answers with that limit's
    # decision, unnamed, and spends as check does.
    with ratecell.Limiter("fixed_window", 2, period=60.0, capacity=capacity) as lim:
        m = lim.check_each(7, 1, at=T0)
        assert m and m.denied_by is None and m.denied_name is None
        assert m.limits == (m.decision,) and m.decision.remaining == 1
        assert lim.check(7, 1, at=T0).remaining == 0, "check_each spent one"
        m = lim.check_each(7, 1, at=T0)
        assert not m and (m.denied_by, m.denied_name) == (0, "")
        assert m.decision.retry_after_ns == MINUTE - T0 % MINUTE
        with pytest.raises(ratecell.InvalidTier):
            lim.check_each(7, 1, at=T0, tier=1)
    with pytest.raises(ratecell.LimiterClosed):
        lim.check_each(7)


def test_bad_lists_raise_named_errors() -> None:
    gcra = ratecell.Limit("gcra", 10, period=1.0)
    with pytest.raises(ratecell.InvalidLength):
        ratecell.MultiLimiter([])
    with pytest.raises(ratecell.InvalidLength):
        ratecell.MultiLimiter([gcra] * (ratecell.MAX_LIMITS + 1))
    with pytest.raises(ratecell.InvalidLimit):
        ratecell.MultiLimiter([gcra, ratecell.Limit("fixed_window", 0, period=1.0)])
    with pytest.raises(TypeError):
        ratecell.MultiLimiter([ratecell.Limit("gcra", 1)])


def test_every_limiter_method_works_on_several_limits() -> None:
    limits = [
        ratecell.Limit("sliding_log", 5, period=1.0),
        ratecell.Limit("token_bucket", 1, period=1.0, burst=3),
    ]
    with ratecell.MultiLimiter(limits, capacity=10) as lim:
        allowed = lim.check_batch([1, 1, 1, 1, 2], at=T0)
        assert list(allowed) == [True, True, True, False, True]
        lim.reset(1)
        assert lim.check(1, 1, at=T0).allowed
        assert lim.stats().checks == 6


def test_reconfigure_keeps_the_spent_and_refuses_by_name() -> None:
    for capacity in (0, 100):
        lim = ratecell.MultiLimiter(
            [
                ratecell.Limit("gcra", 10, SECOND, name="second"),
                ratecell.Limit("fixed_window", 10, 60 * SECOND, name="minute"),
            ],
            capacity=capacity,
        )
        assert lim.check_each(7, 4, at=T0)
        lim.reconfigure(
            ratecell.Limit("gcra", 20, SECOND),
            ratecell.Limit("fixed_window", 14, 60 * SECOND),
        )
        d = lim.check_each(7, 0, at=T0)
        assert d.limits[0].limit == 20
        assert d.limits[1].limit == 14 and d.limits[1].remaining == 10  # 4 stay spent
        assert lim.names == ("second", "minute")
        with pytest.raises(ratecell.ReconfigureRefused):
            lim.reconfigure(
                ratecell.Limit("gcra", 20, SECOND),
                ratecell.Limit("fixed_window", 14, 3600 * SECOND),  # a window's period
            )
        with pytest.raises(ratecell.ReconfigureRefused):
            lim.reconfigure(ratecell.Limit("gcra", 20, SECOND))  # one limit of two
        with pytest.raises(ratecell.InvalidLimit):
            lim.reconfigure(
                ratecell.Limit("gcra", 0, SECOND), ratecell.Limit("fixed_window", 14, 60 * SECOND)
            )
        with pytest.raises(ratecell.InvalidLength):
            lim.reconfigure()
        assert lim.check_each(7, 0, at=T0).limits[1].limit == 14, "a refusal changes nothing"
    single = ratecell.Limiter("token_bucket", 10, SECOND)
    assert single.check(0, 3, at=T0)
    single.reconfigure(ratecell.Limit("token_bucket", 5, period_ns=2 * SECOND, burst=12))
    assert single.check(0, 0, at=T0).remaining == 9
    with pytest.raises(ratecell.ReconfigureRefused):
        single.reconfigure(ratecell.Limit("gcra", 10, SECOND))
    single.close()
    with pytest.raises(ratecell.LimiterClosed):
        single.reconfigure(ratecell.Limit("token_bucket", 10, SECOND))
