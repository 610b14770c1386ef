//! `mpxrun`: starts the processes of a job on this host and serves them
//! PMI-1 (see [`pmi`](super::pmi)), with a credential made for the job.
//!
//! ```text
//! mpxrun -n N [--no-prefix] [--keep-going] program [args...]
//! ```
//!
//! Each process gets `PMI_FD` (its end of a socket pair to `mpxrun`),
//! `PMI_RANK`, `PMI_SIZE`, and `MPX_CREDENTIAL`: its rank's credential
//! under a CA made for this job ([`JobCredential`]), as PEM text, so peers
//! authenticate each other with mutual TLS; ranks publish their addresses
//! in the job's key-value space. Standard output and error are forwarded
//! line by line, prefixed `[rank] ` unless `--no-prefix`. When a process
//! fails (a non-zero status or a signal), the others are killed, unless
//! `--keep-going`; `mpxrun` then exits with status 1 (or the failed
//! process's own status) and names the rank.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};

use mpx_core::{Error, Result};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

use super::pmi::{self, KvSpace, Message};
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
}

const USAGE: &str = "usage: mpxrun -n N [--no-prefix] [--keep-going] program [args...]";

impl Job {
    /// Reads the command line (without the program name).
    ///
    /// ```
    /// use mpx_net::bootstrap::mpxrun::Job;
    /// let job = Job::parse(["-n", "4", "--no-prefix", "./ring", "-v"].map(String::from))?;
    /// assert_eq!((job.ranks, job.prefix, job.command.len()), (4, false, 2));
    /// assert!(Job::parse(["./ring"].map(String::from)).is_err(), "-n is needed");
    /// # Ok::<(), mpx_core::Error>(())
    /// ```
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Job> {
        let bad = |why: String| Error::InvalidArgument(format!("{why}\n{USAGE}"));
        let mut args = args.into_iter();
        let (mut ranks, mut prefix, mut keep_going) = (None, true, false);
        let command = loop {
            let Some(arg) = args.next() else { return Err(bad("no program given".into())) };
            match arg.as_str() {
                "-n" | "-np" => {
                    let n = args.next().ok_or_else(|| bad("-n needs a number".into()))?;
                    ranks = Some(n.parse::<u32>().ok().filter(|&n| n > 0).ok_or_else(|| bad(format!("-n {n}: not a number of processes")))?);
                }
                "--no-prefix" => prefix = false,
                "--keep-going" => keep_going = true,
                "-h" | "--help" => return Err(bad("".into())),
                flag if flag.starts_with('-') => return Err(bad(format!("unknown option {flag}"))),
                _ => break std::iter::once(arg).chain(args).collect::<Vec<_>>(),
            }
        };
        Ok(Job { ranks: ranks.ok_or_else(|| bad("-n is needed".into()))?, command, prefix, keep_going })
    }
}

/// How the job ended.
#[derive(Debug)]
pub struct Outcome {
    /// Each rank's exit status, in rank order.
    pub statuses: Vec<ExitStatus>,
    /// The first rank that failed, if any.
    pub failed: Option<u32>,
}

impl Outcome {
    /// The status `mpxrun` exits with: 0 if every rank succeeded, else the
    /// first failed rank's code (1 if it was killed by a signal).
    pub fn code(&self) -> i32 {
        match self.failed {
            None => 0,
            Some(r) => self.statuses[r as usize].code().filter(|&c| c != 0).unwrap_or(1),
        }
    }
}

/// Forwards one stream of a rank's output, line by line.
async fn forward(rank: u32, prefix: bool, from: impl tokio::io::AsyncRead + Unpin, to_stderr: bool) {
    let mut lines = BufReader::new(from);
    let mut line = Vec::new();
    loop {
        line.clear();
        match lines.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let mut out: Box<dyn Write> = if to_stderr { Box::new(std::io::stderr().lock()) } else { Box::new(std::io::stdout().lock()) };
                if prefix {
                    let _ = write!(out, "[{rank}] ");
                }
                let _ = out.write_all(&line);
                if line.last() != Some(&b'\n') {
                    let _ = out.write_all(b"\n");
                }
                let _ = out.flush();
            }
        }
    }
}

