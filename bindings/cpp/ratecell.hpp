// ratecell.hpp: a header-only C++17 RAII wrapper over ratecell's C ABI
// (include/ratecell.h). Link the program against libratecell as for C.
//
// - ratecell::Limiter owns one ratecell_limiter; it is move-only, and frees
//   the limiter in its destructor. A moved-from Limiter holds nothing: any
//   call on it throws ratecell::Error with RATECELL_NULL_ARGUMENT.
// - Every failure throws ratecell::Error (a std::runtime_error) carrying
//   the ratecell_status. A denied check is not a failure, and neither is an
//   acquire that gives up: both return a Decision with allowed == false.
// - All const member functions are thread-safe, as in C: share one
//   Limiter between threads by reference.
#ifndef RATECELL_HPP
#define RATECELL_HPP

#include "ratecell.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ratecell {

/// The answer to one request: the C struct itself.
using Decision = ::ratecell_decision;
/// A snapshot of the counters: the C struct itself.
using Stats = struct ::ratecell_stats;
/// One request's answer from several limits: the combined decision, the
/// denying limit's index (RATECELL_NO_LIMIT if none) and each limit's own
/// decision in limits[0..count]: the C struct itself.
using MultiDecision = ::ratecell_multi_decision;

enum class Algorithm : std::uint32_t {
    Gcra = RATECELL_ALGORITHM_GCRA,
    LeakyBucket = RATECELL_ALGORITHM_LEAKY_BUCKET,
    TokenBucket = RATECELL_ALGORITHM_TOKEN_BUCKET,
    FixedWindow = RATECELL_ALGORITHM_FIXED_WINDOW,
    SlidingWindow = RATECELL_ALGORITHM_SLIDING_WINDOW,
    BucketedWindow = RATECELL_ALGORITHM_BUCKETED_WINDOW,
    SlidingLog = RATECELL_ALGORITHM_SLIDING_LOG,
};

enum class Overflow : std::uint32_t {
    Deny = RATECELL_OVERFLOW_DENY,
    Allow = RATECELL_OVERFLOW_ALLOW,
    Evict = RATECELL_OVERFLOW_EVICT,
};

enum class Clock : std::uint32_t {
    Tsc = RATECELL_CLOCK_TSC,
    Coarse = RATECELL_CLOCK_COARSE,
};

/// A failed call: `status()` says which of the RATECELL_* codes.
class Error : public std::runtime_error {
public:
    explicit Error(ratecell_status status)
        : std::runtime_error(std::string("ratecell: ") + ::ratecell_status_str(status)),
          status_(status) {}

    /// A failure the wrapper finds itself, with a message saying which.
    Error(ratecell_status status, const std::string &what)
        : std::runtime_error("ratecell: " + what), status_(status) {}

    ratecell_status status() const noexcept { return status_; }

private:
    ratecell_status status_;
};

namespace detail {
inline void check(ratecell_status status) {
    if (status != RATECELL_OK) {
        throw Error(status);
    }
}
}  // namespace detail

/// The SPEC name of an algorithm ("gcra", ...).
inline std::string_view name(Algorithm algorithm) {
    const char *n = ::ratecell_algorithm_name(static_cast<ratecell_algorithm>(algorithm));
    return n != nullptr ? std::string_view(n) : std::string_view();
}

/// The algorithm named `name`; throws Error(RATECELL_UNKNOWN_ALGORITHM).
inline Algorithm algorithm_from_name(std::string_view name) {
    ratecell_algorithm out{};
    detail::check(::ratecell_algorithm_from_name(
        reinterpret_cast<const std::uint8_t *>(name.data()), name.size(), &out));
    return static_cast<Algorithm>(out);
}

/// The library's version string ("0.1.0").
inline std::string_view version() { return ::ratecell_version(); }

/// A configuration with SPEC defaults (ratecell_config_init), and setters
/// that chain. Validated when a Limiter is made from it.
class Config {
public:
    Config(Algorithm algorithm, std::uint64_t limit, std::chrono::nanoseconds period) {
        ::ratecell_config_init(&raw_, static_cast<ratecell_algorithm>(algorithm), limit,
                               static_cast<std::uint64_t>(period.count()));
    }

