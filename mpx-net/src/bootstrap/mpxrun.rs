//! `mpxrun`: starts the processes of a job, on this host or on several,
//! and serves them PMI-1 and PMI-2 (see [`pmi`](super::pmi)), with a credential made
//! for the job.
//!
//! ```text
//! mpxrun -n N [--no-prefix] [--keep-going] [--stdin RANK|none] [--kill-after SECONDS] program [args...]
//! mpxrun -n N --hosts h1,h2,... [--launch 'ssh -o BatchMode=yes ... {host}'] [--pmi-host IP] program [args...]
//! ```
//!
//! On this host each process gets `PMI_FD` (its end of a socket pair to
//! `mpxrun`). With `--hosts`, rank `r` starts on host `r % hosts` through
//! the `--launch` command (`{host}` replaced; default [`LAUNCH`], `ssh`
//! that fails rather than prompts for a password or a host key, and ends
//! once its host has been silent for 15 s; tests use `ip netns exec
//! {host}`), and reaches PMI over
//! TCP instead:
//! `PMI_PORT` (at `--pmi-host`; default `MPX_HOST`, else this host's
//! address on its route to the first host), `PMI_ID`,
//! and `MPX_PMI_TOKEN`, the rank's own secret, without which `mpxrun`
//! refuses the connection. Each rank's token differs (an HMAC-SHA256 of
//! its rank under a random key of the job), and a connection that names
//! rank `r` is taken only with rank `r`'s: a rank, or anyone who saw a
//! rank's token on the network, cannot take another rank's place. Since
//! `ssh` passes no environment, a remote rank's variables go on its
//! command line after the launch command, through `env`, and its token
//! and credential come on its standard input (`MPX_CREDENTIAL=-`), never
//! on a command line, whatever the program: one on another host that is
//! no mpx program gets them as the first lines of its input (`cat` would
//! print the rank's private key), so run only mpx programs there. `ssh` (or `rsh`, `pdsh`, `qrsh`, wherever it stands in the
//! launch command) has the remote user's shell run
//! that command line: through them, mpxrun quotes each word of it, so
//! that the program gets its arguments as given (spaces, quotes and `;`
//! included); the program's path is the remote shell's to resolve (from
//! the remote user's home directory). Every process
//! also gets `PMI_RANK`, `PMI_SIZE`, and `MPX_CREDENTIAL`: its rank's credential
//! under a CA made for this job ([`JobCredential`]), as PEM text, so peers
//! authenticate each other with mutual TLS; ranks publish their addresses
//! in the job's key-value space. Standard output and error are forwarded
//! line by line, prefixed `[rank] ` unless `--no-prefix`. When a process
//! fails (a non-zero status or a signal), the others are killed, unless
//! `--keep-going`; `mpxrun` then exits with the failed process's status
//! as a shell reports it (its code, or 128 + the signal that killed it;
//! 1 for a status of 0) and names the rank. Stopped by SIGINT, SIGTERM,
//! SIGHUP (its terminal closed, its `ssh` session dropped) or SIGQUIT
//! (either unless it was started ignoring it: SIGHUP under `nohup`,
//! SIGQUIT in the background of a script),
//! it passes the signal to every rank's process group (SIGTERM for
//! SIGQUIT, so that the ranks do not dump core), kills those left
//! after `--kill-after` seconds (default 5; 0 kills at once, as does a
//! second signal), and exits with 128 + the signal (130, 143, 129, 131);
//! SIGUSR1 and SIGUSR2 are
//! passed to every rank's process group and the job goes on. With
//! `--hosts` those groups are the launch commands' (`ssh`): the stopping
//! signals end them, and the ranks end as their PMI connections close
//! (below); SIGUSR1 and SIGUSR2 are not passed on. Its standard input
//! goes to rank 0, or the rank `--stdin` names, and the others' input is
//! empty (`--stdin none`: every rank's); on another host, after the
//! rank's token and credential (see below), which the rank reads to a
//! line of its own, leaving the rest to the program. A process that spoke
//! PMI and whose connection ended before its PMI finalize fails the job
//! too, whatever its status, and the ranks waiting for it at the start-up
//! barrier fail at once: a rank that died, failed in its start-up, or
//! left with `process::exit` while its endpoint was up (an mpx program's
//! endpoint says finalize whenever it is dropped). Unless `--keep-going`,
//! the others are killed then, and that process is left to end (it may
//! say why) for `--kill-after` seconds, then killed too. A process that
//! never speaks PMI (no mpx program) may end as it likes.
//!
//! Every rank (and every launch command) runs in a session of its own,
//! with no controlling terminal: a program that asks the terminal (an
//! `ssh` prompting for a password or a host key, a rank's own prompt)
//! fails at once, since `/dev/tty` does not open, where in the background
//! of `mpxrun`'s terminal the kernel would stop it (SIGTTIN) and `mpxrun`
//! wait for it for ever. A rank's output still reaches the terminal
//! (`--no-prefix`: it writes there itself); its input is `mpxrun`'s, for
//! the rank that reads it (see `--stdin`).
//!
//! Ranks die with `mpxrun`, however it ends. On this host `mpxrun` kills
//! each rank's process group (on a failure, or after a stopping signal), and the
//! process it started dies with it (`PR_SET_PDEATHSIG`). On another host
//! neither reaches the rank (killing the local `ssh` tells the remote
//! command nothing), nor, anywhere, a program a wrapper started (`sh -c
//! 'program; true'`): so every process also gets `MPX_LAUNCHER=mpxrun`,
//! and a rank with it watches its PMI connection and, if `mpxrun`'s end
//! closes before the rank's PMI finalize, kills its own process group (see
//! the [bootstrap module docs](super)).

use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::net::{IpAddr, SocketAddr};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use mpx_core::{Error, ErrorKind, Result};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

use super::pmi::{KvSpace, Message};
use crate::quic::JobCredential;

/// What `mpxrun` was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// Processes to start.
    pub ranks: u32,
    /// The program and its arguments.
    pub command: Vec<String>,
    /// Prefix each line of output with `[rank] `.
    pub prefix: bool,
    /// Keep the other processes running when one fails.
    pub keep_going: bool,
    /// Hosts to start ranks on, rank `r` on host `r % hosts.len()`; `None`:
    /// this host, with no remote-start command.
    pub hosts: Option<Vec<String>>,
    /// The command that starts a program on a host, `{host}` standing for
    /// the host (default [`LAUNCH`]).
    pub launch: String,
    /// The address ranks on other hosts reach `mpxrun`'s PMI port at
    /// (default: `MPX_HOST`, else this host's address on its route to the
    /// first host, else its host name's).
    pub pmi_host: Option<IpAddr>,
    /// The rank that reads `mpxrun`'s standard input (default rank 0;
    /// `None`, as with `--stdin none`: every rank's input is empty).
    pub stdin: Option<u32>,
    /// How long ranks stopped with the signal that stopped `mpxrun`
    /// (SIGINT, SIGTERM, SIGHUP; SIGTERM for SIGQUIT) have to end before they are killed (default
    /// [`KILL_AFTER`]).
    pub kill_after: Duration,
}

/// The default `--launch` command. `BatchMode=yes`: `ssh` fails at once
/// with its reason (`Permission denied`, `Host key verification failed`)
/// where it would prompt, which a launch command, with no terminal, could
/// not answer (see the [module docs](self)): it takes keys without a
/// passphrase or from an agent, and hosts already in `known_hosts`.
/// `ServerAliveInterval=5`, `ServerAliveCountMax=3`: once its host has
/// been silent for 15 s (cut off, or down), `ssh` ends, and `mpxrun`
/// learns that the rank there is gone; without them `ssh` waits for its
/// TCP connection to give up, which takes hours (keep-alive) or a quarter
/// of an hour (retransmission) with Linux's defaults, and `mpxrun`, which
/// waits for every rank's launch command to end, with it.
pub const LAUNCH: &str = "ssh -o BatchMode=yes -o ServerAliveInterval=5 -o ServerAliveCountMax=3 {host}";

/// How long ranks have to end, by default, once `mpxrun` has passed them
/// the signal that stopped it (SIGINT, SIGTERM, SIGHUP; SIGTERM for SIGQUIT), before it kills them.
pub const KILL_AFTER: Duration = Duration::from_secs(5);

/// The longest `--kill-after` (an hour).
pub const MAX_KILL_AFTER: Duration = Duration::from_secs(3600);

const USAGE: &str = "usage: mpxrun -n N [--no-prefix] [--keep-going] [--stdin RANK|none] [--kill-after SECONDS] [--hosts h1,h2,... [--launch 'ssh -o BatchMode=yes ... {host}'] [--pmi-host IP]] program [args...]";

