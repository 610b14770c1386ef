//! PMI, the process-management interface launchers offer their processes:
//! MPICH's hydra (`mpiexec`), Slurm's `srun --mpi=pmi2`, and `mpxrun`. A
//! process gets a socket to its launcher (`PMI_FD`, or `PMI_PORT` for a
//! TCP address) and its rank and size (`PMI_RANK`, `PMI_SIZE`); through
//! the socket it stores values in a key-value space shared by the job,
//! meets the other processes at a barrier, and reads their values.
//!
//! Two wire forms exist, and mpx speaks both ([`Version`]). Every
//! connection opens with one PMI-1 line, `cmd=init pmi_version=V
//! pmi_subversion=S`, answered by `cmd=response_to_init pmi_version=V
//! pmi_subversion=S rc=0`; mpx asks for version 2 and falls back to 1 if
//! the launcher declines.
//!
//! **PMI-1** (MPICH's `simple_pmi`; Flux's RFC 13): each message is a line
//! of space-separated `key=value` fields, the first `cmd=<name>`:
//!
//! | client | launcher |
//! |---|---|
//! | `cmd=get_maxes` | `cmd=maxes rc=0 kvsname_max=K keylen_max=L vallen_max=V` |
//! | `cmd=get_my_kvsname` | `cmd=my_kvsname rc=0 kvsname=NAME` |
//! | `cmd=put kvsname=NAME key=K value=V` | `cmd=put_result rc=0` |
//! | `cmd=barrier_in` | `cmd=barrier_out` (once every rank has entered) |
//! | `cmd=get kvsname=NAME key=K` | `cmd=get_result rc=0 value=V` (`rc` not 0: no such key) |
//! | `cmd=finalize` | `cmd=finalize_ack` |
//!
//! **PMI-2** (MPICH's "PMI-2 Wire Protocol"; Slurm's `mpi/pmi2` plugin):
//! each message is its length in six ASCII characters (a decimal number,
//! padded with blanks), then that many bytes of `key=value;` fields, the
//! first `cmd=<name>;`, a `;` inside a value doubled:
//!
//! | client | launcher |
//! |---|---|
//! | `cmd=fullinit;pmijobid=J;pmirank=R;threaded=FALSE;` | `cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank=R;size=N;...` |
//! | `cmd=job-getid;` | `cmd=job-getid-response;rc=0;jobid=J;` |
//! | `cmd=kvs-put;key=K;value=V;` | `cmd=kvs-put-response;rc=0;` |
//! | `cmd=kvs-fence;` | `cmd=kvs-fence-response;rc=0;` (once every rank has entered) |
//! | `cmd=kvs-get;jobid=J;srcid=-1;key=K;` | `cmd=kvs-get-response;rc=0;found=TRUE;value=V;` (`found=FALSE`: no such key) |
//! | `cmd=finalize;` | `cmd=finalize-response;rc=0;` |
//!
//! (The published protocol names the found flag `flag`; Slurm and hydra
//! send `found`; mpx reads either.)
//!
//! The parts: [`Message`] and [`Decoder`] are the sans-IO layer (parsing,
//! encoding and framing messages of either form); [`Client`] is a rank's
//! side over a blocking socket; [`KvSpace`] is the launcher's side, bytes
//! in and bytes out, used by `mpxrun`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use mpx_core::{Error, ErrorKind, Result};

/// Longest message either side accepts: a launcher's answer, or a
/// client's request to `mpxrun`.
pub const MAX_LINE: usize = 64 << 10;

/// A wire form of PMI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Version {
    /// Lines of space-separated fields (PMI 1.1).
    #[default]
    V1,
    /// Length-prefixed messages of `;`-terminated fields (PMI 2.0).
    V2,
}

impl Version {
    /// Reads a version as `MPX_PMI_VERSION` spells it: `1` or `2`.
    ///
    /// ```
    /// use mpx_net::bootstrap::pmi::Version;
    /// assert_eq!(Version::parse("2")?, Version::V2);
    /// assert!(Version::parse("3").is_err());
    /// # Ok::<(), mpx_core::Error>(())
    /// ```
    pub fn parse(text: &str) -> Result<Version> {
        match text.trim() {
            "1" => Ok(Version::V1),
            "2" => Ok(Version::V2),
            other => Err(ErrorKind::InvalidArgument(format!("PMI version {other:?}: mpx speaks 1 and 2")).into()),
        }
    }

    /// The `pmi_version` and `pmi_subversion` of the opening line.
    fn numbers(self) -> (u32, u32) {
        match self {
            Version::V1 => (1, 1),
            Version::V2 => (2, 0),
        }
    }
}

/// One message of either form: its command and fields.
///
/// ```
/// use mpx_net::bootstrap::pmi::{Message, Version};
/// let m = Message::parse("cmd=get_result rc=0 value=10.0.0.1:7000,ab12\n")?;
/// assert_eq!(m.cmd, "get_result");
/// assert_eq!(m.get("value"), Some("10.0.0.1:7000,ab12"));
/// assert_eq!(Message::new("barrier_in").encode(Version::V1), b"cmd=barrier_in\n");
/// let put = Message::new("kvs-put").with("key", "a").with("value", "x;y");
/// assert_eq!(put.encode(Version::V2), b"    29cmd=kvs-put;key=a;value=x;;y;");
/// assert_eq!(Message::parse_v2("cmd=kvs-put;key=a;value=x;;y;")?, put);
/// # Ok::<(), mpx_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The command (`cmd=`).
    pub cmd: String,
    /// The other fields, in order.
    pub fields: Vec<(String, String)>,
}

impl Message {
    /// A message of `cmd` with no fields yet.
    pub fn new(cmd: &str) -> Message {
        Message { cmd: cmd.to_string(), fields: Vec::new() }
    }

    /// Adds a field (over PMI-1 a value must hold no space or newline: see
    /// [`check_value`]).
    pub fn with(mut self, key: &str, value: impl ToString) -> Message {
        self.fields.push((key.to_string(), value.to_string()));
        self
    }

    /// The value of field `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The message on the wire: a line (PMI-1), or the length and the
    /// fields (PMI-2).
    pub fn encode(&self, version: Version) -> Vec<u8> {
        match version {
            Version::V1 => {
                let mut line = format!("cmd={}", self.cmd);
                for (k, v) in &self.fields {
                    line.push(' ');
                    line.push_str(k);
                    line.push('=');
                    line.push_str(v);
                }
                line.push('\n');
                line.into_bytes()
            }
            Version::V2 => {
                let mut body = format!("cmd={};", self.cmd);
                for (k, v) in &self.fields {
                    body.push_str(k);
                    body.push('=');
                    body.push_str(&v.replace(';', ";;"));
                    body.push(';');
                }
                format!("{:>6}{body}", body.len()).into_bytes()
            }
        }
    }

    /// Parses one PMI-1 line (its newline optional). A line that does not
    /// start with `cmd=`, or has a field without `=`, is an error.
    pub fn parse(line: &str) -> Result<Message> {
        let bad = || -> Error { ErrorKind::Protocol(format!("a malformed PMI line: {:?}", truncated(line))).into() };
        let mut words = line.trim_end_matches(['\n', '\r']).split(' ').filter(|w| !w.is_empty());
        let cmd = words.next().and_then(|w| w.strip_prefix("cmd=")).ok_or_else(bad)?;
        let fields = words
            .map(|w| w.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())).ok_or_else(bad))
            .collect::<Result<_>>()?;
        Ok(Message { cmd: cmd.to_string(), fields })
    }

    /// Parses the body of one PMI-2 message (after its length): fields
    /// ended by `;`, `;;` standing for a `;` inside one. The first field
    /// must be `cmd=`, and every field must hold a `=`.
    pub fn parse_v2(body: &str) -> Result<Message> {
        let bad = || -> Error { ErrorKind::Protocol(format!("a malformed PMI-2 message: {:?}", truncated(body))).into() };
        let mut fields = Vec::new();
        let mut field = String::new();
        let mut chars = body.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                ';' if chars.peek() == Some(&';') => {
                    chars.next();
                    field.push(';');
                }
                ';' => fields.push(std::mem::take(&mut field)),
                c => field.push(c),
            }
        }
        if !field.is_empty() {
            fields.push(field); // a last field without its ';'
        }
        let mut pairs = fields.into_iter().map(|f| f.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())).ok_or_else(bad));
        let (key, cmd) = pairs.next().ok_or_else(bad)??;
        if key != "cmd" {
            return Err(bad());
        }
        Ok(Message { cmd, fields: pairs.collect::<Result<_>>()? })
    }

    /// The `rc` field is 0 (or absent).
    fn ok(self, context: &str) -> Result<Message> {
        match self.get("rc") {
            None | Some("0") => Ok(self),
            Some(rc) => Err(ErrorKind::Protocol(format!(
                "the launcher refused {context} (rc={rc}{})",
                self.get("msg").or(self.get("errmsg")).map(|m| format!(": {m}")).unwrap_or_default()
            )).into()),
        }
    }

    /// The integer in field `key`.
    fn number(&self, key: &str) -> Result<u32> {
        let v = self.get(key).ok_or_else(|| ErrorKind::Protocol(format!("the launcher's {:?} gave no {key}", self.cmd)))?;
        v.trim().parse().map_err(|_| ErrorKind::Protocol(format!("the launcher's {:?} gave {key}={v:?}", self.cmd)).into())
    }
}

