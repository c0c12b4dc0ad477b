//go:build ratecell_dev

package ratecell

// With the build tag ratecell_dev: the library cargo builds in the
// repository's target directory (`cargo build --release -p
// ratecell-capi`), for contributors changing the Rust side and for
// platforms without a prebuilt library. scripts/go-tests.sh tests this way.

/*
#cgo LDFLAGS: -L${SRCDIR}/../../target/release -l:libratecell.a -lgcc_s -lutil -lrt -lpthread -lm -ldl

// A clear message instead of the linker's "cannot find -l:libratecell.a"
// when the library is not built yet. cgo compiles this preamble from the
// package directory, so the path is relative to it. Define
// RATECELL_SKIP_LIBRARY_CHECK (CGO_CFLAGS) when the library is elsewhere
// (CGO_LDFLAGS=-L<dir>, which comes first on the link path).
#if defined(__has_include) && !defined(RATECELL_SKIP_LIBRARY_CHECK)
#if !__has_include("../../target/release/libratecell.a")
#error "ratecell (-tags ratecell_dev): the static library is not built. From any directory, run: cargo build --release -p ratecell-capi --manifest-path <the ratecell checkout>/Cargo.toml (the checkout your go.mod's replace directive points into; it writes <checkout>/target/release/libratecell.a). If you build it elsewhere, set CGO_LDFLAGS=-L<that dir> and CGO_CFLAGS=-DRATECELL_SKIP_LIBRARY_CHECK"
#endif
#endif
*/
import "C"