impl Job {
    /// Reads the command line (without the program name).
    ///
    /// ```
    /// use mpx_net::bootstrap::mpxrun::Job;
    /// let job = Job::parse(["-n", "4", "--no-prefix", "./ring", "-v"].map(String::from))?;
    /// assert_eq!((job.ranks, job.prefix, job.command.len()), (4, false, 2));
    /// assert_eq!(job.stdin, Some(0), "rank 0 reads mpxrun's input");
    /// let job = Job::parse(["-n", "2", "--stdin", "none", "--kill-after", "0.5", "./ring"].map(String::from))?;
    /// assert_eq!((job.stdin, job.kill_after.as_millis()), (None, 500));
    /// assert!(Job::parse(["./ring"].map(String::from)).is_err(), "-n is needed");
    /// # Ok::<(), mpx_core::Error>(())
    /// ```
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Job> {
        let bad = |why: String| -> Error { ErrorKind::InvalidArgument(format!("{why}\n{USAGE}")).into() };
        let mut args = args.into_iter();
        let (mut ranks, mut prefix, mut keep_going) = (None, true, false);
        let (mut hosts, mut launch, mut pmi_host) = (None, LAUNCH.to_string(), None);
        let (mut stdin, mut kill_after) = (None, KILL_AFTER);
        let command = loop {
            let Some(arg) = args.next() else { return Err(bad("no program given".into())) };
            match arg.as_str() {
                "-n" | "-np" => {
                    let n = args.next().ok_or_else(|| bad("-n needs a number".into()))?;
                    let max = super::Start::MAX_RANKS;
                    ranks = Some(n.parse::<u32>().ok().filter(|&n| n > 0 && n <= max).ok_or_else(|| bad(format!("-n {n}: not a number of processes (1 to {max})")))?);
                }
                "--no-prefix" => prefix = false,
                "--hosts" => {
                    let list = args.next().ok_or_else(|| bad("--hosts needs a list".into()))?;
                    let list: Vec<String> = list.split(',').map(str::trim).filter(|h| !h.is_empty()).map(String::from).collect();
                    if list.is_empty() {
                        return Err(bad("--hosts needs at least one host".into()));
                    }
                    hosts = Some(list);
                }
                "--launch" => launch = args.next().ok_or_else(|| bad("--launch needs a command".into()))?,
                "--pmi-host" => {
                    let ip = args.next().ok_or_else(|| bad("--pmi-host needs an address".into()))?;
                    pmi_host = Some(ip.parse().map_err(|e| bad(format!("--pmi-host {ip}: {e}")))?);
                }
                "--keep-going" => keep_going = true,
                "--stdin" => {
                    let to = args.next().ok_or_else(|| bad("--stdin needs a rank or none".into()))?;
                    stdin = Some(match to.as_str() {
                        "none" => None,
                        rank => Some(rank.parse::<u32>().map_err(|_| bad(format!("--stdin {rank}: neither a rank nor none")))?),
                    });
                }
                "--kill-after" => {
                    let after = args.next().ok_or_else(|| bad("--kill-after needs a number of seconds".into()))?;
                    kill_after = after
                        .parse::<f64>()
                        .ok()
                        .and_then(|s| Duration::try_from_secs_f64(s).ok())
                        .filter(|d| *d <= MAX_KILL_AFTER)
                        .ok_or_else(|| bad(format!("--kill-after {after}: not a number of seconds from 0 to 3600")))?;
                }
                "-h" | "--help" => return Err(bad("".into())),
                flag if flag.starts_with('-') => return Err(bad(format!("unknown option {flag}"))),
                _ => break std::iter::once(arg).chain(args).collect::<Vec<_>>(),
            }
        };
        // Rank 0 reads the input unless told otherwise.
        let stdin = stdin.unwrap_or(Some(0));
        let job = Job { ranks: ranks.ok_or_else(|| bad("-n is needed".into()))?, command, prefix, keep_going, hosts, launch, pmi_host, stdin, kill_after };
        // What the options say together (`--stdin` of a rank beyond `-n`).
        job.check().map_err(|e| match e.kind() {
            ErrorKind::InvalidArgument(why) => bad(why.clone()),
            _ => e,
        })?;
        Ok(job)
    }
}

impl Job {
    /// Checks what [`run`] relies on: a program, 1 to
    /// [`Start::MAX_RANKS`](super::Start::MAX_RANKS) ranks, and at least
    /// one host and a launch command where hosts are given.
    pub fn check(&self) -> Result<()> {
        let bad = |why: String| -> Result<()> { Err(ErrorKind::InvalidArgument(why).into()) };
        let max = super::Start::MAX_RANKS;
        if self.command.is_empty() {
            return bad("no program given".into());
        }
        if self.ranks == 0 || self.ranks > max {
            return bad(format!("{} processes (1 to {max})", self.ranks));
        }
        if let Some(hosts) = &self.hosts {
            if hosts.is_empty() {
                return bad("an empty list of hosts".into());
            }
            if self.launch.split_whitespace().next().is_none() {
                return bad("an empty --launch".into());
            }
        }
        if let Some(rank) = self.stdin.filter(|&r| r >= self.ranks) {
            return bad(format!("--stdin {rank}: no such rank among {}", self.ranks));
        }
        if self.kill_after > MAX_KILL_AFTER {
            return bad(format!("--kill-after {:?}: at most {MAX_KILL_AFTER:?}", self.kill_after));
        }
        Ok(())
    }
}

/// Whether `launch` (a `--launch` command) has a remote shell run the
/// command line it is given, as `ssh`, `rsh`, `pdsh` and `qrsh` do (sshd
/// passes it to the user's shell), rather than run it word by word:
/// whichever word runs one (`timeout 600 ssh {host}`, `sshpass -e ssh
/// {host}`, `/usr/bin/env ssh {host}`).
fn through_remote_shell(launch: &str) -> bool {
    launch.split_whitespace().any(|word| matches!(word.rsplit('/').next(), Some("ssh" | "rsh" | "pdsh" | "qrsh")))
}

/// `word` as one word of a POSIX shell's command line: as it is if it
/// holds nothing a shell treats specially, else in single quotes (a
/// quote inside as `'\''`).
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// The address ranks on `hosts` reach this host at, for the PMI port
/// (without `--pmi-host`): the one this host routes to the first host
/// that has a route not on loopback (a host is looked up as `ssh` would
/// reach it, its `user@` left out). A host reached by a loopback name is
/// this one; if no host has such a route, this host's own address
/// ([`advertised_ip`](super::advertised_ip)), unless no host resolves
/// here at all (names only `ssh` knows, from its configuration) and this
/// host's name resolves to a loopback address (127.0.1.1), which the
/// other hosts could not reach: an error then, asking for `--pmi-host`.
fn pmi_address(hosts: &[String]) -> Result<IpAddr> {
    let mut resolved = false;
    for host in hosts {
        match super::local_route(&format!("{}:9", bracketed(ssh_host_name(host)))) {
            Some(ip) if !ip.is_loopback() => return Ok(ip),
            Some(_) => resolved = true,
            None => {}
        }
    }
    let ip = super::advertised_ip()?;
    if !resolved && ip.is_loopback() {
        return Err(ErrorKind::InvalidArgument(format!(
            "none of the hosts ({}) resolves on this host, and this host's name resolves to {ip}, which they could not \
             reach: give the address they reach this host at with --pmi-host",
            hosts.join(",")
        ))
        .into());
    }
    Ok(ip)
}

/// The host `ssh` reaches for `host`: without the `user@` before it.
fn ssh_host_name(host: &str) -> &str {
    host.rsplit_once('@').map_or(host, |(_, name)| name)
}

/// `host` as the host part of `host:port` (an IPv6 address in brackets).
fn bracketed(host: &str) -> String {
    match host.parse::<std::net::Ipv6Addr>() {
        Ok(_) => format!("[{host}]"),
        Err(_) => host.to_string(),
    }
}

/// How the job ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Each rank's exit status, in rank order.
    pub statuses: Vec<ExitStatus>,
    /// The first rank that failed, if any.
    pub failed: Option<u32>,
    /// The signal that stopped `mpxrun` itself (SIGINT, SIGTERM, SIGHUP or SIGQUIT), if one
    /// did.
    pub stopped_by: Option<i32>,
}

impl Outcome {
    /// The status `mpxrun` exits with, as a shell reports a command's:
    /// 128 + the signal if one stopped it (SIGINT 130, SIGTERM 143, SIGHUP
    /// 129, SIGQUIT 131);
    /// else 0 if every rank succeeded; else the first failed rank's code,
    /// 128 + the signal if a signal killed it (137 for SIGKILL), or 1 if
    /// it failed with status 0 (it left PMI before its finalize).
    ///
    /// ```
    /// use std::os::unix::process::ExitStatusExt;
    /// use std::process::ExitStatus;
    /// use mpx_net::bootstrap::mpxrun::Outcome;
    /// let killed = Outcome { statuses: vec![ExitStatus::from_raw(0), ExitStatus::from_raw(9)], failed: Some(1), stopped_by: None };
    /// assert_eq!(killed.code(), 137);
    /// let exited = Outcome { statuses: vec![ExitStatus::from_raw(3 << 8)], failed: Some(0), stopped_by: None };
    /// assert_eq!(exited.code(), 3);
    /// assert_eq!(Outcome { stopped_by: Some(15), ..exited.clone() }.code(), 143);
    /// // A failed rank with no status (an outcome made by hand) is a failure.
    /// assert_eq!(Outcome { statuses: vec![], ..exited }.code(), 1);
    /// ```
    pub fn code(&self) -> i32 {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = self.stopped_by {
            return 128 + signal;
        }
        match self.failed {
            None => 0,
            Some(r) => {
                let Some(status) = self.statuses.get(r as usize) else { return 1 };
                status.code().filter(|&c| c != 0).or(status.signal().map(|s| 128 + s)).unwrap_or(1)
            }
        }
    }
}

