//! How a process learns whether it is one rank of a job started by a
//! launcher, and finds its peers: [`Start::detect`] reads the environment,
//! [`start`] turns it into this rank's QUIC endpoint, and [`launch`] runs a
//! program either way.
//!
//! | started by | the environment | peers and trust come from |
//! |---|---|---|
//! | nothing (`cargo run`) | none of the below | no peers: ranks run in this process |
//! | `mpxrun` | `PMI_FD` (or, on other hosts, `PMI_PORT`, `PMI_ID`, and `MPX_CREDENTIAL=-`: the token `MPX_PMI_TOKEN=...` and the credential come as the first lines of standard input), `PMI_RANK`, `PMI_SIZE`, `MPX_CREDENTIAL`, `MPX_LAUNCHER=mpxrun` | mpxrun's PMI key-value space (addresses); the job CA mpxrun made (trust) |
//! | MPICH's `mpiexec.hydra` | `PMI_FD`, `PMI_RANK`, `PMI_SIZE` (PMI-2, or PMI-1) | hydra's PMI key-value space: addresses and certificate fingerprints, pinned |
//! | Slurm's `srun --mpi=pmi2` | `PMI_FD`, `PMI_RANK`, `PMI_SIZE` (PMI-2) | Slurm's PMI key-value space: addresses and certificate fingerprints, pinned |
//! | Open MPI's `mpirun` | `OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`, `PMIX_NAMESPACE`, and `MPX_RENDEZVOUS` passed with `-x` | files in the rendezvous directory: addresses and fingerprints, pinned |
//! | Slurm's `srun` without `--mpi=pmi2` | `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_JOB_ID`, `SLURM_STEP_ID`, and `MPX_RENDEZVOUS` | files in the rendezvous directory, as under Open MPI |
//! | by hand | `MPX_RANK`, `MPX_ADDRS`, `MPX_CREDENTIAL` | the variables ([`quic::start_from_env`]) |
//!
//! Under PMI (hydra, Slurm, mpxrun; [`pmi`] speaks PMI-2 and PMI-1) each
//! rank binds a UDP port, publishes `mpx-<rank>` =
//! `<address>,<fingerprint>` in the job's key-value space, meets the
//! others at the barrier, and reads theirs. Without a job CA (hydra,
//! Slurm, Open MPI) each rank makes a certificate of its own
//! ([`RankCredential::self_signed`]) and trusts exactly the fingerprints
//! published there ([`RankCredential::pin`]): the launcher's channel,
//! private to the job's processes, carries the trust. Through a
//! rendezvous directory (Open MPI, a plain `srun`) each rank writes the
//! same card, with a random nonce of its process, to `rank-<rank>` in the
//! job's own subdirectory, and trusts another rank's card only once that
//! card shows the nonces this rank read from every card, its own new one
//! among them: a card left behind by a killed rank of an earlier job under
//! the same name (a reused Open MPI namespace or Slurm job id) never does,
//! and is waited out until the job's own rank replaces it. A rank advertises
//! `MPX_HOST` if set; else, when it reaches its launcher over TCP, its
//! address on the route to the launcher; else the address its host name
//! resolves to, else 127.0.0.1; it listens on every interface of that
//! address's family (IPv4 or IPv6). Unless every rank is on loopback, packets
//! are sized for any Ethernet path ([`quic::Options::network`]'s MTU).
//! With `MPX_PORT_RANGE` set (`7000:7099`), a rank's two UDP sockets take
//! the first free ports of that range on its host, for hosts behind a
//! firewall ([`quic::PortRange`]); otherwise the system picks them.
//!
//! A rank of `mpxrun` (`MPX_LAUNCHER=mpxrun`, which `mpxrun` sets on every
//! rank it starts) dies with `mpxrun`, on any host. Once its start-up is
//! done, a thread of its own watches its PMI connection to `mpxrun` until
//! the session's finalize begins: it only polls the socket for a hang-up
//! and reads nothing, so every answer stays for the session. If the
//! connection closes before that finalize, `mpxrun` is gone (killed, or
//! its `ssh` ended, which tells the remote command nothing), and the rank
//! writes one line saying so on its standard error and kills its own
//! process group with SIGKILL. That group is the one made for the rank
//! (by `mpxrun` on its host, by the remote login on another): the rank
//! and whatever it, or a wrapper it runs under (`sh -c 'program; true'`,
//! whose `program` the launcher's own kill would not reach), started;
//! the same processes `mpxrun` kills when a rank fails. The watcher keeps
//! nothing alive: the process exits as it would without it. Under hydra,
//! Slurm and Open MPI, which end their ranks themselves, nothing watches.

pub mod mpxrun;
pub mod pmi;

use std::future::Future;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mpx_core::{Comm, Endpoint, Error, ErrorKind, Result};

use crate::quic::{self, Fingerprint, RankCredential};

/// The environment variables mpx reads at start-up, beyond the launchers'
/// own.
pub mod env {
    /// The address this rank advertises to its peers (an IP address).
    pub const HOST: &str = "MPX_HOST";
    /// Under Open MPI's `mpirun` or a plain `srun`: a directory private to the user (mode
    /// 0700), on a file system every host of the job sees, where ranks
    /// find each other (`mpirun -x MPX_RENDEZVOUS=$dir ...`).
    pub const RENDEZVOUS: &str = "MPX_RENDEZVOUS";
    /// Seconds a rank waits, at start-up, for its launcher and its peers
    /// (default 30).
    pub const START_TIMEOUT: &str = "MPX_START_TIMEOUT";
    /// The secret `mpxrun` gives each rank it starts on another host,
    /// which the rank shows when it connects to `mpxrun`'s PMI port: each
    /// rank's differs, and admits that rank alone.
    pub const PMI_TOKEN: &str = "MPX_PMI_TOKEN";
    /// `mpxrun` on every rank `mpxrun` starts: such a rank watches its
    /// PMI connection, and ends (its process group killed) if `mpxrun`
    /// goes before the rank's PMI finalize (see the [module
    /// docs](super)).
    pub const LAUNCHER: &str = "MPX_LAUNCHER";
    /// The form of PMI to ask the launcher for: `2` (the default; a
    /// launcher that declines it is spoken to in PMI-1) or `1`.
    pub const PMI_VERSION: &str = "MPX_PMI_VERSION";
    /// Seconds of silence after which a peer counts as failed, and every
    /// operation that depends on it fails with `ProcessFailed` (default
    /// 10; keep-alives go out at a fifth of it). Read by `launch` under
    /// a launcher.
    pub const IDLE_TIMEOUT: &str = "MPX_IDLE_TIMEOUT";
    pub use crate::quic::env::{ADDRS, CREDENTIAL, PORT_RANGE, RANK};
}

