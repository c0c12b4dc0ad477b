module github.com/ratecell/ratecell-go

go 1.24.0

require (
	go.uber.org/ratelimit v0.3.1
	golang.org/x/time v0.14.0
)

require github.com/benbjohnson/clock v1.3.0 // indirect
