//! The wire format: one frame per protocol message.
//!
//! A frame is a fixed 80-byte header followed by `payload_len` bytes. All
//! integers are little-endian.
//!
//! | bytes | field |
//! |---|---|
//! | 0 | version (2) |
//! | 1 | kind ([`Kind`]) |
//! | 2 | representation ([`Repr`]) |
//! | 3 | flags (bit 0: the payload carries no type signature, i.e. `packed`) |
//! | 4..8 | tag (i32) |
//! | 8..16 | communicator context id; the job id in a hello |
//! | 16..20 | source rank |
//! | 20..24 | bytes of type description leading the data (external32 typed messages); largest payload accepted (hello) |
//! | 24..32 | per-pair sequence number (data frames); byte offset (rendezvous data); data frames sent in all (bye) |
//! | 32..40 | type signature hash ([`SERIALIZED_SIGNATURE`] marks a serde message); native representation (hello) |
//! | 40..48 | type signature length (basic elements); credit granted (hello) |
//! | 48..56 | data length (RTS, rendezvous data), credit bytes, ready answer, world size (hello), failure (bye) |
//! | 56..64 | sender's request id (RTS, CTS, ready, ready answer); eager limit (hello) |
//! | 64..72 | receiver's request id (CTS, rendezvous data); rendezvous slots granted (hello, credit) |
//! | 72..80 | payload length |
//!
//! Encoding writes the header alone ([`Frame::encode_header`]); the payload
//! follows as its own chunk and is never copied. Decoding works on a byte
//! stream ([`Decoder`]): it takes whole frames off the front of a buffer,
//! waits for more bytes when a frame is incomplete, and refuses a payload
//! above its cap before buffering it. Decoding is bounds-checked and never
//! panics: a malformed frame is an [`ErrorKind::Protocol`], and the engine treats
//! the peer that sent it as failed. On the in-memory transport frames travel
//! as values; the byte form is what stream transports carry.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::{ErrorKind, Result};

/// Wire format version: 3 since an eager message counts
/// [`EAGER_OVERHEAD`](super::engine::EAGER_OVERHEAD) of credit beyond its
/// data (2 counted its 80-byte header).
pub const VERSION: u8 = 3;
/// Bytes in an encoded header.
pub const HEADER_LEN: usize = 80;

/// The type signature `(hash, elements)` of a serde message (a value
/// serialized with postcard, see [`crate::comm`]): a hash no datatype's
/// signature has (theirs are below 2^61) and no basic elements. A typed
/// receive of such a message is a type mismatch, and a serde receive of any
/// other message too.
pub const SERIALIZED_SIGNATURE: (u64, u64) = (u64::MAX, 0);

/// What a frame says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum Kind {
    /// A message with its data (eager protocol).
    #[default]
    Eager = 1,
    /// Request to send: a message's envelope, its data to follow once the
    /// receiver matches it (rendezvous). `data_len` is the data's length;
    /// `recv_id` the mode: 0 standard, 1 ready, 2 with its data following
    /// at once, unsolicited.
    Rts = 2,
    /// Clear to send: the receiver `recv_id` matched the RTS of `send_id`.
    Cts = 3,
    /// A chunk of a rendezvous message's data, for receive `recv_id` (0:
    /// unsolicited data, found by `send_id`, which every chunk carries):
    /// `seq` is the chunk's byte offset, `data_len` the whole length.
    RndvData = 4,
    /// A ready-mode message with its data; the receiver answers.
    Ready = 5,
    /// Answer to ready message `send_id`: `data_len` is 1 if a posted
    /// receive took it, 0 if none was posted.
    ReadyAck = 6,
    /// Returns `data_len` bytes of eager credit and `seq` bytes of
    /// unsolicited credit to the sender, and grants it `recv_id` more
    /// rendezvous slots (a finished sender whose last sends wait for slots
    /// gets them this way).
    Credit = 7,
    /// The sender has finished (its program returned, or failed if
    /// `data_len` is 1): it will post no more receives, so operations that
    /// wait for it to match fail. `seq` is the number of data frames it
    /// sends in all: its sends still waiting for credit or slots follow
    /// under the usual flow control. A later goodbye may lower the count
    /// (some of those sends failed), never raise it. One that says it failed
    /// means it serves nothing more: its rendezvous requests will not be
    /// answered and its data in flight will not arrive. `data_len` 2: the
    /// sender found the receiver in breach of the protocol and cut it off.
    Bye = 8,
    /// The first frame on every connection: the job (`context`), the
    /// sender's rank and world size (`data_len`), its native representation
    /// (`sig_hash`), the eager credit it grants the receiver (`sig_len`),
    /// the largest eager message it sends (`send_id`), the rendezvous
    /// requests it accepts unanswered (`recv_id`), the largest frame
    /// payload it accepts (`desc_len`, at least
    /// [`MIN_PAYLOAD`](super::engine::MIN_PAYLOAD)) and the unsolicited
    /// credit it grants (`seq`).
    Hello = 9,
    /// Keeps an idle connection alive; carries nothing.
    Ping = 10,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Eager,
            2 => Kind::Rts,
            3 => Kind::Cts,
            4 => Kind::RndvData,
            5 => Kind::Ready,
            6 => Kind::ReadyAck,
            7 => Kind::Credit,
            8 => Kind::Bye,
            9 => Kind::Hello,
            10 => Kind::Ping,
            _ => return None,
        })
    }
}