/// How this process was started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// By itself: a program's ranks run in this process.
    Alone,
    /// By hand: `MPX_RANK`, `MPX_ADDRS` and `MPX_CREDENTIAL`.
    Env {
        /// This process's rank.
        rank: u32,
        /// Ranks in the job.
        size: u32,
    },
    /// By a PMI launcher (MPICH's hydra, Slurm's `srun --mpi=pmi2`, or
    /// `mpxrun`): `PMI_FD` (or `PMI_PORT`), `PMI_RANK`, `PMI_SIZE`.
    Pmi {
        /// This process's rank.
        rank: u32,
        /// Ranks in the job.
        size: u32,
        /// How to reach the launcher.
        channel: pmi::Channel,
    },
    /// By a launcher that gives rank and size but no key-value space
    /// mpx can reach (Open MPI's `mpirun`; Slurm's `srun` without
    /// `--mpi=pmi2`): peers meet in the rendezvous directory
    /// `MPX_RENDEZVOUS`.
    Rendezvous {
        /// The launcher, for messages: `mpirun` or `srun`.
        launcher: &'static str,
        /// This process's rank.
        rank: u32,
        /// Ranks in the job.
        size: u32,
        /// The job's own directory inside `MPX_RENDEZVOUS`.
        dir: PathBuf,
        /// The job's id (from the launcher's name for the job).
        job: u64,
    },
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn number<T: std::str::FromStr>(name: &str) -> Result<T>
where
    T::Err: std::fmt::Display,
{
    let v = var(name).ok_or_else(|| ErrorKind::InvalidArgument(format!("{name} is not set")))?;
    v.trim().parse().map_err(|e| ErrorKind::InvalidArgument(format!("{name}={v:?}: {e}")).into())
}

impl Start {
    /// Reads how this process was started from its environment (see the
    /// [module docs](self)). A launcher's variables that are present but
    /// wrong are an error naming the variable.
    ///
    /// ```
    /// use mpx_net::bootstrap::Start;
    /// // `cargo test` starts this alone.
    /// assert_eq!(Start::detect()?, Start::Alone);
    /// # Ok::<(), mpx_core::Error>(())
    /// ```
    pub fn detect() -> Result<Start> {
        let start = Self::from_env()?;
        if let Start::Env { rank, size } | Start::Pmi { rank, size, .. } | Start::Rendezvous { rank, size, .. } = &start {
            if *size == 0 || *size > Self::MAX_RANKS || rank >= size {
                return Err(ErrorKind::InvalidArgument(format!(
                    "the launcher's environment says rank {rank} of {size} (mpx takes 1 to {} ranks)",
                    Self::MAX_RANKS
                )).into());
            }
        }
        Ok(start)
    }

    /// The most ranks a job may have.
    pub const MAX_RANKS: u32 = 1 << 20;

    fn from_env() -> Result<Start> {
        if var(env::RANK).is_some() {
            // A rank started by hand, or a variable left over from one in a
            // shell that now runs a launcher, which handed this process its
            // PMI socket: which one is meant cannot be told, and the wrong
            // guess starts every process as the same rank. (A `PMI_FD`
            // inherited in the environment of a program a launched rank
            // started names no such socket here: that program's ranks are
            // started by hand.)
            if var("PMI_FD").and_then(|fd| fd.trim().parse().ok()).is_some_and(pmi::is_handed_socket) {
                return Err(ErrorKind::InvalidArgument(format!(
                    "both {} (a rank started by hand) and PMI_FD (a launcher's PMI socket) are set: unset {} to run under the launcher",
                    env::RANK,
                    env::RANK
                ))
                .into());
            }
            let size = var(env::ADDRS).map(|a| a.split(',').count()).unwrap_or(0);
            return Ok(Start::Env { rank: number(env::RANK)?, size: size as u32 });
        }
        if var("PMI_FD").is_some() {
            let channel = pmi::Channel::Fd(number("PMI_FD")?);
            return Ok(Start::Pmi { rank: number("PMI_RANK")?, size: number("PMI_SIZE")?, channel });
        }
        if let Some(addr) = var("PMI_PORT") {
            let token = match var(env::PMI_TOKEN) {
                Some(token) => Some(token),
                None => launcher_input()?.map(|input| input.token.clone()).unwrap_or_default(),
            };
            let channel = pmi::Channel::Port { addr, id: number("PMI_ID")?, token };
            return Ok(Start::Pmi { rank: number("PMI_RANK")?, size: number("PMI_SIZE")?, channel });
        }
        if var("OMPI_COMM_WORLD_RANK").is_some() {
            let job = var("PMIX_NAMESPACE")
                .or_else(|| var("OMPI_MCA_ess_base_jobid"))
                .ok_or_else(|| ErrorKind::InvalidArgument("Open MPI gave no job id (PMIX_NAMESPACE)".into()))?;
            return Start::rendezvous("mpirun", number("OMPI_COMM_WORLD_RANK")?, number("OMPI_COMM_WORLD_SIZE")?, &job);
        }
        if var("SLURM_PROCID").is_some() && var("SLURM_NTASKS").is_some() && var("SLURM_STEP_ID").is_some() {
            // A job step (a batch script itself has no step id, and runs
            // alone): the job and step ids name it.
            let job = format!("{}.{}", var("SLURM_JOB_ID").unwrap_or_default(), var("SLURM_STEP_ID").unwrap_or_default());
            return Start::rendezvous("srun", number("SLURM_PROCID")?, number("SLURM_NTASKS")?, &job);
        }
        Ok(Start::Alone)
    }

    /// A start through the rendezvous directory, whose absence is an
    /// error saying what to type.
    fn rendezvous(launcher: &'static str, rank: u32, size: u32, job: &str) -> Result<Start> {
        let base = var(env::RENDEZVOUS).ok_or_else(|| {
            let how = match launcher {
                "srun" => format!(
                    "start it with `srun --mpi=pmi2 ...`, or pass a private directory every host sees, `{}=$(mktemp -d) srun ...`",
                    env::RENDEZVOUS
                ),
                _ => format!("pass a private directory, `mpirun -x {}=$(mktemp -d) ...`", env::RENDEZVOUS),
            };
            ErrorKind::InvalidArgument(format!("started by {launcher} without {}: {how}", env::RENDEZVOUS))
        })?;
        let dir = Path::new(&base).join(format!("job-{}", job.replace(['/', '\\'], "_")));
        Ok(Start::Rendezvous { launcher, rank, size, dir, job: job_id(job) })
    }

    /// Ranks in the job, or `None` when alone.
    pub fn size(&self) -> Option<u32> {
        match self {
            Start::Alone => None,
            Start::Env { size, .. } | Start::Pmi { size, .. } | Start::Rendezvous { size, .. } => Some(*size),
        }
    }
}

/// A job id for certificate names, from a launcher's name for the job.
fn job_id(name: &str) -> u64 {
    let f = quic::fingerprint(name.as_bytes());
    u64::from_le_bytes(f[..8].try_into().expect("8 bytes"))
}

/// How long start-up may wait for the launcher and the peers.
fn start_timeout() -> Result<Duration> {
    seconds(env::START_TIMEOUT, Duration::from_secs(30))
}

/// A duration in seconds from the variable `name`, or `default`.
fn seconds(name: &str, default: Duration) -> Result<Duration> {
    if var(name).is_none() {
        return Ok(default);
    }
    // Up to a day: longer is a typing error, and would overflow deadlines.
    const LONGEST: f64 = 86_400.0;
    let s = number::<f64>(name)?;
    if s.is_nan() || !(0.0..=LONGEST).contains(&s) {
        return Err(ErrorKind::InvalidArgument(format!("{name}={s}: not a number of seconds up to {LONGEST}")).into());
    }
    Ok(Duration::from_secs_f64(s.max(0.001)))
}