    explicit Config(const ratecell_config &raw) : raw_(raw) {}

    Config &burst(std::uint64_t burst) {
        raw_.burst = burst;
        return *this;
    }
    Config &sub_windows(std::uint32_t n) {
        raw_.sub_windows = n;
        return *this;
    }
    /// Keys tracked: 0 (the default) for one shared state.
    Config &capacity(std::uint64_t keys) {
        raw_.capacity = keys;
        return *this;
    }
    Config &overflow(Overflow policy) {
        raw_.overflow = static_cast<std::uint32_t>(policy);
        return *this;
    }
    Config &clock(Clock clock) {
        raw_.clock = static_cast<std::uint32_t>(clock);
        return *this;
    }

    const ratecell_config &raw() const noexcept { return raw_; }
    ratecell_config &raw() noexcept { return raw_; }

private:
    ratecell_config raw_{};
};

namespace detail {
/// The C configs of several limits, in order.
inline std::vector<ratecell_config> raw_configs(const std::vector<Config> &limits) {
    std::vector<ratecell_config> raw;
    raw.reserve(limits.size());
    for (const Config &c : limits) {
        raw.push_back(c.raw());
    }
    return raw;
}

/// Tiers laid out as the C ABI takes them, tier by tier; `per_tier` gets
/// the limits per tier. Error(RATECELL_INVALID_LENGTH) when the tiers are
/// not as long as each other.
inline std::vector<ratecell_config> tier_configs(const std::vector<std::vector<Config>> &tiers,
                                                 std::size_t &per_tier) {
    std::vector<ratecell_config> raw;
    per_tier = tiers.empty() ? 0 : tiers[0].size();
    for (const std::vector<Config> &tier : tiers) {
        if (tier.size() != per_tier) {
            throw Error(RATECELL_INVALID_LENGTH);
        }
        for (const Config &c : tier) {
            raw.push_back(c.raw());
        }
    }
    return raw;
}
}  // namespace detail

/// A rate limiter (ratecell_limiter), owned. Move-only.
class Limiter {
public:
    /// Throws Error with the RATECELL_INVALID_* status naming the field, or
    /// RATECELL_OUT_OF_MEMORY.
    explicit Limiter(const Config &config) {
        detail::check(::ratecell_limiter_new(&config.raw(), &handle_));
    }

    /// Several limits checked as one (ratecell_limiter_new_multi): a request
    /// is admitted only when every limit admits it. `names` (optional, one
    /// per limit) are kept here for callers that report which limit denied
    /// (e.g. one HTTP header item per limit). Throws Error with the status
    /// naming the field (RATECELL_INVALID_LENGTH for 0 or more than
    /// RATECELL_MAX_LIMITS limits, or names.size() not matching).
    explicit Limiter(const std::vector<Config> &limits,
                     std::vector<std::string> names = {}) {
        if (!names.empty() && names.size() != limits.size()) {
            throw Error(RATECELL_INVALID_LENGTH);
        }
        std::vector<ratecell_config> raw = detail::raw_configs(limits);
        detail::check(::ratecell_limiter_new_multi(raw.data(), raw.size(), &handle_));
        names_ = std::move(names);
    }

    /// The limiter whose table lies in the file `shared` (a bare name is
    /// placed under /dev/shm), created with `mode` by the first process and
    /// attached by the others: one limit across the processes of a machine
    /// (ratecell_limiter_open_shared). Throws Error with a
    /// RATECELL_SHARED_* status when the region does not fit.
    Limiter(const Config &config, const std::string &shared, std::uint32_t mode = 0600) {
        detail::check(::ratecell_limiter_open_shared_mode(shared.c_str(), &config.raw(), mode,
                                                          &handle_));
    }

    ~Limiter() { ::ratecell_limiter_free(handle_); }

    Limiter(const Limiter &) = delete;
    Limiter &operator=(const Limiter &) = delete;

    Limiter(Limiter &&other) noexcept
        : handle_(std::exchange(other.handle_, nullptr)), names_(std::move(other.names_)) {}