pub use crate::pack::Repr;

/// A frame header. Fields a kind does not use are 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    /// What the frame says.
    pub kind: Kind,
    /// Representation of the payload.
    pub repr: Repr,
    /// The payload is `packed` data: it carries no signature.
    pub untyped: bool,
    /// Message tag.
    pub tag: i32,
    /// Communicator context id (the job id in a hello).
    pub context: u64,
    /// Sender's rank.
    pub source: u32,
    /// Bytes at the start of the message's data that describe its type
    /// sequence (external32 typed messages; see [`crate::comm`]), 0 otherwise.
    pub desc_len: u32,
    /// Per-pair sequence number of data frames (eager, RTS, ready); byte
    /// offset of a rendezvous data chunk.
    pub seq: u64,
    /// Type signature hash (native representation in a hello).
    pub sig_hash: u64,
    /// Type signature length in basic elements (credit granted in a hello).
    pub sig_len: u64,
    /// Message data length (RTS, rendezvous data), credit bytes (credit), 1
    /// or 0 (ready answer, bye), world size (hello).
    pub data_len: u64,
    /// The sender's request id (eager limit in a hello).
    pub send_id: u64,
    /// The receiver's request id.
    pub recv_id: u64,
}

impl Header {
    /// A header of `kind` from `source` with every other field 0.
    pub fn control(kind: Kind, source: u32) -> Header {
        Header { kind, source, ..Header::default() }
    }

    /// Encodes the header of a frame whose payload is `payload_len` bytes.
    pub fn encode(&self, payload_len: u64) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        let mut w = &mut b[..];
        w.put_u8(VERSION);
        w.put_u8(self.kind as u8);
        w.put_u8(self.repr as u8);
        w.put_u8(self.untyped as u8);
        w.put_i32_le(self.tag);
        w.put_u64_le(self.context);
        w.put_u32_le(self.source);
        w.put_u32_le(self.desc_len);
        for v in [self.seq, self.sig_hash, self.sig_len, self.data_len, self.send_id, self.recv_id, payload_len] {
            w.put_u64_le(v);
        }
        debug_assert!(w.is_empty());
        b
    }

    /// Decodes a header; returns it with the payload length it announces.
    pub fn decode(mut bytes: &[u8]) -> Result<(Header, u64)> {
        if bytes.len() < HEADER_LEN {
            return Err(ErrorKind::Protocol(format!("header of {} bytes is shorter than {HEADER_LEN}", bytes.len())).into());
        }
        let version = bytes.get_u8();
        if version != VERSION {
            return Err(ErrorKind::Protocol(format!("unknown wire version {version}")).into());
        }
        let kind_byte = bytes.get_u8();
        let kind = Kind::from_u8(kind_byte).ok_or_else(|| ErrorKind::Protocol(format!("unknown frame kind {kind_byte}")))?;
        let repr = match bytes.get_u8() {
            0 => Repr::Native,
            1 => Repr::External32,
            r => return Err(ErrorKind::Protocol(format!("unknown data representation {r}")).into()),
        };
        let flags = bytes.get_u8();
        if flags > 1 {
            return Err(ErrorKind::Protocol(format!("unknown frame flags {flags:#x}")).into());
        }
        let tag = bytes.get_i32_le();
        let context = bytes.get_u64_le();
        let source = bytes.get_u32_le();
        let desc_len = bytes.get_u32_le();
        let mut words = [0u64; 7];
        for w in &mut words {
            *w = bytes.get_u64_le();
        }
        let [seq, sig_hash, sig_len, data_len, send_id, recv_id, payload_len] = words;
        let header =
            Header {
            kind,
            repr,
            untyped: flags == 1,
            tag,
            context,
            source,
            desc_len,
            seq,
            sig_hash,
            sig_len,
            data_len,
            send_id,
            recv_id,
        };
        Ok((header, payload_len))
    }
}