/// The local address of the route to `addr` (`host:port`): the address a
/// peer on the launcher's network reaches this host at.
fn local_route(addr: &str) -> Option<IpAddr> {
    let target = addr.to_socket_addrs().ok()?.next()?;
    let probe = UdpSocket::bind((quic::unspecified_like(target.ip()), 0)).ok()?;
    probe.connect(target).ok()?;
    Some(probe.local_addr().ok()?.ip())
}

/// The address this rank gives its peers: `MPX_HOST`, else its host
/// name's, else 127.0.0.1.
pub(crate) fn advertised_ip() -> Result<IpAddr> {
    if let Some(host) = var(env::HOST) {
        return host.trim().parse().map_err(|e| ErrorKind::InvalidArgument(format!("{}={host:?}: {e}", env::HOST)).into());
    }
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok().or_else(|| var("HOSTNAME"));
    let resolved = name.and_then(|n| (n.trim(), 0).to_socket_addrs().ok()).and_then(|mut a| a.find(|a| a.is_ipv4()));
    Ok(resolved.map(|a| a.ip()).unwrap_or(IpAddr::from([127, 0, 0, 1])))
}

/// What a rank publishes: its address and its certificate's fingerprint.
fn card(addr: SocketAddr, fp: &Fingerprint) -> String {
    format!("{addr},{}", hex(fp))
}

/// `bytes` in lowercase hex.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The text of a card file in the rendezvous directory: a regular file
/// (not followed if a link, not waited on if a FIFO) of at most 4 KiB
/// (a card is a few hundred bytes; more is read as no card at all).
fn read_card_file(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "not a regular file"));
    }
    let mut text = String::new();
    file.take(4096).read_to_string(&mut text)?;
    Ok(text)
}

fn read_card(rank: u32, text: &str) -> Result<(SocketAddr, Fingerprint)> {
    let bad = || -> Error { ErrorKind::Protocol(format!("rank {rank} published {text:?}, not an address and a fingerprint")).into() };
    let (addr, hex) = text.trim().rsplit_once(',').ok_or_else(bad)?;
    let addr: SocketAddr = addr.parse().map_err(|_| bad())?;
    if hex.len() != 64 || !hex.is_ascii() {
        return Err(bad());
    }
    let mut fp = [0u8; 32];
    for (i, b) in fp.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok((addr, fp))
}

/// This rank's socket and credential before the exchange: a CA credential
/// from `MPX_CREDENTIAL` if the launcher made one (mpxrun), else one of
/// its own to be pinned.
fn prepare(rank: u32, job: u64, route: Option<IpAddr>) -> Result<(UdpSocket, SocketAddr, RankCredential)> {
    let credential = match credential_pem()? {
        Some(pem) => {
            let c = RankCredential::from_pem(&pem)?;
            if c.rank() != rank {
                return Err(ErrorKind::InvalidArgument(format!("{} is rank {}'s, not rank {rank}'s", env::CREDENTIAL, c.rank())).into());
            }
            c
        }
        None => RankCredential::self_signed(job, rank)?,
    };
    let ip = match (var(env::HOST), route) {
        (None, Some(ip)) => ip,
        _ => advertised_ip()?,
    };
    // Every interface of the advertised address's family.
    let ports = quic::port_range_from_env()?.unwrap_or(quic::PortRange::ANY);
    let socket = ports.bind_excluding(quic::unspecified_like(ip), &[], Some(env::PORT_RANGE))?;
    let port = socket.local_addr().map_err(|e| Error::transport("binding a UDP socket", e))?.port();
    Ok((socket, SocketAddr::new(ip, port), credential))
}

/// The credential `MPX_CREDENTIAL` gives: its PEM text or a file's
/// ([`env::CREDENTIAL`]); when that is `-`, read from standard input to
/// its end or to a line [`INPUT_END`] (how `mpxrun` hands a rank on
/// another host its key: never on a command line), within the start-up
/// time.
fn credential_pem() -> Result<Option<String>> {
    match launcher_input()? {
        Some(input) => Ok(Some(input.pem.clone())),
        None => var(env::CREDENTIAL).map(|v| quic::credential_text(&v)).transpose(),
    }
}

/// The line that ends what a launcher writes on a rank's standard input
/// (see [`LauncherInput`]): what follows it is the program's, as
/// `mpxrun`'s own input is for the rank that reads it. Read byte by byte
/// past the standard library's buffer ([`read_launcher_input`]), so that
/// the program's readers get exactly what followed it.
pub(crate) const INPUT_END: &str = "MPX_LAUNCHER_INPUT_END";

/// What `mpxrun` writes on a remote rank's standard input: a first line
/// `MPX_PMI_TOKEN=<token>`, the rank's own token (kept off command lines,
/// which every user of a host can read), then the rank's credential as
/// PEM text, then a line [`INPUT_END`] (or the end of the input).
struct LauncherInput {
    token: Option<String>,
    pem: String,
}

/// The launcher's input, read once, when `MPX_CREDENTIAL` is `-`;
/// `None` otherwise.
fn launcher_input() -> Result<Option<&'static LauncherInput>> {
    const LONGEST: u64 = 64 << 10;
    static INPUT: std::sync::OnceLock<std::result::Result<LauncherInput, String>> = std::sync::OnceLock::new();
    if var(env::CREDENTIAL).is_none_or(|v| v.trim() != "-") {
        return Ok(None);
    }
    let timeout = start_timeout()?;
    let input = INPUT.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(read_launcher_input(LONGEST));
        });
        let text = match rx.recv_timeout(timeout) {
            Ok(Ok(text)) => text,
            Ok(Err(e)) => return Err(format!("reading the credential from standard input: {e}")),
            Err(_) => return Err(format!("{}=- but no credential came on standard input in time", env::CREDENTIAL)),
        };
        let prefix = format!("{}=", env::PMI_TOKEN);
        Ok(match text.split_once('\n') {
            Some((first, pem)) if first.starts_with(&prefix) => LauncherInput { token: Some(first[prefix.len()..].trim().to_string()), pem: pem.to_string() },
            _ => LauncherInput { token: None, pem: text },
        })
    });
    input.as_ref().map(Some).map_err(|e| ErrorKind::InvalidArgument(e.clone()).into())
}

/// Reads standard input up to a line [`INPUT_END`] (or its end), byte by
/// byte from a duplicate of descriptor 0, past the standard library's
/// buffer: the descriptor is left exactly after the end line for the
/// program's readers of every kind (`std::io::stdin`, tokio's, a C
/// library's, a child that inherits it), with nothing of what follows held
/// in a buffer of this process. At most `longest` bytes: more, without the
/// end line, is an error, not a credential cut short.
fn read_launcher_input(longest: u64) -> std::io::Result<String> {
    use std::io::Read;
    use std::os::fd::AsFd;
    // Keeps the standard library's own readers off while this reads.
    let _held = std::io::stdin().lock();
    let mut input = std::fs::File::from(std::io::stdin().as_fd().try_clone_to_owned()?);
    let mut text = Vec::new();
    let mut line_start = 0;
    let is_end = |line: &[u8]| line.trim_ascii_end() == INPUT_END.as_bytes();
    let mut byte = [0u8];
    loop {
        match input.read(&mut byte) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        if byte[0] == b'\n' && is_end(&text[line_start..]) {
            text.truncate(line_start);
            break;
        }
        text.push(byte[0]);
        if byte[0] == b'\n' {
            line_start = text.len();
        }
        if text.len() as u64 > longest {
            let why = format!("more than {longest} bytes before the line {INPUT_END}");
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, why));
        }
    }
    if is_end(&text[line_start..]) {
        // The end line, last and without its newline.
        text.truncate(line_start);
    }
    String::from_utf8(text).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Pins the published fingerprints if the credential is this rank's own.