fn truncated(s: &str) -> &str {
    match s.char_indices().nth(200) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Checks that `value` can travel as a PMI value in either form:
/// non-empty, no spaces, newlines or `=`, and at most `max` bytes.
pub fn check_value(value: &str, max: usize) -> Result<()> {
    if value.is_empty() || value.len() > max || value.contains([' ', '\n', '\r', '=']) {
        return Err(ErrorKind::InvalidArgument(format!("{:?} cannot be a PMI value (at most {max} bytes, no spaces)", truncated(value))).into());
    }
    Ok(())
}

/// Cuts a byte stream into messages of either form, holding at most one
/// message of [`MAX_LINE`] bytes: the sans-IO framing both sides use.
///
/// ```
/// use mpx_net::bootstrap::pmi::{Decoder, Version};
/// let mut d = Decoder::default();
/// d.feed(b"cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0\n    23cmd=kvs-fence-resp");
/// assert_eq!(d.next(Version::V1)?.unwrap().get("pmi_version"), Some("2"));
/// assert!(d.next(Version::V2)?.is_none(), "the rest has not come");
/// d.feed(b"onse;");
/// assert_eq!(d.next(Version::V2)?.unwrap().cmd, "kvs-fence-response");
/// # Ok::<(), mpx_core::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
    /// Bytes at the start of `buf` known to hold no newline: a line fed
    /// a byte at a time is scanned once, not once per byte.
    scanned: usize,
}

impl Decoder {
    /// Adds bytes read from the socket.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes fed but not yet taken as messages.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// The next whole message in `version`'s form, `None` if more bytes
    /// are needed, or an error: a message that is malformed, not UTF-8, or
    /// over [`MAX_LINE`] bytes.
    pub fn next(&mut self, version: Version) -> Result<Option<Message>> {
        let (start, end) = match version {
            Version::V1 => match self.buf[self.scanned.min(self.buf.len())..].iter().position(|&b| b == b'\n') {
                Some(i) if self.scanned + i < MAX_LINE => (0, self.scanned + i + 1),
                None if self.buf.len() <= MAX_LINE => {
                    self.scanned = self.buf.len();
                    return Ok(None);
                }
                _ => return Err(ErrorKind::Protocol("a PMI line over the length limit".into()).into()),
            },
            Version::V2 => {
                let Some(header) = self.buf.get(..6) else { return Ok(None) };
                let len = std::str::from_utf8(header)
                    .ok()
                    .map(|h| h.trim_matches(' '))
                    .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|h| h.parse::<usize>().ok())
                    .ok_or_else(|| ErrorKind::Protocol(format!("a PMI-2 message whose length reads {:?}", String::from_utf8_lossy(header))))?;
                if len > MAX_LINE {
                    return Err(ErrorKind::Protocol(format!("a PMI-2 message of {len} bytes, over the limit of {MAX_LINE}")).into());
                }
                if self.buf.len() < 6 + len {
                    return Ok(None);
                }
                (6, 6 + len)
            }
        };
        let text = std::str::from_utf8(&self.buf[start..end]).map_err(|_| ErrorKind::Protocol("a PMI message that is not UTF-8".into()))?;
        let message = match version {
            Version::V1 => Message::parse(text),
            Version::V2 => Message::parse_v2(text),
        };
        self.buf.drain(..end);
        self.scanned = 0;
        message.map(Some)
    }
}

/// Reads from `stream` until `decoder` holds a whole message. With a
/// `deadline`, each read waits only for what is left of it (a launcher
/// dribbling its answer a byte at a time cannot stretch the wait), and the
/// stream is left with the read timeout it had (none: the longest a
/// socket takes, which is as good).
fn receive<S: Duplex + ?Sized>(stream: &mut S, decoder: &mut Decoder, version: Version, deadline: Option<Instant>) -> std::io::Result<Option<Message>> {
    let restore = match deadline {
        Some(_) => Some(Duplex::read_timeout(stream)?.unwrap_or(Duration::MAX)),
        None => None,
    };
    let answer = read_message(stream, decoder, version, deadline);
    if let Some(timeout) = restore {
        // The answer (or why there is none) matters more than this.
        if let Err(e) = Duplex::set_read_timeout(stream, timeout) {
            tracing::warn!(error = %e, "PMI: the socket's read timeout could not be restored");
        }
    }
    answer
}

/// [`receive`], leaving the stream's timeout as the deadline set it.
fn read_message<S: Duplex + ?Sized>(stream: &mut S, decoder: &mut Decoder, version: Version, deadline: Option<Instant>) -> std::io::Result<Option<Message>> {
    let mut chunk = [0u8; 4096];
    loop {
        match decoder.next(version) {
            Ok(Some(m)) => return Ok(Some(m)),
            Ok(None) => {}
            Err(e) => return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
        }
        if let Some(deadline) = deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(std::io::ErrorKind::TimedOut.into());
            }
            Duplex::set_read_timeout(stream, left)?;
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Ok(None);
        }
        decoder.feed(&chunk[..n]);
    }
}

/// A rank's side of PMI, over the socket its launcher handed it, with
/// blocking I/O (it runs at start-up, on a thread of its own).
pub struct Client<S: Duplex> {
    stream: S,
    decoder: Decoder,
    version: Version,
    /// The job's name: its key-value space (PMI-1) or job id (PMI-2).
    job: String,
    /// The longest value the launcher stores.
    vallen_max: usize,
    /// Ranks in the job, as the launcher tells at init (PMI-2 only).
    size: Option<u32>,
    /// Every answer comes by then, whatever the socket's read timeout
    /// (see [`Client::set_deadline`]).
    deadline: Option<Instant>,
}

impl<S: Duplex> std::fmt::Debug for Client<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("pmi::Client").field("version", &self.version).field("job", &self.job).finish()
    }
}

fn waiting(what: &str, e: std::io::Error) -> Error {
    let why = if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) {
        std::io::Error::new(std::io::ErrorKind::TimedOut, format!("no answer from the launcher in time while waiting for {what}"))
    } else {
        e
    };
    Error::transport(format!("PMI: {what}"), why)
}

impl<S: Duplex> Client<S> {
    /// Greets the launcher on `stream` as rank `rank`, in the `prefer`red
    /// form if the launcher speaks it and in PMI-1 otherwise, and learns
    /// the job's name (and, over PMI-2, its size). Over PMI-2, a launcher
    /// that gives this process another rank than `rank` is an error.
    pub fn init(stream: S, rank: u32, prefer: Version) -> Result<Client<S>> {
        Self::init_by(stream, rank, prefer, None)
    }

    /// [`init`](Client::init), its answers due by `deadline` (see
    /// [`set_deadline`](Client::set_deadline)), which stays set.
    pub fn init_by(stream: S, rank: u32, prefer: Version, deadline: Option<Instant>) -> Result<Client<S>> {
        let mut client = Client { stream, decoder: Decoder::default(), version: Version::V1, job: String::new(), vallen_max: 256, size: None, deadline };
        let greet = |client: &mut Client<S>, version: Version| {
            let (v, sub) = version.numbers();
            let answer = client.call(Message::new("init").with("pmi_version", v).with("pmi_subversion", sub), "response_to_init", "init")?;
            Ok::<_, Error>((answer.get("pmi_version").map(str::to_string), answer.get("rc").map(str::to_string)))
        };
        let (spoken, rc) = greet(&mut client, prefer)?;
        // A PMI answer: the launcher's socket.
        client.stream.answered();
        client.version = match (prefer, spoken.as_deref(), rc.as_deref()) {
            (Version::V2, Some("2"), None | Some("0")) => Version::V2,
            (_, Some("1"), None | Some("0")) => Version::V1,
            (Version::V2, _, _) => {
                // Declined: ask again for PMI-1.
                match greet(&mut client, Version::V1)? {
                    (Some(v), rc) if v == "1" && matches!(rc.as_deref(), None | Some("0")) => Version::V1,
                    (v, _) => return Err(ErrorKind::Protocol(format!("the launcher speaks PMI version {v:?}, neither 2 nor 1")).into()),
                }
            }
            (Version::V1, v, _) => return Err(ErrorKind::Protocol(format!("the launcher speaks PMI version {v:?}, not 1")).into()),
        };
        match client.version {
            Version::V1 => {
                let maxes = client.call(Message::new("get_maxes"), "maxes", "the key-value limits")?;
                client.vallen_max = maxes.get("vallen_max").and_then(|v| v.parse().ok()).unwrap_or(256);
                let name = client.call(Message::new("get_my_kvsname"), "my_kvsname", "the job's key-value space")?;
                client.job = name.get("kvsname").ok_or_else(|| ErrorKind::Protocol("the launcher named no key-value space".into()))?.to_string();
            }
            Version::V2 => {
                let jobid = std::env::var("PMI_JOBID").unwrap_or_else(|_| "0".into());
                let init = Message::new("fullinit").with("pmijobid", &jobid).with("pmirank", rank).with("threaded", "FALSE");
                let answer = client.call(init, "fullinit-response", "the launcher's welcome")?;
                let given = answer.number("rank")?;
                if given != rank {
                    return Err(ErrorKind::Protocol(format!("the launcher calls this process rank {given}, its environment rank {rank}")).into());
                }
                client.size = Some(answer.number("size")?);
                client.vallen_max = 1024; // PMI2_MAX_VALLEN
                let id = client.call(Message::new("job-getid"), "job-getid-response", "the job's id")?;
                client.job = id.get("jobid").ok_or_else(|| ErrorKind::Protocol("the launcher named no job id".into()))?.to_string();
            }
        }
        Ok(client)
    }

