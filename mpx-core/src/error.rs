//! The one error type of mpx.
//!
//! Every fallible operation returns [`Result<T>`](Result). An [`Error`] is
//! one pointer wide (its [`ErrorKind`] lives in a box), so that a
//! `Result<()>` travels in registers through every layer of a future
//! instead of being copied through memory. Its kinds follow MPI's error
//! classes so that a user who knows MPI can tell at a glance what went
//! wrong; each kind carries the values that explain it.


/// Shorthand for `Result<T, mpx::Error>`.
///
/// ```
/// use mpx::{Datatype, Result};
/// fn rows(n: usize, len: usize) -> Result<Datatype> {
///     Datatype::contiguous(n, &Datatype::contiguous(len, &Datatype::double())?)
/// }
/// assert_eq!(rows(3, 4)?.size(), 96);
/// assert!(rows(3, usize::MAX).is_err());
/// # Ok::<(), mpx::Error>(())
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in mpx: an [`ErrorKind`], boxed.
///
/// `Error` is `Send + Sync + 'static` so it crosses tasks and threads, and it
/// implements [`std::error::Error`]. Look at what went wrong with
/// [`kind`](Error::kind) (or take it with [`into_kind`](Error::into_kind));
/// an error and its kind compare equal (either way round), and any kind
/// converts into an error with `into()` or `?`. mpx hands out `Error`s
/// only: an `ErrorKind` is an error too, but one boxed as a
/// `dyn std::error::Error` downcasts to `ErrorKind`, not to `Error`
/// ([`Error::user`] takes either back).
///
/// ```
/// use mpx::{Datatype, Error, ErrorKind};
/// let err = Datatype::contiguous(-1, &Datatype::double()).unwrap_err();
/// assert!(matches!(err.kind(), ErrorKind::InvalidCount { value: -1, .. }));
/// assert_eq!(Error::from(ErrorKind::TypeMismatch), ErrorKind::TypeMismatch);
/// assert_eq!(ErrorKind::TypeMismatch, Error::from(ErrorKind::TypeMismatch));
/// assert_eq!(std::mem::size_of::<mpx::Result<()>>(), std::mem::size_of::<usize>());
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Error(Box<ErrorKind>);