    Limiter &operator=(Limiter &&other) noexcept {
        if (this != &other) {
            ::ratecell_limiter_free(handle_);
            handle_ = std::exchange(other.handle_, nullptr);
            names_ = std::move(other.names_);
        }
        return *this;
    }

    /// Changes the limits while checks run, keeping every state
    /// (ratecell_limiter_reconfigure): one config per limit, in order. Each
    /// check sees the old limits or the new ones; what a state keeps is the
    /// algorithm's carry-over rule (docs/ALGORITHMS.md). Throws Error with
    /// RATECELL_RECONFIGURE_REFUSED for a change with no carry-over (another
    /// algorithm, a window's period, a count width, capacity, ...), or the
    /// status naming an invalid field; nothing changes then.
    void reconfigure(const std::vector<Config> &limits) const {
        std::vector<ratecell_config> raw;
        raw.reserve(limits.size());
        for (const Config &c : limits) {
            raw.push_back(c.raw());
        }
        detail::check(::ratecell_limiter_reconfigure(handle_, raw.data(), raw.size()));
    }

    /// check with each limit's own decision and the denying index.
    MultiDecision check_each(std::uint64_t key, std::uint64_t cost = 1) const {
        MultiDecision d{};
        detail::check(::ratecell_check_each(handle_, key, cost, &d));
        return d;
    }

    /// check_each at the caller's time (UNIX ns).
    MultiDecision check_each_at(std::uint64_t key, std::uint64_t cost,
                                std::uint64_t now_ns) const {
        MultiDecision d{};
        detail::check(::ratecell_check_each_at(handle_, key, cost, now_ns, &d));
        return d;
    }

    /// check_each for a byte-string key.
    MultiDecision check_bytes_each(std::string_view key, std::uint64_t cost = 1) const {
        MultiDecision d{};
        detail::check(::ratecell_check_bytes_each(handle_, bytes(key), key.size(), cost, &d));
        return d;
    }

    /// The name given to limit `index` ("" when none was given).
    std::string_view limit_name(std::size_t index) const noexcept {
        return index < names_.size() ? std::string_view(names_[index]) : std::string_view();
    }

    /// Whether this object holds a limiter (false once moved from).
    explicit operator bool() const noexcept { return handle_ != nullptr; }

    /// The C handle, still owned by this object.
    ratecell_limiter *get() const noexcept { return handle_; }

    /// Gives up ownership: the caller must ratecell_limiter_free the result.
    ratecell_limiter *release() noexcept { return std::exchange(handle_, nullptr); }

    /// A limiter restored from the snapshot file at `path`, with the
    /// configuration saved in it (trust the file as you would a Config).
    /// Throws Error(RATECELL_SNAPSHOT_*) for a missing, damaged or
    /// unsupported file.
    static Limiter restore(const std::string &path) {
        ratecell_limiter *l = nullptr;
        detail::check(::ratecell_limiter_restore(path.c_str(), &l));
        return Limiter(l);
    }

    /// A limiter of `config` restored from the snapshot file at `path`;
    /// throws Error(RATECELL_SNAPSHOT_CONFIG_MISMATCH) if the file was saved
    /// from another configuration (docs/SNAPSHOT.md).
    static Limiter restore(const Config &config, const std::string &path) {
        ratecell_limiter *l = nullptr;
        detail::check(::ratecell_limiter_restore_config(&config.raw(), path.c_str(), &l));
        return Limiter(l);
    }

    /// A limiter of several limits restored from the snapshot file at
    /// `path` (ratecell_limiter_restore_multi): the file must hold the same
    /// limits in the same order, else Error(RATECELL_SNAPSHOT_CONFIG_MISMATCH).
    /// `names` as for the constructor (names are not saved).
    static Limiter restore(const std::vector<Config> &limits, const std::string &path,
                           std::vector<std::string> names = {}) {
        if (!names.empty() && names.size() != limits.size()) {
            throw Error(RATECELL_INVALID_LENGTH);
        }
        std::vector<ratecell_config> raw = detail::raw_configs(limits);
        ratecell_limiter *l = nullptr;
        detail::check(::ratecell_limiter_restore_multi(raw.data(), raw.size(), path.c_str(), &l));
        Limiter back(l);
        back.names_ = std::move(names);
        return back;
    }

