//! PMI-1, the process-management interface MPICH's hydra (`mpiexec`)
//! offers its processes, and `mpxrun` offers too: a line protocol on a
//! socket the launcher hands each process (`PMI_FD`), with a key-value
//! space shared by the job, a barrier, and the process's rank and size in
//! `PMI_RANK` and `PMI_SIZE`.
//!
//! Each message is one line of space-separated `key=value` fields, the
//! first `cmd=<name>`; values carry no spaces. The exchanges a rank makes
//! (client's line, then the launcher's answer):
//!
//! | client | launcher |
//! |---|---|
//! | `cmd=init pmi_version=1 pmi_subversion=1` | `cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0` |
//! | `cmd=get_maxes` | `cmd=maxes rc=0 kvsname_max=K keylen_max=L vallen_max=V` |
//! | `cmd=get_my_kvsname` | `cmd=my_kvsname rc=0 kvsname=NAME` |
//! | `cmd=put kvsname=NAME key=K value=V` | `cmd=put_result rc=0` |
//! | `cmd=barrier_in` | `cmd=barrier_out` (once every rank has entered) |
//! | `cmd=get kvsname=NAME key=K` | `cmd=get_result rc=0 value=V` (`rc` not 0: no such key) |
//! | `cmd=finalize` | `cmd=finalize_ack` |
//!
//! This is the wire format of MPICH's `simple_pmi` and hydra, as Flux's
//! RFC 13 ("Simple Process Manager Interface v1") describes it.
//! [`Message`] is the sans-IO part (parsing and encoding a line);
//! [`Client`] speaks it over a blocking socket, and [`KvSpace`] is the
//! launcher's side, used by `mpxrun`.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::time::Duration;

use mpx_core::{Error, Result};

/// Longest line either side accepts: a launcher's answer, or a client's
/// request to `mpxrun`.
pub const MAX_LINE: usize = 64 << 10;

/// One line of the protocol: its command and fields.
///
/// ```
/// use mpx_net::bootstrap::pmi::Message;
/// let m = Message::parse("cmd=get_result rc=0 value=10.0.0.1:7000,ab12\n")?;
/// assert_eq!(m.cmd, "get_result");
/// assert_eq!(m.get("value"), Some("10.0.0.1:7000,ab12"));
/// assert_eq!(Message::new("barrier_in").encode(), "cmd=barrier_in\n");
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

    /// Adds a field (a value must hold no space or newline: see
    /// [`check_value`]).
    pub fn with(mut self, key: &str, value: impl ToString) -> Message {
        self.fields.push((key.to_string(), value.to_string()));
        self
    }

    /// The value of field `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The line, newline included.
    pub fn encode(&self) -> String {
        let mut line = format!("cmd={}", self.cmd);
        for (k, v) in &self.fields {
            line.push(' ');
            line.push_str(k);
            line.push('=');
            line.push_str(v);
        }
        line.push('\n');
        line
    }

    /// Parses one line (its newline optional). A line that does not start
    /// with `cmd=`, or has a field without `=`, is an error.
    pub fn parse(line: &str) -> Result<Message> {
        let bad = || Error::Protocol(format!("a malformed PMI line: {:?}", truncated(line)));
        let mut words = line.trim_end_matches(['\n', '\r']).split(' ').filter(|w| !w.is_empty());
        let cmd = words.next().and_then(|w| w.strip_prefix("cmd=")).ok_or_else(bad)?;
        let fields = words
            .map(|w| w.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())).ok_or_else(bad))
            .collect::<Result<_>>()?;
        Ok(Message { cmd: cmd.to_string(), fields })
    }

    /// The `rc` field is 0 (or absent).
    fn ok(self, context: &str) -> Result<Message> {
        match self.get("rc") {
            None | Some("0") => Ok(self),
            Some(rc) => Err(Error::Protocol(format!(
                "the launcher refused {context} (rc={rc}{})",
                self.get("msg").map(|m| format!(": {m}")).unwrap_or_default()
            ))),
        }
    }
}

