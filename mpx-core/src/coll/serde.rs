//! Collectives of serde values (the `serde` feature): `bcast_serde`,
//! `gather_serde`, `scatter_serde` and `allgather_serde`. Each value
//! travels as a serde message ([`Serde`](crate::Serde)), serialized once
//! by its owner and passed on as the same bytes by the ranks that forward
//! it; a receive takes whatever length the message has, as point-to-point
//! serde receives do.

use std::future::Future;

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::movement::{binomial, root_salt, BCAST_ROOTED, SCATTER_ROOTED};
use super::{guarded, salt_signature, salted_mismatch, sent, unsalted, word_of_giving_up, Call, Collective, Posted};
use crate::comm::{deserialize, serialize, serialized, Comm, Peer, RawRecv};
use crate::error::{ErrorKind, Result};
use crate::proto::engine::SendMode;
use crate::proto::wire::SERIALIZED_SIGNATURE;
use crate::request::Request;

impl Call {
    /// Sends serialized `bytes` to `to`, as a serde message.
    fn send_serialized(&self, bytes: &Bytes, to: usize) -> Request<'static> {
        if let Some(e) = self.fails_at_once() {
            return Request::completed(Err(e));
        }
        let salt = self.salt;
        let packed = move |_| {
            let mut packed = serialized(bytes.clone());
            packed.signature = salt_signature(packed.signature, salt);
            Ok(packed)
        };
        self.comm.start_send(packed, Peer::Rank(to), self.tag, SendMode::Standard, self.comm.context | 1)
    }

    /// Posts the receive of a serde message from `from`, of any length.
    fn post_serialized(&self, from: usize) -> Result<Posted> {
        if let Some(e) = self.fails_at_once() {
            return Err(e);
        }
        let id = self.comm.post_recv(from, self.tag, self.comm.context | 1, None)?.expect("a rank, never the null process");
        Ok(Posted { raw: RawRecv::new(self.comm.shared.clone(), id), from, count: 0, salt: self.salt })
    }
}

impl Posted {
    /// Waits for a serde message and returns its bytes.
    async fn serialized(self) -> Result<Bytes> {
        let Posted { raw, from, salt, .. } = self;
        let world = raw.shared().size;
        let msg = raw.await?;
        if let Some(e) = word_of_giving_up(&msg, from, world) {
            return Err(e);
        }
        let msg = unsalted(msg, salt);
        match msg.envelope.signature {
            Some(SERIALIZED_SIGNATURE) => Ok(msg.data),
            _ => {
                let e = ErrorKind::CollectiveMismatch { rank: from, detail: "it sent typed data where a serde value was expected".into() }.into();
                Err(salted_mismatch(e, salt))
            }
        }
    }
}

/// `value` serialized.
fn bytes_of<T: Serialize + ?Sized>(value: &T) -> Result<Bytes> {
    serialize(value).map(|p| p.data)
}

