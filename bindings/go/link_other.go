//go:build !ratecell_dev && !(linux && amd64)

package ratecell

// No prebuilt library for this platform: the build stops here with what to
// do, instead of at the linker.

/*
#error "ratecell: no prebuilt library for this platform (only linux/amd64 ships one). Build it from the checkout your go.mod's replace directive points into, from any directory: cargo build --release -p ratecell-capi --manifest-path <the ratecell checkout>/Cargo.toml; then build your program with: go build -tags ratecell_dev"
*/
import "C"