    /// A keyed limiter serving tiers (free, paid, internal...), one config
    /// per tier (ratecell_limiter_new_tiered); each check names the key's
    /// tier (check_tier; check_batch_tier a tier per request,
    /// acquire_tier), and every call that names none is tier 0's, the
    /// default tier. A
    /// key whose tier changes keeps what it spent, read by its new tier's
    /// limits (docs/ALGORITHMS.md, "A quota per tier"). Throws Error with
    /// RATECELL_INVALID_LENGTH for 0 or more than RATECELL_MAX_TIERS tiers,
    /// or the status naming the field in which a tier may not differ.
    static Limiter tiered(const std::vector<Config> &tiers) {
        std::vector<ratecell_config> raw = detail::raw_configs(tiers);
        ratecell_limiter *l = nullptr;
        detail::check(::ratecell_limiter_new_tiered(raw.data(), raw.size(), &l));
        return Limiter(l);
    }

    /// Tiers of several limits each (ratecell_limiter_new_tiered_multi):
    /// every tier lists the same limits in the same order, with its own
    /// values; RATECELL_INVALID_LENGTH when they are not as many.
    static Limiter tiered(const std::vector<std::vector<Config>> &tiers) {
        std::size_t per_tier = 0;
        std::vector<ratecell_config> raw = detail::tier_configs(tiers, per_tier);
        ratecell_limiter *l = nullptr;
        detail::check(
            ::ratecell_limiter_new_tiered_multi(raw.data(), per_tier, tiers.size(), &l));
        return Limiter(l);
    }

    /// A tiered limiter (as tiered makes it) from the snapshot file at
    /// `path` (ratecell_limiter_restore_tiered): the snapshot must hold the
    /// same tiers of the same limits, else Error with
    /// RATECELL_SNAPSHOT_CONFIG_MISMATCH (also for a snapshot of a limiter
    /// made without tiers). restore(path) takes the tiers from the file.
    static Limiter restore_tiered(const std::vector<std::vector<Config>> &tiers,
                                  const std::string &path) {
        std::size_t per_tier = 0;
        std::vector<ratecell_config> raw = detail::tier_configs(tiers, per_tier);
        ratecell_limiter *l = nullptr;
        detail::check(::ratecell_limiter_restore_tiered(raw.data(), per_tier, tiers.size(),
                                                        path.c_str(), &l));
        return Limiter(l);
    }

    /// restore_tiered for tiers of one limit each.
    static Limiter restore_tiered(const std::vector<Config> &tiers, const std::string &path) {
        std::vector<ratecell_config> raw = detail::raw_configs(tiers);
        ratecell_limiter *l = nullptr;
        detail::check(
            ::ratecell_limiter_restore_tiered(raw.data(), 1, raw.size(), path.c_str(), &l));
        return Limiter(l);
    }

    /// How many tiers this limiter serves (1 when made without tiers).
    std::uint32_t tiers() const noexcept { return ::ratecell_limiter_tiers(handle_); }

    /// Decides a request of `cost` for `key` under tier `tier`'s limits,
    /// now. Throws Error(RATECELL_INVALID_TIER) when `tier` is not below
    /// tiers() (nothing is checked then).
    Decision check_tier(std::uint64_t key, std::uint32_t tier, std::uint64_t cost = 1) const {
        Decision d{};
        detail::check(::ratecell_check_tier(handle_, key, tier, cost, &d));
        return d;
    }

    /// check_tier at the caller's time (UNIX ns).
    Decision check_tier_at(std::uint64_t key, std::uint32_t tier, std::uint64_t cost,
                           std::uint64_t now_ns) const {
        Decision d{};
        detail::check(::ratecell_check_tier_at(handle_, key, tier, cost, now_ns, &d));
        return d;
    }

