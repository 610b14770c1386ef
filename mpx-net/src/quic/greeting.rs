//! What the accepting side reads from a connecting peer before anything
//! reaches its endpoint, without I/O: the lane byte that leads each of the
//! peer's streams, then its hello. Everything in it is untrusted: the
//! connection is authenticated, but which rank it is comes from the hello,
//! and is checked against the certificate only after.

use bytes::BytesMut;
use mpx_core::proto::wire::{Decoder, Frame, Kind};
use mpx_core::{Error, Result};

use super::link::Lane;

/// The lane a stream's first byte names.
pub(crate) fn lane_of(byte: u8) -> Result<Lane> {
    match byte {
        0 => Ok(Lane::Control),
        1 => Ok(Lane::Bulk),
        other => Err(Error::Protocol(format!("a stream of unknown lane {other}"))),
    }
}

/// Reads a connecting peer's control stream (after its lane byte) up to
/// its hello: the first frame must be a hello from a rank that dials this
/// one (a higher rank of the world).
///
/// ```
/// use mpx_core::proto::engine::{Config, Engine};
/// use mpx_net::quic::Greeting;
/// // Rank 2 of 3 says hello to rank 0.
/// let mut two = Engine::new(2, 3, Config::default())?;
/// let hello = std::iter::from_fn(|| two.poll_writable().and_then(|d| two.poll_transmit(d).map(|f| (d, f))))
///     .find(|(dest, _)| *dest == 0).unwrap().1;
/// let mut bytes = hello.encode_header().to_vec();
/// bytes.extend_from_slice(&hello.payload);
/// let mut greeting = Greeting::new(0, 3, Config::default().max_payload());
/// assert!(greeting.push(&bytes[..10])?.is_none());
/// assert_eq!(greeting.push(&bytes[10..])?.unwrap().header.source, 2);
/// // Rank 2, the highest, is dialled by nobody: it refuses the same hello.
/// assert!(Greeting::new(2, 3, 4096).push(&bytes).is_err());
/// # Ok::<(), mpx_core::Error>(())
/// ```
pub struct Greeting {
    me: u32,
    size: u32,
    decoder: Decoder,
    buf: BytesMut,
}

impl Greeting {
    /// The greeting of a peer connecting to rank `me` of `size`, whose
    /// frames carry at most `max_payload` bytes.
    pub fn new(me: u32, size: u32, max_payload: usize) -> Greeting {
        Greeting { me, size, decoder: Decoder::new(max_payload), buf: BytesMut::new() }
    }

    /// Takes the next bytes of the control stream: the hello once it is
    /// whole (what follows it stays for [`into_rest`](Greeting::into_rest)),
    /// `None` while it is not, or why the peer is refused.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Option<Frame>> {
        self.buf.extend_from_slice(bytes);
        let Some(frame) = self.decoder.decode(&mut self.buf)? else { return Ok(None) };
        let claimed = frame.header.source;
        if frame.header.kind != Kind::Hello {
            return Err(Error::Protocol(format!("a connecting peer's first frame is a {:?}, not a hello", frame.header.kind)));
        }
        if claimed <= self.me || claimed >= self.size {
            return Err(Error::Protocol(format!(
                "a connecting peer claims rank {claimed}: rank {} of {} is dialled by higher ranks only",
                self.me, self.size
            )));
        }
        Ok(Some(frame))
    }

    /// The bytes that followed the hello.
    pub fn into_rest(self) -> BytesMut {
        self.buf
    }
}
