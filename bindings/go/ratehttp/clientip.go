package ratehttp

// This file owns the client's address as a key: the peer, or behind trusted
// proxies the right-most untrusted address of X-Forwarded-For or Forwarded,
// grouped by prefix (IPv6 clients by /64: one host holds a whole /64). It
// knows nothing about limiters.

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// ClientIPOptions say how ClientIP finds the client's address and groups
// it into a key. The zero value keys by the peer's address (r.RemoteAddr),
// IPv4 by /32 and IPv6 by /64, and ignores forwarding headers (any client
// can send them).
type ClientIPOptions struct {
	// TrustedProxies are the proxies' address ranges. When the peer is in
	// one, the forwarding header is read from the right, skipping addresses
	// in the ranges; the first one outside them is the client.
	TrustedProxies []netip.Prefix
	// TrustedHops is the number of proxies in front of the server, each
	// appending the address it saw: the client is the header's
	// TrustedHops-th address from the right (a request with fewer is keyed
	// by its peer). For when the proxies' addresses are not known; every
	// request must come through them. Used when TrustedProxies is empty.
	TrustedHops int
	// Header is "X-Forwarded-For" (the default) or "Forwarded" (RFC 7239).
	Header string
	// IPv4Prefix and IPv6Prefix group addresses (0: 32 and 64). An IPv6
	// host is usually given a whole /64: keying by the full address would
	// give it 2^64 quotas.
	IPv4Prefix, IPv6Prefix int
}

// ClientIP returns the key function of o: the client's address under its
// family's prefix, as text ("192.0.2.1", "2001:db8::/64"); nil when the
// request has no peer address (a Unix socket, a handler called directly),
// which Middleware answers with 500: keying every such request on one key
// would share one quota among all clients. It returns an error naming a
// bad option.
func ClientIP(o ClientIPOptions) (func(*http.Request) []byte, error) {
	v4, v6 := o.IPv4Prefix, o.IPv6Prefix
	if v4 == 0 {
		v4 = 32
	}
	if v6 == 0 {
		v6 = 64
	}
	if v4 < 0 || v4 > 32 || v6 < 0 || v6 > 128 {
		return nil, fmt.Errorf("ratehttp: ClientIP: prefixes /%d and /%d: IPv4 takes 0..32, IPv6 0..128", v4, v6)
	}
	header := http.CanonicalHeaderKey(o.Header)
	switch header {
	case "":
		header = "X-Forwarded-For"
	case "X-Forwarded-For", "Forwarded":
	default:
		return nil, fmt.Errorf("ratehttp: ClientIP: header %q: give X-Forwarded-For or Forwarded", o.Header)
	}
	if o.TrustedHops < 0 {
		return nil, fmt.Errorf("ratehttp: ClientIP: TrustedHops %d is negative", o.TrustedHops)
	}
	for i, p := range o.TrustedProxies {
		if !p.IsValid() {
			return nil, fmt.Errorf("ratehttp: ClientIP: TrustedProxies[%d] is not a valid prefix", i)
		}
	}
	c := &clientIP{
		proxies: o.TrustedProxies, hops: o.TrustedHops, header: header,
		forwarded: header == "Forwarded", v4: v4, v6: v6,
	}
	return c.key, nil
}

type clientIP struct {
	proxies   []netip.Prefix
	hops      int
	header    string
	forwarded bool
	v4, v6    int
}

func (c *clientIP) trusted(a netip.Addr) bool {
	for _, p := range c.proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func peerHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func (c *clientIP) key(r *http.Request) []byte {
	host := peerHost(r)
	if len(c.proxies) == 0 && c.hops == 0 {
		// The common case: an IPv4 peer's own text, no parsing.
		if host != "" && host[0] >= '0' && host[0] <= '9' && strings.IndexByte(host, ':') < 0 && c.v4 == 32 {
			return []byte(host)
		}
	}
	peer, err := netip.ParseAddr(host)
	if err != nil {
		return nil
	}
	return c.format(c.client(peer.Unmap(), r.Header))
}

func (c *clientIP) format(a netip.Addr) []byte {
	a = a.Unmap()
	bits := c.v6
	if a.Is4() {
		bits = c.v4
		if bits == 32 {
			return []byte(a.String())
		}
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return []byte(a.String())
	}
	return []byte(p.String())
}

// client is the client's address: the peer's unless it is a trusted proxy.
func (c *clientIP) client(peer netip.Addr, h http.Header) netip.Addr {
	switch {
	case len(c.proxies) > 0:
		if !c.trusted(peer) {
			return peer
		}
		// From the right: each trusted hop vouches for the one to its left;
		// the first untrusted one is the client. An entry that is not an
		// address ends the walk at the last address a trusted proxy reported.
		list := c.list(h)
		client := peer
		for i := len(list) - 1; i >= 0; i-- {
			if !list[i].IsValid() {
				break
			}
			client = list[i]
			if !c.trusted(client) {
				break
			}
		}
		return client
	case c.hops > 0:
		list := c.list(h)
		i := len(list) - c.hops
		if i < 0 {
			return peer
		}
		for ; i < len(list); i++ {
			if list[i].IsValid() {
				return list[i]
			}
		}
		return peer
	}
	return peer
}

// list is the header's addresses, left (farthest) to right (nearest), over
// every field line; an invalid Addr for an entry that is not an address.
func (c *clientIP) list(h http.Header) []netip.Addr {
	var out []netip.Addr
	for _, line := range h[c.header] {
		for _, el := range strings.Split(line, ",") {
			node := el
			if c.forwarded {
				node = ""
				for _, pair := range strings.Split(el, ";") {
					k, v, ok := strings.Cut(pair, "=")
					if ok && strings.EqualFold(strings.TrimSpace(k), "for") {
						node = v
						break
					}
				}
			}
			out = append(out, parseNode(node))
		}
	}
	return out
}

// parseNode reads one forwarded address without port, brackets or quotes.
func parseNode(s string) netip.Addr {
	s = strings.Trim(strings.TrimSpace(s), `"`)
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap()
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap()
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return a.Unmap()
		}
	}
	return netip.Addr{}
}