/// Serves PMI to every rank: reads each rank's lines and answers through
/// the job's [`KvSpace`]. A rank that breaks the protocol fails the job.
async fn serve(sockets: Vec<tokio::net::UnixStream>, kvs: Arc<Mutex<KvSpace>>, failed: tokio::sync::mpsc::UnboundedSender<(u32, String)>) {
    let mut writers = Vec::new();
    let mut readers = Vec::new();
    for s in sockets {
        let (r, w) = s.into_split();
        readers.push(r);
        writers.push(Arc::new(tokio::sync::Mutex::new(w)));
    }
    let writers = Arc::new(writers);
    let mut tasks = tokio::task::JoinSet::new();
    for (rank, r) in readers.into_iter().enumerate() {
        let (kvs, writers, failed) = (kvs.clone(), writers.clone(), failed.clone());
        tasks.spawn(async move {
            let mut lines = BufReader::new(r);
            loop {
                let mut line = Vec::new();
                let n = match (&mut lines).take(pmi::MAX_LINE as u64 + 1).read_until(b'\n', &mut line).await {
                    Ok(n) => n,
                    Err(_) => return,
                };
                if n == 0 {
                    return; // the rank closed PMI (finished, or died: its exit status tells)
                }
                let answer = std::str::from_utf8(&line)
                    .map_err(|_| Error::Protocol("a PMI line that is not UTF-8".into()))
                    .and_then(|l| if l.ends_with('\n') { Ok(l) } else { Err(Error::Protocol("a PMI line over the limit".into())) })
                    .and_then(Message::parse)
                    .and_then(|m| kvs.lock().unwrap_or_else(|e| e.into_inner()).handle(rank, m));
                match answer {
                    Ok(replies) => {
                        for (to, m) in replies {
                            let mut w = writers[to].lock().await;
                            let _ = w.write_all(m.encode().as_bytes()).await;
                        }
                    }
                    Err(e) => {
                        let _ = failed.send((rank as u32, format!("broke the PMI protocol: {e}")));
                        return;
                    }
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
}

/// Kills the process group a rank leads (the rank and whatever it
/// started).
fn kill_group(leader: Option<u32>) {
    let Some(pid) = leader.and_then(|p| libc::pid_t::try_from(p).ok()) else { return };
    // SAFETY: kill has no memory-safety preconditions; a negative pid names
    // the process group the rank leads (it was started with its own).
    unsafe {
        libc::kill(-pid, libc::SIGKILL);
    }
}

/// Runs `job`: starts its processes, serves them, forwards their output,
/// and waits for them all.
///
/// # Cancel safety
/// Dropping the future kills the processes started (`kill_on_drop`).
pub async fn run(job: &Job) -> Result<Outcome> {
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let job_id = (seed as u64) ^ u64::from(std::process::id()).rotate_left(32);
    let credential = JobCredential::generate(job_id)?;
    let kvs = Arc::new(Mutex::new(KvSpace::new(&format!("mpx-{job_id:016x}"), job.ranks as usize)));
    let (failed_tx, mut failed_rx) = tokio::sync::mpsc::unbounded_channel::<(u32, String)>();
    let mut children: Vec<Child> = Vec::new();
    let mut servers = Vec::new();
    let mut outputs = tokio::task::JoinSet::new();
    for rank in 0..job.ranks {
        let (ours, theirs) = UnixStream::pair().map_err(|e| Error::transport("a PMI socket pair", e))?;
        ours.set_nonblocking(true).map_err(|e| Error::transport("a PMI socket", e))?;
        servers.push(tokio::net::UnixStream::from_std(ours).map_err(|e| Error::transport("a PMI socket", e))?);
        let fd = theirs.as_raw_fd();
        let mut cmd = Command::new(&job.command[0]);
        cmd.args(&job.command[1..])
            .env("PMI_FD", fd.to_string())
            .env("PMI_RANK", rank.to_string())
            .env("PMI_SIZE", job.ranks.to_string())
            .env(crate::quic::env::CREDENTIAL, credential.issue(rank)?.to_pem())
            .env_remove(crate::quic::env::RANK)
            .stdin(Stdio::null())
            // Its own process group, so that killing the rank kills what it
            // started too (and their hold on its output).
            .process_group(0)
            .kill_on_drop(true);
        if job.prefix {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        // SAFETY: the closure runs in the child between fork and exec, and
        // calls only fcntl, which is async-signal-safe; `fd` is open there
        // (the child inherits every descriptor) and stays open in the
        // parent until the spawn returns.
        unsafe {
            cmd.pre_exec(move || {
                // Let the child keep its end of the PMI socket across exec.
                if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().map_err(|e| Error::transport(format!("starting {} (rank {rank})", job.command[0]), e))?;
        drop(theirs);
        if let Some(out) = child.stdout.take() {
            outputs.spawn(forward(rank, job.prefix, out, false));
        }
        if let Some(err) = child.stderr.take() {
            outputs.spawn(forward(rank, job.prefix, err, true));
        }
        children.push(child);
    }
    let server = tokio::spawn(serve(servers, kvs, failed_tx));

    // Wait for every rank; the first failure kills the rest.
    let mut statuses: Vec<Option<ExitStatus>> = vec![None; children.len()];
    let mut failed: Option<u32> = None;
    let mut waits = tokio::task::JoinSet::new();
    let mut killers = Vec::new();
    let mut groups = Vec::new();
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(|e| Error::transport("SIGINT", e))?;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| Error::transport("SIGTERM", e))?;
    for (rank, mut child) in children.into_iter().enumerate() {
        let (kill_tx, mut kill_rx) = tokio::sync::oneshot::channel::<()>();
        killers.push(Some(kill_tx));
        let group = child.id();
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
        groups.push(group);
    }
    let kill_all = |killers: &mut Vec<Option<tokio::sync::oneshot::Sender<()>>>| {
        for k in killers.iter_mut() {
            if let Some(k) = k.take() {
                let _ = k.send(());
            }
        }
    };
    loop {
        tokio::select! {
            next = waits.join_next() => {
                let Some(joined) = next else { break };
                let (rank, status) = joined.map_err(|e| Error::transport("waiting for a rank", e))?;
                let status = status.map_err(|e| Error::transport(format!("waiting for rank {rank}"), e))?;
                killers[rank] = None;
                if !status.success() && failed.is_none() {
                    failed = Some(rank as u32);
                    eprintln!("mpxrun: rank {rank} failed ({status})");
                    if !job.keep_going {
                        kill_all(&mut killers);
                    }
                }
                statuses[rank] = Some(status);
            }
            _ = interrupt.recv() => {
                eprintln!("mpxrun: interrupted; killing every rank");
                groups.iter().for_each(|&g| kill_group(g));
                kill_all(&mut killers);
            }
            _ = terminate.recv() => {
                eprintln!("mpxrun: terminated; killing every rank");
                groups.iter().for_each(|&g| kill_group(g));
                kill_all(&mut killers);
            }
            Some((rank, why)) = failed_rx.recv() => {
                eprintln!("mpxrun: rank {rank} {why}");
                if failed.is_none() {
                    failed = Some(rank);
                }
                if let Some(k) = killers[rank as usize].take() {
                    let _ = k.send(());
                }
                if !job.keep_going {
                    kill_all(&mut killers);
                }
            }
        }
    }
    server.abort();
    while outputs.join_next().await.is_some() {}
    let statuses: Vec<ExitStatus> = statuses.into_iter().map(|s| s.expect("every rank was waited for")).collect();
    if failed.is_none() {
        failed = statuses.iter().position(|s| !s.success()).map(|r| r as u32);
    }
    Ok(Outcome { statuses, failed })
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
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("mpxrun: {e}");
            std::process::exit(2);
        }
    };
    match runtime.block_on(run(&job)) {
        Ok(outcome) => {
            if let Some(rank) = outcome.failed {
                eprintln!("mpxrun: rank {rank} of {} failed: {}", job.ranks, outcome.statuses[rank as usize]);
            }
            std::process::exit(outcome.code())
        }
        Err(e) => {
            eprintln!("mpxrun: {e}");
            std::process::exit(1);
        }
    }
}
