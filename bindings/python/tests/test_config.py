"""Configuration: defaults, the accepted spellings, and one exception per
invalid field (SPEC.md §2 and the semantics settled in the brief)."""

from __future__ import annotations

import datetime
import re

import pytest
from conftest import SECOND

import ratecell
from ratecell import Algorithm, Clock, Overflow

DAY = 86_400 * SECOND
YEAR_366 = 366 * DAY


def test_defaults_follow_config_init(make):
    c = make("gcra", 10, SECOND).config
    assert c == ratecell.Config(Algorithm.GCRA, 10, SECOND, 0, 10, 0, Overflow.DENY, Clock.TSC)
    # 10 does not divide the period: one sub-window.
    assert make("bucketed_window", 10, 1_000_003).config.sub_windows == 1


def test_every_field_is_passed_through(make):
    c = make(
        "bucketed_window",
        7,
        period=datetime.timedelta(minutes=1),
        sub_windows=6,
        capacity=100,
        overflow="allow",
        clock="coarse",
    ).config
    assert c == ratecell.Config(
        Algorithm.BUCKETED_WINDOW, 7, 60 * SECOND, 0, 6, 100, Overflow.ALLOW, Clock.COARSE
    )
    assert make("token_bucket", 5, period=0.25, burst=9).config.period_ns == 250_000_000


@pytest.mark.parametrize(
    ("spelling", "expected"),
    [
        ("gcra", Algorithm.GCRA),
        ("leaky-bucket", Algorithm.LEAKY_BUCKET),
        ("token_bucket", Algorithm.TOKEN_BUCKET),
        (4, Algorithm.FIXED_WINDOW),
        (Algorithm.SLIDING_LOG, Algorithm.SLIDING_LOG),
    ],
)
def test_algorithm_spellings(make, spelling, expected):
    assert make(spelling, 10, SECOND).config.algorithm is expected


def test_algorithm_names_come_from_the_library():
    assert [a.spec_name for a in Algorithm] == [
        "gcra",
        "leaky_bucket",
        "token_bucket",
        "fixed_window",
        "sliding_window",
        "bucketed_window",
        "sliding_log",
    ]
    assert all(Algorithm.from_name(a.spec_name) is a for a in Algorithm)
    with pytest.raises(ratecell.UnknownAlgorithm):
        Algorithm.from_name("token_buckets")


INVALID = [
    # (exception, keyword arguments over gcra 10 / s)
    (ratecell.InvalidAlgorithm, {"algorithm": 0}),
    (ratecell.InvalidAlgorithm, {"algorithm": 8}),
    (ratecell.InvalidAlgorithm, {"algorithm": "bucket"}),
    (ratecell.InvalidAlgorithm, {"algorithm": 2**32}),
    (ratecell.InvalidLimit, {"limit": 0}),
    (ratecell.InvalidLimit, {"limit": 2**32}),
    (ratecell.InvalidLimit, {"limit": -1}),
    (ratecell.InvalidLimit, {"limit": 2**64}),
    (ratecell.InvalidLimit, {"limit": 2_000, "period_ns": 1_000}),  # L > P
    (ratecell.InvalidPeriod, {"period_ns": 999}),
    (ratecell.InvalidPeriod, {"period_ns": YEAR_366 + 1}),
    (ratecell.InvalidPeriod, {"period_ns": None, "period": 0.0}),
    (ratecell.InvalidPeriod, {"period_ns": None, "period": float("inf")}),
    (ratecell.InvalidBurst, {"burst": 2**32}),
    (ratecell.InvalidBurst, {"algorithm": "fixed_window", "burst": 5}),
    (ratecell.InvalidBurst, {"algorithm": "sliding_log", "burst": 11}),
    # B*T >= 2^62: one unit per 366 days with the largest burst.
    (ratecell.InvalidBurst, {"limit": 1, "period_ns": YEAR_366, "burst": 2**32 - 1}),
    (ratecell.InvalidSubWindows, {"algorithm": "bucketed_window", "sub_windows": 0}),
    (ratecell.InvalidSubWindows, {"algorithm": "bucketed_window", "sub_windows": 65}),
    (ratecell.InvalidSubWindows, {"algorithm": "bucketed_window", "sub_windows": 7}),
    (ratecell.InvalidSubWindows, {"algorithm": "bucketed_window", "sub_windows": 2**32}),
    (ratecell.InvalidCapacity, {"capacity": -1}),
    (ratecell.InvalidCapacity, {"capacity": 2**64}),
    (ratecell.InvalidOverflow, {"overflow": 3}),
    (ratecell.InvalidOverflow, {"overflow": "maybe"}),
    (ratecell.InvalidClock, {"clock": 2}),
    (ratecell.InvalidClock, {"clock": "sundial"}),
]


@pytest.mark.parametrize(("error", "changes"), INVALID)
def test_each_invalid_field_raises_its_own_exception(error, changes):
    kwargs = {"algorithm": "gcra", "limit": 10, "period_ns": SECOND}
    kwargs.update(changes)
    with pytest.raises(error) as info:
        ratecell.Limiter(**kwargs)
    e = info.value
    assert type(e) is error
    assert isinstance(e, ratecell.InvalidConfig)
    assert isinstance(e, ValueError)
    assert isinstance(e, ratecell.RatecellError)
    assert e.status == error.status
    assert e.field in str(e), "the message names the field"