fn trust(credential: &mut RankCredential, fingerprints: Vec<Fingerprint>) -> Result<()> {
    if var(env::CREDENTIAL).is_none() {
        credential.pin(fingerprints)?;
    }
    Ok(())
}

/// Ends this process's PMI session when the endpoint that owns it goes.
struct PmiSession {
    client: Mutex<pmi::Client<Box<dyn pmi::Duplex>>>,
    /// Under `mpxrun`, the watcher's flag ([`watch_mpxrun`]): set as the
    /// finalize begins, after which the connection may close.
    finalizing: Option<Arc<AtomicBool>>,
}

impl Drop for PmiSession {
    fn drop(&mut self) {
        if let Some(finalizing) = &self.finalizing {
            finalizing.store(true, Ordering::SeqCst);
        }
        let client = self.client.get_mut().unwrap_or_else(|e| e.into_inner());
        // The launcher answers at once, or is out of reach (a cut link, a
        // launcher gone): never hold the process's exit for long.
        let _ = client.get_ref().set_read_timeout(Duration::from_secs(1));
        if let Err(e) = client.finalize() {
            tracing::warn!(error = %e, "PMI finalize");
        }
    }
}

/// The exchange through a PMI launcher: on a blocking thread.
fn through_pmi(rank: u32, size: u32, channel: &pmi::Channel, timeout: Duration) -> Result<(UdpSocket, Vec<SocketAddr>, RankCredential, PmiSession)> {
    // Over TCP, the address this host reaches the launcher from is the
    // one to advertise (unless MPX_HOST says otherwise).
    let route = match channel {
        pmi::Channel::Port { addr, .. } => local_route(addr),
        pmi::Channel::Fd(_) => None,
    };
    let version = match var(env::PMI_VERSION) {
        Some(v) => pmi::Version::parse(&v)?,
        None => pmi::Version::V2,
    };
    // The whole start-up within `timeout`, however slowly the launcher
    // answers each of its calls.
    let deadline = std::time::Instant::now() + timeout;
    // SAFETY: PMI_FD names a descriptor the launcher handed this process
    // for PMI alone, or (in the environment a rank's own program
    // inherited) one that is not a socket with close-on-exec clear, or
    // whose owner does not answer as a launcher: `connect` refuses the
    // former, and leaves the latter open. It is taken once (`start` runs
    // once per process).
    let stream = unsafe { pmi::connect(channel, timeout)? };
    let mut client = pmi::Client::init_by(stream, rank, version, Some(deadline))?;
    if let Some(told) = client.size().filter(|&n| n != size) {
        return Err(ErrorKind::Protocol(format!("PMI_SIZE says {size} ranks, but the launcher's PMI says {told}")).into());
    }
    let (socket, addr, mut credential) = prepare(rank, job_id(client.job_name()), route)?;
    client.put(&format!("mpx-{rank}"), &card(addr, &credential.fingerprint()))?;
    client.barrier()?;
    let mut addrs = Vec::with_capacity(size as usize);
    let mut pins = Vec::with_capacity(size as usize);
    for r in 0..size {
        let (a, f) = read_card(r, &client.get(&format!("mpx-{r}"))?)?;
        addrs.push(a);
        pins.push(f);
    }
    trust(&mut credential, pins)?;
    client.set_deadline(None);
    // Only mpxrun's ranks: other launchers end their ranks themselves.
    let finalizing = match var(env::LAUNCHER) {
        Some(launcher) if launcher.trim() == "mpxrun" => Some(watch_mpxrun(rank, &**client.get_ref())?),
        _ => None,
    };
    Ok((socket, addrs, credential, PmiSession { client: Mutex::new(client), finalizing }))
}

/// Starts the thread that watches this rank's PMI connection to `mpxrun`
/// (`stream`) until the returned flag is set, as the session's finalize
/// begins; if the connection closes first, the thread ends the rank (see
/// the [module docs](self)).
fn watch_mpxrun(rank: u32, stream: &dyn pmi::Duplex) -> Result<Arc<AtomicBool>> {
    let what = "watching the PMI connection to mpxrun";
    // A descriptor of the watcher's own (close-on-exec): the session's
    // closes with the session, perhaps while the watcher is polling.
    let fd = stream.as_fd().try_clone_to_owned().map_err(|e| Error::transport(what, e))?;
    let finalizing = Arc::new(AtomicBool::new(false));
    let flag = finalizing.clone();
    std::thread::Builder::new()
        .name("mpx-pmi-watch".into())
        .spawn(move || {
            // A line to a standard error whose reader went with mpxrun
            // fails (EPIPE) rather than raising SIGPIPE, which could end
            // the process before its group is killed.
            // SAFETY: an all-zero sigset_t is a valid set; sigemptyset and
            // sigaddset write only into `set`, a local; pthread_sigmask
            // reads `set` and changes only this thread's mask.
            unsafe {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, libc::SIGPIPE);
                libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            }
            if hung_up(&fd, &flag) {
                mpxrun_gone(rank);
            }
        })
        .map_err(|e| Error::transport(what, e))?;
    Ok(finalizing)
}

/// Polls `fd` for a hang-up (POLLRDHUP, POLLHUP or POLLERR: the launcher's
/// end closed or reset), never reading from it, until `finalizing` is set:
/// `true` if the connection closed first, `false` once `finalizing` is set
/// (or if the socket cannot be polled).
fn hung_up(fd: &std::os::fd::OwnedFd, finalizing: &AtomicBool) -> bool {
    use std::os::fd::AsRawFd;
    loop {
        // Not POLLIN: an answer waiting for the session is no hang-up.
        let mut watched = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLRDHUP, revents: 0 };
        // SAFETY: poll writes only into `watched`, one entry naming a
        // descriptor this function's caller owns and keeps open.
        let ready = unsafe { libc::poll(&mut watched, 1, 250) };
        if finalizing.load(Ordering::SeqCst) {
            return false;
        }
        if ready < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            tracing::warn!(error = %e, "watching the PMI connection to mpxrun");
            return false;
        }
        if ready > 0 && (watched.revents & libc::POLLNVAL) != 0 {
            tracing::warn!("watching the PMI connection to mpxrun: the descriptor is not open");
            return false;
        }
        if ready > 0 && (watched.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR)) != 0 {
            return true;
        }
    }
}

/// Ends this rank once `mpxrun` is gone: a line on standard error, then
/// SIGKILL to this process's group (the rank and what it started).
fn mpxrun_gone(rank: u32) -> ! {
    let line = format!("mpx: rank {rank}: the PMI connection to mpxrun closed before this rank finished: mpxrun is gone; killing this rank's process group\n");
    // SAFETY: write reads only `line`'s bytes. Straight to descriptor 2,
    // not through the standard library's lock on standard error, which
    // another thread may hold.
    unsafe {
        libc::write(2, line.as_ptr().cast(), line.len());
    }
    // SAFETY: kill has no memory-safety preconditions; pid 0 names this
    // process's own group, this process among it.
    unsafe {
        libc::kill(0, libc::SIGKILL);
    }
    // SIGKILL ends this process with its group; should the signal not
    // come at once, the process ends here.
    std::process::exit(1)
}