    /// The socket to the launcher.
    pub fn get_ref(&self) -> &S {
        &self.stream
    }

    /// The form this connection speaks.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The job's name in its launcher (its key-value space, or over PMI-2
    /// its job id): the same for every rank of the job.
    pub fn job_name(&self) -> &str {
        &self.job
    }

    /// Ranks in the job, if the launcher said (PMI-2 does, at init).
    pub fn size(&self) -> Option<u32> {
        self.size
    }

    /// The longest value the launcher keeps.
    pub fn vallen_max(&self) -> usize {
        self.vallen_max
    }

    /// Stores `key` = `value` in the job's space (seen by the others after
    /// the next [`barrier`](Client::barrier)).
    pub fn put(&mut self, key: &str, value: &str) -> Result<()> {
        check_value(value, self.vallen_max)?;
        let what = format!("storing {key}");
        let _ = match self.version {
            Version::V1 => {
                let m = Message::new("put").with("kvsname", &self.job).with("key", key).with("value", value);
                self.call(m, "put_result", &what)?
            }
            Version::V2 => self.call(Message::new("kvs-put").with("key", key).with("value", value), "kvs-put-response", &what)?,
        };
        Ok(())
    }

    /// Waits until every rank of the job has entered the barrier (PMI-2's
    /// fence), after which each sees the values all stored before it.
    pub fn barrier(&mut self) -> Result<()> {
        let what = "the other ranks at the start-up barrier";
        let _ = match self.version {
            Version::V1 => self.call(Message::new("barrier_in"), "barrier_out", what)?,
            Version::V2 => self.call(Message::new("kvs-fence"), "kvs-fence-response", what)?,
        };
        Ok(())
    }

    /// The value of `key` in the job's space; a key no rank stored is an
    /// error.
    pub fn get(&mut self, key: &str) -> Result<String> {
        let what = format!("the value of {key}");
        let missing = || -> Error { ErrorKind::Protocol(format!("the launcher has no value for {key}")).into() };
        match self.version {
            Version::V1 => {
                let m = Message::new("get").with("kvsname", &self.job).with("key", key);
                let answer = self.call(m, "get_result", &what)?;
                answer.get("value").map(str::to_string).ok_or_else(missing)
            }
            Version::V2 => {
                let m = Message::new("kvs-get").with("jobid", &self.job).with("srcid", -1).with("key", key);
                let answer = self.call(m, "kvs-get-response", &what)?;
                let found = answer.get("found").or(answer.get("flag")).is_some_and(|f| f.eq_ignore_ascii_case("true"));
                answer.get("value").filter(|_| found).map(str::to_string).ok_or_else(missing)
            }
        }
    }

    /// Sets a time by which every answer must come from now on (or none:
    /// each answer then takes at most the socket's read timeout), so that
    /// a start-up of many calls takes at most one timeout in all, however
    /// slowly a launcher answers each.
    pub fn set_deadline(&mut self, deadline: Option<Instant>) {
        self.deadline = deadline;
    }

    /// Tells the launcher this process is done with PMI.
    pub fn finalize(&mut self) -> Result<()> {
        let expect = match self.version {
            Version::V1 => "finalize_ack",
            Version::V2 => "finalize-response",
        };
        self.call(Message::new("finalize"), expect, "the launcher's goodbye").map(drop)
    }

    /// Sends `request` and reads the answer, which must be `expect` with
    /// `rc` 0 (the opening `init` is answered whatever its `rc`). The whole
    /// answer takes at most the socket's read timeout, however it arrives.
    fn call(&mut self, request: Message, expect: &str, what: &str) -> Result<Message> {
        // The opening line is PMI-1 in either form.
        let version = if request.cmd == "init" { Version::V1 } else { self.version };
        self.stream.write_all(&request.encode(version)).map_err(|e| waiting(what, e))?;
        self.stream.flush().map_err(|e| waiting(what, e))?;
        let socket = Duplex::read_timeout(&self.stream).map_err(|e| waiting(what, e))?.map(|t| Instant::now() + t);
        let deadline = match (socket, self.deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let answer = receive(&mut self.stream, &mut self.decoder, version, deadline)
            .map_err(|e| waiting(what, e))?
            .ok_or_else(|| ErrorKind::Protocol(format!("the launcher closed PMI while this rank waited for {what}")))?;
        if answer.cmd != expect {
            return Err(ErrorKind::Protocol(format!("the launcher answered {:?} to {:?} (waiting for {what})", answer.cmd, request.cmd)).into());
        }
        if request.cmd == "init" {
            return Ok(answer);
        }
        answer.ok(what)
    }
}

/// A socket to the launcher: either kind a launcher hands out (its
/// descriptor too, which a rank of `mpxrun` watches for a hang-up: see
/// the [bootstrap module docs](super)).
pub trait Duplex: std::io::Read + std::io::Write + Send + std::os::fd::AsFd {
    /// The longest a read (and a write) may wait.
    fn set_read_timeout(&self, timeout: Duration) -> std::io::Result<()>;

    /// The longest a read may wait; `None` for no limit.
    fn read_timeout(&self) -> std::io::Result<Option<Duration>>;

    /// The launcher has answered on the stream as a PMI server: it is the
    /// launcher's, and this process's to close (see [`connect`]). Nothing
    /// for a stream this process opened itself.
    fn answered(&mut self) {}
}

impl Duplex for std::os::unix::net::UnixStream {
    fn set_read_timeout(&self, timeout: Duration) -> std::io::Result<()> {
        std::os::unix::net::UnixStream::set_read_timeout(self, Some(timeout))?;
        self.set_write_timeout(Some(timeout))
    }

    fn read_timeout(&self) -> std::io::Result<Option<Duration>> {
        std::os::unix::net::UnixStream::read_timeout(self)
    }
}

impl Duplex for std::net::TcpStream {
    fn set_read_timeout(&self, timeout: Duration) -> std::io::Result<()> {
        std::net::TcpStream::set_read_timeout(self, Some(timeout))?;
        self.set_write_timeout(Some(timeout))
    }

    fn read_timeout(&self) -> std::io::Result<Option<Duration>> {
        std::net::TcpStream::read_timeout(self)
    }
}

impl<D: Duplex + ?Sized> Duplex for Box<D> {
    fn set_read_timeout(&self, timeout: Duration) -> std::io::Result<()> {
        (**self).set_read_timeout(timeout)
    }

    fn read_timeout(&self) -> std::io::Result<Option<Duration>> {
        (**self).read_timeout()
    }

    fn answered(&mut self) {
        (**self).answered()
    }
}

/// The socket `PMI_FD` names, taken on trust until the launcher answers
/// on it ([`Duplex::answered`]): dropped before, it is left open with the
/// flags it had (close-on-exec clear), for whatever in this process owns
/// it if the launcher does not (a `PMI_FD` inherited in the environment
/// of a program a rank started may name any descriptor there); dropped
/// after, it is closed.
struct HandedSocket {
    stream: std::mem::ManuallyDrop<std::os::unix::net::UnixStream>,
    answered: bool,
    /// The socket's read and write timeouts as it was found, put back if
    /// it is left open.
    found: (Option<Duration>, Option<Duration>),
}

impl std::io::Read for HandedSocket {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.stream.read(buf)
    }
}

impl std::io::Write for HandedSocket {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.stream.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.stream.flush()
    }
}

impl std::os::fd::AsFd for HandedSocket {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.stream.as_fd()
    }
}

impl Duplex for HandedSocket {
    fn set_read_timeout(&self, timeout: Duration) -> std::io::Result<()> {
        Duplex::set_read_timeout(&*self.stream, timeout)
    }

    fn read_timeout(&self) -> std::io::Result<Option<Duration>> {
        Duplex::read_timeout(&*self.stream)
    }

    fn answered(&mut self) {
        self.answered = true;
    }
}

impl Drop for HandedSocket {
    fn drop(&mut self) {
        if self.answered {
            // SAFETY: dropped once, here; the stream is not used again.
            unsafe { std::mem::ManuallyDrop::drop(&mut self.stream) };
            return;
        }
        // Not known to be the launcher's: left open, as it was found.
        let (read, write) = self.found;
        if self.stream.set_read_timeout(read).and_then(|()| self.stream.set_write_timeout(write)).is_err() {
            tracing::warn!("PMI: the timeouts of a socket PMI_FD named could not be put back");
        }
        use std::os::fd::AsRawFd;
        // SAFETY: fcntl on a descriptor that is open (the stream never
        // closed it); it clears the close-on-exec flag `connect` set.
        unsafe { libc::fcntl(self.stream.as_raw_fd(), libc::F_SETFD, 0) };
    }
}

/// Whether descriptor `fd` may be a launcher's PMI socket handed to this
/// process: an open socket, not standard input, output or error (never
/// the launcher's socket), with close-on-exec clear. A descriptor the
/// launcher passed across exec has it clear, and every descriptor Rust's
/// standard library opens has it set: a socket with it set was opened by
/// this process (a `PMI_FD` its environment inherited from a parent names
/// another socket here).
pub(crate) fn is_handed_socket(fd: std::os::fd::RawFd) -> bool {
    if fd <= 2 {
        return false;
    }
    // SAFETY: fstat writes only into the zeroed `stat` it is given.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above; an unopened descriptor is an error (EBADF).
    if unsafe { libc::fstat(fd, &mut stat) } != 0 || stat.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return false;
    }
    // SAFETY: F_GETFD only reads the descriptor's flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    flags != -1 && flags & libc::FD_CLOEXEC == 0
}

