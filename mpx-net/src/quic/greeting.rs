//! What a rank reads from a peer's streams before anything reaches its
//! endpoint, without I/O: the head that leads each stream
//! ([`StreamHead`]), then, on an accepted connection, the peer's hello.
//! Everything in it is untrusted: the connection is authenticated, but
//! which rank it is comes from the hello (or a bulk connection's head),
//! and is checked against the certificate only after.

use bytes::BytesMut;
use mpx_core::proto::wire::{Decoder, Frame, Kind};
use mpx_core::{ErrorKind, Result};

/// What leads each stream, before its first frame: which lane the stream
/// carries, and what the peer must know to set up the rest.
///
/// A connection's control stream says where the sender's bulk socket
/// listens; when both ranks of a pair have one, the bulk streams travel
/// on a connection of their own between those sockets
/// ([`Options::bulk_connection`](super::Options::bulk_connection)),
/// each led by its sender's rank; otherwise they follow the control
/// streams on the same connection.
///
/// ```
/// use mpx_net::quic::StreamHead;
/// let head = StreamHead::Control { bulk_port: 40_000 };
/// let bytes = head.encode();
/// assert_eq!(StreamHead::len(bytes[0])?, bytes.len());
/// assert_eq!(StreamHead::decode(&bytes)?, head);
/// assert!(StreamHead::len(7).is_err(), "an unknown kind of stream");
/// # Ok::<(), mpx_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamHead {
    /// A connection's control stream, from a rank whose bulk socket has
    /// port `bulk_port` on the address of its control socket (0: it has
    /// none, and sends its bulk stream on this connection).
    Control {
        /// The port of the sender's bulk socket, or 0.
        bulk_port: u16,
    },
    /// A bulk stream on the same connection as its control stream.
    Bulk,
    /// The bulk stream of a connection between bulk sockets, from `rank`.
    BulkConnection {
        /// The rank that opened the stream (checked against its
        /// certificate).
        rank: u32,
    },
}

impl StreamHead {
    /// The longest head, in bytes.
    pub const MAX_LEN: usize = 5;

    /// The length of a head whose first byte is `first`, or why no stream
    /// starts so.
    pub fn len(first: u8) -> Result<usize> {
        match first {
            0 => Ok(3),
            1 => Ok(1),
            2 => Ok(5),
            other => Err(ErrorKind::Protocol(format!("a stream of unknown kind {other}")).into()),
        }
    }

    /// The head's bytes.
    pub fn encode(self) -> Vec<u8> {
        match self {
            StreamHead::Control { bulk_port } => [&[0u8][..], &bulk_port.to_le_bytes()].concat(),
            StreamHead::Bulk => vec![1],
            StreamHead::BulkConnection { rank } => [&[2u8][..], &rank.to_le_bytes()].concat(),
        }
    }

    /// The rank a bulk connection's head claims, if rank `me` of `size`
    /// accepts a bulk connection from it (a higher rank of the world), or
    /// why not (another kind of head, or another rank).
    ///
    /// ```
    /// use mpx_net::quic::StreamHead;
    /// assert_eq!(StreamHead::BulkConnection { rank: 2 }.bulk_dialler(0, 3)?, 2);
    /// assert!(StreamHead::BulkConnection { rank: 0 }.bulk_dialler(1, 3).is_err());
    /// assert!(StreamHead::Bulk.bulk_dialler(0, 3).is_err());
    /// # Ok::<(), mpx_core::Error>(())
    /// ```
    pub fn bulk_dialler(self, me: u32, size: u32) -> Result<u32> {
        match self {
            StreamHead::BulkConnection { rank } => check_dialler(rank, me, size).map(|()| rank),
            other => Err(ErrorKind::Protocol(format!("a bulk connection led by {other:?}")).into()),
        }
    }

    /// The head in `bytes`, which must be exactly as long as
    /// [`len`](StreamHead::len) of its first byte says.
    pub fn decode(bytes: &[u8]) -> Result<StreamHead> {
        let first = *bytes.first().ok_or_else(|| ErrorKind::Protocol("a stream ended before its head".into()))?;
        if bytes.len() != StreamHead::len(first)? {
            return Err(ErrorKind::Protocol(format!("a stream head of {} bytes", bytes.len())).into());
        }
        Ok(match first {
            0 => StreamHead::Control { bulk_port: u16::from_le_bytes([bytes[1], bytes[2]]) },
            1 => StreamHead::Bulk,
            _ => StreamHead::BulkConnection { rank: u32::from_le_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) },
        })
    }
}

/// Whether a peer claiming rank `claimed` may dial rank `me` of `size`:
/// higher ranks dial lower ones, so only a higher rank of the world does.
fn check_dialler(claimed: u32, me: u32, size: u32) -> Result<()> {
    if claimed <= me || claimed >= size {
        return Err(ErrorKind::Protocol(format!("a connecting peer claims rank {claimed}: rank {me} of {size} is dialled by higher ranks only")).into());
    }
    Ok(())
}

/// Reads a connecting peer's control stream (after its head) up to
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
/// let mut greeting = Greeting::new(0, 3);
/// assert!(greeting.push(&bytes[..10])?.is_none());
/// assert_eq!(greeting.push(&bytes[10..])?.unwrap().header.source, 2);
/// // Rank 2, the highest, is dialled by nobody: it refuses the same hello.
/// assert!(Greeting::new(2, 3).push(&bytes).is_err());
/// # Ok::<(), mpx_core::Error>(())
/// ```
pub struct Greeting {
    me: u32,
    size: u32,
    decoder: Decoder,
    buf: BytesMut,
}

impl Greeting {
    /// The greeting of a peer connecting to rank `me` of `size`. A hello
    /// carries no payload: a header announcing one refuses the peer before
    /// its bytes are taken.
    pub fn new(me: u32, size: u32) -> Greeting {
        Greeting { me, size, decoder: Decoder::new(0), buf: BytesMut::new() }
    }

    /// Takes the next bytes of the control stream: the hello once it is
    /// whole (what follows it stays for [`into_rest`](Greeting::into_rest)),
    /// `None` while it is not, or why the peer is refused.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Option<Frame>> {
        self.buf.extend_from_slice(bytes);
        let Some(frame) = self.decoder.decode(&mut self.buf)? else { return Ok(None) };
        let claimed = frame.header.source;
        if frame.header.kind != Kind::Hello {
            return Err(ErrorKind::Protocol(format!("a connecting peer's first frame is a {:?}, not a hello", frame.header.kind)).into());
        }
        check_dialler(claimed, self.me, self.size)?;
        Ok(Some(frame))
    }

    /// The bytes that followed the hello.
    pub fn into_rest(self) -> BytesMut {
        self.buf
    }
}