/// How long `mpxrun`, its last rank ended, waits for output while none
/// comes: a pipe that stays open and silent this long is held by a
/// process that left its rank's process group, which mpxrun does not wait
/// for. Output that keeps coming is forwarded to its end.
const OUTPUT_IDLE_AFTER_RANKS: Duration = Duration::from_secs(5);

/// A line for mpxrun's standard error (`true`) or standard output,
/// ending in a newline, and whether it is a rank's (it gives its room in
/// the queue back once written).
type OutputLine = (bool, Vec<u8>, bool);

/// Lines of the ranks' output queued for the terminal thread before the
/// ranks' forwarders wait (and the ranks, once their pipes fill).
const OUTPUT_QUEUE: usize = 256;

/// mpxrun's standard output and error, written by a thread of their own
/// ([`Terminal::start`]): writes that block (a reader of mpxrun's output
/// that stops reading) block that thread alone. The ranks that write wait
/// as their pipes fill, while PMI, the reaping of ranks and the handling
/// of signals go on: mpxrun's own lines never wait (a few per rank), and
/// come out after the ranks' lines queued before them.
#[derive(Clone)]
struct Terminal {
    lines: tokio::sync::mpsc::UnboundedSender<OutputLine>,
    /// Room for ranks' lines: [`OUTPUT_QUEUE`] less those queued.
    room: Arc<tokio::sync::Semaphore>,
    /// Ranks' lines queued so far.
    passed: Arc<AtomicU64>,
}

impl Terminal {
    /// Starts the writing thread; the receiver fires once every
    /// [`Terminal`] is gone and every line queued is written.
    fn start() -> Result<(Terminal, tokio::sync::oneshot::Receiver<()>)> {
        let (lines, mut queued) = tokio::sync::mpsc::unbounded_channel::<OutputLine>();
        let room = Arc::new(tokio::sync::Semaphore::new(OUTPUT_QUEUE));
        let (written, done) = tokio::sync::oneshot::channel();
        let freed = room.clone();
        std::thread::Builder::new()
            .name("mpxrun-output".into())
            .spawn(move || {
                while let Some((to_stderr, line, a_ranks)) = queued.blocking_recv() {
                    // Errors (a reader gone: EPIPE) drop the line.
                    let _ = if to_stderr { std::io::stderr().write_all(&line) } else { std::io::stdout().write_all(&line) };
                    if a_ranks {
                        freed.add_permits(1);
                    }
                }
                let _ = std::io::stdout().flush();
                let _ = written.send(());
            })
            .map_err(|e| Error::transport("starting mpxrun's output thread", e))?;
        Ok((Terminal { lines, room, passed: Arc::default() }, done))
    }

    /// Queues one of mpxrun's own lines for its standard error, at once.
    fn say(&self, text: impl std::fmt::Display) {
        let _ = self.lines.send((true, format!("mpxrun: {text}\n").into_bytes(), false));
    }

    /// Queues a rank's line, once there is room; `false` if the terminal
    /// thread is gone.
    async fn pass(&self, to_stderr: bool, line: Vec<u8>) -> bool {
        let Ok(permit) = self.room.acquire().await else { return false };
        permit.forget();
        self.passed.fetch_add(1, Ordering::Relaxed);
        self.lines.send((to_stderr, line, true)).is_ok()
    }

    /// Ranks' lines queued so far.
    fn passed(&self) -> u64 {
        self.passed.load(Ordering::Relaxed)
    }

    /// Whether no rank's line waits to be written.
    fn drained(&self) -> bool {
        self.room.available_permits() == OUTPUT_QUEUE
    }
}

/// Forwards one stream of a rank's output, line by line, to the
/// [`Terminal`].
async fn forward(rank: u32, prefix: bool, from: impl tokio::io::AsyncRead + Unpin, to_stderr: bool, out: Terminal) {
    // A line longer than this goes out in pieces of this length.
    const LONGEST: u64 = 64 << 10;
    let mut lines = BufReader::new(from);
    loop {
        let mut line = if prefix { format!("[{rank}] ").into_bytes() } else { Vec::new() };
        let start = line.len();
        match (&mut lines).take(LONGEST).read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                if line[start..].last() != Some(&b'\n') {
                    line.push(b'\n');
                }
                if !out.pass(to_stderr, line).await {
                    return;
                }
            }
        }
    }
}

/// A rank that fails the job through PMI (see [`serve_rank`]).
#[derive(Debug)]
enum RankFailure {
    /// It broke the protocol: it is killed, and fails the job.
    Broke { rank: u32, why: String },
    /// Its PMI connection has ended, `early` if before its finalize: then
    /// it fails the job, whatever its status (it is not killed, so that
    /// it may say why itself).
    Ended { rank: u32, early: bool },
}

/// Each rank's [`Outbox`], once its PMI connection is open.
type Writers = Arc<Vec<tokio::sync::Mutex<Option<Outbox>>>>;

/// Bytes of answers a rank may leave unread on its PMI connection, beyond
/// what the connection itself holds: an answer is a line of at most a few
/// KiB, and a rank reads each before it asks again, but for the release
/// of a barrier. A rank that leaves more has stopped reading, and breaks
/// the protocol.
const MOST_UNREAD_ANSWERS: usize = 1 << 20;

/// What a queued answer costs beyond its bytes, counted against
/// [`MOST_UNREAD_ANSWERS`]: its vector and its place in the queue, so
/// that many short answers are bounded as few long ones are.
const ANSWER_OVERHEAD: usize = 64;

/// Where a rank's PMI answers go: a queue that a task of the rank's own
/// writes to its connection in order, so that a rank that stops reading
/// holds up nobody else's answers (a barrier's release goes to every
/// rank, and a full connection would stop the release of those after it).
struct Outbox {
    /// The task writing the answers, stopped when the outbox goes (at the
    /// end of the job).
    writer: tokio::task::AbortHandle,
    queue: tokio::sync::mpsc::UnboundedSender<Vec<u8>>,
    /// Bytes queued and not yet written to the connection, each answer
    /// counting [`ANSWER_OVERHEAD`] more.
    unwritten: Arc<std::sync::atomic::AtomicUsize>,
    /// Whether the rank has been reported for leaving too much unread.
    reported: std::sync::atomic::AtomicBool,
}

impl Outbox {
    /// Starts the task that writes the answers queued to `to`.
    fn start(to: impl tokio::io::AsyncWrite + Send + Unpin + 'static) -> Outbox {
        let (queue, mut answers) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
        let unwritten = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let written = unwritten.clone();
        let writer = tokio::spawn(async move {
            let mut to = to;
            while let Some(answer) = answers.recv().await {
                // A connection that fails ends the queue: what waits in
                // it, and every later answer, is dropped (the rank's
                // reader sees the connection end).
                if to.write_all(&answer).await.is_err() {
                    return;
                }
                written.fetch_sub(answer.len() + ANSWER_OVERHEAD, Ordering::SeqCst);
            }
        })
        .abort_handle();
        Outbox { writer, queue, unwritten, reported: false.into() }
    }

    /// Queues `answer` for rank `rank`, unless the rank has left
    /// [`MOST_UNREAD_ANSWERS`] unread: then it is reported to `failed`
    /// (once) as breaking the protocol, and the answer dropped. An answer
    /// for a connection whose writing failed is dropped.
    fn send(&self, rank: usize, answer: Vec<u8>, failed: &tokio::sync::mpsc::UnboundedSender<RankFailure>) {
        if self.queue.is_closed() {
            return;
        }
        let cost = answer.len() + ANSWER_OVERHEAD;
        let unwritten = self.unwritten.fetch_add(cost, Ordering::SeqCst) + cost;
        if unwritten > MOST_UNREAD_ANSWERS {
            self.unwritten.fetch_sub(cost, Ordering::SeqCst);
            if !self.reported.swap(true, Ordering::SeqCst) {
                let why = format!("broke the PMI protocol: it left more than {MOST_UNREAD_ANSWERS} bytes of answers unread");
                let _ = failed.send(RankFailure::Broke { rank: rank as u32, why });
            }
            return;
        }
        if self.queue.send(answer).is_err() {
            // Its writing failed meanwhile: nothing more is written.
            self.unwritten.fetch_sub(cost, Ordering::SeqCst);
        }
    }
}