    /// check_tier for a byte-string key.
    Decision check_bytes_tier(std::string_view key, std::uint32_t tier,
                              std::uint64_t cost = 1) const {
        Decision d{};
        detail::check(
            ::ratecell_check_bytes_tier(handle_, bytes(key), key.size(), tier, cost, &d));
        return d;
    }

    /// check_bytes_tier at the caller's time (UNIX ns).
    Decision check_bytes_tier_at(std::string_view key, std::uint32_t tier, std::uint64_t cost,
                                 std::uint64_t now_ns) const {
        Decision d{};
        detail::check(::ratecell_check_bytes_tier_at(handle_, bytes(key), key.size(), tier,
                                                     cost, now_ns, &d));
        return d;
    }

    /// check_tier_at with each limit's own decision and the denying index.
    MultiDecision check_tier_each_at(std::uint64_t key, std::uint32_t tier, std::uint64_t cost,
                                     std::uint64_t now_ns) const {
        MultiDecision d{};
        detail::check(::ratecell_check_tier_each_at(handle_, key, tier, cost, now_ns, &d));
        return d;
    }

    /// check_batch with a tier per request: keys[i] under tier tiers[i]
    /// (ratecell_check_batch_tier). Every tier is checked first: one not
    /// below tiers() throws Error(RATECELL_INVALID_TIER), nothing decided.
    std::vector<Decision> check_batch_tier(const std::vector<std::uint64_t> &keys,
                                           const std::vector<std::uint32_t> &tiers,
                                           const std::vector<std::uint64_t> &costs = {}) const {
        return batch(keys, costs, nullptr, &tiers);
    }

    std::vector<Decision> check_batch_tier_at(const std::vector<std::uint64_t> &keys,
                                              const std::vector<std::uint32_t> &tiers,
                                              const std::vector<std::uint64_t> &costs,
                                              std::uint64_t now_ns) const {
        return batch(keys, costs, &now_ns, &tiers);
    }

    /// acquire under tier `tier`'s limits (ratecell_acquire_tier). Throws
    /// Error(RATECELL_INVALID_TIER) at once when `tier` is not below
    /// tiers().
    Decision acquire_tier(std::uint64_t key, std::uint32_t tier, std::uint64_t cost,
                          std::chrono::nanoseconds timeout) const {
        Decision d{};
        return acquired(::ratecell_acquire_tier(handle_, key, tier, cost, timeout_ns(timeout), &d),
                        d);
    }

    Decision acquire_bytes_tier(std::string_view key, std::uint32_t tier, std::uint64_t cost,
                                std::chrono::nanoseconds timeout) const {
        Decision d{};
        return acquired(::ratecell_acquire_bytes_tier(handle_, bytes(key), key.size(), tier, cost,
                                                      timeout_ns(timeout), &d),
                        d);
    }

    /// Saves a snapshot to `path` atomically (temporary file, fsync, rename).
    void save(const std::string &path) const {
        detail::check(::ratecell_snapshot_save(handle_, path.c_str()));
    }

    /// save, judging which states are live at the caller's time (UNIX ns).
    void save_at(const std::string &path, std::uint64_t now_ns) const {
        detail::check(::ratecell_snapshot_save_at(handle_, path.c_str(), now_ns));
    }

    /// Decides a request of `cost` for `key` now (cost 0: a peek).
    Decision check(std::uint64_t key, std::uint64_t cost = 1) const {
        Decision d{};
        detail::check(::ratecell_check(handle_, key, cost, &d));
        return d;
    }

    /// Decides at the caller's time (UNIX ns).
    Decision check_at(std::uint64_t key, std::uint64_t cost, std::uint64_t now_ns) const {
        Decision d{};
        detail::check(::ratecell_check_at(handle_, key, cost, now_ns, &d));
        return d;
    }

    /// Whether one request (cost 1) for `key` is admitted now: check(key).allowed
    /// without the rest of the Decision (a limiter of capacity 0 computes none
    /// of it).
    bool allow(std::uint64_t key) const {
        bool allowed = false;
        detail::check(::ratecell_allow(handle_, key, &allowed));
        return allowed;
    }