/// A rank's card in a rendezvous directory, removed (and the job's
/// directory with the last card) when the rank's endpoint ends. A card
/// that outlives its rank (one killed with SIGKILL) is never trusted by a
/// later job under the same name: see [`through_directory`].
struct PublishedCard {
    file: std::path::PathBuf,
    dir: std::path::PathBuf,
}

impl Drop for PublishedCard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
        // Fails while other ranks' cards remain: the last rank removes it.
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// A rank's card in a rendezvous directory (the file `rank-<r>`), three
/// lines:
///
/// ```text
/// <address>,<fingerprint>
/// <nonce>
/// <view>
/// ```
///
/// The first is the card ranks publish under PMI too. The nonce (32 hex
/// digits) is random, new in every process. The view is `-` until the
/// rank has read a card of every rank, then the SHA-256 (64 hex digits)
/// of the nonces it read, in rank order, joined by `,`: its own and each
/// other rank's as it last read them.
struct DirCard {
    addr: SocketAddr,
    fp: Fingerprint,
    nonce: String,
    view: String,
}

impl DirCard {
    fn text(&self) -> String {
        format!("{}\n{}\n{}\n", card(self.addr, &self.fp), self.nonce, self.view)
    }

    /// The card in `text`, or `None` if it is none of this form (a card
    /// of another form is some other job's).
    fn read(rank: u32, text: &str) -> Option<DirCard> {
        let mut lines = text.lines();
        let (addr, fp) = read_card(rank, lines.next()?).ok()?;
        let nonce = lines.next()?.trim();
        let view = lines.next()?.trim();
        let hex_of = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
        if !hex_of(nonce, 32) || !(view == "-" || hex_of(view, 64)) || lines.any(|l| !l.trim().is_empty()) {
            return None;
        }
        Some(DirCard { addr, fp, nonce: nonce.to_string(), view: view.to_string() })
    }
}