/// Serves PMI to one rank: passes the bytes it sends to the job's
/// [`KvSpace`] and queues each answer for the rank it is for. A rank that
/// breaks the protocol fails the job, and so does one that spoke PMI and
/// closed its connection before its finalize (it died, or failed in its
/// start-up; see [`KvSpace::leave`]): the ranks in the start-up barrier
/// fail at once instead of waiting for it until their timeout. How the
/// connection ended is reported either way.
///
/// # Cancel safety
/// Not cancel-safe: dropped between reading a request and queueing its
/// answers, the answers are lost (mpxrun drops it only once the job is
/// over).
async fn serve_rank(
    rank: usize,
    mut reader: impl tokio::io::AsyncRead + Unpin,
    kvs: Arc<Mutex<KvSpace>>,
    writers: Writers,
    failed: tokio::sync::mpsc::UnboundedSender<RankFailure>,
) {
    let mut chunk = vec![0u8; 4096];
    loop {
        let n = match reader.read(&mut chunk).await {
            // The rank closed PMI: finished, or died (its exit status
            // tells), or failed in its start-up.
            Ok(0) | Err(_) => {
                let left = kvs.lock().unwrap_or_else(|e| e.into_inner()).leave(rank);
                let _ = failed.send(RankFailure::Ended { rank: rank as u32, early: left.is_some() });
                if let Some(replies) = left {
                    answer(&writers, replies, &failed).await;
                }
                return;
            }
            Ok(n) => n,
        };
        let replies = kvs.lock().unwrap_or_else(|e| e.into_inner()).receive(rank, &chunk[..n]);
        match replies {
            Ok(replies) => answer(&writers, replies, &failed).await,
            Err(e) => {
                let _ = failed.send(RankFailure::Broke { rank: rank as u32, why: format!("broke the PMI protocol: {e}") });
                // Served no more: the ranks in the start-up barrier fail
                // at once, as for a rank that left, even if its first bytes
                // were no PMI (with --keep-going they are not killed, and
                // would wait for it until their start-up timeout).
                let replies = kvs.lock().unwrap_or_else(|e| e.into_inner()).broke(rank);
                answer(&writers, replies, &failed).await;
                return;
            }
        }
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        self.writer.abort();
    }
}

/// Queues each of `replies` for the rank it is for (see [`Outbox`]).
async fn answer(writers: &Writers, replies: Vec<(usize, Vec<u8>)>, failed: &tokio::sync::mpsc::UnboundedSender<RankFailure>) {
    for (to, bytes) in replies {
        if let Some(outbox) = writers[to].lock().await.as_ref() {
            outbox.send(to, bytes, failed);
        }
    }
}

/// Takes the PMI connections of ranks started on other hosts: each must
/// name its rank and show that rank's token first (`cmd=initack
/// pmiid=<rank> token=<token>`, the token [`rank_token`] makes with `key`);
/// it is welcomed (`cmd=initack`, then its size, rank and debug level) and
/// served. Anything else, another rank's token among it, is refused. At
/// most `4 × size + 16` connections are kept; beyond, the oldest not yet
/// welcomed is dropped for the new one (a rank shows its token at once,
/// and dials again if dropped).
async fn accept_ranks(
    listener: tokio::net::TcpListener,
    key: ring::hmac::Key,
    kvs: Arc<Mutex<KvSpace>>,
    writers: Writers,
    failed: tokio::sync::mpsc::UnboundedSender<RankFailure>,
) {
    let size = writers.len();
    let mut tasks = tokio::task::JoinSet::new();
    // Connections that have not shown a token yet, oldest first, each with
    // its standing (STRANGER, VOUCHED or EVICTED): at capacity the oldest
    // stranger gives way, so strangers that connect and say nothing cannot
    // keep a rank, which shows its token at once, out. A connection's task
    // and this loop each move it on from STRANGER with a compare-exchange,
    // so one that showed its token is never evicted, however close the two.
    const STRANGER: u8 = 0;
    const VOUCHED: u8 = 1;
    const EVICTED: u8 = 2;
    let mut pending: std::collections::VecDeque<(tokio::task::AbortHandle, Arc<std::sync::atomic::AtomicU8>)> = Default::default();
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(_) => {
                // Out of descriptors, or a connection reset before it was
                // taken: wait a little rather than spin.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        while tasks.try_join_next().is_some() {}
        pending.retain(|(task, standing)| !task.is_finished() && standing.load(Ordering::SeqCst) == STRANGER);
        if tasks.len() >= 4 * size + 16 {
            // More connections than ranks could make: the oldest stranger
            // goes, or this one if every slot serves a rank.
            let evicted = std::iter::from_fn(|| pending.pop_front())
                .find(|(_, standing)| standing.compare_exchange(STRANGER, EVICTED, Ordering::SeqCst, Ordering::SeqCst).is_ok());
            match evicted {
                Some((oldest, _)) => oldest.abort(),
                None => continue,
            }
        }
        let standing = Arc::new(std::sync::atomic::AtomicU8::new(STRANGER));
        let (kvs, writers, failed, key, vouched) = (kvs.clone(), writers.clone(), failed.clone(), key.clone(), standing.clone());
        let task = tasks.spawn(async move {
            let _ = stream.set_nodelay(true);
            super::pmi::keep_alive(&stream);
            let (r, mut w) = stream.into_split();
            let mut lines = BufReader::new(r);
            let mut line = Vec::new();
            let hello = tokio::time::timeout(Duration::from_secs(10), (&mut lines).take(1024).read_until(b'\n', &mut line)).await;
            let Ok(Ok(_)) = hello else { return };
            // A connection that said who it is but is refused is told so
            // (and fails at once rather than dialling again).
            let refusal = b"cmd=initack rc=-1 msg=refused\n";
            let Ok(m) = std::str::from_utf8(&line).map_err(|_| ()).and_then(|l| Message::parse(l).map_err(drop)) else {
                let _ = w.write_all(refusal).await;
                return;
            };
            let rank = m.get("pmiid").and_then(|r| r.parse::<usize>().ok()).filter(|&r| r < size);
            // The token of the rank the connection names, and no other's.
            let shown = rank.is_some_and(|r| m.get("token").is_some_and(|t| same_secret(t, &rank_token(&key, r))));
            let (Some(rank), true) = (rank, m.cmd == "initack" && shown) else {
                let _ = w.write_all(refusal).await;
                return;
            };
            // Shown a rank's token: no longer a stranger that may be evicted
            // (an eviction later, between taking the rank's place and
            // serving it, would leave the rank welcomed and never answered),
            // unless evicted already (it ends here, before taking a place).
            if vouched.compare_exchange(STRANGER, VOUCHED, Ordering::SeqCst, Ordering::SeqCst).is_err() {
                return;
            }
            let mut slot = writers[rank].lock().await;
            if slot.is_some() {
                let _ = w.write_all(refusal).await; // rank already connected
                return;
            }
            let welcome = format!("cmd=initack rc=0\ncmd=set size={size}\ncmd=set rank={rank}\ncmd=set debug=0\n");
            if w.write_all(welcome.as_bytes()).await.is_err() {
                return;
            }
            *slot = Some(Outbox::start(w));
            drop(slot);
            serve_rank(rank, lines, kvs, writers, failed).await;
        });
        pending.push_back((task, standing));
    }
}

/// Rank `rank`'s PMI token: the HMAC-SHA256 of its rank (8 bytes, little
/// endian) under the job's `key`, in hex. Knowing one rank's token tells
/// nothing of another's.
fn rank_token(key: &ring::hmac::Key, rank: usize) -> String {
    super::hex(ring::hmac::sign(key, &(rank as u64).to_le_bytes()).as_ref())
}

