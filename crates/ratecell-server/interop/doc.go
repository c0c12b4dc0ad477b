// Package interop holds the tests that run ratecell-server and
// envoyproxy/ratelimit ("the incumbent") side by side on the same
// configuration and requests: conformance (conformance_test.go), a
// differential run (differential_test.go), nginx auth_request in front of
// the forward-auth endpoint (nginx_test.go) and leased replicas on one
// Redis (leased_test.go). The processes are started by package harness;
// scripts/server-tests.sh builds them all and runs the suite.
package interop