    /// allow at the caller's time (UNIX ns).
    bool allow_at(std::uint64_t key, std::uint64_t now_ns) const {
        bool allowed = false;
        detail::check(::ratecell_allow_at(handle_, key, now_ns, &allowed));
        return allowed;
    }

    /// Decides for a byte-string key (the u64 key k is its 8 LE bytes).
    Decision check_bytes(std::string_view key, std::uint64_t cost = 1) const {
        Decision d{};
        detail::check(::ratecell_check_bytes(handle_, bytes(key), key.size(), cost, &d));
        return d;
    }

    Decision check_bytes_at(std::string_view key, std::uint64_t cost,
                            std::uint64_t now_ns) const {
        Decision d{};
        detail::check(
            ::ratecell_check_bytes_at(handle_, bytes(key), key.size(), cost, now_ns, &d));
        return d;
    }

    /// Decides keys[i] (cost costs[i], or 1 each when `costs` is empty)
    /// with one clock read; returns every decision.
    std::vector<Decision> check_batch(const std::vector<std::uint64_t> &keys,
                                      const std::vector<std::uint64_t> &costs = {}) const {
        return batch(keys, costs, nullptr);
    }

    std::vector<Decision> check_batch_at(const std::vector<std::uint64_t> &keys,
                                         const std::vector<std::uint64_t> &costs,
                                         std::uint64_t now_ns) const {
        return batch(keys, costs, &now_ns);
    }

    /// Waits until admitted, for at most `timeout`. Returns the admitting
    /// decision, or, when it gives up (time-out, or a cost that can never
    /// be admitted: retry_after_ns == UINT64_MAX), the last denied one.
    Decision acquire(std::uint64_t key, std::uint64_t cost,
                     std::chrono::nanoseconds timeout) const {
        Decision d{};
        return acquired(::ratecell_acquire(handle_, key, cost, timeout_ns(timeout), &d), d);
    }

    Decision acquire_bytes(std::string_view key, std::uint64_t cost,
                           std::chrono::nanoseconds timeout) const {
        Decision d{};
        return acquired(::ratecell_acquire_bytes(handle_, bytes(key), key.size(), cost,
                                                 timeout_ns(timeout), &d),
                        d);
    }

    void reset_key(std::uint64_t key) const { detail::check(::ratecell_reset_key(handle_, key)); }

    void reset_bytes(std::string_view key) const {
        detail::check(::ratecell_reset_bytes(handle_, bytes(key), key.size()));
    }

    Stats stats() const {
        Stats s{};
        detail::check(::ratecell_stats(handle_, &s));
        return s;
    }

    /// The limiter's clock, UNIX ns.
    std::uint64_t now_ns() const {
        if (handle_ == nullptr) {
            throw Error(RATECELL_NULL_ARGUMENT);
        }
        return ::ratecell_now_ns(handle_);
    }

    Config config() const {
        ratecell_config raw{};
        detail::check(::ratecell_limiter_config(handle_, &raw));
        return Config(raw);
    }

private:
    static const std::uint8_t *bytes(std::string_view key) noexcept {
        return reinterpret_cast<const std::uint8_t *>(key.data());
    }

    static std::uint64_t timeout_ns(std::chrono::nanoseconds timeout) noexcept {
        return timeout.count() < 0 ? 0 : static_cast<std::uint64_t>(timeout.count());
    }

    /// An acquire's decision: a give-up (time-out, or a cost never
    /// admitted) is a denied decision, any other failure an Error.
    static Decision acquired(ratecell_status s, const Decision &d) {
        if (s != RATECELL_TIMED_OUT && s != RATECELL_COST_EXCEEDS_LIMIT) {
            detail::check(s);
        }
        return d;
    }

