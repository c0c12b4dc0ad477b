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
// - One request shape, as in C: every check takes a key (a std::uint64_t,
//   or bytes as a std::string_view) and a ratecell::Request saying its
//   cost, time and tier, defaults included:
//
//       l.check(user);                                   // cost 1, now, tier 0
//       l.check("alice", Request().cost(3).at(t).tier(1));
//       l.check_each(user, Request().at(t));
//       l.check_batch(keys, Batch().costs(costs).at(t));
//       l.acquire(user, 50ms, Request().cost(2));
//       l.reset(user);
//
//   and one constructor per kind of limiter: Limiter(config), or
//   Limiter(Options()...) for several limits, tiers or a shared region.
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
/// A duration as the C ABI takes it: nanoseconds, a negative one 0.
inline std::uint64_t nanos(std::chrono::nanoseconds d) noexcept {
    return d.count() < 0 ? 0 : static_cast<std::uint64_t>(d.count());
}

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

/// `at` of a request decided at the limiter's own clock (the default).
inline constexpr std::uint64_t now = RATECELL_NOW;

/// What one request asks for besides its key: its cost (1), its time
/// (now: the limiter's clock) and its tier (0). Setters chain:
/// `Request().cost(3).at(t).tier(1)`. Plain data, cheap to copy.
class Request {
public:
    constexpr Request() noexcept = default;

    /// Units asked for; 0 is a peek (nothing is stored).
    constexpr Request &cost(std::uint64_t units) noexcept {
        cost_ = units;
        return *this;
    }
    /// The time, UNIX ns from the caller's clock (ratecell::now: the
    /// limiter's). Ignored by acquire, which waits on the limiter's clock.
    constexpr Request &at(std::uint64_t unix_ns) noexcept {
        at_ns_ = unix_ns;
        return *this;
    }
    /// The tier, below Limiter::tiers(); 0 on a limiter without tiers.
    constexpr Request &tier(std::uint32_t tier) noexcept {
        tier_ = tier;
        return *this;
    }

    constexpr std::uint64_t cost() const noexcept { return cost_; }
    constexpr std::uint64_t at() const noexcept { return at_ns_; }
    constexpr std::uint32_t tier() const noexcept { return tier_; }

private:
    std::uint64_t cost_ = 1;
    std::uint64_t at_ns_ = RATECELL_NOW;
    std::uint32_t tier_ = 0;
};

/// What a batch asks for besides its keys: a cost per key (1 each when
/// none), a tier per key (tier 0 each when none), and the one time of
/// every request (now). Setters chain: `Batch().costs(c).tiers(t).at(t0)`.
class Batch {
public:
    Batch() = default;

    Batch &costs(std::vector<std::uint64_t> costs) {
        costs_ = std::move(costs);
        return *this;
    }
    Batch &tiers(std::vector<std::uint32_t> tiers) {
        tiers_ = std::move(tiers);
        return *this;
    }
    Batch &at(std::uint64_t unix_ns) noexcept {
        at_ns_ = unix_ns;
        return *this;
    }

    const std::vector<std::uint64_t> &costs() const noexcept { return costs_; }
    const std::vector<std::uint32_t> &tiers() const noexcept { return tiers_; }
    std::uint64_t at() const noexcept { return at_ns_; }

private:
    std::vector<std::uint64_t> costs_;
    std::vector<std::uint32_t> tiers_;
    std::uint64_t at_ns_ = RATECELL_NOW;
};

/// What Limiter(Options) makes (ratecell_limiter_build): several limits
/// checked as one, tiers, and where the states come from (fresh unless
/// set: a snapshot file, a persisted file, a shared region; the last set
/// wins). Setters chain:
///
///     Limiter(Options().limit(per_second).limit(per_minute).names({"s", "m"}));
///     Limiter(Options().tier({free}).tier({paid}));
///     Limiter(Options().limit(cfg).snapshot("limits.snap"));
///     Limiter(Options().limit(cfg).persisted("limits.snap", 5s));
///     Limiter(Options().limit(cfg).shared("api", 0600));
class Options {
public:
    Options() = default;

