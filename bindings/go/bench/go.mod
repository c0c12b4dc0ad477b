// The benchmarks of the Go binding against the limiters Go services use
// today. A module of its own, so that their dependencies never reach the
// go.sum of a program that imports ratecell.
module github.com/ratecell/ratecell-go/bench

go 1.24.0

require (
	github.com/ratecell/ratecell-go v0.0.0
	go.uber.org/ratelimit v0.3.1
	golang.org/x/time v0.14.0
)

require github.com/benbjohnson/clock v1.3.0 // indirect

// The binding in this checkout, not a published version.
replace github.com/ratecell/ratecell-go => ../