fn truncated(s: &str) -> &str {
    match s.char_indices().nth(200) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Checks that `value` can travel as a PMI value: non-empty, no spaces or
/// newlines, and at most `max` bytes.
pub fn check_value(value: &str, max: usize) -> Result<()> {
    if value.is_empty() || value.len() > max || value.contains([' ', '\n', '\r', '=']) {
        return Err(Error::InvalidArgument(format!("{:?} cannot be a PMI value (at most {max} bytes, no spaces)", truncated(value))));
    }
    Ok(())
}

/// Reads one line of at most [`MAX_LINE`] bytes; `None` at the end of the
/// stream.
pub(crate) fn read_line<R: BufRead>(reader: &mut R) -> std::io::Result<Option<String>> {
    let mut line = Vec::new();
    let n = std::io::Read::take(reader, MAX_LINE as u64 + 1).read_until(b'\n', &mut line)?;
    if n == 0 {
        return Ok(None);
    }
    if line.last() != Some(&b'\n') {
        let why = if n > MAX_LINE { "a PMI line over the length limit" } else { "a PMI line cut short" };
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, why));
    }
    String::from_utf8(line).map(Some).map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "a PMI line that is not UTF-8"))
}

/// A rank's side of PMI-1, over the socket its launcher handed it, with
/// blocking I/O (it runs at start-up, on a thread of its own).
pub struct Client<S: std::io::Read + std::io::Write> {
    reader: BufReader<S>,
    /// The job's key-value space.
    kvsname: String,
    /// The longest value the launcher stores.
    vallen_max: usize,
}

impl<S: std::io::Read + std::io::Write> std::fmt::Debug for Client<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("pmi::Client").field("kvsname", &self.kvsname).finish()
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

impl<S: std::io::Read + std::io::Write> Client<S> {
    /// Greets the launcher on `stream` and learns the job's key-value
    /// space.
    pub fn init(stream: S) -> Result<Client<S>> {
        let mut client = Client { reader: BufReader::new(stream), kvsname: String::new(), vallen_max: 0 };
        let answer = client.call(Message::new("init").with("pmi_version", 1).with("pmi_subversion", 1), "response_to_init", "init")?;
        if answer.get("pmi_version") != Some("1") {
            return Err(Error::Protocol(format!("the launcher speaks PMI version {:?}, not 1", answer.get("pmi_version"))));
        }
        let maxes = client.call(Message::new("get_maxes"), "maxes", "the key-value limits")?;
        client.vallen_max = maxes.get("vallen_max").and_then(|v| v.parse().ok()).unwrap_or(256);
        let name = client.call(Message::new("get_my_kvsname"), "my_kvsname", "the job's key-value space")?;
        client.kvsname = name.get("kvsname").ok_or_else(|| Error::Protocol("the launcher named no key-value space".into()))?.to_string();
        Ok(client)
    }

    /// The socket to the launcher.
    pub fn get_ref(&self) -> &S {
        self.reader.get_ref()
    }

    /// The job's key-value space: the same for every rank of the job.
    pub fn kvsname(&self) -> &str {
        &self.kvsname
    }

    /// The longest value the launcher keeps.
    pub fn vallen_max(&self) -> usize {
        self.vallen_max
    }

    /// Stores `key` = `value` in the job's space (seen by the others after
    /// the next [`barrier`](Client::barrier)).
    pub fn put(&mut self, key: &str, value: &str) -> Result<()> {
        check_value(value, self.vallen_max)?;
        let m = Message::new("put").with("kvsname", &self.kvsname).with("key", key).with("value", value);
        self.call(m, "put_result", &format!("storing {key}")).map(drop)
    }

    /// Waits until every rank of the job has entered the barrier.
    pub fn barrier(&mut self) -> Result<()> {
        self.call(Message::new("barrier_in"), "barrier_out", "the other ranks at the start-up barrier").map(drop)
    }

    /// The value of `key` in the job's space.
    pub fn get(&mut self, key: &str) -> Result<String> {
        let m = Message::new("get").with("kvsname", &self.kvsname).with("key", key);
        let answer = self.call(m, "get_result", &format!("the value of {key}"))?;
        answer.get("value").map(str::to_string).ok_or_else(|| Error::Protocol(format!("the launcher gave no value for {key}")))
    }