    /// Adds a limit (limits without tiers): a request is admitted only
    /// when every limit admits it.
    Options &limit(const Config &config) {
        limits_.push_back(config);
        return *this;
    }
    /// Sets every limit at once.
    Options &limits(std::vector<Config> limits) {
        limits_ = std::move(limits);
        return *this;
    }
    /// Adds a tier: its limits, the same limits in the same order as every
    /// other tier's, with its own values. Tier i is the i-th added.
    Options &tier(std::vector<Config> limits) {
        tiers_.push_back(std::move(limits));
        return *this;
    }
    /// One name per limit, kept for callers that report which limit
    /// denied (Limiter::limit_name).
    Options &names(std::vector<std::string> names) {
        names_ = std::move(names);
        return *this;
    }
    /// The states saved in the snapshot file `path` (RATECELL_STATES_SNAPSHOT):
    /// the same limits in the same order, or the same tiers of them, else
    /// Error(RATECELL_SNAPSHOT_CONFIG_MISMATCH); with no limit given, the
    /// file's own (trust the file as you would a Config).
    Options &snapshot(std::string path) {
        return states(RATECELL_STATES_SNAPSHOT, std::move(path), 0, "");
    }
    /// Restored from the snapshot file `path` if it exists, else fresh, and
    /// saved there every `every` by a background thread
    /// (RATECELL_STATES_PERSISTED); destroying the Limiter saves a last
    /// time (save(path) first to learn whether a save succeeds).
    Options &persisted(std::string path, std::chrono::nanoseconds every) {
        return states(RATECELL_STATES_PERSISTED, std::move(path), detail::nanos(every), "");
    }
    /// The table lies in the file `region` (a bare name under /dev/shm),
    /// created with `mode` by the first process and attached by the
    /// others: one limit across the processes of a machine
    /// (RATECELL_STATES_SHARED). A new region is filled from the snapshot
    /// file `seed` when it is given and exists.
    Options &shared(std::string region, std::uint32_t mode = 0600, std::string seed = "") {
        mode_ = mode;
        return states(RATECELL_STATES_SHARED, std::move(seed), 0, std::move(region));
    }

    const std::vector<Config> &limits() const noexcept { return limits_; }
    const std::vector<std::vector<Config>> &tiers() const noexcept { return tiers_; }
    const std::vector<std::string> &names() const noexcept { return names_; }
    ratecell_states states() const noexcept { return states_; }
    const std::string &path() const noexcept { return path_; }
    std::uint64_t save_every_ns() const noexcept { return every_ns_; }
    const std::string &shared_path() const noexcept { return shared_; }
    std::uint32_t shared_mode() const noexcept { return mode_; }

private:
    Options &states(ratecell_states states, std::string path, std::uint64_t every_ns,
                    std::string shared) {
        states_ = states;
        path_ = std::move(path);
        every_ns_ = every_ns;
        shared_ = std::move(shared);
        return *this;
    }

    std::vector<Config> limits_;
    std::vector<std::vector<Config>> tiers_;
    std::vector<std::string> names_;
    ratecell_states states_ = RATECELL_STATES_FRESH;
    std::string path_;
    std::uint64_t every_ns_ = 0;
    std::string shared_;
    std::uint32_t mode_ = 0600;
};

namespace detail {
/// `options` as ratecell_limiter_build takes them: the configs laid out
/// tier by tier and the struct pointing into them and into `options`,
/// which must outlive this. Throws Error(RATECELL_INVALID_LENGTH) for no
/// limit (unless the states are a snapshot's, which then gives them),
/// both limits and tiers, tiers of unequal lengths, or names not one per
/// limit.
class RawOptions {
public:
    explicit RawOptions(const Options &options) {
        const std::vector<std::vector<Config>> &tiers = options.tiers();
        if (!tiers.empty() && !options.limits().empty()) {
            throw Error(RATECELL_INVALID_LENGTH, "Options: both limits and tiers given");
        }
        std::size_t per_tier = 0;
        configs_ = tiers.empty() ? raw_configs(options.limits()) : tier_configs(tiers, per_tier);
        std::size_t n_limits = tiers.empty() ? configs_.size() : per_tier;
        if (!options.names().empty() && options.names().size() != n_limits) {
            throw Error(RATECELL_INVALID_LENGTH, "Options: names.size() = " +
                                                     std::to_string(options.names().size()) +
                                                     " != limits = " + std::to_string(n_limits));
        }
        bool from_file = options.states() == RATECELL_STATES_SNAPSHOT ||
                         options.states() == RATECELL_STATES_PERSISTED;
        if (n_limits == 0 && !from_file) {
            throw Error(RATECELL_INVALID_LENGTH, "Options: no limit");
        }
        ::ratecell_options_init(&raw_);
        raw_.configs = n_limits == 0 ? nullptr : configs_.data();
        raw_.n_limits = n_limits;
        raw_.n_tiers = tiers.size();
        raw_.states = options.states();
        if (!options.path().empty()) {
            raw_.path = options.path().c_str();
        }
        raw_.save_every_ns = options.save_every_ns();
        if (!options.shared_path().empty()) {
            raw_.shared_path = options.shared_path().c_str();
            raw_.shared_mode = options.shared_mode();
        }
    }

