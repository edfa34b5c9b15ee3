//! Which address a request came from, for the per-IP sign-in back-off
//! (`login::Backoff::PER_IP`), when the console sits behind reverse proxies.
//!
//! A proxy header such as `X-Forwarded-For` is a list each hop appends to:
//! nginx's `$proxy_add_x_forwarded_for` and the cloud load balancers add the
//! address of whoever connected to them at the right. Everything left of
//! the entries our own proxies wrote was written by the client, so the
//! left-most entry is whatever the client wants it to be. The rule here:
//!
//! - the header counts only when the TCP peer is one of the operator's
//!   trusted proxies (`auth.trusted_proxies`); from anyone else it is
//!   ignored and the peer is the client;
//! - then the client is the right-most entry that is not a trusted proxy
//!   (walking right to left over our own hops); when every entry is a
//!   trusted proxy, the left-most one; an entry that is not an address
//!   (our proxies never write one) stops the walk at the last trusted hop.

use std::net::IpAddr;

/// An address block, `10.0.0.0/8` or `2001:db8::/32` (a bare address is a
/// block of one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Parses `addr/prefix` or a bare address; `None` when either part is
    /// wrong or the prefix is longer than the address.
    pub fn parse(s: &str) -> Option<Cidr> {
        let s = s.trim();
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let net: IpAddr = addr.parse().ok()?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) if p.bytes().all(|b| b.is_ascii_digit()) && !p.is_empty() => p.parse().ok()?,
            Some(_) => return None,
            None => max,
        };
        (prefix <= max).then_some(Cidr { net, prefix })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        // An IPv4 peer may arrive as an IPv4-mapped IPv6 address.
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.net, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// The operator's reverse proxies (`auth.trusted_proxies`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<Cidr>);

impl TrustedProxies {
    /// Every entry must parse; `Err` names the first that does not.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<TrustedProxies, String> {
        entries
            .iter()
            .map(|e| Cidr::parse(e.as_ref()).ok_or_else(|| e.as_ref().to_string()))
            .collect::<Result<Vec<_>, _>>()
            .map(TrustedProxies)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn trusts(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|c| c.contains(ip))
    }

    /// The client's address: `peer` is the TCP peer, `forwarded` the proxy
    /// header's entries in order (every line of it, joined by commas).
    pub fn client(&self, peer: Option<IpAddr>, forwarded: Option<&str>) -> Option<IpAddr> {
        let (Some(peer), Some(forwarded)) = (peer, forwarded) else {
            return peer;
        };
        if !self.trusts(peer) {
            return Some(peer);
        }
        let mut nearest = peer;
        for entry in forwarded.rsplit(',') {
            let entry = entry.trim();
            if entry.is_empty() {
                continue;
            }
            let Ok(ip) = entry.parse::<IpAddr>() else {
                return Some(nearest);
            };
            if !self.trusts(ip) {
                return Some(ip);
            }
            nearest = ip;
        }
        Some(nearest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn proxies(p: &[&str]) -> TrustedProxies {
        TrustedProxies::parse(p).unwrap()
    }

    #[test]
    fn blocks_parse_and_contain() {
        let c = Cidr::parse("10.0.0.0/8").unwrap();
        assert!(c.contains(ip("10.200.1.1")) && !c.contains(ip("11.0.0.1")));
        assert!(Cidr::parse("127.0.0.1").unwrap().contains(ip("127.0.0.1")));
        assert!(!Cidr::parse("127.0.0.1").unwrap().contains(ip("127.0.0.2")));
        assert!(Cidr::parse("0.0.0.0/0").unwrap().contains(ip("8.8.8.8")));
        assert!(Cidr::parse("2001:db8::/32")
            .unwrap()
            .contains(ip("2001:db8:1::5")));
        assert!(!Cidr::parse("2001:db8::/32")
            .unwrap()
            .contains(ip("10.0.0.1")));
        // An IPv4 peer seen on a dual-stack socket.
        assert!(c.contains(ip("::ffff:10.1.2.3")));
        for bad in [
            "10.0.0.0/33",
            "10.0.0/8",
            "x",
            "10.0.0.0/",
            "10.0.0.0/-1",
            "::/129",
        ] {
            assert!(Cidr::parse(bad).is_none(), "{bad}");
        }
        assert_eq!(
            TrustedProxies::parse(&["10.0.0.0/8", "nope"]),
            Err("nope".to_string())
        );
    }

    #[test]
    fn the_client_is_the_right_most_untrusted_hop() {
        let t = proxies(&["10.0.0.0/8", "127.0.0.1/32"]);
        let peer = Some(ip("10.0.0.5"));
        // The client wrote the left part; our load balancer appended its
        // real address, an inner proxy appended the balancer's.
        assert_eq!(
            t.client(peer, Some("1.2.3.4, 203.0.113.7, 10.0.0.9")),
            Some(ip("203.0.113.7"))
        );
        // Whatever the client puts on the left changes nothing.
        assert_eq!(
            t.client(peer, Some("9.9.9.9, 203.0.113.7")),
            t.client(peer, Some("8.8.8.8, 203.0.113.7"))
        );
        // No header from a trusted peer: the peer.
        assert_eq!(t.client(peer, None), peer);
        // Every hop ours: the left-most.
        assert_eq!(
            t.client(peer, Some("10.1.1.1, 10.2.2.2")),
            Some(ip("10.1.1.1"))
        );
        // Garbage where only our proxies write: the nearest trusted hop.
        assert_eq!(
            t.client(peer, Some("203.0.113.7, junk, 10.0.0.9")),
            Some(ip("10.0.0.9"))
        );
        assert_eq!(t.client(peer, Some(" , ")), peer);
        assert_eq!(t.client(None, Some("203.0.113.7")), None);
    }

    #[test]
    fn an_untrusted_peers_header_is_ignored() {
        let t = proxies(&["10.0.0.0/8"]);
        let peer = Some(ip("198.51.100.1"));
        assert_eq!(t.client(peer, Some("203.0.113.7")), peer);
        // No proxies configured: nobody's header counts.
        let none = TrustedProxies::default();
        assert!(none.is_empty());
        assert_eq!(none.client(peer, Some("203.0.113.7")), peer);
    }
}