    /// Every batch; `tiers` null is the untiered one.
    std::vector<Decision> batch(const std::vector<std::uint64_t> &keys,
                                const std::vector<std::uint64_t> &costs,
                                const std::uint64_t *now_ns,
                                const std::vector<std::uint32_t> *tiers = nullptr) const {
        if (tiers != nullptr && tiers->size() != keys.size()) {
            throw Error(RATECELL_INVALID_LENGTH,
                        "check_batch_tier: tiers.size() = " + std::to_string(tiers->size()) +
                            " != keys.size() = " + std::to_string(keys.size()));
        }
        if (!costs.empty() && costs.size() != keys.size()) {
            throw Error(RATECELL_INVALID_LENGTH,
                        "check_batch: costs.size() = " + std::to_string(costs.size()) +
                            " != keys.size() = " + std::to_string(keys.size()));
        }
        std::vector<Decision> decisions;
        std::vector<std::uint8_t> allowed;
        try {
            decisions.resize(keys.size());
            allowed.resize(keys.size());
        } catch (const std::bad_alloc &) {
            throw Error(RATECELL_OUT_OF_MEMORY);
        } catch (const std::length_error &) {
            throw Error(RATECELL_INVALID_LENGTH);
        }
        const std::uint64_t *c = costs.empty() ? nullptr : costs.data();
        if (tiers != nullptr) {
            detail::check(
                now_ns != nullptr
                    ? ::ratecell_check_batch_tier_at(handle_, keys.data(), tiers->data(), c,
                                                     keys.size(), *now_ns, allowed.data(),
                                                     decisions.data())
                    : ::ratecell_check_batch_tier(handle_, keys.data(), tiers->data(), c,
                                                  keys.size(), allowed.data(), decisions.data()));
            return decisions;
        }
        detail::check(now_ns != nullptr
                          ? ::ratecell_check_batch_at(handle_, keys.data(), c, keys.size(),
                                                      *now_ns, allowed.data(), decisions.data())
                          : ::ratecell_check_batch(handle_, keys.data(), c, keys.size(),
                                                   allowed.data(), decisions.data()));
        return decisions;
    }

    explicit Limiter(ratecell_limiter *adopted) noexcept : handle_(adopted) {}

    ratecell_limiter *handle_ = nullptr;
    // The names of several limits, as given (empty when none were).
    std::vector<std::string> names_;
};

/// A limiter saved to a file every period by a background thread, and
/// restored from it (if it exists) when made: crash-safe limits in one
/// line. Move-only. Closing (or destroying) stops the thread and saves a
/// last time; close() reports that save's failure by throwing.
class Persisted {
public:
    /// Throws Error (RATECELL_SNAPSHOT_* for a file that exists but cannot
    /// be restored, RATECELL_INVALID_* for the configuration).
    Persisted(const Config &config, const std::string &path, std::chrono::nanoseconds every) {
        detail::check(::ratecell_persisted_open(&config.raw(), path.c_str(), nanos(every),
                                                &handle_));
    }

    /// Several limits checked as one (ratecell_persisted_open_multi): a file
    /// saved with other limits, or another number of them, throws
    /// Error(RATECELL_SNAPSHOT_CONFIG_MISMATCH).
    Persisted(const std::vector<Config> &limits, const std::string &path,
              std::chrono::nanoseconds every) {
        std::vector<ratecell_config> raw = detail::raw_configs(limits);
        detail::check(::ratecell_persisted_open_multi(raw.data(), raw.size(), path.c_str(),
                                                      nanos(every), &handle_));
    }

    /// A tiered limiter (Limiter::tiered), one config per tier, saved every
    /// period with every tier (ratecell_persisted_open_tiered): restored
    /// from `path` if the file exists, else made fresh. A file of other
    /// tiers, another number of them, or of a limiter made without tiers
    /// throws Error(RATECELL_SNAPSHOT_CONFIG_MISMATCH). Check it with
    /// check_tier*; the calls that name no tier are tier 0's.
    static Persisted tiered(const std::vector<Config> &tiers, const std::string &path,
                            std::chrono::nanoseconds every) {
        std::vector<ratecell_config> raw = detail::raw_configs(tiers);
        ratecell_persisted *p = nullptr;
        detail::check(::ratecell_persisted_open_tiered(raw.data(), 1, raw.size(), path.c_str(),
                                                       nanos(every), &p));
        return Persisted(p);
    }

