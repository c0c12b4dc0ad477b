// C++17 tests of bindings/cpp/ratecell.hpp. Built and run by
// scripts/c-tests.sh (normally and under ASan/UBSan). Prints
// "N passed, M failed" last.
#include "ratecell.hpp"

#include <unistd.h>

#include "harness.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <type_traits>

using namespace std::chrono_literals;
using ratecell::Algorithm;
using ratecell::Config;
using ratecell::Error;
using ratecell::Batch;
using ratecell::Limiter;
using ratecell::Options;
using ratecell::Request;

namespace {

constexpr std::uint64_t SECOND = 1000000000;
constexpr std::uint64_t MINUTE = 60 * SECOND;
constexpr std::uint64_t T0 = 480000 * 60 * MINUTE;

const Algorithm ALL[] = {Algorithm::Gcra,          Algorithm::LeakyBucket,
                         Algorithm::TokenBucket,   Algorithm::FixedWindow,
                         Algorithm::SlidingWindow, Algorithm::BucketedWindow,
                         Algorithm::SlidingLog};

// The status a constructor threw, or RATECELL_OK when it did not throw.
ratecell_status construction_status(const Config &config) {
    try {
        Limiter l(config);
        return RATECELL_OK;
    } catch (const Error &e) {
        return e.status();
    }
}

// A limiter of one tier per config (Options().tier({c}) for each).
Limiter tiered(const std::vector<Config> &tiers) {
    Options o;
    for (const Config &c : tiers) {
        o.tier({c});
    }
    return Limiter(o);
}

// A limiter of tiers of several limits each.
Limiter tiered(const std::vector<std::vector<Config>> &tiers) {
    Options o;
    for (const std::vector<Config> &t : tiers) {
        o.tier(t);
    }
    return Limiter(o);
}

// Request's defaults and setters; the key overloads; what Options refuses
// before the library is called.
void test_request_shape() {
    constexpr Request r;
    static_assert(r.cost() == 1 && r.at() == ratecell::now && r.tier() == 0);
    constexpr Request s = Request().cost(3).at(7).tier(2);
    static_assert(s.cost() == 3 && s.at() == 7 && s.tier() == 2);
    Batch b;
    CHECK(b.costs().empty() && b.tiers().empty() && b.at() == ratecell::now);

    Limiter l(Config(Algorithm::FixedWindow, 3, 60s).capacity(16));
    CHECK(l.tiers() == 1);
    CHECK(l.check(5).remaining == 2);  // cost 1, now
    CHECK(l.check(5, Request().cost(0)).remaining == 2);
    // The number key k is its 8 little-endian bytes; "" is a key of its own.
    const char le5[8] = {5, 0, 0, 0, 0, 0, 0, 0};
    CHECK(l.check(std::string_view(le5, 8)).remaining == 1);
    CHECK(l.check(std::string_view()).remaining == 2);
    CHECK(l.check("").remaining == 1);
    CHECK(l.check(std::string("x")).remaining == 2);
    l.reset(std::string_view(le5, 8));
    CHECK(l.check(5, Request().cost(0)).remaining == 3);
    CHECK(l.check_each("x", Request().cost(2)).decision.remaining == 0);
    CHECK(l.allow(6));

    auto status = [](auto &&f) {
        try {
            f();
            return RATECELL_OK;
        } catch (const Error &e) {
            return e.status();
        }
    };
    CHECK(status([&] { l.check(5, Request().tier(1)); }) == RATECELL_INVALID_TIER);
    CHECK(status([&] { l.acquire("x", 0ns, Request().tier(1)); }) == RATECELL_INVALID_TIER);
    CHECK(status([&] { l.check_batch({1}, Batch().tiers({1})); }) == RATECELL_INVALID_TIER);
    CHECK(status([&] { l.check_batch({1}, Batch().tiers({0, 0})); }) == RATECELL_INVALID_LENGTH);
    CHECK(status([&] { Limiter bad{Options()}; }) == RATECELL_INVALID_LENGTH);
    CHECK(status([&] {
              Limiter bad(Options().limit(Config(Algorithm::Gcra, 1, 1s)).tier({}));
          }) == RATECELL_INVALID_LENGTH);
    CHECK(status([&] {
              Limiter bad(Options().limit(Config(Algorithm::Gcra, 1, 1s)).names({"a", "b"}));
          }) == RATECELL_INVALID_LENGTH);
    // A shared region: one keyed limit, no tiers.
    CHECK(status([&] {
              Limiter bad(Options()
                              .tier({Config(Algorithm::Gcra, 1, 1s).capacity(4)})
                              .shared("/nonexistent-ratecell-dir/x"));
          }) != RATECELL_OK);
    Limiter moved(std::move(l));
    CHECK(status([&] { l.check(1); }) == RATECELL_NULL_ARGUMENT);         // NOLINT
    CHECK(status([&] { l.allow(1); }) == RATECELL_NULL_ARGUMENT);         // NOLINT
    CHECK(status([&] { l.reset("k"); }) == RATECELL_NULL_ARGUMENT);       // NOLINT
    CHECK(status([&] { l.check_batch({}); }) == RATECELL_NULL_ARGUMENT);  // NOLINT
}

void test_limiter_is_move_only() {
    static_assert(!std::is_copy_constructible_v<Limiter>);
    static_assert(!std::is_copy_assignable_v<Limiter>);
    static_assert(std::is_nothrow_move_constructible_v<Limiter>);
    static_assert(std::is_nothrow_move_assignable_v<Limiter>);
    static_assert(std::is_base_of_v<std::runtime_error, Error>);

    Limiter a(Config(Algorithm::TokenBucket, 2, 1s));
    CHECK(a.check(1, Request().at(T0)).allowed);
    Limiter b(std::move(a));
    CHECK(!a);  // NOLINT: moved-from on purpose
    CHECK(static_cast<bool>(b));
    // The state moved with the handle.
    CHECK(b.check(1, Request().at(T0)).allowed);
    CHECK(!b.check(1, Request().at(T0)).allowed);
    // Calls on the moved-from object throw instead of crashing.
    ratecell_status status = RATECELL_OK;
    try {
        a.check(1);  // NOLINT
    } catch (const Error &e) {
        status = e.status();
    }
    CHECK(status == RATECELL_NULL_ARGUMENT);
    // Move assignment frees the old limiter (checked by LeakSanitizer).
    Limiter c(Config(Algorithm::Gcra, 5, 1s));
    c = std::move(b);
    CHECK(!c.check(1, Request().at(T0)).allowed);
    ratecell_limiter *raw = c.release();
    CHECK(raw != nullptr && !c);
    ratecell_limiter_free(raw);
}

void test_config_errors_throw_with_their_status() {
    CHECK(construction_status(Config(Algorithm::Gcra, 0, 1s)) == RATECELL_INVALID_LIMIT);
    CHECK(construction_status(Config(Algorithm::Gcra, 10, 999ns)) ==
          RATECELL_INVALID_PERIOD_NS);
    CHECK(construction_status(Config(Algorithm::FixedWindow, 10, 1s).burst(3)) ==
          RATECELL_INVALID_BURST);
    CHECK(construction_status(Config(Algorithm::BucketedWindow, 10, 1s).sub_windows(65)) ==
          RATECELL_INVALID_SUB_WINDOWS);
    CHECK(construction_status(Config(static_cast<Algorithm>(9), 10, 1s)) ==
          RATECELL_INVALID_ALGORITHM);
    CHECK(construction_status(Config(Algorithm::Gcra, 10, 1s).overflow(
              static_cast<ratecell::Overflow>(5))) == RATECELL_INVALID_OVERFLOW);
    CHECK(construction_status(Config(Algorithm::Gcra, 10, 1s).clock(
              static_cast<ratecell::Clock>(5))) == RATECELL_INVALID_CLOCK);
    ratecell_status s = construction_status(Config(Algorithm::Gcra, 10, 1s).capacity(UINT64_MAX));
    CHECK(s == RATECELL_INVALID_CAPACITY || s == RATECELL_OUT_OF_MEMORY);
    try {
        ratecell::algorithm_from_name("nope");
        CHECK(false);
    } catch (const Error &e) {
        CHECK(e.status() == RATECELL_UNKNOWN_ALGORITHM);
        CHECK(std::strstr(e.what(), "unknown algorithm") != nullptr);
    }
    CHECK(ratecell::algorithm_from_name("sliding-log") == Algorithm::SlidingLog);
    CHECK(ratecell::name(Algorithm::BucketedWindow) == "bucketed_window");
    CHECK(!ratecell::version().empty());
}

void test_spec_example_sliding_window() {
    Limiter l(Config(Algorithm::SlidingWindow, 100, 60s));
    CHECK(l.check(0, Request().cost(88).at(T0 + 30 * SECOND)).allowed);
    CHECK(l.check(0, Request().cost(12).at(T0 + MINUTE)).allowed);
    ratecell::Decision d = l.check(0, Request().at(T0 + MINUTE + 15 * SECOND));
    CHECK(d.allowed);
    CHECK_EQ_U64(d.remaining, 21);
}

void test_keys_bytes_and_reset() {
    Limiter l(Config(Algorithm::FixedWindow, 2, 60s).capacity(100));
    CHECK(l.check("alice", Request().at(T0)).allowed);
    CHECK(l.check("alice", Request().at(T0)).allowed);
    CHECK(!l.check(std::string("alice"), Request().at(T0)).allowed);
    CHECK(l.check("bob", Request().at(T0)).allowed);
    l.reset("alice");
    CHECK(l.check("alice", Request().at(T0)).allowed);
    const char le7[8] = {7, 0, 0, 0, 0, 0, 0, 0};
    CHECK(l.check(7, Request().cost(2).at(T0)).allowed);
    CHECK(!l.check(std::string_view(le7, 8), Request().at(T0)).allowed);
    l.reset(7);
    CHECK(l.check(7, Request().at(T0)).allowed);
    CHECK(l.check(8).allowed);
    CHECK(l.check("carol", Request().cost(0)).allowed);
}

void test_allow_is_the_yes_or_no_of_check() {
    // 3 per hour: three admitted, then denied; a fresh key is admitted only
    // when the limiter keeps keys apart.
    for (std::uint64_t capacity : {0, 16}) {
        Limiter l(Config(Algorithm::FixedWindow, 3, 3600s).capacity(capacity));
        CHECK(l.check(1, Request().at(T0)).allowed);
        CHECK(l.check(1, Request().at(T0 + SECOND)).allowed);
        CHECK(l.check(1, Request().at(T0 + MINUTE)).allowed);
        CHECK(!l.check(1, Request().at(T0 + MINUTE)).allowed);
        CHECK(l.check(2, Request().at(T0 + MINUTE)).allowed == (capacity != 0));
        CHECK_EQ_U64(l.stats().checks, 5);
    }
    // The same answers as check, on the same sequence, for every algorithm.
    for (Algorithm a : ALL) {
        for (std::uint64_t capacity : {0, 16}) {
            Limiter yes_no(Config(a, 3, 60s).capacity(capacity));
            Limiter full(Config(a, 3, 60s).capacity(capacity));
            std::uint64_t now = T0, admitted = 0;
            for (std::uint64_t i = 0; i < 100; i++) {
                now += i * 7 % 4 * 3 * SECOND;
                bool got = yes_no.check(i % 3, Request().at(now)).allowed;
                CHECK(got == full.check(i % 3, Request().at(now)).allowed);
                admitted += got;
            }
            CHECK(admitted > 0 && admitted < 100);
        }
    }
    // The clock-reading form (GCRA: no window edge to cross).
    Limiter l(Config(Algorithm::Gcra, 2, 3600s));
    CHECK(l.allow(7));
    CHECK(l.allow(8));
    CHECK(!l.allow(9));
    // A moved-from Limiter throws, as for every call.
    Limiter moved(std::move(l));
    ratecell_status status = RATECELL_OK;
    try {
        l.allow(1);  // NOLINT: moved-from on purpose
    } catch (const Error &e) {
        status = e.status();
    }
    CHECK(status == RATECELL_NULL_ARGUMENT);
}

void test_batch_equals_one_by_one() {
    std::vector<std::uint64_t> keys, costs;
    for (std::uint64_t i = 0; i < 100; i++) {
        keys.push_back(i * 7 % 11);
        costs.push_back(i % 3);
    }
    for (Algorithm a : ALL) {
        Limiter batch(Config(a, 4, 1s).capacity(32));
        Limiter single(Config(a, 4, 1s).capacity(32));
        std::vector<ratecell::Decision> got = batch.check_batch(keys, Batch().costs(costs).at(T0));
        CHECK(got.size() == keys.size());
        for (std::size_t i = 0; i < keys.size(); i++) {
            ratecell::Decision d = single.check(keys[i], Request().cost(costs[i]).at(T0));
            CHECK(got[i].allowed == d.allowed);
            CHECK_EQ_U64(got[i].remaining, d.remaining);
            CHECK_EQ_U64(got[i].retry_after_ns, d.retry_after_ns);
            CHECK_EQ_U64(got[i].reset_after_ns, d.reset_after_ns);
            CHECK_EQ_U64(got[i].wait_ns, d.wait_ns);
        }
        CHECK(batch.check_batch(keys).size() == keys.size());
    }
    Limiter l(Config(Algorithm::Gcra, 4, 1s));
    // Like every failure, mismatched lengths are a ratecell::Error
    // (issue 20: this was a std::invalid_argument).
    bool threw = false;
    try {
        l.check_batch({1, 2, 3}, Batch().costs({1}));
    } catch (const Error &e) {
        threw = e.status() == RATECELL_INVALID_LENGTH &&
                std::string(e.what()).find("costs.size() = 1 != keys.size() = 3") !=
                    std::string::npos;
    }
    CHECK(threw);
}

void test_acquire_returns_a_denied_decision_when_it_gives_up() {
    Limiter l(Config(Algorithm::Gcra, 5, 1s).burst(1).capacity(8));
    CHECK(l.acquire(1, 0ns).allowed);
    ratecell::Decision d = l.acquire(1, 1ms);
    CHECK(!d.allowed);
    CHECK(d.retry_after_ns > 0 && d.retry_after_ns != UINT64_MAX);
    d = l.acquire(1, 10s, Request().cost(2));  // can never be admitted: no wait
    CHECK(!d.allowed);
    CHECK_EQ_U64(d.retry_after_ns, UINT64_MAX);
    CHECK(l.acquire(1, 2s).allowed);  // sleeps about 200 ms
    CHECK(l.acquire("k", 0ns).allowed);
}

void test_stats_and_config() {
    Limiter l(Config(Algorithm::SlidingLog, 3, 60s).capacity(10).overflow(ratecell::Overflow::Allow));
    for (int i = 0; i < 5; i++) {
        l.check(1, Request().at(T0));
    }
    ratecell::Stats s = l.stats();
    CHECK_EQ_U64(s.checks, 5);
    CHECK_EQ_U64(s.allowed, 3);
    CHECK_EQ_U64(s.denied, 2);
    CHECK_EQ_U64(s.keys_tracked, 1);
    CHECK_EQ_U64(s.capacity, 10);
    CHECK(s.bytes_allocated > 0);
    ratecell_config raw = l.config().raw();
    CHECK_EQ_U64(raw.algorithm, RATECELL_ALGORITHM_SLIDING_LOG);
    CHECK_EQ_U64(raw.capacity, 10);
    CHECK_EQ_U64(raw.overflow, RATECELL_OVERFLOW_ALLOW);
    CHECK(l.now_ns() > T0 / 2);
}

// A full table under Overflow::Evict: every new key is admitted and
// tracked, in the place of a live state, and the evictions are counted.
void test_overflow_evict_tracks_every_new_key() {
    Limiter l(Config(Algorithm::FixedWindow, 1, 3600s).capacity(16).overflow(ratecell::Overflow::Evict));
    const std::uint64_t keys = 2000;
    for (std::uint64_t k = 0; k < keys; k++) {
        CHECK(l.check(k, Request().at(T0)).allowed);
    }
    ratecell::Stats s = l.stats();
    CHECK_EQ_U64(s.overflows, 0);
    CHECK(s.evicted_live > 0);
    CHECK_EQ_U64(s.keys_tracked + s.evicted_live, keys);
    CHECK(!l.check(keys - 1, Request().at(T0)).allowed);
    CHECK_EQ_U64(l.config().raw().overflow, RATECELL_OVERFLOW_EVICT);
}

void test_four_threads_admit_exactly_the_limit() {
    for (Algorithm a : ALL) {
        Limiter l(Config(a, 500, 1s).capacity(64));
        std::atomic<int> ready{0};
        std::atomic<std::uint64_t> admitted{0};
        std::vector<std::thread> threads;
        for (int t = 0; t < 4; t++) {
            threads.emplace_back([&] {
                ready.fetch_add(1);
                while (ready.load() < 4) {
                    std::this_thread::yield();
                }
                for (int i = 0; i < 300; i++) {
                    if (l.check(5, Request().at(T0)).allowed) {
                        admitted.fetch_add(1);
                    }
                }
            });
        }
        for (std::thread &t : threads) {
            t.join();
        }
        CHECK_EQ_U64(admitted.load(), 500);
    }
}

// Several limits as one: the tighter decides, names stay with the wrapper,
// a move keeps them, and a bad list throws with its status.
void test_several_limits_as_one() {
    std::vector<Config> limits{Config(Algorithm::Gcra, 10, 1s),
                               Config(Algorithm::FixedWindow, 3, 60s)};
    Limiter l(Options().limits(limits).names({"per-second", "per-minute"}));
    for (std::uint64_t left = 3; left-- > 0;) {
        ratecell::MultiDecision d = l.check_each(0, Request().at(T0));
        CHECK(d.decision.allowed);
        CHECK_EQ_U64(d.decision.remaining, left);
        CHECK_EQ_U64(d.count, 2);
    }
    Limiter moved(std::move(l));
    ratecell::MultiDecision d = moved.check_each(0, Request().at(T0));
    CHECK(!d.decision.allowed);
    CHECK_EQ_U64(d.denied_by, 1);
    CHECK(moved.limit_name(d.denied_by) == "per-minute");
    CHECK(moved.limit_name(99).empty());
    CHECK(!moved.check(0, Request().at(T0)).allowed);
    auto status = [](std::vector<Config> cs, std::vector<std::string> names) {
        try {
            Limiter bad(Options().limits(cs).names(std::move(names)));
            return RATECELL_OK;
        } catch (const Error &e) {
            return e.status();
        }
    };
    CHECK(status({}, {}) == RATECELL_INVALID_LENGTH);
    CHECK(status(limits, {"one"}) == RATECELL_INVALID_LENGTH);
    limits[1].capacity(5);
    CHECK(status(limits, {}) == RATECELL_INVALID_CAPACITY);
}

// Snapshots: save and restore every algorithm, a mismatch throws its
// status, and a persisted limiter comes back with its states.
void test_snapshots_save_restore_and_persist() {
    std::string path = "/tmp/ratecell-cpp-" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
    for (Algorithm a : ALL) {
        Config config = Config(a, 4, 1s).capacity(50);
        Limiter l(config);
        for (std::uint64_t key = 0; key < 10; key++) {
            l.check(key, Request().cost(key % 4).at(T0));
        }
        l.save_at(path, T0);
        Limiter back = Limiter(Options().limit(config).snapshot(path));
        Limiter any = Limiter(Options().snapshot(path));
        for (std::uint64_t key = 0; key < 10; key++) {
            ratecell::Decision want = l.check(key, Request().at(T0 + 1));
            CHECK(back.check(key, Request().at(T0 + 1)).remaining == want.remaining);
            CHECK(any.check(key, Request().at(T0 + 1)).allowed == want.allowed);
        }
        ratecell_status status = RATECELL_OK;
        try {
            Limiter(Options().limit(Config(a, 5, 1s).capacity(50)).snapshot(path));
        } catch (const Error &e) {
            status = e.status();
        }
        CHECK(status == RATECELL_SNAPSHOT_CONFIG_MISMATCH);
    }
    std::remove(path.c_str());
    Config config = Config(Algorithm::Gcra, 3, 3600s).capacity(100);
    std::uint64_t now = 0;
    {
        Limiter p(Options().limit(config).persisted(path, 1ms));
        now = p.now_ns();
        for (int i = 0; i < 3; i++) {
            CHECK(p.check(7, Request().at(now)).allowed);
        }
        p.stop_saving();  // the last save, reported
        p.stop_saving();  // nothing more, no throw
    }
    {
        Limiter again(Options().limit(config).persisted(path, 1ms));
        CHECK(!again.check(7, Request().at(now)).allowed);
        again.save(path);
    }
    std::remove(path.c_str());
}

// Several limits: saved, restored with the same list (names given again),
// refused with another, and a persisted one of several comes back.
void test_snapshots_of_several_limits() {
    std::string path = "/tmp/ratecell-cpp-multi-" + std::to_string(::getpid());
    std::vector<Config> limits = {Config(Algorithm::SlidingLog, 3, 1s).capacity(20),
                                  Config(Algorithm::Gcra, 10, 1s).capacity(20)};
    Limiter l(Options().limits(limits).names({"burst", "steady"}));
    for (int i = 0; i < 3; i++) {
        CHECK(l.check(4, Request().at(T0)).allowed);
    }
    l.save_at(path, T0);
    Limiter back = Limiter(Options().limits(limits).names({"burst", "steady"}).snapshot(path));
    ratecell::MultiDecision d = back.check_each(4, Request().at(T0));
    CHECK(!d.decision.allowed);
    CHECK(d.denied_by == 0);
    CHECK(back.limit_name(d.denied_by) == "burst");
    CHECK(d.limits[1].remaining == 7);
    ratecell_status status = RATECELL_OK;
    try {
        Limiter(Options().limits({limits[1], limits[0]}).snapshot(path));
    } catch (const Error &e) {
        status = e.status();
    }
    CHECK(status == RATECELL_SNAPSHOT_CONFIG_MISMATCH);
    std::remove(path.c_str());
    std::uint64_t now = 0;
    {
        Limiter p(Options().limits(limits).names({"burst", "steady"}).persisted(path, 1ms));
        now = p.now_ns();
        for (int i = 0; i < 3; i++) {
            CHECK(p.check(9, Request().at(now)).allowed);
        }
    }
    {
        Limiter again(Options().limits(limits).names({"burst", "steady"}).persisted(path, 1ms));
        CHECK(again.check_each(9, Request().at(now)).denied_by == 0);
        CHECK(again.limit_name(0) == "burst");
    }
    std::remove(path.c_str());
}

// Waits for the file at `path` to appear (a periodic save renaming it into
// place); false after 30 s.
bool wait_for(const std::string &path) {
    for (int i = 0; i < 30000; i++) {
        if (::access(path.c_str(), F_OK) == 0) {
            return true;
        }
        std::this_thread::sleep_for(1ms);
    }
    return false;
}

// The status `open` threw, or RATECELL_OK when it did not throw.
template <typename F> ratecell_status thrown(F open) {
    try {
        open();
        return RATECELL_OK;
    } catch (const Error &e) {
        return e.status();
    }
}

// A tiered persisted limiter saving every millisecond: the file as its
// thread (not its last save) left it reopens into one deciding the rest of a trace as the
// original; other tiers, or none, are refused by name.
void test_persisted_tiers() {
    const std::string path = "/tmp/ratecell-cpp-ptiers-" + std::to_string(::getpid()) + ".snap";
    const std::string copy = path + ".copy";
    std::remove(path.c_str());
    const Config free = Config(Algorithm::TokenBucket, 4, 3600s).capacity(100);
    const Config paid = Config(Algorithm::TokenBucket, 40, 3600s).capacity(100);
    auto request = [](int i, std::uint64_t &key, std::uint32_t &tier, std::uint64_t &cost) {
        key = static_cast<std::uint64_t>(i * 7 % 5);
        tier = i % 4 == 0 ? static_cast<std::uint32_t>(i / 4 % 2)
                          : static_cast<std::uint32_t>(key % 2);
        cost = 1 + static_cast<std::uint64_t>(i % 3);
    };
    Limiter p(Options().tier({free}).tier({paid}).persisted(path, 1ms));
    CHECK(p.tiers() == 2);
    // The first half before the limiter's clock (by which the saver judges
    // which states are live), the rest after every save.
    const std::uint64_t start = p.now_ns() - 10 * SECOND;
    for (int i = 0; i < 40; i++) {
        std::uint64_t key = 0, cost = 0;
        std::uint32_t tier = 0;
        request(i, key, tier, cost);
        p.check(key, Request().cost(cost).at(start + static_cast<std::uint64_t>(i) * 100000000).tier(tier));
    }
    // One save may have been under way during the checks; the one after
    // the first to rename began after them.
    std::remove(path.c_str());
    CHECK(wait_for(path));
    CHECK(std::remove(path.c_str()) == 0);
    CHECK(wait_for(path));
    {
        std::ifstream in(path, std::ios::binary);
        std::ofstream out(copy, std::ios::binary);
        out << in.rdbuf();
    }
    Limiter back(Options().tier({free}).tier({paid}).persisted(copy, 1h));
    const std::uint64_t rest = p.now_ns() + SECOND;
    bool alike = true;
    int denied = 0;
    for (int i = 40; i < 80; i++) {
        std::uint64_t key = 0, cost = 0;
        std::uint32_t tier = 0;
        request(i, key, tier, cost);
        const std::uint64_t t = rest + static_cast<std::uint64_t>(i - 40) * 100000000;
        ratecell::Decision want = p.check(key, Request().cost(cost).at(t).tier(tier));
        ratecell::Decision got = back.check(key, Request().cost(cost).at(t).tier(tier));
        alike = alike && got.allowed == want.allowed && got.remaining == want.remaining &&
                got.retry_after_ns == want.retry_after_ns && got.limit == want.limit;
        denied += want.allowed ? 0 : 1;
    }
    CHECK(alike);
    CHECK(denied > 0);
    CHECK(back.check_each(0, Request().cost(0).at(rest).tier(1)).limits[0].limit == 40);
    back.save(copy);
    p.save(path);

    CHECK(thrown([&] { Limiter(Options().tier({free}).persisted(path, 1h)); }) ==
          RATECELL_SNAPSHOT_CONFIG_MISMATCH);
    CHECK(thrown([&] {
              Limiter(Options().tier({free}).tier({Config(Algorithm::TokenBucket, 41, 3600s).capacity(100)}).persisted(path, 1h));
          }) ==
          RATECELL_SNAPSHOT_CONFIG_MISMATCH);
    CHECK(thrown([&] { Limiter(Options().limit(free).persisted(path, 1h)); }) ==
          RATECELL_SNAPSHOT_CONFIG_MISMATCH);
    CHECK(thrown([&] { Limiter(Options().tier({free}).tier({}).persisted(path, 1h)); }) ==
          RATECELL_INVALID_LENGTH);
    // No limit given: the file's own tiers.
    CHECK(Limiter(Options().persisted(path, 1h)).tiers() == 2);
    // The last states set win: a region, then a file, makes no region.
    CHECK(thrown([&] {
              Limiter(Options().limit(free).shared("ratecell-cpp-never-made").snapshot(path));
          }) == RATECELL_SNAPSHOT_CONFIG_MISMATCH);
    CHECK(::access("/dev/shm/ratecell-cpp-never-made", F_OK) != 0);
    Limiter both(Options().tier({free}).tier({paid}).persisted(path, 1h));
    CHECK(both.tiers() == 2);
    std::remove(path.c_str());
    std::remove(copy.c_str());
}

void test_shared_region_is_one_limit_for_every_handle() {
    const std::string path = "/dev/shm/ratecell-cpp-test-" + std::to_string(::getpid());
    const Config cfg = Config(Algorithm::Gcra, 5, 1h).capacity(100);
    {
        Limiter a(Options().limit(cfg).shared(path));
        Limiter b(Options().limit(cfg).shared(path, 0640));
        int admitted = 0;
        for (int i = 0; i < 10; i++) {
            admitted += ((i % 2 != 0) ? a : b).check(7, Request().at(T0)).allowed ? 1 : 0;
        }
        CHECK(admitted == 5);
        try {
            Limiter c(Options().limit(Config(Algorithm::Gcra, 6, 1h).capacity(100)).shared(path));
            CHECK(false);
        } catch (const ratecell::Error &e) {
            CHECK(e.status() == RATECELL_SHARED_CONFIG_MISMATCH);
        }
    }
    CHECK(::unlink(path.c_str()) == 0);
}

}  // namespace