/// Whether `shown` is the expected token, comparing every byte whatever
/// the first difference (the time taken says nothing about the token).
fn same_secret(shown: &str, token: &str) -> bool {
    shown.len() == token.len() && shown.bytes().zip(token.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

/// Kills the process group a rank leads (the rank and whatever it
/// started).
fn kill_group(leader: Option<u32>) {
    signal_group(leader, libc::SIGKILL);
}

/// The process groups of the ranks started so far, killed if dropped
/// before it is emptied.
struct StartedGroups(Vec<Option<u32>>);

impl Drop for StartedGroups {
    fn drop(&mut self) {
        self.0.iter().for_each(|&leader| kill_group(leader));
    }
}

/// Sends `signal` to the process group a rank leads.
fn signal_group(leader: Option<u32>, signal: i32) {
    let Some(pid) = leader.and_then(|p| libc::pid_t::try_from(p).ok()) else { return };
    // SAFETY: kill has no memory-safety preconditions; a negative pid names
    // the process group the rank leads (it was started with its own).
    unsafe {
        libc::kill(-pid, signal);
    }
}

/// Waits for SIGUSR1 or SIGUSR2, which mpxrun passes on to its ranks, and
/// says which came.
///
/// # Cancel safety
/// Cancel-safe: a signal that comes while it is not waited for is kept.
async fn passed_on(user1: &mut tokio::signal::unix::Signal, user2: &mut tokio::signal::unix::Signal) -> (&'static str, i32) {
    tokio::select! {
        _ = user1.recv() => ("SIGUSR1", libc::SIGUSR1),
        _ = user2.recv() => ("SIGUSR2", libc::SIGUSR2),
    }
}

/// Copies `mpxrun`'s standard input to `to` (the reading rank's), on a
/// thread of its own, until the input ends (then the rank's does) or the
/// rank closes its end. The thread is not joined: blocked on a terminal,
/// it ends with the process; it holds the process's standard input until
/// then.
///
/// mpxrun ignores SIGTTIN from here on: run in the background of a
/// terminal, reading it would otherwise stop the whole of mpxrun (its
/// PMI service, its forwarding of output); ignored, the read fails and
/// the rank's input ends. (Its ranks get SIGTTIN's default back.)
fn pass_input(mut to: std::io::PipeWriter) -> Result<()> {
    // SAFETY: signal has no memory-safety preconditions; SIG_IGN is a
    // valid disposition for SIGTTIN.
    unsafe {
        libc::signal(libc::SIGTTIN, libc::SIG_IGN);
    }
    std::thread::Builder::new()
        .name("mpxrun-stdin".into())
        .spawn(move || {
            let _ = std::io::copy(&mut std::io::stdin().lock(), &mut to);
        })
        .map(drop)
        .map_err(|e| Error::transport("a thread for the standard input", e))
}

/// Writes a remote rank's token, credential and end line, `handed`, to
/// its launch command's input (a few KiB into an empty pipe: the write
/// does not wait). A launch command that has ended already (an ssh that
/// could not log in) took none of it, and that is no error of mpxrun's:
/// its status names the failure.
fn hand_over(input: &mut impl Write, handed: &[u8]) -> std::io::Result<()> {
    match input.write_all(handed) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        written => written,
    }
}

/// The signals that stop `mpxrun` (SIGINT, SIGTERM, SIGHUP and SIGQUIT:
/// a closed terminal or a dropped `ssh` session stops the job as an
/// interrupt does, rather than leave its ranks running). A signal
/// `mpxrun` was started ignoring (SIGHUP under `nohup`) stays ignored.
struct Stops {
    listeners: Vec<(tokio::signal::unix::Signal, Stop)>,
}

/// A signal that stops `mpxrun`: what happened (a word), the signal's
/// number, and the signal passed to the ranks, with its name (SIGQUIT
/// passes SIGTERM, so that the ranks do not each dump core).
#[derive(Clone, Copy)]
struct Stop {
    how: &'static str,
    signal: i32,
    passed: (&'static str, i32),
}

impl Stops {
    /// Acts on the stopping signals from now on.
    fn listen() -> Result<Stops> {
        use tokio::signal::unix::{signal, SignalKind};
        let stops = [
            Stop { how: "interrupted", signal: libc::SIGINT, passed: ("SIGINT", libc::SIGINT) },
            Stop { how: "terminated", signal: libc::SIGTERM, passed: ("SIGTERM", libc::SIGTERM) },
            Stop { how: "hung up", signal: libc::SIGHUP, passed: ("SIGHUP", libc::SIGHUP) },
            Stop { how: "quit", signal: libc::SIGQUIT, passed: ("SIGTERM", libc::SIGTERM) },
        ];
        let listeners = stops
            .into_iter()
            .filter(|stop| !matches!(stop.signal, libc::SIGHUP | libc::SIGQUIT) || !ignored(stop.signal))
            .map(|stop| signal(SignalKind::from_raw(stop.signal)).map(|s| (s, stop)).map_err(|e| Error::transport(format!("signal {}", stop.signal), e)))
            .collect::<Result<_>>()?;
        Ok(Stops { listeners })
    }

    /// Waits for a stopping signal, and says which came.
    ///
    /// # Cancel safety
    /// Cancel-safe: a signal that comes while it is not waited for is kept.
    async fn next(&mut self) -> Stop {
        std::future::poll_fn(|cx| {
            for (signal, stop) in &mut self.listeners {
                if signal.poll_recv(cx).is_ready() {
                    return std::task::Poll::Ready(*stop);
                }
            }
            std::task::Poll::Pending
        })
        .await
    }
}

/// Whether this process ignores `signal` (it was started so: `nohup`
/// ignores SIGHUP).
fn ignored(signal: i32) -> bool {
    // SAFETY: sigaction with no new action only writes the current one
    // into the zeroed struct it is given.
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signal, std::ptr::null(), &mut current) == 0 && current.sa_sigaction == libc::SIG_IGN
    }
}

/// The limit on open files `mpxrun` started with, if it raised its own
/// (see [`raise_open_file_limit`]): the ranks on this host get it back.
static STARTED_WITH: std::sync::OnceLock<libc::rlimit> = std::sync::OnceLock::new();

/// Raises this process's limit on open files to the most it may have:
/// mpxrun holds a few descriptors per rank (its PMI socket, its output
/// pipes, on other hosts its `ssh`), and the PMI port's connections, so a
/// job of a few hundred ranks passes the usual soft limit of 1,024. Its
/// ranks get the limit it started with.
fn raise_open_file_limit() {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes only into the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 || limit.rlim_cur >= limit.rlim_max {
        return;
    }
    let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
    // SAFETY: setrlimit only reads the struct it is given.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
        let _ = STARTED_WITH.set(limit);
    }
}

