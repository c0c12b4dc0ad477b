// A C++17 program built against an installed ratecell with CMake's
// find_package(ratecell) and the ratecell.hpp wrapper. Run by
// scripts/install-tests.sh; prints "N passed, M failed".
#include <ratecell.hpp>

#include <cstdint>
#include <iostream>
#include <string>

namespace {
int passed = 0, failed = 0;

void expect(bool ok, const char *what) {
    if (ok) {
        ++passed;
    } else {
        ++failed;
        std::cerr << "FAILED: " << what << '\n';
    }
}
} // namespace

int main() {
    using namespace std::chrono_literals;
    constexpr std::uint64_t second = 1000000000u, t0 = 1700000000u * second;
    const std::string header_version = std::to_string(RATECELL_VERSION_MAJOR) + "." +
                                       std::to_string(RATECELL_VERSION_MINOR) + "." +
                                       std::to_string(RATECELL_VERSION_PATCH);
    expect(ratecell::version() == header_version, "the loaded library is the header's version");

    // Per key: 2 per second with a sliding log.
    ratecell::Limiter limiter(ratecell::Config(ratecell::Algorithm::SlidingLog, 2, 1s).capacity(100));
    int admitted = 0;
    for (int i = 0; i < 4; i++) {
        admitted += limiter.check("alice", ratecell::Request().at(t0)).allowed ? 1 : 0;
    }
    expect(admitted == 2, "2 of 4 admitted for one key at limit 2");
    expect(limiter.check("bob", ratecell::Request().at(t0)).allowed, "another key has its own limit");
    expect(limiter.check("alice", ratecell::Request().at(t0 + second)).allowed, "admitted a period later");

    bool threw = false;
    try {
        ratecell::Limiter bad(ratecell::Config(ratecell::Algorithm::Gcra, 0, 1s));
    } catch (const ratecell::Error &e) {
        threw = e.status() == RATECELL_INVALID_LIMIT;
    }
    expect(threw, "limit 0 throws ratecell::Error with RATECELL_INVALID_LIMIT");
    std::cout << passed << " passed, " << failed << " failed\n";
    return failed != 0;
}