    /// Tells the launcher this process is done with PMI.
    pub fn finalize(&mut self) -> Result<()> {
        self.call(Message::new("finalize"), "finalize_ack", "the launcher's goodbye").map(drop)
    }

    /// Sends `request` and reads the answer, which must be `expect`.
    fn call(&mut self, request: Message, expect: &str, what: &str) -> Result<Message> {
        let stream = self.reader.get_mut();
        stream.write_all(request.encode().as_bytes()).map_err(|e| waiting(what, e))?;
        stream.flush().map_err(|e| waiting(what, e))?;
        let line = read_line(&mut self.reader)
            .map_err(|e| waiting(what, e))?
            .ok_or_else(|| Error::Protocol(format!("the launcher closed PMI while this rank waited for {what}")))?;
        let answer = Message::parse(&line)?;
        if answer.cmd != expect {
            return Err(Error::Protocol(format!("the launcher answered {:?} to {:?} (waiting for {what})", answer.cmd, request.cmd)));
        }
        answer.ok(what)
    }
}

/// A socket to the launcher: either kind a launcher hands out.
pub trait Duplex: std::io::Read + std::io::Write + Send {
    /// The longest a read may wait.
    fn set_read_timeout(&self, timeout: Duration) -> std::io::Result<()>;
}

impl Duplex for std::os::unix::net::UnixStream {
    fn set_read_timeout(&self, timeout: Duration) -> std::io::Result<()> {
        std::os::unix::net::UnixStream::set_read_timeout(self, Some(timeout))?;
        self.set_write_timeout(Some(timeout))
    }
}

impl Duplex for std::net::TcpStream {
    fn set_read_timeout(&self, timeout: Duration) -> std::io::Result<()> {
        std::net::TcpStream::set_read_timeout(self, Some(timeout))?;
        self.set_write_timeout(Some(timeout))
    }
}

/// Opens the launcher's socket as `PMI_FD` or `PMI_PORT` names it, with
/// `timeout` as the longest any one answer may take. Over `PMI_PORT` (a
/// TCP `host:port`, for ranks on other hosts) the client first names
/// itself (`cmd=initack pmiid=<id>`, with `token=<token>` when the
/// launcher gave one: `mpxrun` refuses a connection without its job's),
/// and the launcher answers `cmd=initack`, then `cmd=set` lines.
pub fn connect(channel: &Channel, timeout: Duration) -> Result<Box<dyn Duplex>> {
    match channel {
        Channel::Fd(fd) => {
            use std::os::fd::FromRawFd;
            if *fd < 0 {
                return Err(Error::InvalidArgument(format!("PMI_FD={fd}")));
            }
            // SAFETY: the launcher hands this process the descriptor in
            // PMI_FD for PMI alone; nothing else in the process uses it,
            // and it is taken once (`bootstrap::start` runs once per
            // process).
            let stream = unsafe { std::os::unix::net::UnixStream::from_raw_fd(*fd) };
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
                .ok_or_else(|| Error::InvalidArgument(format!("PMI_PORT={addr:?} names no address")))?;
            let stream = std::net::TcpStream::connect_timeout(&target, timeout).map_err(|e| Error::transport(what, e))?;
            Duplex::set_read_timeout(&stream, timeout).map_err(|e| Error::transport("PMI socket", e))?;
            let _ = stream.set_nodelay(true);
            let mut reader = BufReader::new(stream);
            let mut hello = Message::new("initack").with("pmiid", id);
            if let Some(token) = token {
                hello = hello.with("token", token);
            }
            std::io::Write::write_all(reader.get_mut(), hello.encode().as_bytes()).map_err(|e| waiting("the launcher's welcome", e))?;
            // The welcome: initack, then the launcher's settings (size,
            // rank, debug: the last).
            loop {
                let line = read_line(&mut reader)
                    .map_err(|e| waiting("the launcher's welcome", e))?
                    .ok_or_else(|| Error::Protocol("the launcher refused this rank's PMI connection".into()))?;
                let m = Message::parse(&line)?;
                match m.cmd.as_str() {
                    "initack" => m.ok("this rank's PMI connection").map(drop)?,
                    "set" if m.get("size").is_some() || m.get("rank").is_some() => {}
                    "set" if m.get("debug").is_some() => break,
                    other => return Err(Error::Protocol(format!("the launcher's welcome held {other:?}"))),
                }
            }
            if !reader.buffer().is_empty() {
                return Err(Error::Protocol("the launcher spoke before it was asked".into()));
            }
            Ok(Box::new(reader.into_inner()))
        }
    }
}