/// The exchange through the rendezvous directory `dir` (the job's own):
/// on a blocking thread.
///
/// Each rank writes its card ([`DirCard`], written whole and renamed into
/// place, so that a reader sees one card or another, never part of one),
/// then reads every other rank's, again and again, until each of them
/// shows this rank's view. A card left by a rank of an earlier job under
/// the same name (a rank killed with SIGKILL leaves its card behind) is
/// never trusted: it cannot show this rank's view, which holds this
/// rank's nonce, new in this process, so this rank keeps reading until
/// the job's own rank replaces it. Whenever what a rank has read changes
/// its view, it writes its card again with the new one. The cards only
/// ever change from an earlier job's to this job's, so every rank's view
/// comes to be the same, the nonces of this job's ranks alone, within a
/// few readings of the last rank's first card; a rank whose view every
/// other card shows has read this job's card from each. Ranks that are
/// not all there within `timeout` fail, naming the first rank whose card
/// is missing or not this job's.
fn through_directory(rank: u32, size: u32, dir: &Path, job: u64, timeout: Duration) -> Result<(UdpSocket, Vec<SocketAddr>, RankCredential, PublishedCard)> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let io = |what: String| move |e: std::io::Error| Error::transport(what, e);
    // The directory is looked up once, its links followed now: what is
    // checked below is what is written to and read from, even if a link
    // on the way is pointed elsewhere later.
    let given = dir.parent().unwrap_or(dir);
    let base = std::fs::canonicalize(given).map_err(io(format!("the rendezvous directory {}", given.display())))?;
    let dir = &match dir.file_name() {
        Some(name) if dir.parent().is_some() => base.join(name),
        _ => base.clone(),
    };
    let base = base.as_path();
    let meta = std::fs::metadata(base).map_err(io(format!("the rendezvous directory {}", base.display())))?;
    // The process's own directory in /proc belongs to its effective user.
    let me = std::fs::metadata("/proc/self").map_err(io("/proc/self".into()))?.uid();
    if meta.uid() != me || meta.permissions().mode() & 0o077 != 0 {
        return Err(ErrorKind::InvalidArgument(format!(
            "the rendezvous directory {} must belong to this user and be private (mode 0700): it carries the job's trust",
            base.display()
        )).into());
    }
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(io(format!("creating {}", dir.display())))?;
    let (socket, addr, mut credential) = prepare(rank, job, None)?;
    let mut nonce = [0u8; 16];
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut nonce)
        .map_err(|_| ErrorKind::InvalidArgument("no random numbers from the system for this rank's card".into()))?;
    let mut own = DirCard { addr, fp: credential.fingerprint(), nonce: hex(&nonce), view: "-".into() };
    let file = |r: u32| dir.join(format!("rank-{r}"));
    let partial = dir.join(format!(".rank-{rank}.{}", std::process::id()));
    let publish = |card: &DirCard| -> Result<()> {
        std::fs::write(&partial, card.text()).map_err(io(format!("writing {}", partial.display())))?;
        std::fs::rename(&partial, file(rank)).map_err(io(format!("publishing {}", file(rank).display())))
    };
    publish(&own)?;
    let published = PublishedCard { file: file(rank), dir: dir.to_path_buf() };
    let deadline = Instant::now() + timeout;
    // Each other rank's card as last read (one that has gone since, its
    // rank finished, is kept), and whether it shows this rank's view.
    let mut cards: Vec<Option<DirCard>> = (0..size).map(|_| None).collect();
    let mut confirmed = vec![false; size as usize];
    confirmed[rank as usize] = true;
    loop {
        for r in (0..size).filter(|&r| !confirmed[r as usize]) {
            match read_card_file(&file(r)) {
                Ok(text) => {
                    if let Some(c) = DirCard::read(r, &text) {
                        cards[r as usize] = Some(c);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::transport(format!("reading rank {r}'s card {} in the rendezvous directory", file(r).display()), e)),
            }
        }
        let view = {
            let nonces: Option<Vec<&str>> = (0..size)
                .map(|r| if r == rank { Some(own.nonce.as_str()) } else { cards[r as usize].as_ref().map(|c| c.nonce.as_str()) })
                .collect();
            nonces.map(|n| hex(&quic::fingerprint(n.join(",").as_bytes())))
        };
        if let Some(view) = view {
            if view != own.view {
                own.view = view;
                publish(&own)?;
            }
            for r in (0..size).filter(|&r| r != rank) {
                confirmed[r as usize] = cards[r as usize].as_ref().is_some_and(|c| c.view == own.view);
            }
            if confirmed.iter().all(|&c| c) {
                break;
            }
        }
        if Instant::now() >= deadline {
            let r = (0..size).find(|&r| !confirmed[r as usize]).unwrap_or(rank);
            let (what, why) = match &cards[r as usize] {
                None => ("", "no card of this form there"),
                Some(_) => (" to be this job's", "the card there never showed this rank's view: an earlier job's, or its rank never read every card"),
            };
            let context = format!("waiting for rank {r}'s card {}{what} in the rendezvous directory", file(r).display());
            return Err(Error::transport(context, std::io::Error::new(std::io::ErrorKind::TimedOut, why)));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut addrs = Vec::with_capacity(size as usize);
    let mut pins = Vec::with_capacity(size as usize);
    for r in 0..size {
        let c = if r == rank { Some(&own) } else { cards[r as usize].as_ref() };
        let c = c.ok_or_else(|| ErrorKind::Protocol(format!("rank {r}'s card vanished from the rendezvous exchange")))?;
        addrs.push(c.addr);
        pins.push(c.fp);
    }
    trust(&mut credential, pins)?;
    Ok((socket, addrs, credential, published))
}

/// Starts this process's rank as its launcher says ([`Start::detect`]),
/// or returns `Ok(None)` if it was started alone. Waits for the launcher
/// and the peers' addresses at most `MPX_START_TIMEOUT` seconds (30 by
/// default), then connects as [`quic::start`] does.
///
/// Must be called within a tokio runtime, once per process.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx_core::Result<()> {
/// // Started alone (as by `cargo test`): no endpoint.
/// assert!(mpx_net::bootstrap::start(&mpx_net::quic::Options::network()).await?.is_none());
/// # Ok(()) }
/// ```
///
/// # Cancel safety
/// Not cancel-safe: dropping the future while it waits for the launcher
/// leaves the exchange to finish on its thread, and this process's PMI
/// session spent.
pub async fn start(options: &quic::Options) -> Result<Option<Endpoint>> {
    static STARTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let start = Start::detect()?;
    if start == Start::Alone {
        return Ok(None);
    }
    if STARTED.swap(true, std::sync::atomic::Ordering::SeqCst) {
        return Err(ErrorKind::InvalidArgument("this process has started its rank already".into()).into());
    }
    let timeout = start_timeout()?;
    let options = quic::Options { connect_timeout: timeout, ..*options };
    // Under a launcher, the bulk socket's ports (by hand, `start_from_env`
    // reads them itself).
    let launched = quic::with_port_range_from_env(&options)?;
    let blocking = |f: Box<dyn FnOnce() -> Result<Endpoint> + Send>| async move {
        tokio::task::spawn_blocking(f).await.map_err(|e| Error::transport("the start-up exchange", e))?
    };
    let runtime = tokio::runtime::Handle::current();
    let endpoint = match start {
        Start::Alone => unreachable!("returned above"),
        // Peers' addresses may be names to look up: on a blocking thread too.
        Start::Env { .. } => {
            blocking(Box::new(move || {
                let _inside = runtime.enter();
                quic::start_from_env_with(&options, for_path)?.ok_or_else(|| ErrorKind::InvalidArgument("MPX_RANK vanished".into()).into())
            }))
            .await?
        }
        Start::Pmi { rank, size, channel } => {
            blocking(Box::new(move || {
                let (socket, addrs, credential, session) = through_pmi(rank, size, &channel, timeout)?;
                let _inside = runtime.enter();
                let endpoint = quic::start(socket, &addrs, credential, &for_path(launched, &addrs))?;
                endpoint.own(session);
                Ok(endpoint)
            }))
            .await?
        }
        Start::Rendezvous { rank, size, dir, job, .. } => {
            blocking(Box::new(move || {
                let (socket, addrs, credential, card) = through_directory(rank, size, &dir, job, timeout)?;
                let _inside = runtime.enter();
                let endpoint = quic::start(socket, &addrs, credential, &for_path(launched, &addrs))?;
                endpoint.own(card);
                Ok(endpoint)
            }))
            .await?
        }
    };
    Ok(Some(endpoint))
}

/// `options` with packets that fit any Ethernet path
/// ([`Options::network`](quic::Options::network)'s MTU) unless every peer
/// is on this host's loopback.
fn for_path(options: quic::Options, addrs: &[SocketAddr]) -> quic::Options {
    if addrs.iter().all(|a| a.ip().is_loopback()) {
        options
    } else {
        quic::Options { mtu: options.mtu.min(quic::Options::network().mtu), ..options }
    }
}

/// Runs `f` as `ranks` ranks, wherever this process was started: started
/// alone, all `ranks` run in this process on the in-memory loopback (as
/// [`loopback::launch`](crate::loopback::launch)); started by a launcher
/// (`mpxrun`, `mpiexec.hydra`, Slurm's `srun`, Open MPI's `mpirun`, or by hand, see
/// [`Start`]), this process runs its own rank over QUIC and the launcher's
/// other processes run the others.
///
/// Returns the results of the ranks that ran in this process, in rank
/// order: all `ranks` of them when alone, one (this process's rank's)
/// under a launcher. A launcher that started another number of processes
/// than `ranks` is an error naming both, before anything runs.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx_core::Result<()> {
/// let got = mpx_net::bootstrap::launch(3, |world| async move { Ok(world.rank() * 10) }).await?;
/// // Run alone here: every rank's result. Under `mpxrun -n 3`, each
/// // process would get its own rank's only.
/// assert_eq!(got, [0, 10, 20]);
/// # Ok(()) }
/// ```
///
/// # Errors of the program's own
///
/// A rank's program returns [`mpx_core::Result`], so `?` works on every mpx
/// call without annotations (with a generic error type every `?` would
/// need one). The program's own errors go in too: with `?` for I/O,
/// parse and UTF-8 errors and for strings (`Err("no reply".into())`),
/// with [`Error::user`] for any error, and with `?` for an error type of
/// the program's own once it converts (`impl From<MyError> for Error`,
/// calling [`Error::user`]). They come out of `launch` as
/// [`ErrorKind::User`], from which the original error can be downcast. If
/// several ranks fail, `launch` reports the root cause (see
/// [`loopback::launch`](crate::loopback::launch)).
///
/// ```
/// use mpx_core::{Error, ErrorKind};
/// #[derive(Debug)]
/// struct Overheated(f64);
/// impl std::fmt::Display for Overheated {
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
///         write!(f, "{} degrees", self.0)
///     }
/// }
/// impl std::error::Error for Overheated {}
/// impl From<Overheated> for Error {
///     fn from(e: Overheated) -> Error {
///         Error::user(e)
///     }
/// }
/// fn check(t: f64) -> Result<f64, Overheated> {
///     if t < 100.0 { Ok(t) } else { Err(Overheated(t)) }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let run = mpx_net::bootstrap::launch(2, |world| async move {
///     let t = check(20.0 + 90.0 * world.rank() as f64)?; // rank 1 overheats
///     world.barrier().await?;
///     Ok(t)
/// });
/// match run.await.map_err(Error::into_kind) {
///     Err(ErrorKind::User(cause)) => assert_eq!(cause.0.downcast_ref::<Overheated>().map(|o| o.0), Some(110.0)),
///     other => panic!("{other:?}"),
/// }
/// # }
/// ```
///
/// # Cancel safety
/// Dropping the returned future aborts every task it started. Under a
/// launcher, a start-up exchange still under way goes on on its blocking
/// thread until it ends or times out (see [`start`]); its endpoint is
/// dropped then.
pub async fn launch<F, Fut, R>(ranks: usize, f: F) -> Result<Vec<R>>
where
    F: Fn(Comm) -> Fut,
    Fut: Future<Output = Result<R>> + Send + 'static,
    R: Send + 'static,
{
    let start = Start::detect()?;
    let Some(size) = start.size() else { return crate::loopback::launch(ranks, f).await };
    if size as usize != ranks {
        return Err(ErrorKind::InvalidArgument(format!(
            "the program runs {ranks} ranks, but its launcher started {size} processes: start it with {ranks}"
        )).into());
    }
    let endpoint = start_launched().await?;
    crate::run::run_ranks(vec![endpoint], crate::run::Tasks(Vec::new()), start_timeout()?, f).await
}

async fn start_launched() -> Result<Endpoint> {
    let mut options = if var(env::HOST).is_some() { quic::Options::network() } else { quic::Options::local() };
    options.idle_timeout = seconds(env::IDLE_TIMEOUT, options.idle_timeout)?;
    start(&options).await?.ok_or_else(|| ErrorKind::InvalidArgument("the launcher's environment vanished".into()).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A card in the rendezvous directory is read only from a regular
    /// file, and only its first 4 KiB: a FIFO is refused at once (no
    /// wait for a writer), a link is not followed, a huge file costs
    /// 4 KiB.
    #[test]
    fn a_card_file_is_a_regular_file_read_in_bounded_memory() {
        let dir = std::env::temp_dir().join(format!("mpx-card-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let card = dir.join("card");
        std::fs::write(&card, "127.0.0.1:5,ab").unwrap();
        assert_eq!(read_card_file(&card).unwrap(), "127.0.0.1:5,ab");
        let fifo = dir.join("fifo");
        let path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo reads the NUL-terminated path it is given.
        assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
        assert!(read_card_file(&fifo).is_err(), "a FIFO is no card");
        let link = dir.join("link");
        std::os::unix::fs::symlink(&card, &link).unwrap();
        assert!(read_card_file(&link).is_err(), "a link is not followed");
        let huge = dir.join("huge");
        std::fs::write(&huge, vec![b'x'; 1 << 20]).unwrap();
        assert_eq!(read_card_file(&huge).unwrap().len(), 4096);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn cards_round_trip_and_bad_ones_are_errors() {
        let fp = [0xabu8; 32];
        let addr: SocketAddr = "10.1.2.3:4567".parse().unwrap();
        assert_eq!(read_card(1, &card(addr, &fp)).unwrap(), (addr, fp));
        let v6: SocketAddr = "[::1]:9".parse().unwrap();
        assert_eq!(read_card(1, &card(v6, &fp)).unwrap(), (v6, fp));
        for bad in ["", "10.1.2.3:4567", "10.1.2.3:4567,abcd", "nohost,".to_string().as_str(), &format!("x:1,{}", "ab".repeat(32))] {
            assert!(read_card(3, bad).is_err(), "{bad:?}");
        }
        assert!(read_card(3, &format!("10.1.2.3:4567,{}", "zz".repeat(32))).is_err());
        // 64 bytes, but not 64 characters: an error, not a slice inside one.
        assert!(read_card(3, &format!("10.1.2.3:4567,{}", "é".repeat(32))).is_err());
    }

    #[test]
    fn directory_cards_round_trip_and_other_forms_are_none() {
        let addr: SocketAddr = "10.1.2.3:4567".parse().unwrap();
        let c = DirCard { addr, fp: [0xab; 32], nonce: "0f".repeat(16), view: "-".into() };
        let back = DirCard::read(1, &c.text()).expect("a card of this form");
        assert_eq!((back.addr, back.fp, back.nonce.as_str(), back.view.as_str()), (addr, [0xab; 32], c.nonce.as_str(), "-"));
        let seen = DirCard { view: "1e".repeat(32), ..c };
        assert_eq!(DirCard::read(1, &seen.text()).expect("a card with a view").view, seen.view);
        let line = card(addr, &[0xab; 32]);
        // The one-line card of PMI, a short nonce, a view of neither form,
        // and a line too many are some other job's.
        for other in [
            line.clone(),
            format!("{line}\n{}\n-\n", "0f".repeat(15)),
            format!("{line}\n{}\nsoon\n", "0f".repeat(16)),
            format!("{line}\n{}\n-\nmore\n", "0f".repeat(16)),
            format!("garbage\n{}\n-\n", "0f".repeat(16)),
        ] {
            assert!(DirCard::read(1, &other).is_none(), "{other:?}");
        }
    }

    /// A card that a killed rank of an earlier job under the same name
    /// left in the job's rendezvous directory (a dead address, a
    /// fingerprint no rank has) is never trusted: rank 0 alone fails
    /// waiting for rank 1's card to be this job's, and with rank 1 started
    /// later, which replaces it, each rank gets the other's own address.
    #[test]
    fn a_card_an_earlier_job_left_in_the_rendezvous_directory_is_waited_out() {
        use std::os::unix::fs::DirBuilderExt;
        let base = std::env::temp_dir().join(format!("mpx-stale-card-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let dir = base.join("job-reused");
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir).unwrap();
        let dead: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let stale = DirCard { addr: dead, fp: [0xab; 32], nonce: "cd".repeat(16), view: "ef".repeat(32) };
        std::fs::write(dir.join("rank-1"), stale.text()).unwrap();
        let alone = through_directory(0, 2, &dir, 7, Duration::from_millis(300)).err().expect("rank 1's card is an earlier job's");
        assert!(alone.to_string().contains("rank 1's card") && alone.to_string().contains("to be this job's"), "{alone}");
        assert!(dir.join("rank-1").exists() && !dir.join("rank-0").exists(), "a failed rank removes its own card alone");
        let d = dir.clone();
        let zero = std::thread::spawn(move || through_directory(0, 2, &d, 7, Duration::from_secs(10)));
        // Rank 0 reads the stale card before rank 1 replaces it.
        std::thread::sleep(Duration::from_millis(300));
        let one = through_directory(1, 2, &dir, 7, Duration::from_secs(10)).unwrap();
        let zero = zero.join().unwrap().unwrap();
        let port = |socket: &UdpSocket| socket.local_addr().unwrap().port();
        assert_ne!(zero.1[1], dead);
        assert_eq!(zero.1[1].port(), port(&one.0), "rank 0 has rank 1's own address");
        assert_eq!(one.1[0].port(), port(&zero.0), "rank 1 has rank 0's own address");
        drop((zero, one));
        assert!(!dir.exists(), "the last rank removes the job's directory");
        let _ = std::fs::remove_dir_all(&base);
    }

    /// A rendezvous directory reached through a link is used where the
    /// link pointed when it was checked: pointing the link elsewhere
    /// afterwards (another user's link in /tmp, say) neither moves the
    /// ranks' cards nor stops them meeting.
    #[test]
    fn a_rendezvous_directory_behind_a_link_is_used_where_it_was_checked() {
        use std::os::unix::fs::DirBuilderExt;
        let base = std::env::temp_dir().join(format!("mpx-linked-rendezvous-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let (real, other, link) = (base.join("real"), base.join("other"), base.join("link"));
        for d in [&real, &other] {
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(d).unwrap();
        }
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let through_link = link.join("job");
        let zero = std::thread::spawn(move || through_directory(0, 2, &through_link, 8, Duration::from_secs(10)));
        // Rank 0 has checked and published; the link now points elsewhere.
        let card = real.join("job").join("rank-0");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !card.exists() {
            assert!(Instant::now() < deadline, "rank 0 published no card");
            std::thread::sleep(Duration::from_millis(10));
        }
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink(&other, &link).unwrap();
        let one = through_directory(1, 2, &real.join("job"), 8, Duration::from_secs(10)).unwrap();
        let zero = zero.join().unwrap().expect("rank 0 read rank 1's card where it checked");
        assert_eq!(zero.1[1].port(), one.0.local_addr().unwrap().port());
        assert!(!other.join("job").exists(), "nothing went where the link points now");
        drop((zero, one));
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn packets_stay_large_only_when_every_rank_is_on_loopback() {
        let addrs = |list: &[&str]| list.iter().map(|a| a.parse().unwrap()).collect::<Vec<SocketAddr>>();
        let local = quic::Options::local();
        let network = quic::Options::network();
        assert!(local.mtu > network.mtu);
        assert_eq!(for_path(local, &addrs(&["127.0.0.1:7000", "127.0.0.1:7001"])), local);
        assert_eq!(for_path(local, &addrs(&["[::1]:7000", "[::1]:7001"])), local);
        // By hand on two hosts, or with one rank off this host: packets
        // that fit a 1500-byte Ethernet path, the rest as given.
        for list in [&["10.0.0.1:7000", "10.0.0.2:7000"][..], &["127.0.0.1:7000", "10.0.0.2:7000"][..], &["[fd00::1]:7000"][..]] {
            let got = for_path(local, &addrs(list));
            assert_eq!(got.mtu, network.mtu, "{list:?}");
            assert_eq!(quic::Options { mtu: local.mtu, ..got }, local, "{list:?}");
        }
        // Never larger than asked.
        let small = quic::Options { mtu: 1280, ..local };
        assert_eq!(for_path(small, &addrs(&["10.0.0.1:7000", "10.0.0.2:7000"])), small);
    }

    #[test]
    fn the_credential_variable_holds_the_text_or_a_files_path() {
        let pem = quic::JobCredential::generate(5).unwrap().issue(1).unwrap().to_pem();
        assert_eq!(quic::credential_text(&pem).unwrap(), pem);
        let dir = std::env::temp_dir().join(format!("mpx-credential-text-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("rank-1.pem");
        std::fs::write(&file, &pem).unwrap();
        let path = file.to_str().unwrap();
        assert_eq!(quic::credential_text(path).unwrap(), pem);
        assert_eq!(quic::RankCredential::from_pem(&quic::credential_text(path).unwrap()).unwrap().rank(), 1);
        // A missing file, and one too large to be a credential, are errors
        // naming the variable and the path.
        let missing = dir.join("missing.pem");
        let err = quic::credential_text(missing.to_str().unwrap()).unwrap_err().to_string();
        assert!(err.contains(env::CREDENTIAL) && err.contains("missing.pem"), "{err}");
        let huge = dir.join("huge.pem");
        std::fs::write(&huge, vec![b'x'; (64 << 10) + 1]).unwrap();
        let err = quic::credential_text(huge.to_str().unwrap()).unwrap_err().to_string();
        assert!(err.contains("huge.pem"), "{err}");
        // A FIFO: nobody writing to it gives no credential at once, rather
        // than wait for a writer for ever; one being written (a shell's
        // `<(...)`) gives what is written.
        let fifo = dir.join("fifo.pem");
        let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo reads the NUL-terminated path it is given.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let fifo_path = fifo.to_str().unwrap().to_string();
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = fifo_path.clone();
        std::thread::spawn(move || tx.send(quic::credential_text(&reader)));
        let unwritten = rx.recv_timeout(std::time::Duration::from_secs(5)).expect("no wait for a writer");
        assert!(unwritten.as_deref().map_or(true, str::is_empty), "{unwritten:?}");
        let writer = {
            let pem = pem.clone();
            let fifo = fifo.clone();
            std::thread::spawn(move || {
                // Waits for a reader to open it; one that found no writer
                // yet and closed it again breaks the pipe: written again.
                while std::fs::write(&fifo, &pem).is_err() {}
            })
        };
        let written = loop {
            // The reader may open it before the writer does (and read
            // nothing): it tries again.
            let text = quic::credential_text(&fifo_path).unwrap();
            if !text.is_empty() {
                break text;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        writer.join().unwrap();
        assert_eq!(written, pem);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The watch of mpxrun's PMI connection leaves an answer waiting for
    /// the session unread (it is no hang-up), ends without a word once the
    /// session's finalize begins, and sees the launcher's end close, over
    /// a socket pair (this host) and over TCP (other hosts).
    #[test]
    fn the_watch_reads_nothing_and_sees_the_launcher_go() {
        use std::io::{Read, Write};
        use std::os::fd::AsFd;
        use std::os::unix::net::UnixStream;
        let watch = |fd: std::os::fd::OwnedFd| {
            let finalizing = Arc::new(AtomicBool::new(false));
            let flag = finalizing.clone();
            (finalizing, std::thread::spawn(move || hung_up(&fd, &flag)))
        };
        let (mut mine, mut launcher) = UnixStream::pair().unwrap();
        let (finalizing, watching) = watch(mine.as_fd().try_clone_to_owned().unwrap());
        launcher.write_all(b"cmd=finalize_ack\n").unwrap();
        std::thread::sleep(Duration::from_millis(600));
        assert!(!watching.is_finished(), "an answer waiting is no hang-up");
        finalizing.store(true, Ordering::SeqCst);
        assert!(!watching.join().unwrap(), "the session's finalize ends the watch");
        let mut answer = [0u8; 17];
        mine.read_exact(&mut answer).unwrap();
        assert_eq!(&answer, b"cmd=finalize_ack\n", "left for the session");

        let (mine, launcher) = UnixStream::pair().unwrap();
        let (_finalizing, watching) = watch(mine.as_fd().try_clone_to_owned().unwrap());
        std::thread::sleep(Duration::from_millis(100));
        let gone = Instant::now();
        drop(launcher);
        assert!(watching.join().unwrap(), "the launcher's end closed");
        assert!(gone.elapsed() < Duration::from_secs(2));

        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mine = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (launcher, _) = listener.accept().unwrap();
        let (_finalizing, watching) = watch(mine.as_fd().try_clone_to_owned().unwrap());
        std::thread::sleep(Duration::from_millis(100));
        let gone = Instant::now();
        drop(launcher);
        assert!(watching.join().unwrap(), "the launcher's end closed (over TCP)");
        assert!(gone.elapsed() < Duration::from_secs(2));
        drop(mine);
    }

    #[test]
    fn durations_from_the_environment_refuse_what_no_duration_holds() {
        // A name of this test's own: no other test reads it.
        let name = "MPX_TEST_SECONDS_ONLY_HERE";
        let default = Duration::from_secs(7);
        assert_eq!(seconds(name, default).unwrap(), default);
        for (text, ok) in [("2.5", true), ("0", true), ("86400", true), ("86401", false), ("1e19", false), ("inf", false), ("1e20", false), ("NaN", false), ("-1", false), ("soon", false)] {
            std::env::set_var(name, text);
            let got = seconds(name, default);
            assert_eq!(got.is_ok(), ok, "{text}: {got:?}");
        }
        std::env::remove_var(name);
    }
}