/// Opens the launcher's socket as `PMI_FD` or `PMI_PORT` names it, with
/// `timeout` as the longest any one answer may take. Over `PMI_PORT` (a
/// TCP `host:port`, for ranks on other hosts) the client first names
/// itself (`cmd=initack pmiid=<id>`, with `token=<token>` when the
/// launcher gave one: `mpxrun` refuses a connection without the token of
/// the rank it names), and the launcher answers `cmd=initack`, then
/// `cmd=set` lines.
///
/// # Safety
/// For [`Channel::Fd`], the descriptor must not be closed by anything
/// else in the process while the connection lives, nor used by anything
/// else once the launcher has answered on it (the launcher hands it over
/// for PMI alone; [`crate::bootstrap::start`] takes it once). One with
/// close-on-exec set, which this process opened itself, is refused, not
/// taken. The connection closes it when dropped only once the launcher
/// has answered on it ([`Client::init`]); dropped before, it leaves it
/// open, as it found it.
pub unsafe fn connect(channel: &Channel, timeout: Duration) -> Result<Box<dyn Duplex>> {
    match channel {
        Channel::Fd(fd) => {
            use std::os::fd::FromRawFd;
            // Standard input, output and error are never the launcher's
            // socket, and what is not an open socket is not one either.
            let not_socket = || -> Error { ErrorKind::InvalidArgument(format!("PMI_FD={fd} is not a socket this process was given")).into() };
            if !is_handed_socket(*fd) {
                return Err(not_socket());
            }
            // SAFETY: the descriptor is open (fstat said so) and stays
            // open while the stream lives (this function's contract); the
            // stream closes it only once the launcher has answered on it,
            // when it is the connection's alone (`HandedSocket`).
            let stream = std::mem::ManuallyDrop::new(unsafe { std::os::unix::net::UnixStream::from_raw_fd(*fd) });
            let found = (stream.read_timeout(), stream.write_timeout());
            let (Ok(read), Ok(write)) = found else { return Err(not_socket()) };
            let stream = HandedSocket { stream, answered: false, found: (read, write) };
            // Programs this rank starts do not inherit the launcher's
            // socket (cleared again should the launcher not answer).
            // SAFETY: fcntl on an open descriptor; it sets one flag.
            if unsafe { libc::fcntl(*fd, libc::F_SETFD, libc::FD_CLOEXEC) } == -1 {
                return Err(Error::transport("PMI socket", std::io::Error::last_os_error()));
            }
            Duplex::set_read_timeout(&stream, timeout).map_err(|e| Error::transport("PMI socket", e))?;
            Ok(Box::new(stream))
        }
        Channel::Port { addr, id, token } => {
            use std::net::ToSocketAddrs;
            let what = format!("PMI: connecting to the launcher at {addr}");
            let target = addr
                .to_socket_addrs()
                .map_err(|e| Error::transport(what.clone(), e))?
                .next()
                .ok_or_else(|| ErrorKind::InvalidArgument(format!("PMI_PORT={addr:?} names no address")))?;
            // A launcher with more connections waiting than its ranks could
            // make (strangers among them) drops new ones unanswered: dial
            // again until the timeout, a little later each time. (A refusal
            // it answers, a wrong token say, fails at once.)
            let deadline = Instant::now() + timeout;
            let mut pause = Duration::from_millis(20);
            let stream = loop {
                let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
                match welcomed(&target, &what, *id, token.as_deref(), left) {
                    Ok(stream) => break stream,
                    Err(Dial::Again(e)) if Instant::now() + pause < deadline => {
                        tracing::debug!(error = %e, "PMI: dialling the launcher again");
                        std::thread::sleep(pause);
                        pause = (pause * 2).min(Duration::from_millis(500));
                    }
                    Err(Dial::Again(e) | Dial::Fatal(e)) => return Err(e),
                }
            };
            // Every later answer may take the whole timeout again.
            Duplex::set_read_timeout(&stream, timeout).map_err(|e| Error::transport("PMI socket", e))?;
            Ok(Box::new(stream))
        }
    }
}

/// Why a dial of the launcher failed: worth another try (the connection
/// refused, or dropped before the welcome), or not.
enum Dial {
    Again(Error),
    Fatal(Error),
}

/// One dial of the launcher at `target`: the connection, this rank's
/// `initack` (its id and its token), and the launcher's welcome.
fn welcomed(target: &std::net::SocketAddr, what: &str, id: u32, token: Option<&str>, timeout: Duration) -> std::result::Result<std::net::TcpStream, Dial> {
    let again = |e: std::io::Error| Dial::Again(Error::transport(what.to_string(), e));
    let mut stream = std::net::TcpStream::connect_timeout(target, timeout).map_err(again)?;
    Duplex::set_read_timeout(&stream, timeout).map_err(|e| Dial::Fatal(Error::transport("PMI socket", e)))?;
    let _ = stream.set_nodelay(true);
    keep_alive(&stream);
    let mut hello = Message::new("initack").with("pmiid", id);
    if let Some(token) = token {
        hello = hello.with("token", token);
    }
    let what = "the launcher's welcome";
    std::io::Write::write_all(&mut stream, &hello.encode(Version::V1)).map_err(|e| Dial::Again(waiting(what, e)))?;
    // The welcome: initack, then the launcher's settings (size, rank,
    // debug: the last), all within the timeout.
    let mut decoder = Decoder::default();
    let deadline = Some(Instant::now() + timeout);
    loop {
        let m = match receive(&mut stream, &mut decoder, Version::V1, deadline) {
            Ok(Some(m)) => m,
            Ok(None) => return Err(Dial::Again(ErrorKind::Protocol("the launcher refused this rank's PMI connection".into()).into())),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe) => {
                return Err(Dial::Again(waiting(what, e)))
            }
            Err(e) => return Err(Dial::Fatal(waiting(what, e))),
        };
        match m.cmd.as_str() {
            "initack" => m.ok("this rank's PMI connection").map(drop).map_err(Dial::Fatal)?,
            "set" if m.get("size").is_some() || m.get("rank").is_some() => {}
            "set" if m.get("debug").is_some() => break,
            other => return Err(Dial::Fatal(ErrorKind::Protocol(format!("the launcher's welcome held {other:?}")).into())),
        }
    }
    if decoder.pending() > 0 {
        return Err(Dial::Fatal(ErrorKind::Protocol("the launcher spoke before it was asked".into()).into()));
    }
    Ok(stream)
}

/// TCP keep-alive on a PMI connection between hosts: an end whose host
/// vanishes without closing it (powered off, cut off) is found out within
/// about [`KEEP_ALIVE_AFTER`] plus three probes [`KEEP_ALIVE_EVERY`] apart,
/// and the connection fails, where it would wait for ever: a rank then
/// ends as it does when `mpxrun` is gone, and `mpxrun` stops serving it.
pub(crate) fn keep_alive(stream: &impl std::os::fd::AsFd) {
    let probes = socket2::TcpKeepalive::new().with_time(KEEP_ALIVE_AFTER).with_interval(KEEP_ALIVE_EVERY).with_retries(3);
    if let Err(e) = socket2::SockRef::from(stream).set_tcp_keepalive(&probes) {
        tracing::warn!(error = %e, "PMI: no TCP keep-alive on the connection");
    }
}

/// Silence on a PMI connection between hosts before its first keep-alive
/// probe (see [`keep_alive`]).
pub(crate) const KEEP_ALIVE_AFTER: Duration = Duration::from_secs(10);

/// Time between unanswered keep-alive probes (see [`keep_alive`]).
pub(crate) const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(5);

/// How a rank reaches its launcher's PMI server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Channel {
    /// An inherited socket (`PMI_FD`).
    Fd(i32),
    /// A TCP address (`PMI_PORT`), with the rank's id (`PMI_ID`) and its
    /// token (`MPX_PMI_TOKEN`), if any.
    Port {
        /// `host:port`.
        addr: String,
        /// The id the rank names itself with.
        id: u32,
        /// The rank's own secret, proving it is the rank the launcher
        /// started under that id.
        token: Option<String>,
    },
}

/// The launcher's side of PMI for one job, in either form: the key-value
/// space and the barrier, as a state machine that the launcher's I/O feeds
/// with the bytes each rank sends ([`KvSpace::receive`]) and that says
/// what bytes to send to whom. Each rank picks its form with its opening
/// line; ranks of one job may differ.
///
/// ```
/// use mpx_net::bootstrap::pmi::KvSpace;
/// let mut kvs = KvSpace::new("job-1", 2);
/// // Rank 0 speaks PMI-1, rank 1 PMI-2.
/// kvs.receive(0, b"cmd=init pmi_version=1 pmi_subversion=1\n")?;
/// let opened = kvs.receive(1, b"cmd=init pmi_version=2 pmi_subversion=0\n")?;
/// assert_eq!(opened, [(1, b"cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0\n".to_vec())]);
/// assert_eq!(kvs.receive(0, b"cmd=put kvsname=job-1 key=a value=1\n")?, [(0, b"cmd=put_result rc=0\n".to_vec())]);
/// assert!(kvs.receive(0, b"cmd=barrier_in\n")?.is_empty(), "rank 1 has not entered");
/// let out = kvs.receive(1, b"    14cmd=kvs-fence;")?;
/// assert_eq!(out, [(0, b"cmd=barrier_out\n".to_vec()), (1, b"    28cmd=kvs-fence-response;rc=0;".to_vec())]);
/// let got = kvs.receive(1, b"    39cmd=kvs-get;jobid=job-1;srcid=-1;key=a;")?;
/// assert_eq!(got, [(1, b"    45cmd=kvs-get-response;rc=0;found=TRUE;value=1;".to_vec())]);
/// # Ok::<(), mpx_core::Error>(())
/// ```
#[derive(Debug)]
pub struct KvSpace {
    name: String,
    size: usize,
    values: HashMap<String, String>,
    /// Bytes each rank stored: its keys and values, with
    /// [`KvSpace::ENTRY_COST`] for each, stay within [`KvSpace::PER_RANK`],
    /// so no rank can fill the space for the others.
    stored: Vec<usize>,
    in_barrier: Vec<bool>,
    /// Each rank's connection: its framing and the form it chose.
    ranks: Vec<(Decoder, Version)>,
    /// The ranks that have sent a whole message.
    joined: Vec<bool>,
    /// The ranks that have said PMI finalize.
    finalized: Vec<bool>,
    /// A rank that spoke PMI and left without its finalize (see
    /// [`KvSpace::leave`]): no barrier completes any more.
    lost: Option<usize>,
    /// The answers to the messages a rank sent before one it broke the
    /// protocol with, in the same bytes, for [`KvSpace::broke`].
    answered_before_breach: Vec<(usize, Vec<u8>)>,
}