/// What went wrong: the variants of an [`Error`], after MPI's error classes.
///
/// ```
/// use mpx::{Datatype, ErrorKind};
/// let err = Datatype::contiguous(-1, &Datatype::double()).unwrap_err();
/// match err.kind() {
///     ErrorKind::InvalidCount { what, value } => assert_eq!(*value, -1, "{what}"),
///     other => panic!("unexpected {other}"),
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A count argument is negative or otherwise out of range (MPI_ERR_COUNT).
    #[error("invalid count {value} for {what}")]
    InvalidCount {
        /// Which argument was wrong.
        what: &'static str,
        /// The value given.
        value: i64,
    },
    /// An argument is invalid (MPI_ERR_ARG): mismatched array lengths,
    /// subarray starts out of range, darray grids that do not fit, ...
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Size, extent or displacement arithmetic overflowed 64 bits.
    #[error("arithmetic overflow computing {0}")]
    Overflow(&'static str),
    /// An operation that needs a derived datatype was given a predefined one,
    /// or the datatype cannot be used here (MPI_ERR_TYPE).
    #[error("invalid datatype: {0}")]
    InvalidDatatype(String),
    /// The output buffer is too small for the data (MPI_ERR_TRUNCATE).
    #[error("truncated: {needed} bytes needed, {available} available{}", message_text(.message))]
    Truncate {
        /// Bytes the operation needs.
        needed: u64,
        /// Bytes there are.
        available: u64,
        /// For a receive, the message it took, as its status would name it
        /// (MPI's status of a truncated receive): its sender's rank in the
        /// communicator and its tag. `None` for packing and unpacking, and
        /// where the receive no longer knows its message (one dropped part
        /// way that failed taking its data).
        message: Option<(usize, i32)>,
    },
    /// Input ended before the data it should contain (a short packed buffer,
    /// a short frame).
    #[error("input too short: {requested} bytes requested, {available} available")]
    ShortInput {
        /// Bytes the operation needs to read.
        requested: u64,
        /// Bytes there are.
        available: u64,
    },
    /// The memory a datatype touches over `count` items does not fit in the
    /// buffer given (it would read or write outside it).
    #[error("out of bounds: the datatype touches bytes [{low}, {high}) relative to the buffer start, which holds {len} bytes")]
    OutOfBounds {
        /// Lowest byte touched, relative to the buffer's first byte.
        low: i128,
        /// One past the highest byte touched.
        high: i128,
        /// Length of the buffer.
        len: usize,
    },
    /// Operations sharing one buffer overlap where MPI forbids it: a
    /// receive's typemap shares a byte with another receive's (or with
    /// itself), or with a send's. `first` and `second` are the two parts'
    /// positions in the list given (equal when a receive overlaps itself);
    /// nothing was started. A receive or unpack on its own whose typemap
    /// writes a byte twice (entries of one item, or items that reach into
    /// each other) fails so too, as part 0 of its buffer, before anything
    /// is written or posted.
    #[error("overlapping typemaps: parts {first} and {second} of one buffer both touch byte {byte}, and at least one writes it")]
    Overlap {
        /// Position of the first part.
        first: usize,
        /// Position of the second part (`first <= second`).
        second: usize,
        /// A byte both touch, relative to the buffer's first byte.
        byte: usize,
    },
    /// Received bytes hold a value that is not valid for the Rust type they
    /// are unpacked into (a `bool` that is not 0 or 1, a `char` that is not a
    /// Unicode scalar value, ...). The destination is left unchanged.
    #[error("invalid value for {type_name} in item {item}")]
    InvalidValue {
        /// The Rust type that rejected the value.
        type_name: &'static str,
        /// Index of the first offending item.
        item: usize,
    },
    /// A value cannot be represented in the target data representation
    /// (for example a `long` outside 32 bits in external32).
    #[error("value of {what} does not fit the {representation} representation")]
    Conversion {
        /// The basic type being converted.
        what: &'static str,
        /// The representation that cannot hold it.
        representation: &'static str,
    },
    /// A rank argument is out of range for the communicator (MPI_ERR_RANK).
    #[error("invalid rank {rank}: the communicator has {size} ranks")]
    InvalidRank {
        /// The rank given.
        rank: usize,
        /// The communicator's size.
        size: usize,
    },
    /// A tag is negative or above [`TAG_UB`](crate::TAG_UB) (MPI_ERR_TAG).
    #[error("invalid tag {0}: user tags are 0..=TAG_UB")]
    InvalidTag(i32),
    /// The message's type signature does not match the receive's
    /// (MPI_ERR_TYPE): for example `float` data received as `byte`.
    #[error("type mismatch: the message's type signature does not match the receive's datatype")]
    TypeMismatch,
    /// A value could not be serialized for a serde message, or a serde
    /// message's bytes do not deserialize into the type asked for (corrupt
    /// bytes, or a value of another type).
    #[error("serialization: {0}")]
    Serialization(String),
    /// A buffered send does not fit in the attached buffer, or no buffer is
    /// attached (MPI_ERR_BUFFER).
    #[error("buffered send of {needed} bytes does not fit: {available} of the attached buffer are free")]
    BufferExhausted {
        /// Bytes the send needs, overhead included.
        needed: u64,
        /// Bytes free in the attached buffer.
        available: u64,
    },
    /// A buffer is already attached, or none is attached to detach.
    #[error("{0}")]
    BufferState(&'static str),
    /// A ready-mode send found no matching receive posted; the message was
    /// not delivered.
    #[error("ready send: no matching receive was posted at the destination")]
    NotReady,
    /// The operation was cancelled.
    #[error("operation cancelled")]
    Cancelled,
    /// A collective's ranks disagree: what this rank received from `rank`
    /// (or was told by it) does not match this rank's own part: another
    /// count or type, or the peer gave up on the collective.
    #[error("collective mismatch with rank {rank}: {detail}")]
    CollectiveMismatch {
        /// The rank, in the communicator, whose part disagrees.
        rank: usize,
        /// What disagrees.
        detail: String,
    },
    /// The peer the operation depends on has failed or finished.
    #[error("process {rank} failed or finished: {reason}")]
    ProcessFailed {
        /// The peer's rank in the world.
        rank: usize,
        /// What happened.
        reason: String,
        /// The error that made this rank fail the peer, if one did (its
        /// connection broke: an [`ErrorKind::Transport`] with the I/O or TLS
        /// error inside; it broke the protocol: an [`ErrorKind::Protocol`]),
        /// kept as the error's [`source`](std::error::Error::source).
        #[source]
        cause: Option<Cause>,
    },
    /// A peer sent a frame that violates the protocol; its connection is closed.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The transport failed; the cause is kept as the error's
    /// [`source`](std::error::Error::source).
    #[error("transport error: {context}")]
    Transport {
        /// What the transport was doing.
        context: String,
        /// The underlying error (an I/O or TLS error, a closed connection).
        #[source]
        source: Cause,
    },
    /// An error of the program's own: a rank's closure (see `launch`)
    /// returned an error that is not an mpx one, or the program made one
    /// with [`Error::user`].
    ///
    /// The errors a rank's program most often meets besides mpx's own convert
    /// with `?` into this variant (keeping the error as its cause): I/O,
    /// parse and UTF-8 errors, tokio's timeout (`Elapsed`, so
    /// `timeout(d, comm.recv::<T>(..)).await??` works) and a joined task's
    /// failure (`JoinError`), and a message as a `String` or `&str` (a
    /// timeout branch's `Err("no reply in time".into())`). Any other error
    /// converts with [`Error::user`], through a `Box<dyn Error + Send +
    /// Sync>`, or with `?` once the program has an
    /// `impl From<ItsError> for mpx::Error` that calls [`Error::user`].
    ///
    /// ```
    /// fn rank_program(reply: Option<&str>) -> mpx::Result<u32> {
    ///     let Some(text) = reply else { return Err("no reply in time".into()) };
    ///     let n: u32 = text.parse()?; // ParseIntError
    ///     std::fs::metadata("/no/such/file")?; // io::Error
    ///     Ok(n)
    /// }
    /// let e = rank_program(Some("42")).unwrap_err();
    /// assert!(matches!(e.kind(), mpx::ErrorKind::User(cause) if cause.0.is::<std::io::Error>()));
    /// assert_eq!(rank_program(Some("x")).unwrap_err().to_string(), "invalid digit found in string");
    /// assert_eq!(rank_program(None).unwrap_err().to_string(), "no reply in time");
    /// ```
    #[error(transparent)]
    User(Cause),
    /// The operation was started on an endpoint whose program has ended
    /// (its `launch` returned): nothing can be sent or received through it.
    #[error("the endpoint is finalized: its program has ended")]
    Finalized,
    /// A rank's program panicked; `launch` reports this rather than the
    /// failures it caused on other ranks.
    #[error("rank {rank} panicked: {message}")]
    RankPanicked {
        /// The rank that panicked.
        rank: usize,
        /// The panic's message.
        message: String,
    },
}

/// An error from outside mpx (the cause of an [`ErrorKind::Transport`], or a
/// program's own error in [`ErrorKind::User`]), shared so that [`Error`] stays
/// `Clone`.
#[derive(Debug, Clone)]
pub struct Cause(pub std::sync::Arc<dyn std::error::Error + Send + Sync + 'static>);

impl Cause {
    /// Wraps any error.
    ///
    /// ```
    /// use mpx::{Cause, Error, ErrorKind};
    /// let cause = Cause::new(std::io::Error::new(std::io::ErrorKind::TimedOut, "no reply"));
    /// assert!(cause.0.downcast_ref::<std::io::Error>().is_some());
    /// let e = Error::from(ErrorKind::User(cause.clone()));
    /// assert_eq!(e.to_string(), "no reply");
    /// assert_eq!(e, ErrorKind::User(cause)); // causes compare by identity
    /// ```
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Cause {
        Cause(std::sync::Arc::new(error))
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Cause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl PartialEq for Cause {
    /// Causes compare by identity (the same underlying error).
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Cause {}

impl Error {
    /// What went wrong.
    ///
    /// ```
    /// use mpx::{Datatype, ErrorKind};
    /// let err = Datatype::contiguous(-1, &Datatype::double()).unwrap_err();
    /// assert!(matches!(err.kind(), ErrorKind::InvalidCount { .. }));
    /// ```
    #[inline]
    pub fn kind(&self) -> &ErrorKind {
        &self.0
    }

    /// What went wrong, to change in place.
    #[inline]
    pub(crate) fn kind_mut(&mut self) -> &mut ErrorKind {
        &mut self.0
    }

    /// What went wrong, taken out of the error.
    ///
    /// ```
    /// use mpx::{Error, ErrorKind};
    /// let e = Error::from(ErrorKind::InvalidTag(-3));
    /// let ErrorKind::InvalidTag(tag) = e.into_kind() else { unreachable!() };
    /// assert_eq!(tag, -3);
    /// ```
    #[inline]
    pub fn into_kind(self) -> ErrorKind {
        *self.0
    }

    /// The program's own error `e` as an mpx error: [`ErrorKind::User`], or
    /// `e` itself if it is already an mpx error (an [`Error`] or an
    /// [`ErrorKind`]). Any error type, a `String` or a `&str` converts.
    ///
    /// ```
    /// use mpx::{Error, ErrorKind};
    /// #[derive(Debug)]
    /// struct Overheated(f64);
    /// impl std::fmt::Display for Overheated {
    ///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    ///         write!(f, "{} degrees", self.0)
    ///     }
    /// }
    /// impl std::error::Error for Overheated {}
    ///
    /// let e = Error::user(Overheated(451.0));
    /// assert!(matches!(e.kind(), ErrorKind::User(cause) if cause.0.downcast_ref::<Overheated>().is_some()));
    /// assert_eq!(e.to_string(), "451 degrees");
    /// assert_eq!(Error::user("no reply in time").to_string(), "no reply in time");
    /// assert_eq!(Error::user(Error::from(ErrorKind::TypeMismatch)), ErrorKind::TypeMismatch);
    /// assert_eq!(Error::user(ErrorKind::TypeMismatch), ErrorKind::TypeMismatch);
    /// ```
    pub fn user(e: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>) -> Error {
        let e = match e.into().downcast::<Error>() {
            Ok(mpx) => return *mpx,
            Err(other) => other,
        };
        match e.downcast::<ErrorKind>() {
            Ok(kind) => Error(kind),
            Err(other) => ErrorKind::User(Cause(std::sync::Arc::from(other))).into(),
        }
    }

    /// Rank `rank` failed or finished, for `reason`, with no underlying
    /// error.
    pub(crate) fn process_failed(rank: u32, reason: impl Into<String>) -> Error {
        ErrorKind::ProcessFailed { rank: rank as usize, reason: reason.into(), cause: None }.into()
    }

    /// What an operation that depends on rank `rank` gets once `cause`
    /// made this rank fail it: [`ErrorKind::ProcessFailed`] naming the
    /// rank, with `cause` as its source (or `cause` itself if it already
    /// says that rank failed).
    ///
    /// ```
    /// use std::error::Error as _;
    /// use mpx::{Error, ErrorKind};
    /// let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
    /// let e = Error::peer_failure(3, Error::transport("reading from rank 3", io));
    /// assert!(matches!(e.kind(), ErrorKind::ProcessFailed { rank: 3, .. }));
    /// let cause = e.source().unwrap();
    /// assert_eq!(cause.to_string(), "transport error: reading from rank 3");
    /// assert_eq!(cause.source().unwrap().to_string(), "reset by peer");
    /// ```
    pub fn peer_failure(rank: usize, cause: Error) -> Error {
        match cause.kind() {
            ErrorKind::ProcessFailed { rank: r, .. } if *r == rank => cause,
            _ => ErrorKind::ProcessFailed { rank, reason: cause.to_string(), cause: Some(Cause::new(cause)) }.into(),
        }
    }

    /// A transport error with its cause.
    ///
    /// ```
    /// use std::error::Error as _;
    /// let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
    /// let e = mpx::Error::transport("writing to rank 3", io);
    /// assert_eq!(e.source().unwrap().to_string(), "reset by peer");
    /// ```
    pub fn transport(context: impl Into<String>, cause: impl std::error::Error + Send + Sync + 'static) -> Error {
        ErrorKind::Transport { context: context.into(), source: Cause::new(cause) }.into()
    }
}

impl From<ErrorKind> for Error {
    #[inline]
    fn from(kind: ErrorKind) -> Error {
        Error(Box::new(kind))
    }
}

impl PartialEq<ErrorKind> for Error {
    /// An error equals its kind.
    fn eq(&self, kind: &ErrorKind) -> bool {
        *self.0 == *kind
    }
}

impl PartialEq<Error> for ErrorKind {
    /// A kind equals an error of that kind.
    fn eq(&self, error: &Error) -> bool {
        *self == *error.0
    }
}

impl From<Error> for ErrorKind {
    /// As [`Error::into_kind`].
    #[inline]
    fn from(error: Error) -> ErrorKind {
        error.into_kind()
    }
}

impl std::fmt::Debug for Error {
    /// As its kind's.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::fmt::Display for Error {
    /// As its kind's.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl From<Box<dyn std::error::Error + Send + Sync + 'static>> for Error {
    /// As [`Error::user`].
    fn from(e: Box<dyn std::error::Error + Send + Sync + 'static>) -> Error {
        Error::user(e)
    }
}

// The errors a rank's program most often meets besides mpx's own: see
// `ErrorKind::User`.
macro_rules! user_errors {
    ($($t:ty),*) => {$(
        impl From<$t> for Error {
            fn from(e: $t) -> Error {
                Error::user(e)
            }
        }
    )*};
}

user_errors!(
    std::io::Error,
    std::num::ParseIntError,
    std::num::ParseFloatError,
    std::str::Utf8Error,
    std::string::FromUtf8Error,
    std::fmt::Error,
    String,
    &str,
    tokio::time::error::Elapsed,
    tokio::task::JoinError
);

/// The end of [`ErrorKind::Truncate`]'s text: the message, if a receive's.
fn message_text(message: &Option<(usize, i32)>) -> String {
    match message {
        Some((source, tag)) => format!(" (the message from rank {source} with tag {tag})"),
        None => String::new(),
    }
}