void test_reconfigure_keeps_the_spent() {
    Limiter l(Config(Algorithm::FixedWindow, 10, 60s));
    CHECK(l.check(0, Request().cost(4).at(T0)).allowed);
    l.reconfigure({Config(Algorithm::FixedWindow, 14, 60s)});
    CHECK_EQ_U64(l.check(0, Request().cost(0).at(T0)).remaining, 10);
    auto status = [&l](std::vector<Config> cs) {
        try {
            l.reconfigure(cs);
            return RATECELL_OK;
        } catch (const Error &e) {
            return e.status();
        }
    };
    CHECK(status({Config(Algorithm::FixedWindow, 14, 30s)}) == RATECELL_RECONFIGURE_REFUSED);
    CHECK(status({Config(Algorithm::Gcra, 14, 60s)}) == RATECELL_RECONFIGURE_REFUSED);
    CHECK(status({}) == RATECELL_INVALID_LENGTH);
    CHECK_EQ_U64(l.check(0, Request().cost(0).at(T0)).remaining, 10);
}

// Tiers: each key held to the tier its check names, a key moving tiers
// keeps what it spent, tiers of several limits, and the errors.
void test_tiers() {
    const std::uint64_t limits[3] = {2, 20, 200};
    std::vector<Config> tiers;
    for (std::uint64_t limit : limits) {
        tiers.push_back(Config(Algorithm::TokenBucket, limit, 3600s).capacity(100));
    }
    Limiter l = tiered(tiers);
    CHECK(l.tiers() == 3);
    for (std::uint32_t tier = 0; tier < 3; tier++) {
        std::uint64_t admitted = 0;
        for (int i = 0; i < 300; i++) {
            admitted += l.check(tier, Request().at(T0).tier(tier)).allowed ? 1 : 0;
        }
        CHECK(admitted == limits[tier]);
    }
    // Key 1 spent 20 as paid: nothing as free, 180 more as internal.
    CHECK(!l.check(1, Request().at(T0).tier(0)).allowed);
    CHECK(l.check(1, Request().cost(0).at(T0).tier(2)).remaining == 180);
    CHECK(l.check("k", Request().cost(5).at(T0).tier(1)).remaining == 15);
    CHECK(l.check("k", Request().cost(0).tier(0)).remaining == 2); // now is long after T0: refilled
    CHECK(l.check(9, Request().cost(0).tier(2)).remaining == 200);
    CHECK(l.check(9, Request().cost(0).at(T0)).remaining == 2); // no tier named: tier 0

    ratecell_status status = RATECELL_OK;
    try {
        l.check(1, Request().at(T0).tier(3));
    } catch (const Error &e) {
        status = e.status();
    }
    CHECK(status == RATECELL_INVALID_TIER);
    status = RATECELL_OK;
    try {
        tiered({tiers[0], Config(Algorithm::Gcra, 5, 1s).capacity(100)});
    } catch (const Error &e) {
        status = e.status();
    }
    CHECK(status == RATECELL_INVALID_ALGORITHM);
    status = RATECELL_OK;
    try {
        tiered(std::vector<Config>{});
    } catch (const Error &e) {
        status = e.status();
    }
    CHECK(status == RATECELL_INVALID_LENGTH);

    Config rate = Config(Algorithm::Gcra, 1, 1s).capacity(10);
    Config day = Config(Algorithm::FixedWindow, 3, 86400s).capacity(10);
    Limiter both = tiered(std::vector<std::vector<Config>>{
        {rate, day}, {Config(Algorithm::Gcra, 100, 1s).capacity(10),
                      Config(Algorithm::FixedWindow, 50, 86400s).capacity(10)}});
    CHECK(both.check(4, Request().cost(40).at(T0).tier(1)).allowed);
    ratecell::MultiDecision m = both.check_each(4, Request().at(T0).tier(0));
    CHECK(!m.decision.allowed && m.count == 2);
    status = RATECELL_OK;
    try {
        tiered(std::vector<std::vector<Config>>{{rate, day}, {rate}});
    } catch (const Error &e) {
        status = e.status();
    }
    CHECK(status == RATECELL_INVALID_LENGTH);
}

