//! The client's address as a key: the peer, or behind trusted proxies the
//! right-most untrusted address of `X-Forwarded-For` or `Forwarded`, grouped
//! by prefix (IPv6 clients by /64: one host holds a whole /64). Owns CIDR
//! parsing and both headers' address lists; knows nothing about limiters.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use http::HeaderMap;
use http::header::{FORWARDED, HeaderName};

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// An address range (`10.0.0.0/8`, `fd00::/8`, or one address, `/32` or
/// `/128` implied).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

/// A string that is not an address or an `address/prefix` range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidCidr {
    /// The string as given.
    pub cidr: String,
}

impl fmt::Display for InvalidCidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid address range {:?}: give an IP address or address/prefix (10.0.0.0/8, fd00::/8)",
            self.cidr
        )
    }
}

impl std::error::Error for InvalidCidr {}

impl FromStr for Cidr {
    type Err = InvalidCidr;

    fn from_str(s: &str) -> Result<Cidr, InvalidCidr> {
        let bad = || InvalidCidr { cidr: s.to_owned() };
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p.parse::<u8>().ok().filter(|p| *p <= max).ok_or_else(bad)?,
            None => max,
        };
        Ok(Cidr { addr, prefix })
    }
}

impl Cidr {
    /// Whether `ip` is in the range (an IPv4-mapped IPv6 address counts as
    /// its IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, canonical(ip)) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                mask_u32(u32::from(net), self.prefix) == mask_u32(u32::from(ip), self.prefix)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                mask_u128(u128::from(net), self.prefix) == mask_u128(u128::from(ip), self.prefix)
            }
            _ => false,
        }
    }
}

fn mask_u32(v: u32, prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        v & (u32::MAX << (32 - u32::from(prefix.min(32))))
    }
}

fn mask_u128(v: u128, prefix: u8) -> u128 {
    if prefix == 0 {
        0
    } else {
        v & (u128::MAX << (128 - u32::from(prefix.min(128))))
    }
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// Which proxies' word about the client is taken.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum TrustedProxies {
    /// None: the key is the peer's address and forwarding headers are
    /// ignored (any client can send them). The default.
    #[default]
    None,
    /// Peers in these ranges are proxies. When the peer is one, the
    /// header's addresses are read from the right, skipping those in the
    /// ranges; the first one outside them is the client.
    Cidrs(Vec<Cidr>),
    /// This many proxies stand in front of the server, each appending the
    /// address it saw: the client is the header's `n`-th address from the
    /// right. A header with fewer addresses (a request that did not come
    /// through every proxy) is keyed by the peer.
    Hops(usize),
}

/// The header that trusted proxies append the client's address to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (de facto; nginx's
    /// `$proxy_add_x_forwarded_for`, most load balancers). The default.
    #[default]
    XForwardedFor,
    /// `Forwarded: for=client, for=proxy1` (RFC 7239).
    Forwarded,
}

/// How the client's address is found and grouped into a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ClientIp {
    pub(crate) trusted: TrustedProxies,
    pub(crate) header: ForwardedHeader,
    pub(crate) v4_prefix: u8,
    pub(crate) v6_prefix: u8,
}

impl Default for ClientIp {
    fn default() -> ClientIp {
        ClientIp {
            trusted: TrustedProxies::None,
            header: ForwardedHeader::XForwardedFor,
            v4_prefix: 32,
            v6_prefix: 64,
        }
    }
}

/// One address of a forwarding header, without port or brackets; `None`
/// when it is not an IP address (RFC 7239's `unknown`, `_hidden`).
fn parse_node(s: &str) -> Option<IpAddr> {
    let s = s.trim().trim_matches('"');
    if let Ok(ip) = s.parse() {
        return Some(ip);
    }
    if let Some(rest) = s.strip_prefix('[') {
        // [v6] or [v6]:port
        return rest
            .split_once(']')?
            .0
            .parse::<Ipv6Addr>()
            .ok()
            .map(IpAddr::V6);
    }
    // v4:port
    let (host, _port) = s.rsplit_once(':')?;
    host.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
}