/// A header and its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The header.
    pub header: Header,
    /// The payload (message data), possibly empty.
    pub payload: Bytes,
}

impl Frame {
    /// A frame of `header` with no payload.
    pub fn control(header: Header) -> Frame {
        Frame { header, payload: Bytes::new() }
    }

    /// The encoded header; the payload follows it on the wire as it is.
    pub fn encode_header(&self) -> [u8; HEADER_LEN] {
        self.header.encode(self.payload.len() as u64)
    }

    /// Bytes this frame occupies on the wire.
    pub fn wire_len(&self) -> usize {
        HEADER_LEN + self.payload.len()
    }

    /// The frame as one contiguous buffer (copies the payload: for tests and
    /// fuzzing; transports write [`encode_header`](Frame::encode_header) and
    /// the payload as two chunks).
    ///
    /// ```
    /// use mpx::proto::wire::{Frame, Header, Kind};
    /// let f = Frame::control(Header { data_len: 4096, ..Header::control(Kind::Credit, 3) });
    /// assert_eq!(Frame::decode(f.to_bytes())?, f);
    /// # Ok::<(), mpx::Error>(())
    /// ```
    pub fn to_bytes(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(self.wire_len());
        b.extend_from_slice(&self.encode_header());
        b.extend_from_slice(&self.payload);
        b.freeze()
    }

    /// Decodes one frame that fills `bytes` exactly.
    pub fn decode(bytes: Bytes) -> Result<Frame> {
        let (header, payload_len) = Header::decode(&bytes)?;
        if payload_len != (bytes.len() - HEADER_LEN) as u64 {
            return Err(ErrorKind::Protocol(format!(
                "frame says {payload_len} payload bytes but carries {}",
                bytes.len() - HEADER_LEN
            )).into());
        }
        Ok(Frame { header, payload: bytes.slice(HEADER_LEN..) })
    }
}

/// Takes frames off a byte stream.
///
/// ```
/// use bytes::BytesMut;
/// use mpx::proto::wire::{Decoder, Frame, Header, Kind};
/// let f = Frame { header: Header::control(Kind::Eager, 1), payload: "hi".into() };
/// let mut stream = BytesMut::new();
/// stream.extend_from_slice(&f.encode_header());
/// let decoder = Decoder::new(1024);
/// assert_eq!(decoder.decode(&mut stream)?, None, "the payload has not arrived");
/// stream.extend_from_slice(&f.payload);
/// assert_eq!(decoder.decode(&mut stream)?, Some(f));
/// assert!(stream.is_empty());
/// # Ok::<(), mpx::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Decoder {
    max_payload: u64,
}

impl Decoder {
    /// A decoder that refuses payloads above `max_payload` bytes.
    pub fn new(max_payload: usize) -> Decoder {
        Decoder { max_payload: max_payload as u64 }
    }