    // `raw_` points into `configs_`: neither copied nor moved.
    RawOptions(const RawOptions &) = delete;
    RawOptions &operator=(const RawOptions &) = delete;

    const ratecell_options *get() const noexcept { return &raw_; }

private:
    std::vector<ratecell_config> configs_;
    ratecell_options raw_{};
};

inline const std::uint8_t *bytes(std::string_view key) noexcept {
    return reinterpret_cast<const std::uint8_t *>(key.data());
}

/// The C request for a number key.
inline ratecell_request raw_request(std::uint64_t key, const Request &r) noexcept {
    ratecell_request c{};
    c.size = static_cast<std::uint32_t>(sizeof c);
    c.tier = r.tier();
    c.key_id = key;
    c.cost = r.cost();
    c.at_ns = r.at();
    return c;
}

/// The C request for a byte key (never NULL bytes: an empty key is a
/// key of its own, not the number key 0).
inline ratecell_request raw_request(std::string_view key, const Request &r) noexcept {
    ratecell_request c = raw_request(std::uint64_t{0}, r);
    c.key_bytes = key.data() != nullptr ? bytes(key) : bytes("");
    c.key_len = key.size();
    return c;
}

/// An acquire's decision: a give-up (time-out, or a cost never
/// admitted) is a denied decision, any other failure an Error.
inline Decision acquired(ratecell_status s, const Decision &d) {
    if (s != RATECELL_TIMED_OUT && s != RATECELL_COST_EXCEEDS_LIMIT) {
        check(s);
    }
    return d;
}

/// The calls that decide requests, shared by Limiter and Persisted:
/// `Derived::handle()` is the C limiter (NULL when there is none, which
/// every call reports as Error(RATECELL_NULL_ARGUMENT)).
template <typename Derived>
class Checks {
public:
    /// Decides one request for `key` (a number, or bytes: the number k is
    /// the same key as its 8 little-endian bytes). A denied request is a
    /// Decision with allowed == false; Error(RATECELL_INVALID_TIER) when
    /// the tier is not below tiers() (nothing is checked then).
    Decision check(std::uint64_t key, const Request &request = {}) const {
        ratecell_request r = raw_request(key, request);
        Decision d{};
        detail::check(::ratecell_check(handle(), &r, &d));
        return d;
    }
    Decision check(std::string_view key, const Request &request = {}) const {
        ratecell_request r = raw_request(key, request);
        Decision d{};
        detail::check(::ratecell_check(handle(), &r, &d));
        return d;
    }

    /// check with each limit's own decision and the denying limit's index.
    MultiDecision check_each(std::uint64_t key, const Request &request = {}) const {
        ratecell_request r = raw_request(key, request);
        MultiDecision d{};
        detail::check(::ratecell_check_each(handle(), &r, &d));
        return d;
    }
    MultiDecision check_each(std::string_view key, const Request &request = {}) const {
        ratecell_request r = raw_request(key, request);
        MultiDecision d{};
        detail::check(::ratecell_check_each(handle(), &r, &d));
        return d;
    }