/// The header's addresses, in order, left (farthest) to right (nearest):
/// every field line, each split at commas. `None` for an entry that is not
/// an address.
fn forwarded_for(headers: &HeaderMap, which: ForwardedHeader) -> Vec<Option<IpAddr>> {
    let mut out = Vec::new();
    let name = match which {
        ForwardedHeader::XForwardedFor => X_FORWARDED_FOR,
        ForwardedHeader::Forwarded => FORWARDED,
    };
    for value in headers.get_all(name) {
        let Ok(value) = value.to_str() else {
            out.push(None);
            continue;
        };
        for element in value.split(',') {
            match which {
                ForwardedHeader::XForwardedFor => out.push(parse_node(element)),
                ForwardedHeader::Forwarded => {
                    let node = element.split(';').find_map(|pair| {
                        let (k, v) = pair.split_once('=')?;
                        k.trim().eq_ignore_ascii_case("for").then_some(v)
                    });
                    out.push(node.and_then(parse_node));
                }
            }
        }
    }
    out
}

/// The client's address of a request from `peer` with `headers`: the
/// peer's, unless `trusted` says the peer is a proxy whose `header` names
/// the client (the rule of [`TrustedProxies`]). The HTTP layer keys by it;
/// ratecell-server's forward-auth endpoint uses it for its descriptors.
pub fn client_address(
    peer: IpAddr,
    headers: &HeaderMap,
    trusted: &TrustedProxies,
    header: ForwardedHeader,
) -> IpAddr {
    match trusted {
        TrustedProxies::None => peer,
        TrustedProxies::Hops(n) => {
            let list = forwarded_for(headers, header);
            match list.len().checked_sub(*n) {
                // The proxy n hops away wrote what it saw; not an
                // address there: the nearest that is.
                Some(i) if *n > 0 => list[i]
                    .or_else(|| list[i + 1..].iter().rev().flatten().next().copied())
                    .unwrap_or(peer),
                _ => peer,
            }
        }
        TrustedProxies::Cidrs(ranges) => {
            let trusted = |ip: IpAddr| ranges.iter().any(|r| r.contains(ip));
            if !trusted(peer) {
                return peer;
            }
            // From the right: each trusted hop vouches for the one to
            // its left; the first untrusted one is the client. An entry
            // that is not an address ends the walk at the last
            // address a trusted proxy reported.
            let mut client = peer;
            for node in forwarded_for(headers, header).into_iter().rev() {
                match node {
                    Some(ip) => {
                        client = ip;
                        if !trusted(ip) {
                            break;
                        }
                    }
                    None => break,
                }
            }
            client
        }
    }
}