/// How a rank reaches its launcher's PMI server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Channel {
    /// An inherited socket (`PMI_FD`).
    Fd(i32),
    /// A TCP address (`PMI_PORT`), with the rank's id (`PMI_ID`) and the
    /// job's token (`MPX_PMI_TOKEN`), if any.
    Port {
        /// `host:port`.
        addr: String,
        /// The id the rank names itself with.
        id: u32,
        /// The job's secret, proving the rank was started by the launcher.
        token: Option<String>,
    },
}

/// The launcher's side of PMI-1 for one job: the key-value space and the
/// barrier, as a state machine that the launcher's I/O feeds one line at a
/// time ([`KvSpace::handle`]) and that says what to send to whom.
///
/// ```
/// use mpx_net::bootstrap::pmi::{KvSpace, Message};
/// let mut kvs = KvSpace::new("job-1", 2);
/// let line = |s: &str| Message::parse(s).unwrap();
/// assert_eq!(kvs.handle(0, line("cmd=put kvsname=job-1 key=a value=1"))?, vec![(0, line("cmd=put_result rc=0"))]);
/// assert_eq!(kvs.handle(0, line("cmd=barrier_in"))?, vec![], "rank 1 has not entered");
/// assert_eq!(kvs.handle(1, line("cmd=barrier_in"))?.len(), 2, "both leave");
/// let got = kvs.handle(1, line("cmd=get kvsname=job-1 key=a"))?;
/// assert_eq!(got[0].1.get("value"), Some("1"));
/// # Ok::<(), mpx_core::Error>(())
/// ```
#[derive(Debug)]
pub struct KvSpace {
    name: String,
    size: usize,
    values: HashMap<String, String>,
    /// Bytes stored: keys and values together stay within `size` times
    /// [`KvSpace::PER_RANK`].
    stored: usize,
    in_barrier: Vec<bool>,
}

impl KvSpace {
    /// Longest key.
    pub const KEYLEN_MAX: usize = 64;
    /// Longest value.
    pub const VALLEN_MAX: usize = 1024;
    /// Bytes of keys and values each rank may store, on average.
    pub const PER_RANK: usize = 64 << 10;

    /// The space of a job of `size` ranks, named `name`.
    pub fn new(name: &str, size: usize) -> KvSpace {
        KvSpace { name: name.to_string(), size, values: HashMap::new(), stored: 0, in_barrier: vec![false; size] }
    }