impl Comm {
    /// `MPI_Bcast` of a serde value: the root's `value` replaces every
    /// other rank's (a binomial tree; the root serializes once, and each
    /// rank passes the bytes on as they came).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// let mut config = if comm.rank() == 0 { vec![String::from("fast"), String::from("safe")] } else { Vec::new() };
    /// comm.bcast_serde(&mut config, 0).await?;
    /// assert_eq!(config, ["fast", "safe"]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`bcast`](Comm::bcast)).
    pub fn bcast_serde<'a, T: Serialize + DeserializeOwned + Send>(&self, value: &'a mut T, root: usize) -> Collective<'a> {
        // Salted with the root, and every rank watching for stray data, as
        // in `bcast`.
        let call = Call::start(self).salted(root_salt(BCAST_ROOTED, root));
        let started = (|| -> Result<_> {
            call.check_root(root)?;
            let (parent, children) = binomial(call.size(), root, call.rank());
            let from_parent = parent.map(|p| call.post_serialized(p)).transpose()?;
            let (bytes, sends) = match from_parent {
                Some(_) => (None, Vec::new()),
                None => {
                    let bytes = bytes_of(&*value)?;
                    let sends = children.iter().map(|&c| call.send_serialized(&bytes, c)).collect();
                    (Some(bytes), sends)
                }
            };
            Ok((from_parent, children, bytes, sends))
        })();
        Collective::new(call.clone(), async move {
            let (from_parent, children, _, sends) = started?;
            match from_parent {
                Some(posted) => {
                    let from = Some(posted.from);
                    let part = async {
                        let bytes = posted.serialized().await?;
                        let sends: Vec<_> = children.iter().map(|&c| call.send_serialized(&bytes, c)).collect();
                        *value = deserialize(&bytes)?;
                        sent(sends).await
                    };
                    call.watching_for_stray_data("bcast", from, part).await
                }
                None => call.watching_for_stray_data("bcast", None, sent(sends)).await,
            }
        })
    }

    /// `MPI_Gather` of serde values: the root gets every rank's `value`, in
    /// rank order (`Some`); the other ranks `None`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// let report = format!("rank {} ok", comm.rank());
    /// if let Some(all) = comm.gather_serde(&report, 2).await? {
    ///     assert_eq!(all, ["rank 0 ok", "rank 1 ok", "rank 2 ok"]);
    /// }
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`bcast`](Comm::bcast)).
    pub fn gather_serde<T: Serialize + DeserializeOwned + Send + 'static>(&self, value: &T, root: usize) -> impl Future<Output = Result<Option<Vec<T>>>> + Send + 'static {
        let call = Call::start(self);
        let (n, me) = (call.size(), call.rank());
        let started = (|| -> Result<_> {
            call.check_root(root)?;
            let bytes = bytes_of(value)?;
            if me != root {
                return Ok((Vec::new(), vec![call.send_serialized(&bytes, root)], bytes));
            }
            let posted = (0..n).filter(|&r| r != me).map(|r| Ok((r, call.post_serialized(r)?))).collect::<Result<Vec<_>>>()?;
            Ok((posted, Vec::new(), bytes))
        })();
        guarded(call.clone(), async move {
            let (posted, sends, own) = started?;
            sent(sends).await?;
            if me != root {
                return Ok(None);
            }
            let mut all: Vec<Option<T>> = (0..n).map(|_| None).collect();
            all[me] = Some(deserialize(&own)?);
            for (r, p) in posted {
                all[r] = Some(deserialize(&p.serialized().await?)?);
            }
            Ok(Some(all.into_iter().map(|v| v.expect("every rank's value")).collect()))
        })
    }

    /// `MPI_Scatter` of serde values: the root's `values` (one per rank;
    /// ignored, and may be empty, elsewhere) go out, rank `r` getting
    /// `values[r]`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// let jobs: Vec<String> = if comm.rank() == 0 { (0..3).map(|r| "x".repeat(r)).collect() } else { Vec::new() };
    /// let mine: String = comm.scatter_serde(&jobs, 0).await?;
    /// assert_eq!(mine.len(), comm.rank());
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`bcast`](Comm::bcast)).
    pub fn scatter_serde<T: Serialize + DeserializeOwned + Send + 'static>(&self, values: &[T], root: usize) -> impl Future<Output = Result<T>> + Send + 'static {
        // Salted with the root, and every rank watching for stray data, as
        // in `scatter`.
        let call = Call::start(self).salted(root_salt(SCATTER_ROOTED, root));
        let (n, me) = (call.size(), call.rank());
        let started = (|| -> Result<_> {
            call.check_root(root)?;
            if me != root {
                return Ok((Some(call.post_serialized(root)?), Vec::new(), None));
            }
            super::check_len("scatter_serde: the root's values", values.len(), n)?;
            let sends = (0..n).filter(|&r| r != me).map(|r| Ok(call.send_serialized(&bytes_of(&values[r])?, r))).collect::<Result<Vec<_>>>()?;
            Ok((None, sends, Some(bytes_of(&values[me])?)))
        })();
        guarded(call.clone(), async move {
            let (posted, sends, own) = started?;
            let bytes = match (posted, own) {
                (Some(p), _) => {
                    let part = async {
                        let bytes = p.serialized().await?;
                        sent(sends).await?;
                        Ok(bytes)
                    };
                    call.watching_for_stray_data("scatter", Some(root), part).await?
                }
                (None, Some(own)) => {
                    call.watching_for_stray_data("scatter", None, sent(sends)).await?;
                    own
                }
                (None, None) => unreachable!("the root keeps its own"),
            };
            deserialize(&bytes)
        })
    }

    /// `MPI_Allgather` of serde values: every rank gets every rank's
    /// `value`, in rank order (a ring; each value is serialized once and
    /// passed on as the same bytes).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(3, |comm| async move {
    /// let names: Vec<String> = comm.allgather_serde(&format!("node-{}", comm.rank())).await?;
    /// assert_eq!(names, ["node-0", "node-1", "node-2"]);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Not cancel-safe (see [`bcast`](Comm::bcast)).
    pub fn allgather_serde<T: Serialize + DeserializeOwned + Send + 'static>(&self, value: &T) -> impl Future<Output = Result<Vec<T>>> + Send + 'static {
        let call = Call::start(self);
        let (n, me) = (call.size(), call.rank());
        let (left, right) = ((me + n - 1) % n, (me + 1) % n);
        let started = (|| -> Result<_> {
            let own = bytes_of(value)?;
            let posted = (0..n - 1).map(|_| call.post_serialized(left)).collect::<Result<Vec<_>>>()?;
            let first = (n > 1).then(|| call.send_serialized(&own, right));
            Ok((own, posted, first))
        })();
        guarded(call.clone(), async move {
            let (own, posted, first) = started?;
            let mut bytes: Vec<Option<Bytes>> = vec![None; n];
            bytes[me] = Some(own);
            let mut sends: Vec<Request<'static>> = first.into_iter().collect();
            for (k, p) in posted.into_iter().enumerate() {
                let owner = (me + 2 * n - k - 1) % n;
                let got = p.serialized().await?;
                if k + 2 < n {
                    sends.push(call.send_serialized(&got, right));
                }
                bytes[owner] = Some(got);
            }
            sent(sends).await?;
            bytes.into_iter().map(|b| deserialize(&b.expect("every rank's value"))).collect::<Result<Vec<T>>>()
        })
    }
}