    /// The largest payload this decoder accepts.
    pub fn max_payload(&self) -> usize {
        self.max_payload as usize
    }

    /// Takes the first whole frame off `buf`, or returns `None` (leaving
    /// `buf` as it is) if it does not hold one yet. A malformed header, or a
    /// payload above the cap, is an error as soon as the header is in.
    pub fn decode(&self, buf: &mut BytesMut) -> Result<Option<Frame>> {
        if buf.len() < HEADER_LEN {
            return Ok(None);
        }
        let (header, payload_len) = self.header(&buf[..HEADER_LEN])?;
        let total = HEADER_LEN + payload_len as usize;
        if buf.len() < total {
            buf.reserve(total - buf.len());
            return Ok(None);
        }
        let mut frame = buf.split_to(total);
        let payload = frame.split_off(HEADER_LEN).freeze();
        Ok(Some(Frame { header, payload }))
    }

    /// Decodes a header and checks its payload length against the cap
    /// (none for a kind that carries no payload: refused before a byte of
    /// it is buffered).
    fn header(&self, bytes: &[u8]) -> Result<(Header, u64)> {
        let (header, payload_len) = Header::decode(bytes)?;
        if payload_len > 0 && !matches!(header.kind, Kind::Eager | Kind::Ready | Kind::RndvData) {
            return Err(ErrorKind::Protocol(format!("{:?} frame with a payload of {payload_len} bytes", header.kind)).into());
        }
        if payload_len > self.max_payload {
            return Err(ErrorKind::Protocol(format!(
                "frame payload of {payload_len} bytes is above the {}-byte cap",
                self.max_payload
            )).into());
        }
        Ok((header, payload_len))
    }
}

/// First pieces of rendezvous data for a receive up to this many bytes
/// are copied out of their buffer rather than sliced: a slice would keep
/// the whole buffer alive. (Payloads of other frames, and data no receive
/// has claimed yet, are always copied: they may wait long, charged only
/// their own bytes.)
pub const COPY_PAYLOAD_MAX: u64 = 16 << 10;

/// `bytes`, a part of a buffer received from a transport, to keep past
/// that buffer while a receive takes it: up to [`COPY_PAYLOAD_MAX`] bytes
/// a copy, larger ones as the slice of it `slice` makes. A slice keeps the
/// whole buffer alive (a QUIC stack receives many packets into one, and
/// may gather a stream's out-of-order pieces into a buffer of many
/// megabytes), so only data about to be taken is kept so.
pub(crate) fn kept(bytes: &[u8], slice: impl FnOnce() -> Bytes) -> Bytes {
    if bytes.len() as u64 <= COPY_PAYLOAD_MAX {
        crate::pack::copy::bytes_of(bytes)
    } else {
        slice()
    }
}

/// Takes frames off a byte stream that arrives in chunks (as a QUIC
/// stream's do), copying as little as it can: a frame whole inside one
/// chunk is a slice of it (but for payloads up to [`COPY_PAYLOAD_MAX`]
/// bytes, copied so that a small message kept waiting does not keep the
/// chunk's whole buffer alive), and rendezvous data is passed on as it arrives,
/// one frame per piece of a chunk, never gathered here. Each piece has its
/// frame's header with `seq` (the data's offset in its message) advanced by
/// the bytes before it, so the engine takes the pieces as it takes frames
/// of any size, and checks them the same way. Other frames are gathered
/// when they span chunks, each in a buffer of exactly its size, their
/// length capped as by [`Decoder`].
///
/// ```
/// use bytes::Bytes;
/// use mpx::proto::wire::{ChunkDecoder, Frame, Header, Kind};
/// let data = Frame { header: Header { seq: 100, data_len: 110, ..Header::control(Kind::RndvData, 1) }, payload: Bytes::from(vec![7u8; 10]) };
/// let stream = data.to_bytes();
/// let mut decoder = ChunkDecoder::new(1024);
/// let mut frames = Vec::new();
/// let mut take = |f| {
///     frames.push(f);
///     Ok(())
/// };
/// decoder.push(stream.slice(..84), &mut take)?;
/// decoder.push(stream.slice(84..), &mut take)?;
/// assert_eq!(frames.len(), 2, "one piece per chunk");
/// assert_eq!((frames[0].header.seq, frames[0].payload.len()), (100, 4));
/// assert_eq!((frames[1].header.seq, frames[1].payload.len()), (104, 6));
/// assert!(decoder.is_idle());
/// # Ok::<(), mpx::Error>(())
/// ```
#[derive(Debug)]
pub struct ChunkDecoder {
    decoder: Decoder,
    /// The start of a frame that spans chunks: its header, or its header
    /// and part of its payload (never rendezvous data).
    partial: BytesMut,
    /// The rendezvous data frame being passed on: its header (`seq` at the
    /// next piece) and the payload bytes still due.
    data: Option<(Header, u64)>,
}