/// Runs `job`: starts its processes, serves them, forwards their output,
/// and waits for them all.
///
/// Ranks on this host die with the thread that started them
/// (`PR_SET_PDEATHSIG`): poll the future on a thread that lives as long
/// as the job (`block_on`'s, as `mpxrun`'s `main` does, or a runtime's
/// worker), not on one that may end first (`spawn_blocking`'s).
///
/// # Cancel safety
/// Dropping the future kills the processes started (`kill_on_drop`).
pub async fn run(job: &Job) -> Result<Outcome> {
    job.check()?;
    // From here on SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are mpxrun's to
    // act on: one that comes while ranks start is acted on once they have
    // (repeats of one signal meanwhile count as one).
    let mut stops = Stops::listen()?;
    let mut user1 = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1()).map_err(|e| Error::transport("SIGUSR1", e))?;
    let mut user2 = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined2()).map_err(|e| Error::transport("SIGUSR2", e))?;
    let mut secret = [0u8; 40];
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut secret)
        .map_err(|_| ErrorKind::InvalidArgument("no random numbers from the system for the job's secrets".into()))?;
    // The job id names the job in its certificates (which peers see);
    // the key of the ranks' tokens is the rest of the secret, never
    // derived from the id.
    let job_id = u64::from_le_bytes(secret[..8].try_into().expect("8 bytes"));
    let credential = JobCredential::generate(job_id)?;
    let kvs = Arc::new(Mutex::new(KvSpace::new(&format!("mpx-{job_id:016x}"), job.ranks as usize)));
    let (failed_tx, mut failed_rx) = tokio::sync::mpsc::unbounded_channel::<RankFailure>();
    let mut children: Vec<Child> = Vec::new();
    let writers: Writers = Arc::new((0..job.ranks).map(|_| tokio::sync::Mutex::new(None)).collect());
    let mut serving = tokio::task::JoinSet::new();
    let mut outputs = tokio::task::JoinSet::new();
    let (output, output_written) = Terminal::start()?;
    // Ranks on other hosts reach PMI over TCP, each with a token of its own.
    let remote = match &job.hosts {
        Some(hosts) => {
            let ip = match job.pmi_host {
                Some(ip) => ip,
                None if super::var(super::env::HOST).is_some() => super::advertised_ip()?,
                None => pmi_address(hosts)?,
            };
            let listener = tokio::net::TcpListener::bind(SocketAddr::new(ip, 0)).await.map_err(|e| Error::transport(format!("listening on {ip}"), e))?;
            let port = listener.local_addr().map_err(|e| Error::transport("the PMI port", e))?.port();
            let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &secret[8..]);
            serving.spawn(accept_ranks(listener, key.clone(), kvs.clone(), writers.clone(), failed_tx.clone()));
            Some((hosts.clone(), SocketAddr::new(ip, port), key))
        }
        None => None,
    };
    // Should a rank fail to start (or to take its credential), mpxrun
    // returns at once: the ranks started before it go with their process
    // groups (`kill_on_drop` reaches only the processes themselves).
    let mut started = StartedGroups(Vec::new());
    for rank in 0..job.ranks {
        // A rank on another host: its PMI token, which admits it alone.
        let token = remote.as_ref().map(|(_, _, key)| rank_token(key, rank as usize));
        let mut cmd = match &remote {
            None => Command::new(&job.command[0]),
            Some((hosts, addr, _)) => {
                let host = &hosts[rank as usize % hosts.len()];
                let mut words = job.launch.split_whitespace().map(|w| w.replace("{host}", host));
                let mut c = Command::new(words.next().ok_or_else(|| ErrorKind::InvalidArgument("an empty --launch".into()))?);
                // A remote start (ssh) passes no environment: the rank's
                // variables go on its command line through `env` (none of
                // them secret), and the rank's token and credential come
                // on its standard input.
                let mut vars = vec![
                    format!("PMI_RANK={rank}"),
                    format!("PMI_SIZE={}", job.ranks),
                    format!("PMI_PORT={addr}"),
                    format!("PMI_ID={rank}"),
                    format!("{}=-", crate::quic::env::CREDENTIAL),
                    format!("{}=mpxrun", super::env::LAUNCHER),
                ];
                for name in [super::env::START_TIMEOUT, super::env::IDLE_TIMEOUT, super::env::PMI_VERSION, super::env::PORT_RANGE] {
                    if let Some(v) = super::var(name).filter(|v| v.chars().all(|c| c.is_ascii_alphanumeric() || ".:-".contains(c))) {
                        vars.push(format!("{name}={v}"));
                    }
                }
                let line = std::iter::once("env".to_string()).chain(vars).chain(job.command.iter().cloned());
                match through_remote_shell(&job.launch) {
                    true => c.args(words).args(line.map(|w| shell_word(&w))),
                    false => c.args(words).args(line),
                };
                c
            }
        };
        if remote.is_none() {
            cmd.args(&job.command[1..]);
        }
        cmd
            .env("PMI_RANK", rank.to_string())
            .env("PMI_SIZE", job.ranks.to_string())
            // The rank dies with mpxrun, wherever it runs (it watches its PMI connection).
            .env(super::env::LAUNCHER, "mpxrun")
            .env_remove(crate::quic::env::RANK)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        // A rank on another host (its token and credential come on its
        // input), and the rank that reads mpxrun's input, get a pipe.
        let input = match remote.is_some() || job.stdin == Some(rank) {
            true => {
                let (reader, writer) = std::io::pipe().map_err(|e| Error::transport("a pipe for the standard input", e))?;
                cmd.stdin(reader);
                Some(writer)
            }
            false => None,
        };
        let pem = credential.issue(rank)?.to_pem();
        match remote {
            Some(_) => cmd.env(crate::quic::env::CREDENTIAL, "-"),
            None => cmd.env(crate::quic::env::CREDENTIAL, &pem),
        };
        if job.prefix {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        let mpxrun = std::process::id() as libc::pid_t;
        // SAFETY: the closure runs in the child between fork and exec and
        // calls only setsid, prctl, getppid and signal, which are
        // async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                // A session of its own: a process group of its own (killing
                // the rank kills what it started too, and their hold on its
                // output), and no controlling terminal (see the module docs).
                if libc::setsid() == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                // The rank dies with mpxrun, however mpxrun ends.
                // (prctl reads its arguments as unsigned longs. The signal
                // comes when the thread that started the rank ends: the
                // thread that polls `run`, see its docs.)
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                // mpxrun may have died between the fork and the prctl,
                // which then has no parent's death left to wait for: the
                // rank is not started (an orphan has a new parent; the
                // error is a raw code, since nothing may allocate here).
                if libc::getppid() != mpxrun {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                // SIGTTIN as any program has it (mpxrun ignores it itself:
                // see `pass_input`).
                libc::signal(libc::SIGTTIN, libc::SIG_DFL);
                Ok(())
            });
        }
        // This host: the rank's end of a socket pair. Others: the TCP port.
        let theirs = match &remote {
            Some((_, addr, _)) => {
                cmd.env("PMI_PORT", addr.to_string()).env("PMI_ID", rank.to_string()).env(super::env::PMI_TOKEN, token.as_deref().unwrap_or_default()).env_remove("PMI_FD");
                None
            }
            None => {
                let (ours, theirs) = UnixStream::pair().map_err(|e| Error::transport("a PMI socket pair", e))?;
                ours.set_nonblocking(true).map_err(|e| Error::transport("a PMI socket", e))?;
                let (r, w) = tokio::net::UnixStream::from_std(ours).map_err(|e| Error::transport("a PMI socket", e))?.into_split();
                *writers[rank as usize].lock().await = Some(Outbox::start(w));
                serving.spawn(serve_rank(rank as usize, r, kvs.clone(), writers.clone(), failed_tx.clone()));
                let fd = theirs.as_raw_fd();
                cmd.env("PMI_FD", fd.to_string()).env_remove("PMI_PORT");
                // SAFETY: the closure runs in the child between fork and
                // exec, and calls only fcntl and setrlimit, which are
                // async-signal-safe, and reads a `OnceLock` set before
                // any rank is started (an atomic load, no allocation);
                // `fd` is open there (the child inherits every descriptor)
                // and stays open in the parent until the spawn returns.
                unsafe {
                    cmd.pre_exec(move || {
                        // Let the child keep its end of the PMI socket across exec.
                        if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                            return Err(std::io::Error::last_os_error());
                        }
                        // The rank's limit on open files is the one mpxrun
                        // started with (an atomic load and a system call:
                        // safe between fork and exec).
                        if let Some(limit) = STARTED_WITH.get() {
                            libc::setrlimit(libc::RLIMIT_NOFILE, limit);
                        }
                        Ok(())
                    });
                }
                Some(theirs)
            }
        };
        let starting = match &remote {
            None => format!("starting {} (rank {rank})", job.command[0]),
            Some(_) => format!("starting the launch command {:?} (rank {rank})", cmd.as_std().get_program()),
        };
        let mut child = cmd.spawn().map_err(|e| Error::transport(starting, e))?;
        started.0.push(child.id());
        drop(theirs);
        // Its end of the pipe went with the spawn (the command held it).
        drop(cmd);
        if let Some(mut input) = input {
            if remote.is_some() {
                let handed = format!("{}={}\n{pem}{}\n", super::env::PMI_TOKEN, token.as_deref().unwrap_or_default(), super::INPUT_END);
                hand_over(&mut input, handed.as_bytes()).map_err(|e| Error::transport(format!("handing rank {rank} its credential"), e))?;
            }
            // Then mpxrun's own input, for the rank that reads it; the
            // others' input ends here.
            if job.stdin == Some(rank) {
                pass_input(input)?;
            }
        }
        if let Some(out) = child.stdout.take() {
            outputs.spawn(forward(rank, job.prefix, out, false, output.clone()));
        }
        if let Some(err) = child.stderr.take() {
            outputs.spawn(forward(rank, job.prefix, err, true, output.clone()));
        }
        children.push(child);
    }
    drop(failed_tx);
    // Every rank started: from here on their groups (in rank order) are
    // killed as they end.
    let mut groups = std::mem::take(&mut started.0);

    // Wait for every rank; the first failure kills the rest.
    let mut statuses: Vec<Option<ExitStatus>> = vec![None; children.len()];
    let mut failed: Option<u32> = None;
    let mut stopped_by: Option<i32> = None;
    let mut left_early = vec![false; job.ranks as usize];
    // Whether each rank's PMI connection has ended (see [`serve_rank`]).
    let mut pmi_ended = vec![false; job.ranks as usize];
    // Whether the first failed rank has been named.
    let mut named = false;
    let mut waits = tokio::task::JoinSet::new();
    let mut killers = Vec::new();
    for (rank, mut child) in children.into_iter().enumerate() {
        let (kill_tx, mut kill_rx) = tokio::sync::oneshot::channel::<()>();
        killers.push(Some(kill_tx));
        let group = groups[rank];
        waits.spawn(async move {
            let status = tokio::select! {
                s = child.wait() => s,
                _ = &mut kill_rx => {
                    kill_group(group);
                    let _ = child.start_kill();
                    child.wait().await
                }
            };
            (rank, status)
        });
    }
    let kill_all = |killers: &mut Vec<Option<tokio::sync::oneshot::Sender<()>>>| {
        for k in killers.iter_mut() {
            if let Some(k) = k.take() {
                let _ = k.send(());
            }
        }
    };
    // Once every process has ended, how long mpxrun still waits to learn
    // how the PMI connections of ranks that spoke PMI ended (a rank's
    // finalize may still be unread when its process is reaped).
    const PMI_ENDS_AFTER_RANKS: Duration = Duration::from_secs(2);
    let mut grace: Option<tokio::time::Instant> = None;
    // Once mpxrun is stopped and has passed the signal on: when the ranks
    // left are killed. Until then a rank that ends (of the signal, most
    // likely) does not take the others down with it.
    let mut kill_at: Option<tokio::time::Instant> = None;
    // The rank that left early and was spared when the others were killed
    // (it may say why), and when it is killed too if it has not ended:
    // `--kill-after` later.
    let mut spared: Option<(usize, tokio::time::Instant)> = None;
    loop {
        if waits.is_empty() {
            let kvs = kvs.lock().unwrap_or_else(|e| e.into_inner());
            if (0..job.ranks as usize).all(|r| pmi_ended[r] || !kvs.joined(r)) {
                break;
            }
            grace.get_or_insert_with(|| tokio::time::Instant::now() + PMI_ENDS_AFTER_RANKS);
        }
        // A rank that ended, or whose PMI connection ended, and may have
        // failed the job now. What PMI says comes first: a rank that left
        // early fails the job before the ranks its departure fails in turn.
        let ended: Option<usize> = tokio::select! {
            biased;
            Some(event) = failed_rx.recv() => match event {
                RankFailure::Ended { rank, early } => {
                    pmi_ended[rank as usize] = true;
                    left_early[rank as usize] = early;
                    // The first rank to leave early fails the job then; it
                    // is not killed itself (it is ending, and may say
                    // why), and it is named once its process has ended.
                    if early && failed.is_none() {
                        failed = Some(rank);
                        if !job.keep_going && kill_at.is_none() {
                            let own = killers[rank as usize].take();
                            kill_all(&mut killers);
                            if own.is_some() {
                                spared = Some((rank as usize, tokio::time::Instant::now() + job.kill_after));
                            }
                            killers[rank as usize] = own;
                        }
                    }
                    Some(rank as usize)
                }
                RankFailure::Broke { rank, why } => {
                    pmi_ended[rank as usize] = true;
                    output.say(format_args!("rank {rank} {why}"));
                    if failed.is_none() {
                        failed = Some(rank);
                    }
                    if let Some(k) = killers[rank as usize].take() {
                        let _ = k.send(());
                    }
                    if !job.keep_going && kill_at.is_none() {
                        kill_all(&mut killers);
                    }
                    None
                }
            },
            Some(joined) = waits.join_next() => {
                let (rank, status) = joined.map_err(|e| Error::transport("waiting for a rank", e))?;
                let status = status.map_err(|e| Error::transport(format!("waiting for rank {rank}"), e))?;
                killers[rank] = None;
                statuses[rank] = Some(status);
                // What the rank left running (holding its output open)
                // ends with it; its group is not named again (its number
                // may go to another group).
                kill_group(groups[rank].take());
                Some(rank)
            }
            Stop { how, signal, passed: (name, passed) } = stops.next() => {
                // The first time, the ranks get the signal and a while to
                // end; the second time, or with no while, they are killed.
                stopped_by.get_or_insert(signal);
                if kill_at.is_none() && !job.kill_after.is_zero() {
                    output.say(format_args!("{how}; passing {name} to every rank, killing those left after {:?}", job.kill_after));
                    groups.iter().for_each(|&g| signal_group(g, passed));
                    kill_at = Some(tokio::time::Instant::now() + job.kill_after);
                } else {
                    output.say(format_args!("{how}; killing every rank"));
                    groups.iter().for_each(|&g| kill_group(g));
                    kill_all(&mut killers);
                }
                None
            }
            _ = tokio::time::sleep_until(kill_at.unwrap_or_else(tokio::time::Instant::now)), if kill_at.is_some() && killers.iter().any(Option::is_some) => {
                output.say("killing the ranks left");
                groups.iter().for_each(|&g| kill_group(g));
                kill_all(&mut killers);
                None
            }
            _ = tokio::time::sleep_until(spared.map_or_else(tokio::time::Instant::now, |(_, at)| at)), if spared.is_some_and(|(rank, _)| killers[rank].is_some()) => {
                let (rank, _) = spared.take().expect("spared");
                output.say(format_args!("rank {rank} left the job early and had not ended {:?} later: killing it", job.kill_after));
                if let Some(k) = killers[rank].take() {
                    let _ = k.send(());
                }
                None
            }
            (name, signal) = passed_on(&mut user1, &mut user2) => {
                // Ranks on other hosts are out of reach (their groups
                // here are their launch commands').
                if remote.is_none() {
                    groups.iter().for_each(|&g| signal_group(g, signal));
                } else {
                    output.say(format_args!("{name} not passed on: the ranks run on other hosts"));
                }
                None
            }
            // A PMI connection a process left behind (held open by a
            // process the rank started) is not waited for past the grace.
            _ = tokio::time::sleep_until(grace.unwrap_or_else(tokio::time::Instant::now)), if grace.is_some() => break,
        };
        // A rank fails the job once its process has ended with a failure,
        // or, whatever its status, once its PMI connection has ended
        // before its finalize; the first to fail is named once both its
        // process and its connection have ended (or the connection was
        // never opened).
        let Some((rank, status)) = ended.and_then(|rank| statuses[rank].map(|status| (rank, status))) else { continue };
        if (!status.success() || left_early[rank]) && failed.is_none() {
            failed = Some(rank as u32);
            if !job.keep_going && kill_at.is_none() {
                kill_all(&mut killers);
            }
        }
        if failed == Some(rank as u32) && !named {
            named = true;
            if status.success() {
                output.say(format_args!("rank {rank} failed: it closed its PMI connection before its PMI finalize, then exited with status 0"));
            } else {
                output.say(format_args!("rank {rank} failed ({status})"));
            }
        }
    }
    serving.abort_all();
    // Output still open once every rank is gone and its process group
    // killed comes from processes that left the group (a daemon a rank
    // started with `setsid`): it is forwarded while it comes, and mpxrun
    // stops once it has been silent for `OUTPUT_IDLE_AFTER_RANKS` (lines
    // queued for a reader that is slow to take them are not silence), or
    // when interrupted.
    let mut interrupted = false;
    loop {
        let before = output.passed();
        tokio::select! {
            next = outputs.join_next() => if next.is_none() { break },
            _ = tokio::time::sleep(OUTPUT_IDLE_AFTER_RANKS) => {
                if output.passed() == before && output.drained() {
                    break;
                }
            }
            Stop { signal, .. } = stops.next() => {
                stopped_by.get_or_insert(signal);
                interrupted = true;
                break;
            }
        }
    }
    outputs.abort_all();
    while outputs.join_next().await.is_some() {}
    let statuses: Vec<ExitStatus> = statuses.into_iter().map(|s| s.expect("every rank was waited for")).collect();
    if remote.is_some() {
        // A rank on another host that never spoke PMI either is no mpx
        // program or lost its variables on the way (a launch command that
        // drops `env`'s arguments): say so, since it ran on its own.
        let kvs = kvs.lock().unwrap_or_else(|e| e.into_inner());
        for rank in (0..statuses.len()).filter(|&r| !kvs.joined(r)) {
            output.say(format_args!("rank {rank} never reached the job's PMI port: it ran outside the job (not an mpx program, or its launch command lost its variables)"));
        }
    }
    if failed.is_none() {
        failed = statuses.iter().position(|s| !s.success()).map(|r| r as u32);
    }
    if let Some(rank) = failed {
        output.say(format_args!("rank {rank} of {} failed: {}", job.ranks, statuses[rank as usize]));
    }
    // What was read is written before mpxrun exits, unless it is told to
    // stop (its reader may never read again).
    drop(output);
    if !interrupted {
        tokio::select! {
            _ = output_written => {}
            Stop { signal, .. } = stops.next() => {
                stopped_by.get_or_insert(signal);
            }
        }
    }
    Ok(Outcome { statuses, failed, stopped_by })
}