    /// Answers `rank`'s message: the lines to send, each to its rank. A
    /// message this launcher does not serve is an error (the launcher then
    /// fails the job).
    pub fn handle(&mut self, rank: usize, m: Message) -> Result<Vec<(usize, Message)>> {
        let reply = |m: Message| Ok(vec![(rank, m)]);
        match m.cmd.as_str() {
            "init" => reply(
                Message::new("response_to_init").with("pmi_version", 1).with("pmi_subversion", 1).with("rc", 0),
            ),
            "get_maxes" => reply(
                Message::new("maxes")
                    .with("rc", 0)
                    .with("kvsname_max", 256)
                    .with("keylen_max", Self::KEYLEN_MAX)
                    .with("vallen_max", Self::VALLEN_MAX),
            ),
            "get_appnum" => reply(Message::new("appnum").with("rc", 0).with("appnum", 0)),
            "get_universe_size" => reply(Message::new("universe_size").with("rc", 0).with("size", self.size)),
            "get_my_kvsname" => reply(Message::new("my_kvsname").with("rc", 0).with("kvsname", &self.name)),
            "put" => {
                let (Some(key), Some(value)) = (m.get("key"), m.get("value")) else {
                    return reply(Message::new("put_result").with("rc", -1).with("msg", "key_or_value_missing"));
                };
                let fits = key.len() <= Self::KEYLEN_MAX
                    && value.len() <= Self::VALLEN_MAX
                    && self.stored + key.len() + value.len() <= self.size * Self::PER_RANK;
                if m.get("kvsname") != Some(&self.name) || !fits || self.values.contains_key(key) {
                    return reply(Message::new("put_result").with("rc", -1).with("msg", "refused"));
                }
                self.stored += key.len() + value.len();
                self.values.insert(key.to_string(), value.to_string());
                reply(Message::new("put_result").with("rc", 0))
            }
            "get" => {
                let found = m.get("key").filter(|_| m.get("kvsname") == Some(&self.name)).and_then(|k| self.values.get(k));
                match found {
                    Some(v) => reply(Message::new("get_result").with("rc", 0).with("value", v)),
                    None => reply(Message::new("get_result").with("rc", -1).with("msg", "key_not_found")),
                }
            }
            "barrier_in" => {
                self.in_barrier[rank] = true;
                if self.in_barrier.iter().all(|&b| b) {
                    self.in_barrier.fill(false);
                    Ok((0..self.size).map(|r| (r, Message::new("barrier_out"))).collect())
                } else {
                    Ok(Vec::new())
                }
            }
            "finalize" => reply(Message::new("finalize_ack")),
            other => Err(Error::Protocol(format!("rank {rank} sent the PMI command {other:?}, which mpxrun does not serve"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn malformed_lines_are_errors() {
        for bad in ["", "put key=a", "cmd=put keya", "cmd"] {
            assert!(Message::parse(bad).is_err(), "{bad:?}");
        }
        let m = Message::parse("cmd=put  kvsname=x key=a value=b=c\r\n").unwrap();
        assert_eq!(m.get("value"), Some("b=c"), "a value may hold '=' after the first");
    }

    #[test]
    fn values_that_cannot_travel_are_refused() {
        assert!(check_value("a b", 100).is_err());
        assert!(check_value("", 100).is_err());
        assert!(check_value(&"x".repeat(101), 100).is_err());
        assert!(check_value("10.0.0.1:7000,abcd", 100).is_ok());
    }

    #[test]
    fn a_line_over_the_limit_is_an_error_not_memory() {
        let long = vec![b'x'; MAX_LINE + 10];
        let mut reader = BufReader::new(&long[..]);
        assert!(read_line(&mut reader).is_err());
    }

    /// The client against the launcher's side, over a socket pair: the
    /// whole start-up exchange of two ranks.
    #[test]
    fn two_clients_exchange_values_through_the_space() {
        use std::os::unix::net::UnixStream;
        let mut kvs = KvSpace::new("kvs_7", 2);
        let (a, a_server) = UnixStream::pair().unwrap();
        let (b, b_server) = UnixStream::pair().unwrap();
        let serve = std::thread::spawn(move || {
            let mut readers = [BufReader::new(a_server.try_clone().unwrap()), BufReader::new(b_server.try_clone().unwrap())];
            let mut writers = [a_server, b_server];
            let mut open = [true, true];
            // Alternate between the two clients one line at a time; a
            // client blocked in the barrier has nothing to read, so serve
            // whichever has a line (non-blocking peeks would be overkill
            // here: each client's next line comes after its answer).
            let mut turn = 0;
            while open.iter().any(|&o| o) {
                let r = turn % 2;
                turn += 1;
                if !open[r] {
                    continue;
                }
                writers[r].set_read_timeout(Some(Duration::from_millis(20))).unwrap();
                readers[r].get_ref().set_read_timeout(Some(Duration::from_millis(20))).unwrap();
                match read_line(&mut readers[r]) {
                    Ok(Some(line)) => {
                        for (to, m) in kvs.handle(r, Message::parse(&line).unwrap()).unwrap() {
                            writers[to].write_all(m.encode().as_bytes()).unwrap();
                        }
                    }
                    Ok(None) => open[r] = false,
                    Err(_) => {}
                }
            }
        });
        let rank = |stream: UnixStream, me: usize| {
            std::thread::spawn(move || {
                let mut c = Client::init(stream).unwrap();
                c.put(&format!("addr-{me}"), &format!("10.0.0.{me}:7000")).unwrap();
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
        serve.join().unwrap();
    }
}