// A batch with a tier per request, and an acquire naming the tier.
void test_tiered_batch_and_acquire() {
    using namespace std::chrono_literals;
    Config free = Config(Algorithm::TokenBucket, 3, 3600s).capacity(100);
    Limiter l = tiered({free, Config(Algorithm::TokenBucket, 30, 3600s).capacity(100)});
    std::vector<ratecell::Decision> ds = l.check_batch({1, 1, 1, 1, 2}, Batch().tiers({0, 0, 0, 0, 1}).at(T0));
    CHECK(ds.size() == 5);
    CHECK(ds[2].allowed && !ds[3].allowed);
    CHECK(ds[4].allowed && ds[4].limit == 30 && ds[4].remaining == 29);
    CHECK(l.check_batch({3}, Batch().tiers({1}).costs({2}))[0].remaining == 28);
    ratecell_status status = RATECELL_OK;
    try {
        l.check_batch({9, 9}, Batch().tiers({1, 2}).at(T0));
    } catch (const Error &e) {
        status = e.status();
    }
    CHECK(status == RATECELL_INVALID_TIER);
    CHECK(l.check(9, Request().cost(0).at(T0).tier(1)).remaining == 30);
    status = RATECELL_OK;
    try {
        l.check_batch({9, 9}, Batch().tiers({1}));
    } catch (const Error &e) {
        status = e.status();
    }
    CHECK(status == RATECELL_INVALID_LENGTH);

    for (int i = 0; i < 3; i++) {
        CHECK(l.acquire(7, 0ns, Request().tier(0)).allowed);
    }
    CHECK(!l.acquire(7, 0ns, Request().tier(0)).allowed);
    CHECK(l.acquire("p", 0ns, Request().tier(1)).limit == 30);
    CHECK(l.acquire("p", 0ns, Request().cost(31).tier(1)).retry_after_ns == UINT64_MAX);
    status = RATECELL_OK;
    try {
        l.acquire(7, 0ns, Request().tier(2));
    } catch (const Error &e) {
        status = e.status();
    }
    CHECK(status == RATECELL_INVALID_TIER);

    // Saved with the tiers, restored with them.
    const std::string path = "/tmp/ratecell-cpp-tiers-" + std::to_string(::getpid()) + ".snap";
    l.save_at(path, T0);
    Config paid = Config(Algorithm::TokenBucket, 30, 3600s).capacity(100);
    Limiter back = Limiter(Options().tier({free}).tier({paid}).snapshot(path));
    CHECK(back.tiers() == 2);
    CHECK(back.check(2, Request().cost(0).at(T0).tier(1)).remaining == 29);
    Limiter both = Limiter(Options().snapshot(path));
    CHECK(both.tiers() == 2);
    CHECK(both.check(1, Request().at(T0).tier(0)).allowed == false);
    status = RATECELL_OK;
    try {
        Limiter(Options().tier({free}).tier({free}).snapshot(path));
    } catch (const Error &e) {
        status = e.status();
    }
    CHECK(status == RATECELL_SNAPSHOT_CONFIG_MISMATCH);
    std::remove(path.c_str());
}

int main() {
    RUN(test_request_shape);
    RUN(test_limiter_is_move_only);
    RUN(test_config_errors_throw_with_their_status);
    RUN(test_spec_example_sliding_window);
    RUN(test_keys_bytes_and_reset);
    RUN(test_allow_is_the_yes_or_no_of_check);
    RUN(test_batch_equals_one_by_one);
    RUN(test_acquire_returns_a_denied_decision_when_it_gives_up);
    RUN(test_stats_and_config);
    RUN(test_overflow_evict_tracks_every_new_key);
    RUN(test_four_threads_admit_exactly_the_limit);
    RUN(test_several_limits_as_one);
    RUN(test_reconfigure_keeps_the_spent);
    RUN(test_tiers);
    RUN(test_tiered_batch_and_acquire);
    RUN(test_snapshots_save_restore_and_persist);
    RUN(test_snapshots_of_several_limits);
    RUN(test_persisted_tiers);
    RUN(test_shared_region_is_one_limit_for_every_handle);
    return harness_finish();
}