    /// Tiers of several limits each (Limiter::tiered of several): every
    /// tier lists the same limits in the same order, with its own values.
    static Persisted tiered(const std::vector<std::vector<Config>> &tiers,
                            const std::string &path, std::chrono::nanoseconds every) {
        std::size_t per_tier = 0;
        std::vector<ratecell_config> raw = detail::tier_configs(tiers, per_tier);
        ratecell_persisted *p = nullptr;
        detail::check(::ratecell_persisted_open_tiered(raw.data(), per_tier, tiers.size(),
                                                       path.c_str(), nanos(every), &p));
        return Persisted(p);
    }

    ~Persisted() { ::ratecell_persisted_close(handle_); }

    Persisted(const Persisted &) = delete;
    Persisted &operator=(const Persisted &) = delete;
    Persisted(Persisted &&other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
    Persisted &operator=(Persisted &&other) noexcept {
        if (this != &other) {
            ::ratecell_persisted_close(handle_);
            handle_ = std::exchange(other.handle_, nullptr);
        }
        return *this;
    }

    /// The limiter's C handle, owned by this object (valid until close).
    const ratecell_limiter *get() const {
        const ratecell_limiter *l = nullptr;
        detail::check(::ratecell_persisted_limiter(handle_, &l));
        return l;
    }

    /// Decides a request of `cost` for `key` now.
    Decision check(std::uint64_t key, std::uint64_t cost = 1) const {
        Decision d{};
        detail::check(::ratecell_check(get(), key, cost, &d));
        return d;
    }

    /// Decides at the caller's time (UNIX ns).
    Decision check_at(std::uint64_t key, std::uint64_t cost, std::uint64_t now_ns) const {
        Decision d{};
        detail::check(::ratecell_check_at(get(), key, cost, now_ns, &d));
        return d;
    }

    /// check with each limit's own decision and the denying index.
    MultiDecision check_each_at(std::uint64_t key, std::uint64_t cost,
                                std::uint64_t now_ns) const {
        MultiDecision d{};
        detail::check(::ratecell_check_each_at(get(), key, cost, now_ns, &d));
        return d;
    }

    /// How many tiers the limiter serves (1 when made without tiers).
    std::uint32_t tiers() const { return ::ratecell_limiter_tiers(get()); }

    /// Decides a request of `cost` for `key` under tier `tier`'s limits,
    /// now. Throws Error(RATECELL_INVALID_TIER) when `tier` is not below
    /// tiers().
    Decision check_tier(std::uint64_t key, std::uint32_t tier, std::uint64_t cost = 1) const {
        Decision d{};
        detail::check(::ratecell_check_tier(get(), key, tier, cost, &d));
        return d;
    }

    /// check_tier at the caller's time (UNIX ns).
    Decision check_tier_at(std::uint64_t key, std::uint32_t tier, std::uint64_t cost,
                           std::uint64_t now_ns) const {
        Decision d{};
        detail::check(::ratecell_check_tier_at(get(), key, tier, cost, now_ns, &d));
        return d;
    }

    /// check_tier_at with each limit's own decision and the denying index.
    MultiDecision check_tier_each_at(std::uint64_t key, std::uint32_t tier, std::uint64_t cost,
                                     std::uint64_t now_ns) const {
        MultiDecision d{};
        detail::check(::ratecell_check_tier_each_at(get(), key, tier, cost, now_ns, &d));
        return d;
    }

    /// Saves now, in the calling thread.
    void save() const { detail::check(::ratecell_persisted_save(handle_)); }

    /// Stops the saving thread and saves a last time; throws if that save
    /// failed. The object is empty afterwards.
    void close() { detail::check(::ratecell_persisted_close(std::exchange(handle_, nullptr))); }

private:
    explicit Persisted(ratecell_persisted *adopted) noexcept : handle_(adopted) {}

    static std::uint64_t nanos(std::chrono::nanoseconds every) {
        return every.count() < 0 ? 0 : static_cast<std::uint64_t>(every.count());
    }

    ratecell_persisted *handle_ = nullptr;
};

}  // namespace ratecell

#endif  // RATECELL_HPP