    /// Decides keys[i] (cost batch.costs()[i], tier batch.tiers()[i]) in
    /// order with one clock read (or at batch.at()); returns every
    /// decision. Every tier is checked first: one not below tiers() throws
    /// Error(RATECELL_INVALID_TIER), nothing decided. Costs or tiers not
    /// as many as the keys throw Error(RATECELL_INVALID_LENGTH).
    std::vector<Decision> check_batch(const std::vector<std::uint64_t> &keys,
                                      const Batch &batch = {}) const {
        const std::vector<std::uint64_t> &costs = batch.costs();
        const std::vector<std::uint32_t> &tiers = batch.tiers();
        if (!costs.empty() && costs.size() != keys.size()) {
            throw Error(RATECELL_INVALID_LENGTH,
                        "check_batch: costs.size() = " + std::to_string(costs.size()) +
                            " != keys.size() = " + std::to_string(keys.size()));
        }
        if (!tiers.empty() && tiers.size() != keys.size()) {
            throw Error(RATECELL_INVALID_LENGTH,
                        "check_batch: tiers.size() = " + std::to_string(tiers.size()) +
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
        ratecell_batch b{};
        b.size = static_cast<std::uint32_t>(sizeof b);
        b.n = keys.size();
        b.keys = keys.data();
        b.costs = costs.empty() ? nullptr : costs.data();
        b.tiers = tiers.empty() ? nullptr : tiers.data();
        b.at_ns = batch.at();
        detail::check(::ratecell_check_batch(handle(), &b, allowed.data(), decisions.data()));
        return decisions;
    }

    /// Whether one request (cost 1, now, tier 0) for `key` is admitted:
    /// check(key).allowed without the rest of the Decision, the fastest
    /// call (a limiter of capacity 0 computes none of it).
    bool allow(std::uint64_t key) const {
        ratecell_status status = ::ratecell_allow(handle(), key);
        if (status == RATECELL_DENIED) {
            return false;
        }
        detail::check(status);
        return true;
    }

    /// Waits until the request is admitted, for at most `timeout`, on the
    /// limiter's clock (the request's time is not used). Returns the
    /// admitting decision, or, when it gives up (time-out, or a cost that
    /// can never be admitted: retry_after_ns == UINT64_MAX), the last
    /// denied one.
    Decision acquire(std::uint64_t key, std::chrono::nanoseconds timeout,
                     const Request &request = {}) const {
        ratecell_request r = raw_request(key, request);
        Decision d{};
        return acquired(::ratecell_acquire(handle(), &r, nanos(timeout), &d), d);
    }
    Decision acquire(std::string_view key, std::chrono::nanoseconds timeout,
                     const Request &request = {}) const {
        ratecell_request r = raw_request(key, request);
        Decision d{};
        return acquired(::ratecell_acquire(handle(), &r, nanos(timeout), &d), d);
    }

    /// Forgets the key's state: its next request is a fresh key's.
    void reset(std::uint64_t key) const {
        ratecell_request r = raw_request(key, Request());
        detail::check(::ratecell_reset(handle(), &r));
    }
    void reset(std::string_view key) const {
        ratecell_request r = raw_request(key, Request());
        detail::check(::ratecell_reset(handle(), &r));
    }

    /// How many tiers the limiter serves (1 when made without tiers; 0
    /// when there is no limiter).
    std::uint32_t tiers() const { return ::ratecell_limiter_tiers(handle()); }

private:
    const ratecell_limiter *handle() const {
        return static_cast<const Derived *>(this)->handle();
    }
};
}  // namespace detail

/// A rate limiter (ratecell_limiter), owned. Move-only.
class Limiter : public detail::Checks<Limiter> {
public:
    /// Throws Error with the RATECELL_INVALID_* status naming the field, or
    /// RATECELL_OUT_OF_MEMORY.
    explicit Limiter(const Config &config) {
        detail::check(::ratecell_limiter_new(&config.raw(), &handle_));
    }

    /// The limiter `options` describes (ratecell_limiter_build): several
    /// limits checked as one, tiers, its states from a snapshot, a
    /// persisted file or a shared region. Throws Error with the status
    /// naming the field (RATECELL_INVALID_LENGTH for no limit, more than
    /// RATECELL_MAX_LIMITS or RATECELL_MAX_TIERS, tiers of unequal lengths,
    /// both limit() and tier() given, or names not one per limit;
    /// RATECELL_SNAPSHOT_* for a snapshot that cannot be restored;
    /// RATECELL_SHARED_* when a shared region does not fit). Names are not
    /// saved in snapshots: a restored limiter has `options`' names.
    explicit Limiter(const Options &options) {
        detail::RawOptions raw(options);
        detail::check(::ratecell_limiter_build(raw.get(), &handle_));
        names_ = options.names();
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

    /// Saves a snapshot to `path` atomically (temporary file, fsync, rename).
    void save(const std::string &path) const {
        detail::check(::ratecell_snapshot_save(handle_, path.c_str()));
    }

    /// A persisted limiter (Options::persisted): stops its saving thread
    /// and saves a last time, throwing Error(RATECELL_SNAPSHOT_IO) if that
    /// save fails (ratecell_snapshot_stop); the limiter goes on checking,
    /// and its destructor saves nothing more. Nothing for other limiters.
    void stop_saving() const { detail::check(::ratecell_snapshot_stop(handle_)); }

    /// save, judging which states are live at the caller's time (UNIX ns).
    void save_at(const std::string &path, std::uint64_t now_ns) const {
        detail::check(::ratecell_snapshot_save_at(handle_, path.c_str(), now_ns));
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
    friend class detail::Checks<Limiter>;
    const ratecell_limiter *handle() const noexcept { return handle_; }

    explicit Limiter(ratecell_limiter *adopted) noexcept : handle_(adopted) {}

    ratecell_limiter *handle_ = nullptr;
    // The names of several limits, as given (empty when none were).
    std::vector<std::string> names_;
};


}  // namespace ratecell

#endif  // RATECELL_HPP