/// `mpxrun`'s `main`: parses the command line, runs the job, and exits
/// with its status.
pub fn main() -> ! {
    let job = match Job::parse(std::env::args().skip(1)) {
        Ok(job) => job,
        Err(e) => {
            eprintln!("mpxrun: {e}");
            std::process::exit(2);
        }
    };
    raise_open_file_limit();
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("mpxrun: {e}");
            std::process::exit(2);
        }
    };
    match runtime.block_on(run(&job)) {
        Ok(outcome) => std::process::exit(outcome.code()),
        Err(e) => {
            eprintln!("mpxrun: {e}");
            std::process::exit(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host given as `user@host` is looked up by its name alone; a host
    /// that resolves to a loopback address is this one, and its PMI
    /// address is never refused.
    #[test]
    fn hosts_are_looked_up_as_ssh_reaches_them() {
        assert_eq!(ssh_host_name("someone@node7"), "node7");
        assert_eq!(ssh_host_name("a@b@node7"), "node7");
        assert_eq!(ssh_host_name("node7"), "node7");
        assert_eq!(ssh_host_name("::1"), "::1");
        assert!(pmi_address(&["someone@127.0.0.1".into()]).is_ok());
        let refused = pmi_address(&["no-such-host.invalid".into()]);
        match super::super::advertised_ip() {
            Ok(ip) if ip.is_loopback() => {
                assert!(matches!(refused, Err(ref e) if e.to_string().contains("--pmi-host")), "{refused:?}");
            }
            Ok(ip) => assert_eq!(refused.ok(), Some(ip)),
            Err(_) => assert!(refused.is_err()),
        }
    }

    /// Strangers holding every connection slot in silence do not keep a
    /// rank out: the oldest of them gives way when the rank connects.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn silent_connections_give_way_to_a_rank() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let size = 2;
        let writers: Writers = Arc::new((0..size).map(|_| tokio::sync::Mutex::new(None)).collect());
        let kvs = Arc::new(Mutex::new(KvSpace::new("job-1", size)));
        let (failed, _failures) = tokio::sync::mpsc::unbounded_channel();
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"the job's key");
        let server = tokio::spawn(accept_ranks(listener, key.clone(), kvs, writers, failed));
        let mut silent = Vec::new();
        for _ in 0..4 * size + 16 + 4 {
            silent.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let channel = super::super::pmi::Channel::Port { addr: addr.to_string(), id: 1, token: Some(rank_token(&key, 1)) };
        let started = std::time::Instant::now();
        // SAFETY: not a descriptor.
        let welcomed = tokio::task::spawn_blocking(move || unsafe { super::super::pmi::connect(&channel, Duration::from_secs(5)) }).await.unwrap();
        assert!(welcomed.is_ok(), "{:?}", welcomed.err());
        assert!(started.elapsed() < Duration::from_secs(5));
        server.abort();
        drop(silent);
    }

    /// A launch command that has ended before it took its rank's
    /// credential closed its input: handing it over is no error (the
    /// command's status names the failure); one still there gets every
    /// byte.
    #[test]
    fn a_credential_for_a_launch_command_already_gone_is_no_error() {
        let (reader, mut writer) = std::io::pipe().unwrap();
        drop(reader);
        hand_over(&mut writer, b"MPX_PMI_TOKEN=x\n").unwrap();
        let (mut reader, mut writer) = std::io::pipe().unwrap();
        hand_over(&mut writer, b"MPX_PMI_TOKEN=x\n").unwrap();
        drop(writer);
        let mut got = String::new();
        std::io::Read::read_to_string(&mut reader, &mut got).unwrap();
        assert_eq!(got, "MPX_PMI_TOKEN=x\n");
    }

    /// A rank that stops reading its PMI answers holds up no other rank's:
    /// with rank 1's connection full, ranks 0 and 2 still get the release
    /// of the barrier rank 1 entered too; and once rank 1 has left more
    /// than [`MOST_UNREAD_ANSWERS`] unread, it is reported as breaking the
    /// protocol, its answers no longer kept.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rank_that_stops_reading_holds_up_no_other_rank() {
        let size = 3;
        let writers: Writers = Arc::new((0..size).map(|_| tokio::sync::Mutex::new(None)).collect());
        let kvs = Arc::new(Mutex::new(KvSpace::new("job-1", size)));
        let (failed, mut failures) = tokio::sync::mpsc::unbounded_channel();
        let mut ranks = Vec::new();
        for rank in 0..size {
            let (ours, theirs) = tokio::net::UnixStream::pair().unwrap();
            // Small buffers, whatever the system's defaults: a few KiB of
            // unread answers fill the connection.
            socket2::SockRef::from(&ours).set_send_buffer_size(4096).unwrap();
            socket2::SockRef::from(&theirs).set_recv_buffer_size(4096).unwrap();
            let (r, w) = ours.into_split();
            *writers[rank].lock().await = Some(Outbox::start(w));
            tokio::spawn(serve_rank(rank, r, kvs.clone(), writers.clone(), failed.clone()));
            ranks.push(theirs);
        }
        let [mut rank_0, mut rank_1, mut rank_2]: [tokio::net::UnixStream; 3] = ranks.try_into().unwrap();
        // Rank 1 asks, reading no answer, until its connection is full
        // (its buffers made small), then enters the barrier.
        let asks = b"cmd=get_maxes\n".repeat(5_000);
        rank_1.write_all(&asks).await.unwrap();
        rank_1.write_all(b"cmd=barrier_in\n").await.unwrap();
        // Its connection is full: answers wait in its outbox.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while writers[1].lock().await.as_ref().unwrap().unwritten.load(Ordering::SeqCst) == 0 {
            assert!(std::time::Instant::now() < deadline, "rank 1's connection never filled");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        rank_2.write_all(b"cmd=barrier_in\n").await.unwrap();
        rank_0.write_all(b"cmd=barrier_in\n").await.unwrap();
        for rank in [&mut rank_0, &mut rank_2] {
            let mut answer = vec![0u8; 64];
            let n = tokio::time::timeout(Duration::from_secs(5), rank.read(&mut answer)).await.expect("released").unwrap();
            assert!(String::from_utf8_lossy(&answer[..n]).starts_with("cmd=barrier_out"), "{:?}", String::from_utf8_lossy(&answer[..n]));
        }
        assert!(failures.try_recv().is_err(), "nobody failed yet");
        // More unread answers than mpxrun keeps: rank 1 broke the protocol.
        rank_1.write_all(&b"cmd=get_maxes\n".repeat(30_000)).await.unwrap();
        let failure = tokio::time::timeout(Duration::from_secs(5), failures.recv()).await.expect("reported").unwrap();
        assert!(matches!(&failure, RankFailure::Broke { rank: 1, why } if why.contains("unread")), "{failure:?}");
    }

    /// A rank's token admits that rank alone: rank 1's token cannot take
    /// rank 0's place (the connection is refused, and rank 0's slot stays
    /// free), and the real rank 0, with its own token, is welcomed after.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_ranks_token_cannot_claim_another_ranks_place() {
        use super::super::pmi::{connect, Channel};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let size = 2;
        let writers: Writers = Arc::new((0..size).map(|_| tokio::sync::Mutex::new(None)).collect());
        let kvs = Arc::new(Mutex::new(KvSpace::new("job-1", size)));
        let (failed, _failures) = tokio::sync::mpsc::unbounded_channel();
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"the job's key");
        assert_ne!(rank_token(&key, 0), rank_token(&key, 1));
        let server = tokio::spawn(accept_ranks(listener, key.clone(), kvs, writers.clone(), failed));
        let dial = |id: u32, token: Option<String>| {
            let channel = Channel::Port { addr: addr.clone(), id, token };
            // SAFETY: not a descriptor.
            tokio::task::spawn_blocking(move || unsafe { connect(&channel, Duration::from_secs(5)) })
        };
        // Rank 1's token, naming rank 0: refused at once.
        let started = std::time::Instant::now();
        let impostor = dial(0, Some(rank_token(&key, 1))).await.unwrap();
        let e = impostor.err().expect("rank 1's token does not admit rank 0");
        assert!(e.to_string().contains("refused"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5), "refused, not left to time out");
        assert!(writers[0].lock().await.is_none(), "rank 0's place stays free");
        // No token, and another key's token for rank 0: refused too.
        let other = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"another job's key");
        assert!(dial(0, Some(rank_token(&other, 0))).await.unwrap().is_err());
        assert!(dial(0, None).await.unwrap().is_err());
        // Malformed hellos (not UTF-8, not a message, no rank, a rank out
        // of range, a line longer than a hello, another command): each
        // refused, or its connection closed, and nobody takes a place.
        let long = format!("cmd=initack pmiid=0 token={}\n", "x".repeat(4000));
        let hellos: [&[u8]; 6] = [b"\xff\xfe\n", b"hello\n", b"cmd=initack token=t\n", b"cmd=initack pmiid=9 token=t\n", long.as_bytes(), b"cmd=init pmi_version=1\n"];
        for hello in hellos {
            let mut stranger = tokio::net::TcpStream::connect(&addr).await.unwrap();
            let _ = stranger.write_all(hello).await;
            let mut answer = Vec::new();
            let read = tokio::time::timeout(Duration::from_secs(5), stranger.read_to_end(&mut answer)).await;
            assert!(read.is_ok(), "{:?}: the connection was neither refused nor closed", String::from_utf8_lossy(hello));
            assert!(answer.is_empty() || answer.starts_with(b"cmd=initack rc=-1"), "{:?}", String::from_utf8_lossy(&answer));
        }
        assert!(writers[0].lock().await.is_none() && writers[1].lock().await.is_none());
        // The real rank 0, then rank 1, each with its own token.
        let rank_0 = dial(0, Some(rank_token(&key, 0))).await.unwrap();
        assert!(rank_0.is_ok(), "{:?}", rank_0.err());
        // A host that vanishes is found out (TCP keep-alive).
        let socket = socket2::SockRef::from(rank_0.as_ref().unwrap());
        assert!(socket.keepalive().unwrap());
        assert_eq!(socket.tcp_keepalive_time().unwrap(), super::super::pmi::KEEP_ALIVE_AFTER);
        let rank_1 = dial(1, Some(rank_token(&key, 1))).await.unwrap();
        assert!(rank_1.is_ok(), "{:?}", rank_1.err());
        assert!(writers[0].lock().await.is_some() && writers[1].lock().await.is_some());
        server.abort();
    }

    /// A job built by hand that `run` could not start is an error, not a
    /// panic: no program, no ranks, an empty list of hosts or launch
    /// command, a rank to read the input that is not there.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_run_cannot_start_is_an_error() {
        let good = Job { ranks: 1, command: vec!["true".into()], prefix: true, keep_going: false, hosts: None, launch: LAUNCH.into(), pmi_host: None, stdin: None, kill_after: KILL_AFTER };
        let bad = [
            Job { command: Vec::new(), ..good.clone() },
            Job { ranks: 0, ..good.clone() },
            Job { ranks: u32::MAX, ..good.clone() },
            Job { hosts: Some(Vec::new()), ..good.clone() },
            Job { hosts: Some(vec!["h".into()]), launch: " ".into(), ..good.clone() },
            Job { stdin: Some(1), ..good.clone() },
            Job { kill_after: Duration::MAX, ..good.clone() },
        ];
        for job in bad {
            let e = run(&job).await.expect_err("refused");
            assert!(matches!(e.kind(), ErrorKind::InvalidArgument(_)), "{job:?}: {e}");
        }
        assert!(run(&good).await.expect("runs").failed.is_none());
    }

    /// Words of a remote command line come out of a POSIX shell as they
    /// went in.
    #[test]
    fn shell_words_survive_a_shell() {
        let words = ["plain", "a b", "it's", "x;rm -rf ~", "$HOME", "", "\\n", "\"q\"", "PMI_PORT=10.0.0.1:80"];
        let line: Vec<String> = words.iter().map(|w| shell_word(w)).collect();
        let script = format!("for w in {}; do printf '%s\\0' \"$w\"; done", line.join(" "));
        let out = std::process::Command::new("sh").arg("-c").arg(&script).output().unwrap();
        let back: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().split_terminator('\0').collect();
        assert_eq!(back, words);
        assert_eq!(shell_word("PMI_RANK=3"), "PMI_RANK=3", "plain words stay as they are");
        assert!(through_remote_shell("/usr/bin/ssh -p 2222 {host}") && through_remote_shell("rsh {host}"));
        assert!(!through_remote_shell("ip netns exec {host}") && !through_remote_shell("sh sshd-like {host}"));
        for wrapped in ["timeout 600 ssh {host}", "sshpass -e ssh -o BatchMode=no {host}", "/usr/bin/env ssh {host}", "pdsh -w {host}"] {
            assert!(through_remote_shell(wrapped), "{wrapped}");
        }
    }

    #[test]
    fn only_the_expected_token_is_the_same_secret() {
        assert!(same_secret("a1b2", "a1b2"));
        assert!(!same_secret("a1b3", "a1b2"));
        assert!(!same_secret("a1b", "a1b2"));
        assert!(!same_secret("", "a1b2"));
    }
}
