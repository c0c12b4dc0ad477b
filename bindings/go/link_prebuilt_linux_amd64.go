//go:build !ratecell_dev

package ratecell

// The prebuilt static library shipped in this module for linux/amd64
// (lib/linux_amd64/libratecell.a, built from the Rust source by
// scripts/go-prebuilt.sh and checked against include/ratecell.h by
// scripts/go-tests.sh), so that `go build` in a user's module needs no
// Rust toolchain. The system libraries are what Rust's standard library
// needs (`rustc --print native-static-libs`); -l:name is GNU ld's.

/*
#cgo LDFLAGS: -L${SRCDIR}/lib/linux_amd64 -l:libratecell.a -lgcc_s -lutil -lrt -lpthread -lm -ldl
*/
import "C"