impl KvSpace {
    /// Longest key.
    pub const KEYLEN_MAX: usize = 64;
    /// Longest value.
    pub const VALLEN_MAX: usize = 1024;
    /// Bytes of keys and values each rank may store (with
    /// [`KvSpace::ENTRY_COST`] counted for each).
    pub const PER_RANK: usize = 64 << 10;
    /// What an entry costs beside its key's and value's bytes (two strings'
    /// headers, their allocations' least size, the table's slot): counted
    /// against the rank's share, so that empty keys and values cannot hold
    /// far more memory than the share says.
    pub const ENTRY_COST: usize = 96;

    /// The space of a job of `size` ranks, named `name` (its PMI-1
    /// key-value space and PMI-2 job id).
    pub fn new(name: &str, size: usize) -> KvSpace {
        KvSpace {
            name: name.to_string(),
            size,
            values: HashMap::new(),
            stored: vec![0; size],
            in_barrier: vec![false; size],
            ranks: (0..size).map(|_| (Decoder::default(), Version::V1)).collect(),
            joined: vec![false; size],
            finalized: vec![false; size],
            lost: None,
            answered_before_breach: Vec::new(),
        }
    }

    /// Whether `rank` has spoken PMI and not said finalize (see
    /// [`leave`](KvSpace::leave)).
    pub fn left_early(&self, rank: usize) -> bool {
        self.joined(rank) && !self.finalized[rank]
    }

    /// `rank`'s connection has ended. A rank that spoke PMI and had not
    /// said finalize has left the job early (it died, or failed in its
    /// start-up): the ranks in the barrier, and those that enter
    /// it from now on, are answered with an error at once, as the barrier
    /// can never complete. Returns those answers, or `None` when the rank
    /// left as it should (finalized, or never spoke PMI: a program of the
    /// job that is no mpx program).
    ///
    /// ```
    /// use mpx_net::bootstrap::pmi::KvSpace;
    /// let mut kvs = KvSpace::new("job-1", 3);
    /// assert!(kvs.leave(2).is_none(), "rank 2 never spoke PMI: no mpx program, gone as it may");
    /// kvs.receive(1, b"cmd=get_appnum\n")?;
    /// assert!(kvs.receive(0, b"cmd=barrier_in\n")?.is_empty());
    /// let answers = kvs.leave(1).expect("rank 1 spoke PMI and left without its finalize");
    /// assert_eq!(answers, [(0, b"cmd=barrier_out rc=-1 msg=rank-1-left-the-job-before-its-PMI-finalize\n".to_vec())]);
    /// // A rank that enters the barrier later is answered at once too.
    /// assert_eq!(kvs.receive(2, b"cmd=barrier_in\n")?.len(), 1);
    /// # Ok::<(), mpx_core::Error>(())
    /// ```
    pub fn leave(&mut self, rank: usize) -> Option<Vec<(usize, Vec<u8>)>> {
        if !self.left_early(rank) {
            return None;
        }
        Some(self.lose(rank))
    }

    /// `rank` broke the protocol (its bytes are no PMI, from the first
    /// ones on, or ask for what this launcher does not serve): it is
    /// served no more, and, as for a rank that left early, the ranks in the
    /// barrier are answered with an error at once (returned), and those
    /// that enter it later too. The answers its messages before the breach
    /// earned come first.
    ///
    /// ```
    /// use mpx_net::bootstrap::pmi::KvSpace;
    /// let mut kvs = KvSpace::new("job-1", 3);
    /// assert!(kvs.receive(0, b"cmd=barrier_in\n")?.is_empty());
    /// // Rank 2 breaks the protocol with its very first bytes.
    /// assert!(kvs.receive(2, b"hello\n").is_err());
    /// assert_eq!(kvs.broke(2), [(0, b"cmd=barrier_out rc=-1 msg=rank-2-left-the-job-before-its-PMI-finalize\n".to_vec())]);
    ///
    /// // Rank 1 completes the barrier and breaks the protocol in one write:
    /// // the barrier's answers still go.
    /// let mut kvs = KvSpace::new("job-2", 2);
    /// assert!(kvs.receive(0, b"cmd=barrier_in\n")?.is_empty());
    /// assert!(kvs.receive(1, b"cmd=barrier_in\nbogus\n").is_err());
    /// let answers = kvs.broke(1);
    /// assert_eq!(answers, [(0, b"cmd=barrier_out\n".to_vec()), (1, b"cmd=barrier_out\n".to_vec())]);
    /// # Ok::<(), mpx_core::Error>(())
    /// ```
    pub fn broke(&mut self, rank: usize) -> Vec<(usize, Vec<u8>)> {
        // What its messages before the breach completed (a barrier it
        // entered last, say) goes first.
        let mut answers = std::mem::take(&mut self.answered_before_breach);
        answers.extend(self.lose(rank));
        answers
    }

    /// The barrier can never complete without `rank`: the answers to the
    /// ranks in it (those that enter it later are answered at once).
    fn lose(&mut self, rank: usize) -> Vec<(usize, Vec<u8>)> {
        self.lost.get_or_insert(rank);
        let waiting: Vec<usize> = (0..self.size).filter(|&r| self.in_barrier[r]).collect();
        waiting.into_iter().map(|r| self.barrier_failed(r)).collect()
    }

    /// The answer to `rank`'s barrier once a rank has left early.
    fn barrier_failed(&mut self, rank: usize) -> (usize, Vec<u8>) {
        self.in_barrier[rank] = false;
        let why = format!("rank-{}-left-the-job-before-its-PMI-finalize", self.lost.unwrap_or(rank));
        match self.ranks[rank].1 {
            Version::V1 => self.to(rank, Message::new("barrier_out").with("rc", -1).with("msg", why)),
            Version::V2 => self.to(rank, Message::new("kvs-fence-response").with("rc", -1).with("errmsg", why)),
        }
    }

    /// Whether `rank` has spoken PMI to this space (sent a whole message).
    pub fn joined(&self, rank: usize) -> bool {
        self.joined.get(rank).copied().unwrap_or(false)
    }

    /// Takes bytes `rank` sent and answers every whole message among them:
    /// the bytes to send, each to its rank. A malformed message, or one
    /// this launcher does not serve, is an error (the launcher then fails
    /// the job; the answers to the messages before it are kept for
    /// [`broke`](KvSpace::broke)).
    pub fn receive(&mut self, rank: usize, bytes: &[u8]) -> Result<Vec<(usize, Vec<u8>)>> {
        let (decoder, _) = self.ranks.get_mut(rank).ok_or_else(|| ErrorKind::InvalidArgument(format!("rank {rank} of {}", self.size)))?;
        decoder.feed(bytes);
        let mut out = Vec::new();
        loop {
            let (decoder, version) = &mut self.ranks[rank];
            let handled = match decoder.next(*version) {
                Ok(None) => return Ok(out),
                Ok(Some(m)) => {
                    self.joined[rank] = true;
                    self.handle(rank, m)
                }
                Err(e) => Err(ErrorKind::Protocol(format!("rank {rank}: {e}")).into()),
            };
            match handled {
                Ok(answers) => out.extend(answers),
                Err(e) => {
                    self.answered_before_breach.extend(out);
                    return Err(e);
                }
            }
        }
    }

    /// `m` to `to`, in the form `to` speaks.
    fn to(&self, to: usize, m: Message) -> (usize, Vec<u8>) {
        (to, m.encode(self.ranks[to].1))
    }

    /// Stores a value `rank` puts; `false` if refused (too long, beyond the
    /// rank's share, a key stored already, another rank's card: a key
    /// `mpx-<r>` is rank `r`'s alone, so no rank can take another's first;
    /// or a key or value that is no PMI value: a PMI-2 rank may send
    /// spaces and line ends in a value, which a PMI-1 rank reading it
    /// would take as fields and lines of their own).
    fn put(&mut self, rank: usize, key: &str, value: &str) -> bool {
        let others_card = key.strip_prefix("mpx-").and_then(|r| r.parse::<usize>().ok()).is_some_and(|r| r != rank);
        let cost = Self::ENTRY_COST + key.len() + value.len();
        let well_formed = check_value(key, Self::KEYLEN_MAX).is_ok() && check_value(value, Self::VALLEN_MAX).is_ok() && !key.contains(';');
        let fits = well_formed && self.stored[rank] + cost <= Self::PER_RANK;
        if !fits || others_card || self.values.contains_key(key) {
            return false;
        }
        self.stored[rank] += cost;
        self.values.insert(key.to_string(), value.to_string());
        true
    }

