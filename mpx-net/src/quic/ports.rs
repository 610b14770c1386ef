//! The UDP ports a rank's sockets may take ([`PortRange`]), for ranks
//! behind a firewall that lets only some ports through.

use std::net::{IpAddr, SocketAddr, UdpSocket};

use mpx_core::{Error, ErrorKind, Result};

/// The UDP ports a socket may take: the first free one from `first` to
/// `last`, both included, or, as [`PortRange::ANY`] (`0:0`), any port the
/// system picks.
///
/// Written `first:last` (as MPICH's `MPICH_PORT_RANGE`), `first-last`, or
/// one port alone:
///
/// ```
/// use mpx_net::quic::PortRange;
/// assert_eq!("7000:7009".parse::<PortRange>()?, PortRange::new(7000, 7009)?);
/// assert_eq!("7100".parse::<PortRange>()?, PortRange::new(7100, 7100)?);
/// assert!("7009:7000".parse::<PortRange>().is_err(), "first after last");
/// assert!("70000".parse::<PortRange>().is_err(), "not a port");
/// // Two sockets from one range: the second takes the next free port.
/// let range = PortRange::new(46000, 46099)?;
/// let a = range.bind([127, 0, 0, 1].into())?;
/// let b = range.bind([127, 0, 0, 1].into())?;
/// assert!(range.contains(a.local_addr()?.port()) && range.contains(b.local_addr()?.port()));
/// assert_ne!(a.local_addr()?.port(), b.local_addr()?.port());
/// # Ok::<(), mpx_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    first: u16,
    last: u16,
}

impl PortRange {
    /// Any port the system picks.
    pub const ANY: PortRange = PortRange { first: 0, last: 0 };

    /// The ports from `first` to `last`, both included; `0:0` is
    /// [`PortRange::ANY`]. An error if `first` is after `last`, or 0 but
    /// `last` is not.
    pub fn new(first: u16, last: u16) -> Result<PortRange> {
        if first > last || (first == 0 && last != 0) {
            return Err(ErrorKind::InvalidArgument(format!("ports {first}:{last}: no such range")).into());
        }
        Ok(PortRange { first, last })
    }

    /// The first port of the range (0 for [`PortRange::ANY`]).
    pub fn first(&self) -> u16 {
        self.first
    }

    /// The last port of the range (0 for [`PortRange::ANY`]).
    pub fn last(&self) -> u16 {
        self.last
    }

    /// Whether `port` is one of the range's (any port is, for
    /// [`PortRange::ANY`]).
    pub fn contains(&self, port: u16) -> bool {
        *self == PortRange::ANY || (self.first..=self.last).contains(&port)
    }

    /// Binds a UDP socket on `ip` at the first port of the range that is
    /// free, with the buffers of [`bind`](super::bind); an error naming the
    /// range if none is.
    pub fn bind(&self, ip: IpAddr) -> Result<UdpSocket> {
        self.bind_excluding(ip, &[], None)
    }

    /// [`bind`](PortRange::bind), never at a port of `excluded` (the
    /// ports other ranks listen at, on this host maybe); `origin` names
    /// where the range came from, for the error.
    pub(crate) fn bind_excluding(&self, ip: IpAddr, excluded: &[u16], origin: Option<&str>) -> Result<UdpSocket> {
        if *self == PortRange::ANY {
            return super::bind(SocketAddr::new(ip, 0)).map_err(|e| Error::transport(format!("binding a UDP socket on {ip}"), e));
        }
        let mut last_error = None;
        for port in (self.first..=self.last).filter(|p| !excluded.contains(p)) {
            match super::bind(SocketAddr::new(ip, port)) {
                Ok(socket) => return Ok(socket),
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => last_error = Some(e),
                Err(e) => return Err(Error::transport(format!("binding a UDP socket on {ip} port {port}"), e)),
            }
        }
        let e = last_error.unwrap_or_else(|| std::io::Error::from(std::io::ErrorKind::AddrInUse));
        let origin = origin.map_or(String::new(), |o| format!(" ({o})"));
        Err(Error::transport(format!("binding a UDP socket on {ip}: every port of {self}{origin} is in use or another rank's"), e))
    }
}

impl Default for PortRange {
    fn default() -> PortRange {
        PortRange::ANY
    }
}

impl std::fmt::Display for PortRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.first, self.last)
    }
}

impl std::str::FromStr for PortRange {
    type Err = Error;

    fn from_str(s: &str) -> Result<PortRange> {
        let port = |p: &str| -> Result<u16> {
            let p = p.trim();
            // Digits only (`u16`'s parse takes a leading `+`).
            let digits = !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
            p.parse::<u16>().ok().filter(|_| digits).ok_or_else(|| ErrorKind::InvalidArgument(format!("ports {s:?}: {p:?} is no port")).into())
        };
        match s.split_once([':', '-']) {
            Some((first, last)) => PortRange::new(port(first)?, port(last)?),
            None => {
                let p = port(s)?;
                PortRange::new(p, p)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_in_every_form_and_refuse_what_is_no_range() {
        assert_eq!("7000:7009".parse::<PortRange>().unwrap(), PortRange { first: 7000, last: 7009 });
        assert_eq!(" 7000 - 7009 ".parse::<PortRange>().unwrap(), PortRange { first: 7000, last: 7009 });
        assert_eq!("7100".parse::<PortRange>().unwrap(), PortRange { first: 7100, last: 7100 });
        assert_eq!("0".parse::<PortRange>().unwrap(), PortRange::ANY);
        assert_eq!("0:0".parse::<PortRange>().unwrap().to_string(), "0:0");
        for bad in ["", "x", "7000:", ":7000", "7009:7000", "0:7000", "70000", "7000:70000", "-1", "+7000", "7000:+7009", "1:2:3"] {
            let e = bad.parse::<PortRange>().expect_err(bad);
            assert!(matches!(e.kind(), ErrorKind::InvalidArgument(_)), "{bad}: {e:?}");
        }
    }

    #[test]
    fn a_range_binds_its_first_free_port_and_says_when_none_is() {
        let ip: IpAddr = [127, 0, 0, 1].into();
        // Three free ports in a row: the first held, the second excluded.
        let (held, first) = loop {
            let held = UdpSocket::bind((ip, 0)).unwrap();
            let first = held.local_addr().unwrap().port();
            if first < u16::MAX - 2 && (1..3).all(|i| UdpSocket::bind((ip, first + i)).is_ok()) {
                break (held, first);
            }
        };
        let range = PortRange::new(first, first + 2).unwrap();
        assert_eq!((range.first(), range.last()), (first, first + 2));
        let taken = range.bind_excluding(ip, &[first + 1], None).unwrap();
        assert_eq!(taken.local_addr().unwrap().port(), first + 2, "the held port and the excluded one are skipped");
        let e = range.bind_excluding(ip, &[first + 1], Some("MPX_PORT_RANGE")).expect_err("every port is held or excluded");
        assert!(matches!(e.kind(), ErrorKind::Transport { .. }), "{e:?}");
        assert!(e.to_string().contains(&format!("every port of {range} (MPX_PORT_RANGE) is in use")), "{e}");
        let next = range.bind(ip).unwrap();
        assert_eq!(next.local_addr().unwrap().port(), first + 1, "bind excludes nothing");
        drop(held);
        let any = PortRange::ANY.bind(ip).unwrap();
        assert_ne!(any.local_addr().unwrap().port(), 0);
    }
}