impl ClientIp {
    /// The client's address: the peer's unless it is a trusted proxy.
    pub(crate) fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        client_address(peer, headers, &self.trusted, self.header)
    }

    /// `ip`'s key: its address bits under the prefix of its family (4
    /// bytes for IPv4, 16 for IPv6, so the two never collide).
    pub(crate) fn key(&self, ip: IpAddr) -> Vec<u8> {
        match canonical(ip) {
            IpAddr::V4(v4) => mask_u32(u32::from(v4), self.v4_prefix)
                .to_be_bytes()
                .to_vec(),
            IpAddr::V6(v6) => mask_u128(u128::from(v6), self.v6_prefix)
                .to_be_bytes()
                .to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn headers(name: &str, values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    fn cidrs(list: &[&str]) -> ClientIp {
        ClientIp {
            trusted: TrustedProxies::Cidrs(list.iter().map(|c| c.parse().unwrap()).collect()),
            ..ClientIp::default()
        }
    }

    #[test]
    fn cidrs_parse_and_contain() {
        let c: Cidr = "10.0.0.0/8".parse().unwrap();
        assert!(c.contains(ip("10.1.2.3")));
        assert!(c.contains(ip("::ffff:10.1.2.3")), "IPv4-mapped");
        assert!(!c.contains(ip("11.0.0.1")));
        let one: Cidr = "::1".parse().unwrap();
        assert!(one.contains(ip("::1")) && !one.contains(ip("::2")));
        for bad in ["10.0.0.0/33", "fd00::/129", "proxy", "10.0.0.0/", "/8"] {
            let err = bad.parse::<Cidr>().unwrap_err();
            assert!(err.to_string().contains(bad), "{err}");
        }
    }

    #[test]
    fn without_trusted_proxies_the_headers_are_ignored() {
        let h = headers("x-forwarded-for", &["1.2.3.4"]);
        assert_eq!(ClientIp::default().client(ip("9.9.9.9"), &h), ip("9.9.9.9"));
    }

    #[test]
    fn the_right_most_untrusted_address_is_the_client() {
        let c = cidrs(&["10.0.0.0/8"]);
        // The client spoofed 6.6.6.6; the edge proxy appended what it saw.
        let h = headers("x-forwarded-for", &["6.6.6.6, 1.2.3.4", "10.0.0.2"]);
        assert_eq!(c.client(ip("10.0.0.1"), &h), ip("1.2.3.4"));
        // An untrusted peer's headers are not read.
        assert_eq!(c.client(ip("5.5.5.5"), &h), ip("5.5.5.5"));
        // Every hop trusted: the left-most.
        let h = headers("x-forwarded-for", &["10.0.0.3"]);
        assert_eq!(c.client(ip("10.0.0.1"), &h), ip("10.0.0.3"));
        // No header: the peer.
        assert_eq!(c.client(ip("10.0.0.1"), &HeaderMap::new()), ip("10.0.0.1"));
        // Garbage where an address should be: the last reported address.
        let h = headers("x-forwarded-for", &["1.2.3.4, garbage, 10.0.0.2"]);
        assert_eq!(c.client(ip("10.0.0.1"), &h), ip("10.0.0.2"));
    }

    #[test]
    fn forwarded_for_with_ports_brackets_and_quotes() {
        let c = ClientIp {
            header: ForwardedHeader::Forwarded,
            ..cidrs(&["10.0.0.0/8"])
        };
        let h = headers(
            "forwarded",
            &["for=6.6.6.6, for=\"[2001:db8::1]:4711\";proto=https, For=10.0.0.2:80"],
        );
        assert_eq!(c.client(ip("10.0.0.1"), &h), ip("2001:db8::1"));
        let h = headers("forwarded", &["for=unknown, for=10.0.0.2"]);
        assert_eq!(c.client(ip("10.0.0.1"), &h), ip("10.0.0.2"));
    }

    #[test]
    fn hop_counts_take_the_nth_from_the_right() {
        let c = ClientIp {
            trusted: TrustedProxies::Hops(2),
            ..ClientIp::default()
        };
        let h = headers("x-forwarded-for", &["6.6.6.6, 1.2.3.4, 10.0.0.2"]);
        assert_eq!(c.client(ip("10.0.0.1"), &h), ip("1.2.3.4"));
        let short = headers("x-forwarded-for", &["1.2.3.4"]);
        assert_eq!(c.client(ip("10.0.0.1"), &short), ip("10.0.0.1"));
    }

    #[test]
    fn ipv6_clients_are_grouped_by_prefix() {
        let c = ClientIp::default();
        assert_eq!(
            c.key(ip("2001:db8:1:2:aaaa::1")),
            c.key(ip("2001:db8:1:2:bbbb::9"))
        );
        assert_ne!(c.key(ip("2001:db8:1:2::1")), c.key(ip("2001:db8:1:3::1")));
        assert_eq!(c.key(ip("1.2.3.4")), vec![1, 2, 3, 4]);
        assert_eq!(c.key(ip("::ffff:1.2.3.4")), vec![1, 2, 3, 4]);
        let wide = ClientIp {
            v4_prefix: 24,
            v6_prefix: 48,
            ..ClientIp::default()
        };
        assert_eq!(wide.key(ip("1.2.3.4")), vec![1, 2, 3, 0]);
        assert_eq!(
            wide.key(ip("2001:db8:1:2::1")),
            wide.key(ip("2001:db8:1:ffff::1"))
        );
    }
}
