//! The wire format: one frame per protocol message.
//!
//! A frame is a fixed 80-byte header followed by `payload_len` bytes. All
//! integers are little-endian.
//!
//! | bytes | field |
//! |---|---|
//! | 0 | version (1) |
//! | 1 | kind ([`Kind`]) |
//! | 2 | representation ([`Repr`]) |
//! | 3 | flags (bit 0: the payload carries no type signature, i.e. `packed`) |
//! | 4..8 | tag (i32) |
//! | 8..16 | communicator context id |
//! | 16..20 | source rank |
//! | 20..24 | reserved (0) |
//! | 24..32 | per-pair sequence number (data frames) |
//! | 32..40 | type signature hash |
//! | 40..48 | type signature length (basic elements) |
//! | 48..56 | data length (the message's, for an RTS), credit bytes, or ready answer |
//! | 56..64 | sender's request id (RTS, CTS, ready, ready answer) |
//! | 64..72 | receiver's request id (CTS, rendezvous data) |
//! | 72..80 | payload length |
//!
//! Decoding is bounds-checked and never panics: a short or malformed frame
//! is an [`Error::Protocol`], and the engine treats the peer that sent it as
//! failed. On the in-memory transport frames travel as values (no encoding);
//! the byte form is what stream transports carry.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::{Error, Result};

/// Wire format version.
pub const VERSION: u8 = 1;
/// Bytes in an encoded header.
pub const HEADER_LEN: usize = 80;

/// What a frame says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum Kind {
    /// A message with its data (eager protocol).
    #[default]
    Eager = 1,
    /// Request to send: a message's envelope, its data to follow once the
    /// receiver matches it (rendezvous). `data_len` is the data's length.
    Rts = 2,
    /// Clear to send: the receiver `recv_id` matched the RTS of `send_id`.
    Cts = 3,
    /// The data of a rendezvous message, for receive `recv_id`.
    RndvData = 4,
    /// A ready-mode message with its data; the receiver answers.
    Ready = 5,
    /// Answer to ready message `send_id`: `data_len` is 1 if a posted
    /// receive took it, 0 if none was posted.
    ReadyAck = 6,
    /// Returns `data_len` bytes of eager credit to the sender.
    Credit = 7,
    /// The sender has finished (its program returned): it will post no more
    /// receives, so operations that wait for it to match fail.
    Bye = 8,
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
    /// Communicator context id.
    pub context: u64,
    /// Sender's rank.
    pub source: u32,
    /// Per-pair sequence number of data frames (eager, RTS, ready).
    pub seq: u64,
    /// Type signature hash.
    pub sig_hash: u64,
    /// Type signature length in basic elements.
    pub sig_len: u64,
    /// Message data length (RTS), credit bytes (credit), 1 or 0 (ready answer).
    pub data_len: u64,
    /// The sender's request id.
    pub send_id: u64,
    /// The receiver's request id.
    pub recv_id: u64,
}

impl Header {
    /// A header of `kind` from `source` with every other field 0.
    pub fn control(kind: Kind, source: u32) -> Header {
        Header { kind, source, ..Header::default() }
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
    /// Encodes the frame as header bytes followed by the payload.
    ///
    /// ```
    /// use mpx_core::proto::wire::{Frame, Header, Kind};
    /// let f = Frame { header: Header { data_len: 4096, ..Header::control(Kind::Credit, 3) },
    ///                 payload: Default::default() };
    /// assert_eq!(Frame::decode(f.encode().freeze())?, f);
    /// # Ok::<(), mpx_core::Error>(())
    /// ```
    pub fn encode(&self) -> BytesMut {
        let h = &self.header;
        let mut b = BytesMut::with_capacity(HEADER_LEN + self.payload.len());
        b.put_u8(VERSION);
        b.put_u8(h.kind as u8);
        b.put_u8(h.repr as u8);
        b.put_u8(h.untyped as u8);
        b.put_i32_le(h.tag);
        b.put_u64_le(h.context);
        b.put_u32_le(h.source);
        b.put_u32_le(0);
        for v in [h.seq, h.sig_hash, h.sig_len, h.data_len, h.send_id, h.recv_id] {
            b.put_u64_le(v);
        }
        b.put_u64_le(self.payload.len() as u64);
        b.extend_from_slice(&self.payload);
        b
    }

    /// Decodes one frame that fills `bytes` exactly.
    pub fn decode(mut bytes: Bytes) -> Result<Frame> {
        if bytes.len() < HEADER_LEN {
            return Err(Error::Protocol(format!(
                "frame of {} bytes is shorter than its {HEADER_LEN}-byte header",
                bytes.len()
            )));
        }
        let version = bytes.get_u8();
        if version != VERSION {
            return Err(Error::Protocol(format!("unknown wire version {version}")));
        }
        let kind_byte = bytes.get_u8();
        let kind = Kind::from_u8(kind_byte).ok_or_else(|| Error::Protocol(format!("unknown frame kind {kind_byte}")))?;
        let repr = match bytes.get_u8() {
            0 => Repr::Native,
            1 => Repr::External32,
            r => return Err(Error::Protocol(format!("unknown data representation {r}"))),
        };
        let flags = bytes.get_u8();
        if flags > 1 {
            return Err(Error::Protocol(format!("unknown frame flags {flags:#x}")));
        }
        let tag = bytes.get_i32_le();
        let context = bytes.get_u64_le();
        let source = bytes.get_u32_le();
        let _reserved = bytes.get_u32_le();
        let mut words = [0u64; 6];
        for w in &mut words {
            *w = bytes.get_u64_le();
        }
        let [seq, sig_hash, sig_len, data_len, send_id, recv_id] = words;
        let payload_len = bytes.get_u64_le();
        if payload_len != bytes.len() as u64 {
            return Err(Error::Protocol(format!(
                "frame says {payload_len} payload bytes but carries {}",
                bytes.len()
            )));
        }
        let header =
            Header { kind, repr, untyped: flags == 1, tag, context, source, seq, sig_hash, sig_len, data_len, send_id, recv_id };
        Ok(Frame { header, payload: bytes })
    }
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
        assert_eq!(Frame::decode(f.encode().freeze()).unwrap(), f);
    }

    #[test]
    fn every_truncation_and_corruption_is_an_error_not_a_panic() {
        let bytes = sample().encode().freeze();
        for cut in 0..bytes.len() {
            assert!(Frame::decode(bytes.slice(..cut)).is_err(), "cut at {cut}");
        }
        for i in 0..4 {
            let mut b = bytes.to_vec();
            b[i] = 0xee;
            assert!(matches!(Frame::decode(b.into()), Err(Error::Protocol(_))), "byte {i}");
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
}