def test_status_codes_match_the_header(repo):
    header = (repo / "include" / "ratecell.h").read_text()
    names = {
        ratecell.NullArgument: "RATECELL_NULL_ARGUMENT",
        ratecell.InvalidAlgorithm: "RATECELL_INVALID_ALGORITHM",
        ratecell.InvalidLimit: "RATECELL_INVALID_LIMIT",
        ratecell.InvalidPeriod: "RATECELL_INVALID_PERIOD_NS",
        ratecell.InvalidBurst: "RATECELL_INVALID_BURST",
        ratecell.InvalidSubWindows: "RATECELL_INVALID_SUB_WINDOWS",
        ratecell.InvalidCapacity: "RATECELL_INVALID_CAPACITY",
        ratecell.InvalidOverflow: "RATECELL_INVALID_OVERFLOW",
        ratecell.InvalidClock: "RATECELL_INVALID_CLOCK",
        ratecell.UnknownAlgorithm: "RATECELL_UNKNOWN_ALGORITHM",
        ratecell.OutOfMemory: "RATECELL_OUT_OF_MEMORY",
        ratecell.TimedOut: "RATECELL_TIMED_OUT",
        ratecell.CostExceedsLimit: "RATECELL_COST_EXCEEDS_LIMIT",
        ratecell.InvalidLength: "RATECELL_INVALID_LENGTH",
        ratecell.Panic: "RATECELL_PANIC",
        ratecell.SnapshotIO: "RATECELL_SNAPSHOT_IO",
        ratecell.SnapshotNotFound: "RATECELL_SNAPSHOT_NOT_FOUND",
        ratecell.SnapshotDamaged: "RATECELL_SNAPSHOT_DAMAGED",
        ratecell.SnapshotVersion: "RATECELL_SNAPSHOT_VERSION",
        ratecell.SnapshotConfigMismatch: "RATECELL_SNAPSHOT_CONFIG_MISMATCH",
        ratecell.SnapshotSeveralLimits: "RATECELL_SNAPSHOT_SEVERAL_LIMITS",
        ratecell.SharedIO: "RATECELL_SHARED_IO",
        ratecell.SharedNotARegion: "RATECELL_SHARED_NOT_A_REGION",
        ratecell.SharedTruncated: "RATECELL_SHARED_TRUNCATED",
        ratecell.SharedVersion: "RATECELL_SHARED_VERSION",
        ratecell.SharedConfigMismatch: "RATECELL_SHARED_CONFIG_MISMATCH",
        ratecell.SharedStale: "RATECELL_SHARED_STALE",
        ratecell.SharedUnsupported: "RATECELL_SHARED_UNSUPPORTED",
        ratecell.ReconfigureRefused: "RATECELL_RECONFIGURE_REFUSED",
        ratecell.InvalidTier: "RATECELL_INVALID_TIER",
        ratecell.NotLeasable: "RATECELL_NOT_LEASABLE",
        ratecell.InvalidMaxGrant: "RATECELL_INVALID_MAX_GRANT",
        ratecell.InvalidHorizon: "RATECELL_INVALID_HORIZON",
        ratecell.InvalidExpire: "RATECELL_INVALID_EXPIRE",
        ratecell.InvalidSkew: "RATECELL_INVALID_SKEW",
        ratecell.InvalidFailure: "RATECELL_INVALID_FAILURE",
        ratecell.InvalidReply: "RATECELL_INVALID_REPLY",
        ratecell.InvalidGrant: "RATECELL_INVALID_GRANT",
        ratecell.InvalidStates: "RATECELL_INVALID_STATES",
    }
    block = header[header.index("enum ratecell_status\n") :]
    block = block[: block.index("};")]
    declared = {m[1]: int(m[2]) for m in re.finditer(r"^  (RATECELL_\w+) = (\d+),$", block, re.M)}
    expected = {name: cls.status for cls, name in names.items()}
    expected["RATECELL_OK"] = 0
    # Not an error: ratecell_allow's answer for a request not admitted.
    expected["RATECELL_DENIED"] = ratecell._ffi.DENIED
    # Every status has its exception, with the header's value.
    assert declared == expected


def test_a_table_too_large_for_memory_is_out_of_memory():
    with pytest.raises(ratecell.OutOfMemory) as info:
        ratecell.Limiter("gcra", 10, SECOND, capacity=2**40)
    assert isinstance(info.value, MemoryError)
    with pytest.raises((ratecell.OutOfMemory, ratecell.InvalidCapacity)):
        ratecell.Limiter("gcra", 10, SECOND, capacity=2**64 - 1)


@pytest.mark.parametrize(
    "changes",
    [
        {"limit": 10.0},
        {"limit": "10"},
        {"limit": True},
        {"period_ns": 1.5e9},
        {"capacity": None},
        {"period_ns": None, "period": "1s"},
    ],
)
def test_wrong_types_are_type_errors(changes):
    kwargs = {"algorithm": "gcra", "limit": 10, "period_ns": SECOND}
    kwargs.update(changes)
    with pytest.raises(TypeError):
        ratecell.Limiter(**kwargs)


def test_exactly_one_period():
    with pytest.raises(TypeError):
        ratecell.Limiter("gcra", 10)
    with pytest.raises(TypeError):
        ratecell.Limiter("gcra", 10, SECOND, period=1.0)