impl ChunkDecoder {
    /// A decoder that refuses payloads above `max_payload` bytes.
    pub fn new(max_payload: usize) -> ChunkDecoder {
        ChunkDecoder { decoder: Decoder::new(max_payload), partial: BytesMut::new(), data: None }
    }

    /// Whether the stream is between frames (so it may end here).
    pub fn is_idle(&self) -> bool {
        self.partial.is_empty() && self.data.is_none()
    }

    /// Takes the next chunk of the stream and hands each frame (or piece
    /// of rendezvous data) it completes to `each`, in order. A malformed
    /// header or a payload above the cap is an error, as is any error of
    /// `each`; the decoder is not to be used after an error.
    pub fn push(&mut self, mut chunk: Bytes, each: &mut dyn FnMut(Frame) -> Result<()>) -> Result<()> {
        loop {
            if let Some((header, due)) = &mut self.data {
                if chunk.is_empty() {
                    return Ok(());
                }
                let n = (*due).min(chunk.len() as u64);
                let piece = Frame { header: *header, payload: chunk.split_to(n as usize) };
                header.seq += n;
                *due -= n;
                if *due == 0 {
                    self.data = None;
                }
                each(piece)?;
                continue;
            }
            // The header: read in place when whole in the chunk, else gathered.
            let in_place = self.partial.is_empty() && chunk.len() >= HEADER_LEN;
            if !in_place && self.partial.len() < HEADER_LEN {
                let n = (HEADER_LEN - self.partial.len()).min(chunk.len());
                self.partial.extend_from_slice(&chunk.split_to(n));
                if self.partial.len() < HEADER_LEN {
                    return Ok(());
                }
            }
            let head = if in_place { &chunk[..HEADER_LEN] } else { &self.partial[..HEADER_LEN] };
            let (header, payload_len) = self.decoder.header(head)?;
            if header.kind == Kind::RndvData && payload_len > 0 {
                // The pieces' offsets are worked out here, before the
                // engine checks them: they must not overflow.
                if header.seq.checked_add(payload_len).is_none() {
                    return Err(ErrorKind::Protocol(format!(
                        "rendezvous data at offset {} of {payload_len} bytes runs past the largest offset",
                        header.seq
                    )).into());
                }
                if in_place {
                    chunk.advance(HEADER_LEN);
                } else {
                    self.partial.clear();
                }
                self.data = Some((header, payload_len));
                continue;
            }
            let total = HEADER_LEN + payload_len as usize;
            if in_place && chunk.len() >= total {
                each(Frame { header, payload: payload_of(&chunk.split_to(total)) })?;
                continue;
            }
            if self.partial.len() <= HEADER_LEN {
                // A frame that spans chunks is gathered in a buffer of its
                // own, exactly its size: its payload may be kept as a slice
                // of it (a message waiting as unexpected, charged only its
                // own bytes), and a buffer reused or grown from earlier
                // frames would keep all of its memory alive with it.
                let mut own = BytesMut::with_capacity(total);
                own.extend_from_slice(if in_place { &chunk[..HEADER_LEN] } else { &self.partial[..] });
                if in_place {
                    chunk.advance(HEADER_LEN);
                }
                self.partial = own;
            }
            let n = (total - self.partial.len()).min(chunk.len());
            crate::pack::copy::extend_bytes(&mut self.partial, &chunk.split_to(n));
            if self.partial.len() < total {
                return Ok(());
            }
            // Its own buffer: the payload is kept as a slice of it.
            each(Frame { header, payload: self.partial.split_to(total).freeze().slice(HEADER_LEN..) })?;
        }
    }
}