    /// Enters `rank` into the barrier: every rank's release once all are
    /// in.
    fn barrier(&mut self, rank: usize) -> Vec<(usize, Vec<u8>)> {
        if self.lost.is_some() {
            return vec![self.barrier_failed(rank)];
        }
        self.in_barrier[rank] = true;
        if !self.in_barrier.iter().all(|&b| b) {
            return Vec::new();
        }
        self.in_barrier.fill(false);
        (0..self.size)
            .map(|r| match self.ranks[r].1 {
                Version::V1 => self.to(r, Message::new("barrier_out")),
                Version::V2 => self.to(r, Message::new("kvs-fence-response").with("rc", 0)),
            })
            .collect()
    }

    fn handle(&mut self, rank: usize, m: Message) -> Result<Vec<(usize, Vec<u8>)>> {
        let version = self.ranks[rank].1;
        let reply = |kvs: &KvSpace, m: Message| Ok(vec![kvs.to(rank, m)]);
        match (version, m.cmd.as_str()) {
            (Version::V1, "init") => {
                let (v, sub) = (m.get("pmi_version").unwrap_or(""), m.get("pmi_subversion").unwrap_or(""));
                let (version, rc) = match (v, sub) {
                    ("1", "0" | "1") => (Version::V1, 0),
                    ("2", "0") => (Version::V2, 0),
                    _ => (Version::V2, -1),
                };
                let (v, sub) = version.numbers();
                // The answer to the opening line is a PMI-1 line either way.
                let answer = Message::new("response_to_init").with("pmi_version", v).with("pmi_subversion", sub).with("rc", rc);
                let out = vec![(rank, answer.encode(Version::V1))];
                if rc == 0 {
                    self.ranks[rank].1 = version;
                }
                Ok(out)
            }
            (Version::V1, "get_maxes") => reply(
                self,
                Message::new("maxes")
                    .with("rc", 0)
                    .with("kvsname_max", 256)
                    .with("keylen_max", Self::KEYLEN_MAX)
                    .with("vallen_max", Self::VALLEN_MAX),
            ),
            (Version::V1, "get_appnum") => reply(self, Message::new("appnum").with("rc", 0).with("appnum", 0)),
            (Version::V1, "get_universe_size") => reply(self, Message::new("universe_size").with("rc", 0).with("size", self.size)),
            (Version::V1, "get_my_kvsname") => reply(self, Message::new("my_kvsname").with("rc", 0).with("kvsname", &self.name)),
            (Version::V1, "put") => {
                let (Some(key), Some(value)) = (m.get("key"), m.get("value")) else {
                    return reply(self, Message::new("put_result").with("rc", -1).with("msg", "key_or_value_missing"));
                };
                let rc = if m.get("kvsname") == Some(&self.name) && self.put(rank, key, value) { 0 } else { -1 };
                reply(self, Message::new("put_result").with("rc", rc))
            }
            (Version::V1, "get") => {
                let found = m.get("key").filter(|_| m.get("kvsname") == Some(&self.name)).and_then(|k| self.values.get(k));
                match found {
                    Some(v) => reply(self, Message::new("get_result").with("rc", 0).with("value", v)),
                    None => reply(self, Message::new("get_result").with("rc", -1).with("msg", "key_not_found")),
                }
            }
            (Version::V1, "barrier_in") | (Version::V2, "kvs-fence") => Ok(self.barrier(rank)),
            (Version::V1, "finalize") => {
                self.finalized[rank] = true;
                reply(self, Message::new("finalize_ack"))
            }
            (Version::V2, "fullinit") => {
                // The rank the process believes it is must be the one its
                // connection was made for.
                let claimed = m.get("pmirank").and_then(|r| r.trim().parse::<usize>().ok());
                let answer = Message::new("fullinit-response");
                let answer = match claimed {
                    Some(r) if r == rank => answer
                        .with("rc", 0)
                        .with("pmi-version", 2)
                        .with("pmi-subversion", 0)
                        .with("rank", rank)
                        .with("size", self.size)
                        .with("appnum", 0)
                        .with("debugged", "FALSE")
                        .with("pmiverbose", "FALSE"),
                    _ => answer.with("rc", 3).with("errmsg", format!("this connection is rank {rank}'s")),
                };
                reply(self, answer)
            }
            (Version::V2, "job-getid") => reply(self, Message::new("job-getid-response").with("rc", 0).with("jobid", &self.name)),
            (Version::V2, "kvs-put") => {
                let stored = match (m.get("key"), m.get("value")) {
                    (Some(key), Some(value)) => self.put(rank, key, value),
                    _ => false,
                };
                reply(self, Message::new("kvs-put-response").with("rc", if stored { 0 } else { 6 }))
            }
            (Version::V2, "kvs-get") => {
                let found = m.get("key").filter(|_| m.get("jobid").is_none_or(|j| j == self.name)).and_then(|k| self.values.get(k));
                let answer = Message::new("kvs-get-response").with("rc", 0);
                match found {
                    Some(v) => reply(self, answer.with("found", "TRUE").with("value", v)),
                    None => reply(self, answer.with("found", "FALSE")),
                }
            }
            (Version::V2, "finalize") => {
                self.finalized[rank] = true;
                reply(self, Message::new("finalize-response").with("rc", 0))
            }
            (_, other) => Err(ErrorKind::Protocol(format!("rank {rank} sent the PMI command {other:?}, which mpxrun does not serve over {version:?}")).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A PMI_FD naming a socket this process opened itself (close-on-exec
    /// set: a parent's PMI_FD inherited in the environment, say) is refused
    /// and left open, never taken over and closed.
    #[test]
    fn a_socket_this_process_opened_is_not_taken_as_the_launchers() {
        use std::os::fd::AsRawFd;
        let (mine, _other) = UnixStream::pair().unwrap();
        let fd = mine.as_raw_fd();
        // SAFETY: `connect` refuses the descriptor (what this test checks)
        // rather than taking it; were it taken, `mine` would close it twice.
        let refused = unsafe { connect(&Channel::Fd(fd), Duration::from_secs(1)) };
        assert!(matches!(refused, Err(ref e) if matches!(e.kind(), ErrorKind::InvalidArgument(_))), "{:?}", refused.err());
        // SAFETY: F_GETFD only reads the flags of a descriptor `mine` owns.
        assert_ne!(unsafe { libc::fcntl(fd, libc::F_GETFD) }, -1, "still open");
        drop(mine);
    }

    /// A PMI-1 line fed a byte at a time is found once its newline comes
    /// (each byte scanned once), and one fed so past the length limit is
    /// an error as soon as it is over.
    #[test]
    fn a_line_fed_a_byte_at_a_time_is_found_and_bounded() {
        let mut d = Decoder::default();
        let line = format!("cmd=put kvsname=job key=k value={}\n", "v".repeat(1000));
        for (i, b) in line.bytes().enumerate() {
            d.feed(&[b]);
            let got = d.next(Version::V1).unwrap();
            assert_eq!(got.is_some(), i + 1 == line.len(), "at byte {i}");
            if let Some(m) = got {
                assert_eq!(m.get("value").map(str::len), Some(1000));
            }
        }
        assert_eq!(d.pending(), 0);
        let mut fed = 0;
        let over = loop {
            d.feed(b"x");
            fed += 1;
            match d.next(Version::V1) {
                Ok(None) => assert!(fed <= MAX_LINE),
                Ok(Some(m)) => panic!("{m:?}"),
                Err(e) => break e,
            }
        };
        assert!(matches!(over.kind(), ErrorKind::Protocol(_)) && fed == MAX_LINE + 1, "{fed}: {over}");
    }

    /// A PMI_FD naming a socket with close-on-exec clear whose other end
    /// does not answer as a launcher (a descriptor that something else in
    /// the process owns) is left open when the greeting fails, with its
    /// flags as they were: never closed under its owner.
    #[test]
    fn a_socket_whose_end_does_not_answer_as_a_launcher_is_left_open() {
        use std::io::Write;
        use std::os::fd::AsRawFd;
        let (mine, mut other) = UnixStream::pair().unwrap();
        let fd = mine.as_raw_fd();
        // SAFETY: fcntl on a descriptor `mine` owns: clears close-on-exec,
        // as on a descriptor a parent passed across exec.
        assert_ne!(unsafe { libc::fcntl(fd, libc::F_SETFD, 0) }, -1);
        other.write_all(b"HTTP/1.1 400 Bad Request\n").unwrap();
        drop(other);
        // SAFETY: `mine` keeps the descriptor open while the connection
        // lives, and nothing uses it meanwhile; the connection is dropped
        // before the launcher answers, so it leaves the descriptor open
        // (what this test checks) for `mine` to close.
        let greeted = unsafe { connect(&Channel::Fd(fd), Duration::from_secs(5)) }.and_then(|stream| Client::init(stream, 0, Version::V2).map(drop));
        assert!(greeted.is_err(), "no launcher answered");
        // SAFETY: F_GETFD only reads the flags of a descriptor `mine` owns.
        assert_eq!(unsafe { libc::fcntl(fd, libc::F_GETFD) }, 0, "still open, close-on-exec clear again");
        assert_eq!((mine.read_timeout().unwrap(), mine.write_timeout().unwrap()), (None, None), "its timeouts as they were");
        drop(mine);
    }

    /// A launcher that drops a rank's connection before welcoming it (as
    /// mpxrun does while more connections wait than its ranks could make)
    /// is dialled again, until the timeout.
    #[test]
    fn a_rank_dials_again_when_the_launcher_drops_it_before_the_welcome() {
        use std::io::BufRead;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let launcher = std::thread::spawn(move || {
            let mut dropped = 0;
            for stream in listener.incoming() {
                let mut stream = stream.unwrap();
                if dropped < 3 {
                    dropped += 1;
                    continue; // dropped unanswered
                }
                let mut line = String::new();
                std::io::BufReader::new(&stream).read_line(&mut line).unwrap();
                assert!(line.starts_with("cmd=initack pmiid=2 token=secret"), "{line}");
                stream.write_all(b"cmd=initack rc=0\ncmd=set size=4\ncmd=set rank=2\ncmd=set debug=0\n").unwrap();
                return dropped;
            }
            unreachable!()
        });
        let channel = Channel::Port { addr: addr.clone(), id: 2, token: Some("secret".into()) };
        // SAFETY: not a descriptor.
        let welcomed = unsafe { connect(&channel, Duration::from_secs(10)) };
        assert!(welcomed.is_ok(), "{:?}", welcomed.err());
        assert_eq!(launcher.join().unwrap(), 3);
        // A launcher that always drops it: an error once the time is up.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || listener.incoming().for_each(drop));
        let channel = Channel::Port { addr, id: 2, token: None };
        let started = Instant::now();
        // SAFETY: not a descriptor.
        let refused = unsafe { connect(&channel, Duration::from_millis(500)) };
        let e = refused.err().expect("an error once the time is up");
        assert!(e.to_string().contains("PMI"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5));
        // A refusal the launcher answers (a wrong token, say) fails at once.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let launcher = std::thread::spawn(move || {
            let mut dials = 0;
            listener.set_nonblocking(true).unwrap();
            let until = Instant::now() + Duration::from_secs(2);
            while Instant::now() < until {
                if let Ok((mut stream, _)) = listener.accept() {
                    dials += 1;
                    stream.set_nonblocking(false).unwrap();
                    let mut line = String::new();
                    std::io::BufReader::new(&stream).read_line(&mut line).unwrap();
                    stream.write_all(b"cmd=initack rc=-1 msg=refused\n").unwrap();
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            dials
        });
        let channel = Channel::Port { addr, id: 2, token: Some("wrong".into()) };
        // SAFETY: not a descriptor.
        let refused = unsafe { connect(&channel, Duration::from_secs(10)) };
        assert!(refused.err().is_some_and(|e| e.to_string().contains("rc=-1: refused")));
        assert_eq!(launcher.join().unwrap(), 1, "not dialled again");
    }

    #[test]
    fn malformed_messages_are_errors() {
        for bad in ["", "put key=a", "cmd=put keya", "cmd"] {
            assert!(Message::parse(bad).is_err(), "{bad:?}");
        }
        let m = Message::parse("cmd=put  kvsname=x key=a value=b=c\r\n").unwrap();
        assert_eq!(m.get("value"), Some("b=c"), "a value may hold '=' after the first");
        for bad in ["", ";", "key=a;cmd=put;", "cmd=put;keya;", "cmd"] {
            assert!(Message::parse_v2(bad).is_err(), "{bad:?}");
        }
        let m = Message::parse_v2("cmd=kvs-put;key=a;value=b=c;;d").unwrap();
        assert_eq!((m.get("key"), m.get("value")), (Some("a"), Some("b=c;d")));
    }

    #[test]
    fn values_that_cannot_travel_are_refused() {
        assert!(check_value("a b", 100).is_err());
        assert!(check_value("", 100).is_err());
        assert!(check_value(&"x".repeat(101), 100).is_err());
        assert!(check_value("10.0.0.1:7000,abcd", 100).is_ok());
    }

    /// Each rank stores within its own share, so one rank filling the
    /// space leaves the others theirs; and a rank's card (`mpx-<rank>`) is
    /// its own to put.
    #[test]
    fn a_rank_can_neither_fill_the_space_nor_take_anothers_card() {
        let mut kvs = KvSpace::new("job-1", 3);
        let put = |kvs: &mut KvSpace, rank: usize, key: &str| {
            let value = if rank == 2 { "v".to_string() } else { "v".repeat(1000) };
            let line = format!("cmd=put kvsname=job-1 key={key} value={value}\n");
            let out = kvs.receive(rank, line.as_bytes()).unwrap();
            out == [(rank, b"cmd=put_result rc=0\n".to_vec())]
        };
        kvs.receive(0, b"cmd=init pmi_version=1 pmi_subversion=1\n").unwrap();
        kvs.receive(1, b"cmd=init pmi_version=1 pmi_subversion=1\n").unwrap();
        kvs.receive(2, b"cmd=init pmi_version=1 pmi_subversion=1\n").unwrap();
        let mut stored = 0;
        while put(&mut kvs, 0, &format!("k{stored:03}")) {
            stored += 1;
        }
        assert_eq!(stored, KvSpace::PER_RANK / (1004 + KvSpace::ENTRY_COST), "rank 0's share, then refusals");
        // One-byte values and short keys count what their entries cost.
        let mut tiny = 0;
        while put(&mut kvs, 2, &format!("{tiny:x}")) {
            tiny += 1;
        }
        assert!(tiny > 0 && tiny <= KvSpace::PER_RANK / KvSpace::ENTRY_COST, "{tiny} tiny entries");
        assert!(put(&mut kvs, 1, "mpx-1"), "rank 1 still has its share");
        assert!(!put(&mut kvs, 1, "mpx-0"), "rank 0's card is rank 0's");
        assert!(!put(&mut kvs, 1, "mpx-1"), "stored already");
    }

    /// A PMI-2 rank cannot store a value (or key) that a PMI-1 rank
    /// reading it would take as more fields or lines: a line end, a space
    /// or an `=` in it is refused, and the PMI-1 rank finds no such key.
    #[test]
    fn a_pmi_2_rank_cannot_put_lines_into_a_pmi_1_ranks_answers() {
        let mut kvs = KvSpace::new("job-1", 2);
        kvs.receive(0, b"cmd=init pmi_version=1 pmi_subversion=1\n").unwrap();
        kvs.receive(1, b"cmd=init pmi_version=2 pmi_subversion=0\n").unwrap();
        for (key, value) in [("mpx-1", "10.0.0.1:1\ncmd=get_result rc=0 value=10.9.9.9:1"), ("mpx-1", "a b"), ("mpx-1", "a=b"), ("mpx 1", "x"), ("", "x")] {
            let put = Message::new("kvs-put").with("key", key).with("value", value).encode(Version::V2);
            let out = kvs.receive(1, &put).unwrap();
            assert_eq!(out, [(1, Message::new("kvs-put-response").with("rc", 6).encode(Version::V2))], "{key:?} = {value:?}");
        }
        let out = kvs.receive(0, b"cmd=get kvsname=job-1 key=mpx-1\n").unwrap();
        assert_eq!(out, [(0, b"cmd=get_result rc=-1 msg=key_not_found\n".to_vec())]);
        let put = Message::new("kvs-put").with("key", "mpx-1").with("value", "10.0.0.1:1;fingerprint").encode(Version::V2);
        assert_eq!(kvs.receive(1, &put).unwrap(), [(1, Message::new("kvs-put-response").with("rc", 0).encode(Version::V2))]);
        let out = kvs.receive(0, b"cmd=get kvsname=job-1 key=mpx-1\n").unwrap();
        assert_eq!(out, [(0, b"cmd=get_result rc=0 value=10.0.0.1:1;fingerprint\n".to_vec())]);
    }

    #[test]
    fn messages_over_the_limit_or_badly_framed_are_errors_not_memory() {
        let mut d = Decoder::default();
        d.feed(&vec![b'x'; MAX_LINE + 10]);
        assert!(d.next(Version::V1).is_err(), "a line with no end in sight");
        for header in [b"999999".as_slice(), b"  12x4", b"      ", b"-00001"] {
            let mut d = Decoder::default();
            d.feed(header);
            assert!(d.next(Version::V2).is_err(), "{:?}", String::from_utf8_lossy(header));
        }
        let mut d = Decoder::default();
        d.feed(b"     4\xff\xfe;;");
        assert!(d.next(Version::V2).is_err(), "not UTF-8");
    }

    /// Serves `kvs` to each rank's stream on a thread of its own, as
    /// mpxrun's I/O does; the returned thread ends when every rank has
    /// closed its stream.
    fn serve(kvs: KvSpace, streams: Vec<UnixStream>) -> std::thread::JoinHandle<()> {
        let kvs = Arc::new(Mutex::new(kvs));
        let writers: Arc<Vec<Mutex<UnixStream>>> = Arc::new(streams.iter().map(|s| Mutex::new(s.try_clone().unwrap())).collect());
        let threads: Vec<_> = streams
            .into_iter()
            .enumerate()
            .map(|(rank, mut stream)| {
                let (kvs, writers) = (kvs.clone(), writers.clone());
                std::thread::spawn(move || {
                    let mut chunk = [0u8; 7]; // small, so messages arrive in pieces
                    loop {
                        let n = match stream.read(&mut chunk) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        let out = kvs.lock().unwrap().receive(rank, &chunk[..n]).unwrap();
                        for (to, bytes) in out {
                            writers[to].lock().unwrap().write_all(&bytes).unwrap();
                        }
                    }
                })
            })
            .collect();
        std::thread::spawn(move || threads.into_iter().for_each(|t| t.join().unwrap()))
    }

    /// Two clients, each in its own form, through the launcher's side over
    /// socket pairs: the whole start-up exchange.
    fn exchange(forms: [Version; 2]) {
        let (a, a_server) = UnixStream::pair().unwrap();
        let (b, b_server) = UnixStream::pair().unwrap();
        let server = serve(KvSpace::new("kvs_7", 2), vec![a_server, b_server]);
        let rank = |stream: UnixStream, me: u32| {
            let prefer = forms[me as usize];
            std::thread::spawn(move || {
                let mut c = Client::init(stream, me, prefer).unwrap();
                assert_eq!(c.version(), prefer);
                assert_eq!(c.job_name(), "kvs_7");
                assert_eq!(c.size(), (prefer == Version::V2).then_some(2));
                c.put(&format!("addr-{me}"), &format!("10.0.0.{me}:7000")).unwrap();
                assert!(c.put(&format!("addr-{me}"), "again").is_err(), "a key is stored once");
                c.barrier().unwrap();
                let other = c.get(&format!("addr-{}", 1 - me)).unwrap();
                assert!(c.get("nothing").is_err(), "a missing key is an error");
                c.finalize().unwrap();
                other
            })
        };
        let (x, y) = (rank(a, 0), rank(b, 1));
        assert_eq!(x.join().unwrap(), "10.0.0.1:7000");
        assert_eq!(y.join().unwrap(), "10.0.0.0:7000");
        server.join().unwrap();
    }

    #[test]
    fn clients_exchange_values_in_either_form_and_mixed() {
        exchange([Version::V1, Version::V1]);
        exchange([Version::V2, Version::V2]);
        exchange([Version::V1, Version::V2]);
    }

    /// A launcher that answers every call just inside the socket's read
    /// timeout cannot stretch a start-up of many calls past its deadline:
    /// the calls after it fail, timed out, however soon each is answered.
    #[test]
    fn a_slow_launcher_cannot_stretch_a_start_up_past_its_deadline() {
        let (client, mut server) = UnixStream::pair().unwrap();
        let launcher = std::thread::spawn(move || {
            let mut kvs = KvSpace::new("slow", 1);
            let mut chunk = [0u8; 256];
            loop {
                let n = match server.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                std::thread::sleep(Duration::from_millis(150));
                for (_, bytes) in kvs.receive(0, &chunk[..n]).unwrap() {
                    if server.write_all(&bytes).is_err() {
                        return;
                    }
                }
            }
        });
        Duplex::set_read_timeout(&client, Duration::from_millis(400)).unwrap();
        let started = Instant::now();
        let deadline = started + Duration::from_millis(700);
        let mut c = Client::init_by(client, 0, Version::V1, Some(deadline)).unwrap();
        let mut outcome = Ok(());
        for k in 0..20 {
            outcome = c.put(&format!("k{k}"), "v");
            if outcome.is_err() {
                break;
            }
        }
        let e = outcome.expect_err("a call past the deadline fails");
        assert!(e.to_string().contains("PMI"), "{e}");
        assert!(started.elapsed() < Duration::from_millis(1000), "the start-up took {:?}", started.elapsed());
        // Without a deadline, each call takes what it takes.
        c.set_deadline(None);
        drop(c);
        launcher.join().unwrap();
        // A socket with no read timeout is left with none that can expire
        // (not with the last wait the deadline left).
        let (client, mut server) = UnixStream::pair().unwrap();
        let launcher = std::thread::spawn(move || {
            let mut kvs = KvSpace::new("slow", 1);
            let mut chunk = [0u8; 256];
            while let Ok(n @ 1..) = server.read(&mut chunk) {
                for (_, bytes) in kvs.receive(0, &chunk[..n]).unwrap() {
                    server.write_all(&bytes).unwrap();
                }
            }
        });
        let c = Client::init_by(client, 0, Version::V1, Some(Instant::now() + Duration::from_secs(5))).unwrap();
        let left = Duplex::read_timeout(&c.stream).unwrap();
        assert!(left.is_none_or(|t| t > Duration::from_secs(3600)), "{left:?}");
        drop(c);
        launcher.join().unwrap();
    }

    #[test]
    fn a_launcher_that_declines_pmi_2_is_spoken_to_in_pmi_1() {
        let (client, mut server) = UnixStream::pair().unwrap();
        let launcher = std::thread::spawn(move || {
            let mut kvs = KvSpace::new("old", 1);
            let mut d = Decoder::default();
            let first = receive(&mut server, &mut d, Version::V1, None).unwrap().unwrap();
            assert_eq!(first.get("pmi_version"), Some("2"));
            server.write_all(b"cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1\n").unwrap();
            // From here on, an ordinary PMI-1 launcher.
            let mut chunk = [0u8; 256];
            loop {
                let n = server.read(&mut chunk).unwrap();
                if n == 0 {
                    return;
                }
                for (_, bytes) in kvs.receive(0, &chunk[..n]).unwrap() {
                    server.write_all(&bytes).unwrap();
                }
            }
        });
        let mut c = Client::init(client, 0, Version::V2).unwrap();
        assert_eq!(c.version(), Version::V1);
        c.put("k", "v").unwrap();
        c.barrier().unwrap();
        assert_eq!(c.get("k").unwrap(), "v");
        c.finalize().unwrap();
        drop(c);
        launcher.join().unwrap();
    }

    /// A PMI-2 launcher that says whether a key was found as `flag=`
    /// (older PMI-2 servers) rather than `found=` is understood either way.
    #[test]
    fn a_pmi_2_launcher_saying_flag_for_found_is_understood() {
        let (client, mut server) = UnixStream::pair().unwrap();
        let launcher = std::thread::spawn(move || {
            let mut d = Decoder::default();
            let answer = |server: &mut UnixStream, version: Version, m: Message| server.write_all(&m.encode(version)).unwrap();
            receive(&mut server, &mut d, Version::V1, None).unwrap().unwrap();
            answer(&mut server, Version::V1, Message::new("response_to_init").with("pmi_version", 2).with("pmi_subversion", 0).with("rc", 0));
            receive(&mut server, &mut d, Version::V2, None).unwrap().unwrap();
            answer(&mut server, Version::V2, Message::new("fullinit-response").with("rank", 0).with("size", 1).with("rc", 0));
            receive(&mut server, &mut d, Version::V2, None).unwrap().unwrap();
            answer(&mut server, Version::V2, Message::new("job-getid-response").with("jobid", "j").with("rc", 0));
            for (flag, value) in [("TRUE", "here"), ("FALSE", "stale")] {
                let get = receive(&mut server, &mut d, Version::V2, None).unwrap().unwrap();
                assert_eq!(get.cmd, "kvs-get");
                answer(&mut server, Version::V2, Message::new("kvs-get-response").with("flag", flag).with("value", value).with("rc", 0));
            }
        });
        let mut c = Client::init(client, 0, Version::V2).unwrap();
        assert_eq!(c.get("k").unwrap(), "here");
        assert!(c.get("k").is_err(), "flag=FALSE: not found, whatever the value says");
        launcher.join().unwrap();
    }

    #[test]
    fn an_answer_dribbled_a_byte_at_a_time_still_times_out() {
        let (client, mut server) = UnixStream::pair().unwrap();
        let launcher = std::thread::spawn(move || {
            let mut d = Decoder::default();
            receive(&mut server, &mut d, Version::V1, None).unwrap().unwrap();
            // Each byte well within the timeout, the whole answer far beyond it.
            for byte in b"cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0\n" {
                if server.write_all(&[*byte]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        Duplex::set_read_timeout(&client, Duration::from_millis(400)).unwrap();
        let started = Instant::now();
        let err = Client::init(client, 0, Version::V2).unwrap_err();
        // The greeting itself timed out (not a later question, asked after
        // the whole dribbled answer came in).
        let why = std::error::Error::source(&err).map(ToString::to_string).unwrap_or_default();
        assert!(why.contains("in time while waiting for init"), "{err}: {why}");
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
        launcher.join().unwrap();
    }

    #[test]
    fn a_rank_the_launcher_does_not_know_is_refused() {
        let (client, server) = UnixStream::pair().unwrap();
        let (other, other_server) = UnixStream::pair().unwrap();
        let serving = serve(KvSpace::new("job", 2), vec![server, other_server]);
        // This connection is rank 0's, but the process claims rank 1.
        let err = Client::init(client, 1, Version::V2).unwrap_err();
        assert!(err.to_string().contains("rank 0"), "{err}");
        drop(other);
        serving.join().unwrap();
    }

    #[test]
    fn a_command_the_launcher_does_not_serve_fails_the_rank() {
        let mut kvs = KvSpace::new("job", 1);
        kvs.receive(0, b"cmd=init pmi_version=2 pmi_subversion=0\n").unwrap();
        assert!(kvs.receive(0, b"    18cmd=spawn;ncmds=1;").is_err());
        let mut kvs = KvSpace::new("job", 1);
        assert!(kvs.receive(0, b"cmd=kvs-fence\n").is_err(), "a PMI-2 command on a PMI-1 connection");
        assert!(KvSpace::new("job", 1).receive(3, b"cmd=init\n").is_err(), "no such rank");
    }
}