/// The payload of a whole frame's bytes found in a transport's chunk, to
/// keep: a copy, since a message may wait long as unexpected, charged only
/// its own bytes, while a slice would keep the whole buffer the chunk lies
/// in alive (see [`kept`]). Such payloads are at most the eager threshold.
fn payload_of(whole: &Bytes) -> Bytes {
    crate::pack::copy::bytes_of(&whole[HEADER_LEN..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Frame {
        Frame {
            header: Header {
                kind: Kind::Eager,
                repr: Repr::External32,
                untyped: false,
                tag: 77,
                context: 0xdead_beef,
                source: 5,
                desc_len: 2,
                seq: 12,
                sig_hash: 1 << 60,
                sig_len: 3,
                data_len: 5,
                send_id: 9,
                recv_id: 10,
            },
            payload: Bytes::from_static(b"hello"),
        }
    }

    #[test]
    fn round_trip() {
        let f = sample();
        assert_eq!(Frame::decode(f.to_bytes()).unwrap(), f);
    }

    #[test]
    fn every_truncation_and_corruption_is_an_error_not_a_panic() {
        let bytes = sample().to_bytes();
        for cut in 0..bytes.len() {
            assert!(Frame::decode(bytes.slice(..cut)).is_err(), "cut at {cut}");
        }
        for i in 0..4 {
            let mut b = bytes.to_vec();
            b[i] = 0xee;
            assert!(matches!(Frame::decode(b.into()), Err(ref e) if matches!(e.kind(), ErrorKind::Protocol(_))), "byte {i}");
        }
        // Pseudo-random garbage of every length up to 200 bytes.
        let mut x = 0x1234_5678u32;
        for len in 0..200 {
            let garbage: Vec<u8> = (0..len)
                .map(|_| {
                    x = x.wrapping_mul(1664525).wrapping_add(1013904223);
                    (x >> 24) as u8
                })
                .collect();
            let _ = Frame::decode(garbage.into());
        }
    }

    #[test]
    fn a_stream_split_anywhere_decodes_to_the_same_frames() {
        let mut second = sample();
        second.payload = Bytes::from(vec![7u8; 300]);
        let third = Frame::control(Header::control(Kind::Ping, 2));
        let frames = [sample(), second, third];
        let stream: Vec<u8> = frames.iter().flat_map(|f| f.to_bytes().to_vec()).collect();
        let decoder = Decoder::new(1000);
        for step in [1, 3, 79, 80, 81, 200, stream.len()] {
            let (mut buf, mut got) = (BytesMut::new(), Vec::new());
            for piece in stream.chunks(step) {
                buf.extend_from_slice(piece);
                while let Some(f) = decoder.decode(&mut buf).unwrap() {
                    got.push(f);
                }
            }
            assert_eq!(got, frames, "pieces of {step} bytes");
            assert!(buf.is_empty());
        }
    }

    #[test]
    fn a_payload_above_the_cap_is_refused_from_its_header() {
        let mut f = sample();
        f.payload = Bytes::from(vec![0u8; 65]);
        let mut buf = BytesMut::from(&f.encode_header()[..]);
        assert!(matches!(Decoder::new(64).decode(&mut buf), Err(ref e) if matches!(e.kind(), ErrorKind::Protocol(_))));
        // A forged length near u64::MAX reserves nothing.
        let mut h = f.encode_header();
        h[72..80].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(Decoder::new(1 << 20).decode(&mut BytesMut::from(&h[..])).is_err());
    }

    /// `frames` with consecutive pieces of one message's rendezvous data
    /// (each starting where the last ended) joined into one frame.
    fn join_data(frames: Vec<Frame>) -> Vec<Frame> {
        let mut joined: Vec<Frame> = Vec::new();
        for f in frames {
            match joined.last_mut() {
                Some(last)
                    if f.header.kind == Kind::RndvData
                        && last.header.kind == Kind::RndvData
                        && !f.payload.is_empty()
                        && last.header.seq + last.payload.len() as u64 == f.header.seq =>
                {
                    let mut both = last.payload.to_vec();
                    both.extend_from_slice(&f.payload);
                    last.payload = both.into();
                }
                _ => joined.push(f),
            }
        }
        joined
    }

    /// A stream of frames of every shape, cut into chunks at every size
    /// from 1 byte up, gives the same frames back, rendezvous data as
    /// pieces that join up to the original at the right offsets.
    #[test]
    fn a_chunk_decoder_gives_back_every_frame_however_the_stream_is_cut() {
        let data = |seq: u64, len: usize| Frame {
            header: Header { seq, data_len: 10_000, recv_id: 4, ..Header::control(Kind::RndvData, 2) },
            payload: Bytes::from((0..len).map(|i| (i % 251) as u8).collect::<Vec<_>>()),
        };
        let frames = [
            sample(),
            Frame::control(Header::control(Kind::Credit, 2)),
            data(0, 300),
            Frame { header: Header::control(Kind::Eager, 2), payload: Bytes::from(vec![9u8; 200]) },
            data(300, 1),
            Frame::control(Header::control(Kind::RndvData, 2)),
            data(301, 97),
            sample(),
        ];
        let stream: Vec<u8> = frames.iter().flat_map(|f| f.to_bytes().to_vec()).collect();
        let stream = Bytes::from(stream);
        for size in [1, 2, 7, 79, 80, 81, 100, 333, 4096] {
            let mut decoder = ChunkDecoder::new(1024);
            let mut got: Vec<Frame> = Vec::new();
            let mut at = 0;
            while at < stream.len() {
                let end = (at + size).min(stream.len());
                decoder
                    .push(stream.slice(at..end), &mut |f| {
                        got.push(f);
                        Ok(())
                    })
                    .unwrap();
                at = end;
            }
            assert!(decoder.is_idle(), "chunks of {size}");
            // Pieces of rendezvous data joined back together, on both sides
            // (adjacent data frames of the original join the same way).
            assert_eq!(join_data(got), join_data(frames.to_vec()), "chunks of {size}");
        }
    }

    /// A payload above the cap is refused as soon as its header is in,
    /// whatever its kind, and nothing of it is gathered.
    #[test]
    fn a_chunk_decoder_refuses_payloads_above_its_cap() {
        for kind in [Kind::Eager, Kind::RndvData] {
            let header = Header::control(kind, 1).encode(1 << 40);
            let mut decoder = ChunkDecoder::new(1024);
            let err = decoder.push(Bytes::copy_from_slice(&header), &mut |_| Ok(())).unwrap_err();
            assert!(matches!(err.kind(), ErrorKind::Protocol(_)), "{err}");
        }
        let mut decoder = ChunkDecoder::new(1024);
        let mut bad = Header::control(Kind::Eager, 1).encode(0);
        bad[0] = 0xEE;
        assert!(decoder.push(Bytes::copy_from_slice(&bad), &mut |_| Ok(())).is_err(), "a bad version");
    }

    /// A kind that carries no payload announcing one is refused at its
    /// header, before any of the payload is buffered.
    #[test]
    fn a_control_frame_announcing_a_payload_is_refused_at_its_header() {
        for kind in [Kind::Ping, Kind::Credit, Kind::Cts, Kind::Hello] {
            let header = Header::control(kind, 1).encode(1 << 20);
            let mut decoder = ChunkDecoder::new(1 << 20);
            assert!(decoder.push(Bytes::copy_from_slice(&header), &mut |_| Ok(())).is_err(), "{kind:?}");
            let mut stream = BytesMut::from(&header[..]);
            assert!(Decoder::new(1 << 20).decode(&mut stream).is_err(), "{kind:?}");
        }
    }

    /// A frame whole in a chunk is copied out of it, small or large, so
    /// that it does not keep the chunk's buffer alive (a transport may
    /// receive many frames, or a stream's out-of-order pieces, into one).
    #[test]
    fn a_chunk_decoder_copies_payloads_out_of_their_chunk() {
        let small = Frame { header: Header::control(Kind::Eager, 1), payload: Bytes::from(vec![3u8; 8]) };
        let large = Frame { header: Header::control(Kind::Eager, 1), payload: Bytes::from(vec![4u8; COPY_PAYLOAD_MAX as usize + 1]) };
        let mut stream = small.to_bytes().to_vec();
        stream.extend_from_slice(&large.to_bytes());
        let chunk = Bytes::from(stream);
        let inside = |p: &Bytes| chunk.as_ptr_range().contains(&p.as_ptr());
        let mut frames = Vec::new();
        ChunkDecoder::new(1 << 20).push(chunk.clone(), &mut |f| {
            frames.push(f);
            Ok(())
        }).unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!((&frames[0].payload[..], inside(&frames[0].payload)), (&small.payload[..], false));
        assert!(frames[1].payload == large.payload && !inside(&frames[1].payload), "the large payload is copied too");
    }

    /// A frame that spans chunks is gathered in a buffer of exactly its
    /// size, never in one a larger frame before it grew: its payload, kept
    /// as a slice while the message waits, holds no more than its own bytes.
    #[test]
    fn a_chunk_decoder_gathers_each_frame_in_a_buffer_of_its_own_size() {
        let mut decoder = ChunkDecoder::new(2 << 20);
        let push_in_pieces = |decoder: &mut ChunkDecoder, frame: &Frame, upto: usize| {
            let bytes = frame.to_bytes();
            for piece in bytes[..upto.min(bytes.len())].chunks(1000) {
                // Every frame handed on is dropped at once, as a ping's is.
                decoder.push(Bytes::copy_from_slice(piece), &mut |_| Ok(())).unwrap();
            }
        };
        let big = Frame { header: Header::control(Kind::Eager, 1), payload: Bytes::from(vec![1u8; 1 << 20]) };
        push_in_pieces(&mut decoder, &big, usize::MAX);
        assert!(decoder.is_idle());
        let small = Frame { header: Header::control(Kind::Eager, 1), payload: Bytes::from(vec![2u8; 20 << 10]) };
        push_in_pieces(&mut decoder, &small, 3000);
        assert_eq!(decoder.partial.capacity(), HEADER_LEN + (20 << 10), "not the megabyte the frame before grew");
        let mut got = Vec::new();
        decoder.push(small.to_bytes().slice(3000..), &mut |f| {
            got.push(f);
            Ok(())
        }).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].payload, small.payload);
    }

    /// Rendezvous data whose offset plus length overflows is refused at its
    /// header, before any piece is handed on (the pieces' offsets are
    /// computed by the decoder).
    #[test]
    fn a_chunk_decoder_refuses_data_offsets_that_overflow() {
        for (seq, len) in [(u64::MAX, 1usize), (u64::MAX - 2, 4)] {
            let frame = Frame { header: Header { seq, data_len: u64::MAX, ..Header::control(Kind::RndvData, 1) }, payload: Bytes::from(vec![0u8; len]) };
            let mut decoder = ChunkDecoder::new(1024);
            let mut pieces = 0;
            let err = decoder
                .push(frame.to_bytes(), &mut |_| {
                    pieces += 1;
                    Ok(())
                })
                .unwrap_err();
            assert!(matches!(err.kind(), ErrorKind::Protocol(_)), "{err}");
            assert_eq!(pieces, 0);
        }
        // The last byte of the largest offset is still data.
        let frame = Frame { header: Header { seq: u64::MAX - 1, data_len: u64::MAX, ..Header::control(Kind::RndvData, 1) }, payload: Bytes::from(vec![0u8; 1]) };
        let mut pieces = Vec::new();
        ChunkDecoder::new(1024).push(frame.to_bytes(), &mut |f| {
            pieces.push(f.header.seq);
            Ok(())
        }).unwrap();
        assert_eq!(pieces, [u64::MAX - 1]);
    }
}
