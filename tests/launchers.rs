//! The same programs started as one process per rank: by `mpxrun` (on
//! this host, and on three "hosts" made of network namespaces), by MPICH's
//! `mpiexec.hydra`, by Slurm's `srun`, by Open MPI's `mpirun`, and by hand
//! on two such "hosts".
//!
//! The external launchers and the namespaces need this machine's MPICH,
//! Open MPI, a running Slurm (`scripts/slurm-up.sh`) and root: where one
//! is missing, its test says so and passes, unless
//! `MPX_REQUIRE_LAUNCHERS` is set (`.ci/run` sets it, and installs and
//! starts them), where it fails.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// An example built by `cargo test` beside this test.
fn example(name: &str) -> PathBuf {
    let deps = std::env::current_exe().expect("the test's path");
    let path = deps.parent().and_then(|d| d.parent()).expect("target/<profile>").join("examples").join(name);
    assert!(path.exists(), "{} is not built (cargo test builds the examples)", path.display());
    path
}

/// Waits up to `limit` for every process of `ranks` to end, then takes
/// their outputs, killing those still running: whether all ended in time,
/// and the outputs in order.
fn outputs_within(mut ranks: Vec<Launched>, limit: Duration) -> (bool, Vec<Output>) {
    let deadline = Instant::now() + limit;
    let mut finished = false;
    while !finished && Instant::now() < deadline {
        finished = ranks.iter_mut().all(|r| r.child().try_wait().expect("waiting").is_some());
        std::thread::sleep(Duration::from_millis(50));
    }
    let outputs = ranks
        .into_iter()
        .map(|r| {
            let mut child = r.take();
            if !finished {
                let _ = child.kill();
            }
            child.wait_with_output().expect("its output")
        })
        .collect();
    (finished, outputs)
}

/// Whether `setsid` (util-linux) is installed; required under
/// `MPX_REQUIRE_LAUNCHERS`.
fn have_setsid() -> bool {
    if Command::new("setsid").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok() {
        return true;
    }
    assert!(std::env::var_os("MPX_REQUIRE_LAUNCHERS").is_none(), "setsid (util-linux) is required (MPX_REQUIRE_LAUNCHERS) but not installed");
    eprintln!("setsid is not installed: not tested here");
    false
}

fn mpxrun() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mpxrun"))
}

/// A launcher started by a test: stopped (asked with SIGTERM, so that it
/// takes its ranks down, then killed) if the test ends before it does,
/// passing or failing.
struct Launched(Option<std::process::Child>);

impl Launched {
    fn spawn(cmd: &mut Command) -> Launched {
        Launched(Some(cmd.spawn().expect("starting the launcher")))
    }

    fn child(&mut self) -> &mut std::process::Child {
        self.0.as_mut().expect("not taken")
    }

    /// The launcher, no longer stopped on drop.
    fn take(mut self) -> std::process::Child {
        self.0.take().expect("not taken")
    }
}

impl Drop for Launched {
    fn drop(&mut self) {
        let Some(child) = self.0.as_mut() else { return };
        if child.try_wait().ok().flatten().is_some() {
            return;
        }
        let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline && child.try_wait().ok().flatten().is_none() {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Runs `cmd` to its end, at most `limit`, reading its output as it comes
/// (a launcher writing more than a pipe holds is not held up).
fn run(cmd: &mut Command, limit: Duration) -> Output {
    run_fed(cmd, None, limit)
}

/// [`run`], with `input` (if any) written to the command's standard input
/// on a thread of its own, then closed.
fn run_fed(cmd: &mut Command, input: Option<Vec<u8>>, limit: Duration) -> Output {
    let started = Instant::now();
    let stdin = if input.is_some() { Stdio::piped() } else { Stdio::null() };
    let mut launched = Launched::spawn(cmd.stdin(stdin).stdout(Stdio::piped()).stderr(Stdio::piped()));
    if let (Some(input), Some(mut pipe)) = (input, launched.child().stdin.take()) {
        std::thread::spawn(move || std::io::Write::write_all(&mut pipe, &input));
    }
    let read_all = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = read_all(Box::new(launched.child().stdout.take().expect("piped")));
    let stderr = read_all(Box::new(launched.child().stderr.take().expect("piped")));
    let status = loop {
        if launched.child().try_wait().expect("waiting").is_some() {
            break launched.take().wait().expect("its status");
        }
        if started.elapsed() > limit {
            let mut child = launched.take();
            let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
            std::thread::sleep(Duration::from_secs(2));
            let _ = child.kill();
            let _ = child.wait();
            // What it wrote until now (its ranks, gone with it, close the pipes).
            let lossy = |reader: std::thread::JoinHandle<Vec<u8>>| String::from_utf8_lossy(&reader.join().unwrap_or_default()).into_owned();
            panic!("{cmd:?} did not finish in {limit:?}\nstdout:\n{}\nstderr:\n{}", lossy(stdout), lossy(stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output { status, stdout: stdout.join().expect("reading stdout"), stderr: stderr.join().expect("reading stderr") }
}

/// The lines of a child's output as they come, read on a thread of their own.
fn lines_of(stdout: std::process::ChildStdout) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// The quickstart's ring: each rank's report names its left neighbour.
fn check_quickstart(out: &Output) {
    assert!(out.status.success(), "{}", text(out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for rank in 0..4 {
        let left = (rank + 3) % 4;
        let want = format!("rank {rank}: 1000 particles from rank {left} (first id {})", left * 1000);
        assert!(stdout.contains(&want), "missing {want:?} in:\n{}", text(out));
    }
}

fn check_ring(out: &Output, ranks: usize) {
    assert!(out.status.success(), "{}", text(out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&format!("rank 0 of {ranks}: token {ranks},")), "{}", text(out));
    for rank in 0..ranks {
        assert!(stdout.contains(&format!("rank {rank} of {ranks}:")), "rank {rank} missing:\n{}", text(out));
    }
}

/// Whether `launcher` can be run here; if not, fails under
/// `MPX_REQUIRE_LAUNCHERS`, else says so.
fn have(launcher: &str) -> bool {
    let found = Command::new(launcher).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok();
    if !found {
        assert!(std::env::var_os("MPX_REQUIRE_LAUNCHERS").is_none(), "{launcher} is required (MPX_REQUIRE_LAUNCHERS) but not installed");
        eprintln!("{launcher} is not installed: not tested here (install MPICH and Open MPI, or see .ci/run)");
    }
    found
}

#[test]
fn mpxrun_runs_the_quickstart_and_a_ring_one_process_per_rank() {
    let out = run(mpxrun().args(["-n", "4"]).arg(example("quickstart")), Duration::from_secs(60));
    check_quickstart(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.lines().filter(|l| l.starts_with("[2] ")).count() > 5, "rank 2's lines are prefixed:\n{stdout}");
    let out = run(mpxrun().args(["-n", "4", "--no-prefix"]).arg(example("quic_ring")), Duration::from_secs(60));
    check_ring(&out, 4);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("[0] "), "--no-prefix");
}

/// `count` consecutive UDP ports free now on every address, below the
/// range the system hands out (where other tests' sockets get theirs):
/// the first of a range ranks may take their sockets from.
fn free_ports(count: u16) -> u16 {
    let handed_out_from: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768);
    let span = handed_out_from.saturating_sub(10_000).max(count);
    let mut first = 10_000 + (std::process::id() % u32::from(span)) as u16;
    loop {
        if first.saturating_add(count) >= handed_out_from {
            first = 10_000;
        }
        let held: Vec<_> = (first..first + count).map_while(|p| std::net::UdpSocket::bind(("0.0.0.0", p)).ok()).collect();
        if held.len() == usize::from(count) {
            return first;
        }
        first += count;
    }
}

/// With `MPX_PORT_RANGE`, every rank's two sockets (its own and its bulk
/// socket) take ports of that range: a ring of three ranks runs in six
/// ports, and in five the rank left without a port fails, saying so.
#[test]
fn ranks_take_their_ports_from_the_port_range() {
    // Another test's socket may take a port between the look and the
    // start: one more try then.
    for attempt in 0..2 {
        let first = free_ports(6);
        let range = format!("{first}:{}", first + 5);
        let out = run(mpxrun().env("MPX_PORT_RANGE", &range).args(["-n", "3", "--no-prefix"]).arg(example("quic_ring")), Duration::from_secs(60));
        if attempt == 0 && !out.status.success() && text(&out).contains("is in use") {
            continue;
        }
        check_ring(&out, 3);
        break;
    }
    let first = free_ports(5);
    let range = format!("{first}:{}", first + 4);
    let out = run(mpxrun().env("MPX_PORT_RANGE", &range).args(["-n", "3"]).arg(example("quic_ring")), Duration::from_secs(60));
    assert!(!out.status.success(), "five ports cannot hold three ranks' six sockets:\n{}", text(&out));
    assert!(text(&out).contains(&format!("every port of {range}")) && text(&out).contains("is in use"), "{}", text(&out));
}

/// Ranks that advertise an IPv6 address (`MPX_HOST=::1`) listen on it and
/// run a ring (where the machine has IPv6 at all).
#[test]
fn ranks_advertising_an_ipv6_address_run() {
    if std::net::UdpSocket::bind("[::1]:0").is_err() {
        eprintln!("no IPv6 loopback here: not tested");
        return;
    }
    let out = run(mpxrun().env("MPX_HOST", "::1").args(["-n", "3", "--no-prefix"]).arg(example("quic_ring")), Duration::from_secs(60));
    check_ring(&out, 3);
}

/// A program that asks for another number of ranks than the launcher
/// started fails in every process, naming both numbers.
#[test]
fn a_launcher_of_another_size_is_an_error_naming_both() {
    let out = run(mpxrun().args(["-n", "3"]).arg(example("quickstart")), Duration::from_secs(60));
    assert!(!out.status.success());
    assert!(text(&out).contains("the program runs 4 ranks, but its launcher started 3 processes"), "{}", text(&out));
}

/// A rank that fails makes mpxrun kill the others at once and exit with
/// its status, naming it; `--keep-going` lets the others finish.
#[test]
fn a_failing_rank_fails_mpxrun_naming_it() {
    let script = "if [ \"$PMI_RANK\" = 2 ]; then exit 3; fi; sleep 30";
    let started = Instant::now();
    let out = run(mpxrun().args(["-n", "3", "sh", "-c", script]), Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(text(&out).contains("rank 2 of 3 failed"), "{}", text(&out));
    assert!(started.elapsed() < Duration::from_secs(10), "the other ranks were killed, not waited for");
    let script = "if [ \"$PMI_RANK\" = 2 ]; then exit 3; fi; sleep 0.3; echo finished";
    let out = run(mpxrun().args(["-n", "3", "--keep-going", "sh", "-c", script]), Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(3));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("[0] finished") && stdout.contains("[1] finished"), "{}", text(&out));
    let out = run(mpxrun().args(["-n", "0", "true"]), Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(2), "a bad command line");
}

/// A rank that speaks PMI and then ends without its PMI finalize (a
/// rank that died, or failed in its start-up) fails the job at
/// once: the ranks waiting for it at the start-up barrier are answered
/// with an error then, not after their start-up timeout, and mpxrun names
/// the rank. (A program that never speaks PMI, such as `true`, is no mpx
/// program, and may end as it likes.)
#[test]
fn a_rank_that_leaves_before_its_pmi_finalize_fails_the_job_at_once() {
    let ring = example("quic_ring");
    let script = format!(
        "if [ \"$PMI_RANK\" = 2 ]; then cat >/dev/null; printf 'cmd=init pmi_version=1 pmi_subversion=1\\n' >&\"$PMI_FD\"; exit 0; fi; exec {}",
        ring.display()
    );
    let started = Instant::now();
    let out = run(mpxrun().args(["-n", "3", "--keep-going", "bash", "-c", &script]), Duration::from_secs(60));
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("rank 2 failed: it closed its PMI connection before its PMI finalize"), "{}", text(&out));
    assert!(text(&out).contains("rank-2-left-the-job-before-its-PMI-finalize"), "the ranks say why they failed:\n{}", text(&out));
    assert!(started.elapsed() < Duration::from_secs(20), "the others failed at once, not after their 30 s start-up timeout");
    // Without --keep-going the others are killed, but not the rank that
    // left: it may still say why.
    let script = format!(
        "if [ \"$PMI_RANK\" = 2 ]; then cat >/dev/null; printf 'cmd=init pmi_version=1 pmi_subversion=1\\n' >&\"$PMI_FD\"; exec {{PMI_FD}}>&-; sleep 0.5; echo 'rank 2 explains' >&2; exit 0; fi; exec {}",
        ring.display()
    );
    let out = run(mpxrun().args(["-n", "3", "bash", "-c", &script]), Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("rank 2 failed: it closed its PMI connection before its PMI finalize"), "{}", text(&out));
    assert!(text(&out).contains("[2] rank 2 explains"), "the rank that left was not killed:\n{}", text(&out));
    // A rank that left and goes on running (it caught its start-up's
    // error and carries on alone) is killed `--kill-after` later.
    let script = format!(
        "if [ \"$PMI_RANK\" = 2 ]; then cat >/dev/null; printf 'cmd=init pmi_version=1 pmi_subversion=1\\n' >&\"$PMI_FD\"; exec {{PMI_FD}}>&-; exec sleep 600; fi; exec {}",
        ring.display()
    );
    let started = Instant::now();
    let out = run(mpxrun().args(["-n", "3", "--kill-after", "1", "bash", "-c", &script]), Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(137), "the status of the rank killed:\n{}", text(&out));
    assert!(text(&out).contains("rank 2 left the job early and had not ended 1s later: killing it"), "{}", text(&out));
    assert!(started.elapsed() < Duration::from_secs(30), "mpxrun waited {:?} for the rank that left", started.elapsed());
    let out = run(mpxrun().args(["-n", "2", "true"]), Duration::from_secs(20));
    assert!(out.status.success(), "{}", text(&out));
}

/// A rank variable left over from a start by hand (`MPX_RANK`) beside a
/// PMI socket a launcher handed the process (`PMI_FD`) is an error naming
/// both, not a start by hand that makes every process the same rank; a
/// `PMI_FD` that names no such socket (inherited by a program a launched
/// rank started) leaves the start by hand to `MPX_RANK`.
#[test]
fn a_leftover_rank_variable_under_a_launcher_is_an_error_naming_both() {
    use std::os::fd::AsRawFd;
    let (handed, _launcher) = std::os::unix::net::UnixStream::pair().unwrap();
    // SAFETY: fcntl on a descriptor `handed` owns, which outlives the
    // child's start: clears close-on-exec, as on a descriptor a launcher
    // passes across exec.
    assert_ne!(unsafe { libc::fcntl(handed.as_raw_fd(), libc::F_SETFD, 0) }, -1);
    let fd = handed.as_raw_fd().to_string();
    let out = run(
        Command::new(example("quickstart")).env("MPX_RANK", "0").env("PMI_FD", &fd).env("PMI_RANK", "0").env("PMI_SIZE", "4"),
        Duration::from_secs(30),
    );
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("both MPX_RANK (a rank started by hand) and PMI_FD (a launcher's PMI socket) are set"), "{}", text(&out));
    // Standard error as PMI_FD: no socket a launcher handed over.
    let out = run(Command::new(example("quickstart")).env("MPX_RANK", "0").env("PMI_FD", "2"), Duration::from_secs(30));
    assert!(!text(&out).contains("both MPX_RANK"), "{}", text(&out));
    assert!(text(&out).contains("rank 0 of 0"), "a start by hand, with no addresses:\n{}", text(&out));
}

/// A rank that breaks the PMI protocol is served no more, and, with
/// `--keep-going` (the others not killed), the ranks in the start-up
/// barrier fail at once rather than wait for it until their start-up
/// timeout.
#[test]
fn a_rank_that_breaks_the_pmi_protocol_fails_the_barrier_at_once() {
    let script = format!(
        "if [ \"$PMI_RANK\" = 0 ]; then printf 'cmd=bogus\\n' >&\"$PMI_FD\"; exec sleep 60; fi; exec {}",
        example("quic_ring").display()
    );
    for first in ["cmd=bogus", "hello"] {
        let script = script.replace("cmd=bogus", first);
        let started = Instant::now();
        let out = run(mpxrun().args(["-n", "2", "--keep-going", "bash", "-c", &script]).env("MPX_START_TIMEOUT", "40"), Duration::from_secs(90));
        assert!(!out.status.success(), "{}", text(&out));
        assert!(text(&out).contains("rank 0 broke the PMI protocol"), "{}", text(&out));
        assert!(text(&out).contains("rank-0-left-the-job-before-its-PMI-finalize"), "rank 1 is told why it fails:\n{}", text(&out));
        assert!(started.elapsed() < Duration::from_secs(20), "{first}: rank 1 waited {:?} for the rank that broke the protocol:\n{}", started.elapsed(), text(&out));
    }
}

/// A rank that leaves a process of its own behind, outside its process
/// group (`setsid`), holding its output open: mpxrun forwards what the
/// rank wrote and exits with it, rather than wait for that process.
#[test]
fn mpxrun_does_not_wait_for_output_held_by_a_process_that_left_the_rank() {
    if !have_setsid() {
        return;
    }
    let started = Instant::now();
    let out = run(mpxrun().args(["-n", "1", "sh", "-c", "setsid sleep 30 & echo hi"]), Duration::from_secs(25));
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("[0] hi"), "{}", text(&out));
    assert!(started.elapsed() < Duration::from_secs(10), "mpxrun waited {:?} for the process left behind", started.elapsed());
}

/// A reader of mpxrun's output that stops reading holds up only the
/// ranks that write (their pipes fill): mpxrun still sees the rank that
/// fails and takes the others down, and once the output is read again it
/// writes all of it and exits with the failure.
#[test]
fn a_reader_that_stops_reading_the_output_does_not_stop_mpxrun_reaping_ranks() {
    let dir = scratch_dir("stalled-reader");
    // Ranks 0 and 1 flood mpxrun's output, then linger; rank 2 fails.
    let script = format!(
        r#"if [ "$PMI_RANK" = 2 ]; then sleep 1; exit 3; fi; echo $$ > {}/pid-$PMI_RANK; yes flood | head -c 20000000; exec sleep 60"#,
        dir.display()
    );
    // Standard output and error into one pipe (`2>&1`): mpxrun's own lines
    // meet the stalled reader too.
    let (mut output, into) = std::io::pipe().unwrap();
    let launched = Launched::spawn(mpxrun().args(["-n", "3", "sh", "-c", &script]).stdin(Stdio::null()).stdout(into.try_clone().unwrap()).stderr(into));
    let pids = pids_written(&dir, 2);
    // Nobody reads mpxrun's output: the flooding ranks are taken down anyway.
    let left = outliving(&pids, Duration::from_secs(15));
    assert!(left.is_empty(), "the flooding ranks {left:?} outlived the failed one while mpxrun's output was not read");
    let mut text = Vec::new();
    std::io::Read::read_to_end(&mut output, &mut text).unwrap();
    let status = launched.take().wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&text);
    let said: Vec<&str> = text.lines().filter(|l| l.starts_with("mpxrun:")).collect();
    assert_eq!(status.code(), Some(3), "{said:?}");
    assert!(said.iter().any(|l| l.contains("rank 2 of 3 failed")), "{said:?}");
    assert!(text.len() > 64 << 10, "the output read before the failure was written ({} bytes)", text.len());
}

/// A fresh, empty directory of this test process's for `name` (in the
/// system's temporary directory).
fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mpx-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The process ids ranks `0..ranks` wrote to `dir/pid-<rank>`, waited for.
fn pids_written(dir: &std::path::Path, ranks: usize) -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(20);
    (0..ranks)
        .map(|rank| loop {
            if let Some(pid) = std::fs::read_to_string(dir.join(format!("pid-{rank}"))).ok().and_then(|p| p.trim().parse().ok()) {
                break pid;
            }
            assert!(Instant::now() < deadline, "rank {rank} never started");
            std::thread::sleep(Duration::from_millis(20));
        })
        .collect()
}

/// Asked to stop (SIGTERM, as a batch system ending a job), mpxrun passes
/// it to every rank's process group (ranks that do not catch it end at
/// once) and exits with 143 (128 + SIGTERM); a rank killed by a signal
/// fails the job with 128 + the signal, naming it; a line longer than
/// 64 KiB reaches mpxrun's output in prefixed pieces,
/// nothing lost.
#[test]
fn mpxrun_stops_on_sigterm_reports_signals_and_splits_long_lines() {
    let dir = scratch_dir("sigterm");
    let script = format!("echo $$ > {}/pid-$PMI_RANK; sleep 60 & sleep 60", dir.display());
    let mut launched = Launched::spawn(mpxrun().args(["-n", "2", "sh", "-c", &script]).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()));
    let pids = pids_written(&dir, 2);
    let started = Instant::now();
    let child = launched.child();
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    let status = launched.take().wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(status.code() == Some(143) && stderr.contains("terminated; passing SIGTERM to every rank"), "{status}: {stderr}");
    assert!(started.elapsed() < Duration::from_secs(10), "mpxrun took {:?} to stop", started.elapsed());
    let left = outliving(&pids, Duration::from_secs(5));
    assert!(left.is_empty(), "ranks {left:?} outlived a terminated mpxrun");

    let out = run(mpxrun().args(["-n", "2", "sh", "-c", "if [ \"$PMI_RANK\" = 1 ]; then kill -9 $$; fi; sleep 30"]), Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(137), "128 + SIGKILL, as a shell says: {}", text(&out));
    assert!(text(&out).contains("rank 1 of 2 failed") && text(&out).contains("signal: 9"), "{}", text(&out));

    let out = run(mpxrun().args(["-n", "1", "sh", "-c", "head -c 200000 /dev/zero | tr '\\0' x; echo; echo after"]), Duration::from_secs(20));
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines.iter().all(|l| l.starts_with("[0] ")), "every piece is prefixed");
    let pieces: Vec<&str> = lines.iter().map(|l| &l[4..]).collect();
    assert_eq!(pieces.last(), Some(&"after"));
    let xs = &pieces[..pieces.len() - 1];
    assert!(xs.len() >= 4 && xs.iter().all(|p| p.len() <= 64 << 10 && p.bytes().all(|b| b == b'x')), "{:?}", xs.iter().map(|p| p.len()).collect::<Vec<_>>());
    assert_eq!(xs.iter().map(|p| p.len()).sum::<usize>(), 200_000);
}

/// mpxrun's standard input reaches rank 0, or the rank `--stdin` names,
/// and no other; `--stdin none` gives it to none; a rank that does not
/// read it does not hold mpxrun up.
#[test]
fn mpxrun_passes_its_input_to_one_rank() {
    let script = "cat; echo end-$PMI_RANK";
    let input = || Some(b"one\ntwo\n".to_vec());
    let out = run_fed(mpxrun().args(["-n", "3", "sh", "-c", script]), input(), Duration::from_secs(20));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{}", text(&out));
    let read: Vec<&str> = stdout.lines().filter(|l| l.ends_with("one") || l.ends_with("two")).collect();
    assert_eq!(read, ["[0] one", "[0] two"], "{stdout}");
    assert!((0..3).all(|r| stdout.contains(&format!("[{r}] end-{r}"))), "{stdout}");

    let out = run_fed(mpxrun().args(["-n", "3", "--stdin", "2", "sh", "-c", script]), input(), Duration::from_secs(20));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let read: Vec<&str> = stdout.lines().filter(|l| l.ends_with("one") || l.ends_with("two")).collect();
    assert_eq!(read, ["[2] one", "[2] two"], "{stdout}");

    let out = run_fed(mpxrun().args(["-n", "2", "--stdin", "none", "sh", "-c", script]), input(), Duration::from_secs(20));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success() && !stdout.contains("one") && stdout.contains("[0] end-0"), "{stdout}");

    // Rank 0 ends without reading 4 MiB of input: the job ends with it.
    let started = Instant::now();
    let out = run_fed(mpxrun().args(["-n", "1", "true"]), Some(vec![b'x'; 4 << 20]), Duration::from_secs(20));
    assert!(out.status.success() && started.elapsed() < Duration::from_secs(10), "{:?}: {}", started.elapsed(), text(&out));

    let out = run(mpxrun().args(["-n", "2", "--stdin", "2", "true"]), Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(2), "no rank 2 among 2: {}", text(&out));
}

/// Runs the shell command `line` with a pseudo-terminal as its
/// controlling terminal (through `script`), as [`run`] does; `None`
/// (the test skipped, as it says) where this host has no `script`.
fn on_a_terminal(line: &str, limit: Duration) -> Option<Output> {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("no `script` here: skipped");
        return None;
    }
    Some(run(Command::new("script").args(["-qc", line, "/dev/null"]), limit))
}

/// Started in the background of an interactive shell on a terminal (a
/// pseudo-terminal of `script`), mpxrun does not stop when it reads the
/// terminal for rank 0 (the kernel stops a background reader with
/// SIGTTIN): rank 0's input is empty, and the job ends.
#[test]
fn mpxrun_in_the_background_of_a_terminal_runs_on() {
    let mpxrun = env!("CARGO_BIN_EXE_mpxrun");
    // With job control on (`m` in `$-`), `&` puts mpxrun in a background
    // process group of the terminal; without it, the test proves nothing.
    let line = format!("bash --norc -ic 'case $- in *m*) echo jobs=on;; esac; {mpxrun} -n 1 wc -c & wait $!; echo rc=$?'");
    let Some(out) = on_a_terminal(&line, Duration::from_secs(30)) else { return };
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("jobs=on"), "the shell has no job control: {}", text(&out));
    assert!(stdout.contains("[0] 0") && stdout.contains("rc=0"), "{}", text(&out));
}

/// A rank that asks the terminal, and a launch command that prompts there
/// (an `ssh` asking for a password), fail at once, failing the job: each
/// runs in a session of its own, with no terminal to open, where in the
/// background of mpxrun's terminal the kernel would stop it (SIGTTIN) and
/// mpxrun wait for it for ever.
#[test]
fn a_rank_that_asks_the_terminal_fails_at_once() {
    let mpxrun = env!("CARGO_BIN_EXE_mpxrun");
    if on_a_terminal("true", Duration::from_secs(10)).is_none() {
        return;
    }
    let dir = scratch_dir("terminal-prompt");
    // `sh <script> {host} env VAR=... program args`: rank 1's asks the
    // terminal, then the host is dropped.
    let prompting = dir.join("prompting-ssh");
    std::fs::write(&prompting, "case \"$*\" in *PMI_RANK=1*) read answer < /dev/tty || exit 3;; esac\nshift\nexec \"$@\"\n").unwrap();
    let remote = format!("--hosts 127.0.0.1 --pmi-host 127.0.0.1 --launch 'sh {} {{host}}'", prompting.display());
    let cases = [("", "if [ $PMI_RANK = 1 ]; then read x < /dev/tty || exit 3; fi; sleep 30"), (&*remote, "sleep 30")];
    for (options, program) in cases {
        // Rank 0 would run for 30 s: the job ends long before.
        let line = format!("tty > /dev/null && echo terminal=on; {mpxrun} -n 2 {options} sh -c '{program}'; echo rc=$?");
        let started = Instant::now();
        let out = on_a_terminal(&line, Duration::from_secs(60)).expect("script is here");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("terminal=on"), "mpxrun has no terminal: {}", text(&out));
        assert!(stdout.contains("rank 1 failed (exit status: 3)"), "{options:?}: {}", text(&out));
        assert!(stdout.contains("rc=3") && started.elapsed() < Duration::from_secs(20), "{options:?}: {:?}: {}", started.elapsed(), text(&out));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A launch command that ends at once, before it takes the rank's token
/// and credential on its input (an ssh that cannot log in), fails the
/// job naming the rank and its status, however soon it ends: mpxrun does
/// not take the closed pipe for a failure of its own.
#[test]
fn a_launch_command_that_ends_at_once_names_its_rank() {
    let dir = scratch_dir("launch-ends");
    let failing = dir.join("failing-ssh");
    std::fs::write(&failing, "exec 0<&-\nexit 7\n").unwrap();
    for _ in 0..10 {
        let out = run(
            mpxrun().args(["-n", "1", "--hosts", "127.0.0.1", "--pmi-host", "127.0.0.1", "--launch"]).arg(format!("sh {} {{host}}", failing.display())).arg("true"),
            Duration::from_secs(20),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(7), "{}", text(&out));
        assert!(stderr.contains("rank 0 failed (exit status: 7)") && !stderr.contains("transport error"), "{}", text(&out));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Starts `mpxrun` with `args` on `ranks` copies of `sh -c script` (which
/// writes its process id into `dir/pid-<rank>` once its traps are set),
/// waits for every rank's process id, sends mpxrun `signals` (each a
/// `kill` option, `delay` apart), and gives its status, its standard
/// output and error, the time from the first signal to its end, and the
/// ranks still alive 5 s after that.
/// Starts `cmd` with the stopping signals' default dispositions, whatever
/// the test's own (a test run under `nohup` ignores SIGHUP, which mpxrun
/// would then leave ignored, as it is meant to).
fn with_default_signals(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec, and
    // only calls signal(2), which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            for signal in [libc::SIGHUP, libc::SIGINT, libc::SIGQUIT, libc::SIGTERM] {
                libc::signal(signal, libc::SIG_DFL);
            }
            Ok(())
        })
    }
}

fn signalled(tag: &str, ranks: usize, args: &[&str], script: &str, signals: &[&str], delay: Duration) -> (std::process::ExitStatus, String, String, Duration, Vec<u32>) {
    let dir = scratch_dir(tag);
    let script = format!("{script}; echo $$ > {}/pid-$PMI_RANK; while :; do sleep 0.1; done", dir.display());
    let n = ranks.to_string();
    let mut cmd = mpxrun();
    with_default_signals(&mut cmd);
    let mut launched = Launched::spawn(cmd.args(["-n", &n]).args(args).args(["sh", "-c", &script]).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()));
    let read_all = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = read_all(Box::new(launched.child().stdout.take().unwrap()));
    let stderr = read_all(Box::new(launched.child().stderr.take().unwrap()));
    let pids = pids_written(&dir, ranks);
    let id = launched.child().id().to_string();
    let started = Instant::now();
    for (i, signal) in signals.iter().enumerate() {
        if i > 0 {
            std::thread::sleep(delay);
        }
        Command::new("kill").args([*signal, &id]).status().unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while launched.child().try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    // Still running: failed (and stopped as `launched` goes), not waited for.
    assert!(launched.child().try_wait().unwrap().is_some(), "mpxrun still runs 30 s after {signals:?}");
    let took = started.elapsed();
    let status = launched.take().wait().unwrap();
    let left = outliving(&pids, Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(&dir);
    (status, stdout.join().unwrap(), stderr.join().unwrap(), took, left)
}

/// Stopped by SIGTERM, SIGINT or SIGHUP, mpxrun passes the signal to every rank
/// (which may clean up), kills those left after `--kill-after` (at once
/// on a second signal), and exits with 128 + the signal; SIGUSR1 and
/// SIGUSR2 reach the ranks, and the job goes on.
#[test]
fn mpxrun_passes_signals_to_its_ranks_before_killing_them() {
    // Ranks that clean up when told.
    let cleans = "trap 'echo cleaning-$PMI_RANK; exit 3' TERM INT";
    let (status, stdout, stderr, took, left) = signalled("term", 2, &[], cleans, &["-TERM"], Duration::ZERO);
    assert_eq!(status.code(), Some(143), "{stdout}{stderr}");
    assert!(stdout.contains("[0] cleaning-0") && stdout.contains("[1] cleaning-1"), "the ranks cleaned up: {stdout}{stderr}");
    assert!(stderr.contains("terminated; passing SIGTERM to every rank") && !stderr.contains("killing the ranks left"), "{stderr}");
    assert!(took < Duration::from_secs(4) && left.is_empty(), "{took:?}, {left:?} left");
    let (status, stdout, _, _, left) = signalled("int", 2, &[], cleans, &["-INT"], Duration::ZERO);
    assert_eq!(status.code(), Some(130), "{stdout}");
    assert!(stdout.contains("[0] cleaning-0") && stdout.contains("[1] cleaning-1") && left.is_empty(), "{stdout}");
    // A closed terminal (or a dropped ssh session) stops the job alike:
    // the ranks, in sessions of their own, get the hang-up from mpxrun.
    let hangs_up = "trap 'echo hung-up-$PMI_RANK; exit 3' HUP";
    let (status, stdout, stderr, took, left) = signalled("hup", 2, &[], hangs_up, &["-HUP"], Duration::ZERO);
    assert_eq!(status.code(), Some(129), "{stdout}{stderr}");
    assert!(stdout.contains("[0] hung-up-0") && stdout.contains("[1] hung-up-1"), "{stdout}{stderr}");
    assert!(stderr.contains("hung up; passing SIGHUP to every rank") && took < Duration::from_secs(4) && left.is_empty(), "{took:?}, {left:?} left: {stderr}");
    // Started ignoring SIGHUP (as under nohup), it goes on, and so do its
    // ranks.
    let mut nohup = Command::new("sh");
    nohup.args(["-c", "trap '' HUP; exec \"$0\" -n 2 sh -c 'sleep 2; echo done-$PMI_RANK'", env!("CARGO_BIN_EXE_mpxrun")]);
    let mut launched = Launched::spawn(nohup.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()));
    // The ranks are running by then.
    std::thread::sleep(Duration::from_secs(1));
    Command::new("kill").args(["-HUP", &launched.child().id().to_string()]).status().unwrap();
    let out = launched.take().wait_with_output().unwrap();
    assert!(out.status.success() && text(&out).contains("[0] done-0") && text(&out).contains("[1] done-1"), "{}", text(&out));

    // Ranks that ignore it are killed after the while given, or at the
    // second signal.
    let deaf = "trap '' TERM";
    let (status, _, stderr, took, left) = signalled("deaf", 2, &["--kill-after", "1"], deaf, &["-TERM"], Duration::ZERO);
    assert_eq!(status.code(), Some(143), "{stderr}");
    assert!(stderr.contains("killing the ranks left") && left.is_empty(), "{stderr}, {left:?} left");
    assert!(took >= Duration::from_secs(1) && took < Duration::from_secs(5), "killed {took:?} after SIGTERM with --kill-after 1");
    let (status, _, stderr, took, left) = signalled("twice", 2, &["--kill-after", "60"], deaf, &["-TERM", "-TERM"], Duration::from_millis(300));
    assert_eq!(status.code(), Some(143), "{stderr}");
    assert!(stderr.contains("terminated; killing every rank") && left.is_empty() && took < Duration::from_secs(5), "{took:?}: {stderr}");

    // SIGUSR1 and SIGUSR2 reach every rank; the job ends as they do.
    let listens = "trap 'echo usr1-$PMI_RANK' USR1; trap 'echo usr2-$PMI_RANK; exit 0' USR2";
    let (status, stdout, stderr, _, left) = signalled("usr", 2, &[], listens, &["-USR1", "-USR2"], Duration::from_millis(300));
    assert!(status.success(), "{status}: {stdout}{stderr}");
    for r in 0..2 {
        assert!(stdout.contains(&format!("[{r}] usr1-{r}")) && stdout.contains(&format!("[{r}] usr2-{r}")), "{stdout}");
    }
    assert!(left.is_empty());
}

/// A rank that cannot be started ends mpxrun at once with an error, and
/// the ranks started before it go with what they started (their process
/// groups). Ranks 0 to 19 start through `timeout` (the launch command
/// `{host} 60`, their "host" `timeout`), each a shell that leaves a
/// `sleep` behind; rank 20's launch command does not exist.
#[test]
fn a_rank_that_cannot_start_takes_the_ranks_started_before_it_down() {
    let dir = scratch_dir("no-start");
    let script = format!("sleep 60 & echo $! > {}/pid-$PMI_RANK; wait", dir.display());
    let hosts = format!("{}/nonexistent/launcher", "timeout,".repeat(20));
    // The ranks' groups may all go before any shell has started its
    // sleep (a loaded machine): then the run is repeated.
    for _ in 0..10 {
        let out = run(mpxrun().args(["-n", "21", "--hosts", &hosts, "--pmi-host", "127.0.0.1", "--launch", "{host} 60", "sh", "-c", &script]), Duration::from_secs(20));
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert!(text(&out).contains("starting the launch command \"/nonexistent/launcher\" (rank 20)"), "{}", text(&out));
        std::thread::sleep(Duration::from_millis(200));
        let pids: Vec<u32> = (0..20).filter_map(|r| std::fs::read_to_string(dir.join(format!("pid-{r}"))).ok()?.trim().parse().ok()).collect();
        if pids.is_empty() {
            continue;
        }
        let _ = std::fs::remove_dir_all(&dir);
        let left = outliving(&pids, Duration::from_secs(5));
        assert!(left.is_empty(), "the sleeps {left:?} of {pids:?} outlived mpxrun");
        return;
    }
    let _ = std::fs::remove_dir_all(&dir);
    panic!("in 10 runs no rank got as far as starting its sleep");
}

/// The rank of the test below (a no-op unless started as one): a program
/// that starts its rank, has `dd` copy the first `MPX_TEST_INPUT` bytes
/// of its standard input (one byte per read, so no more), then prints
/// each line of the rest.
#[test]
fn input_reading_child() {
    let Some(head) = std::env::var_os("MPX_TEST_INPUT") else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(mpx::launch(1, |world| async move { world.barrier().await })).expect("its rank starts");
    let count = format!("count={}", head.to_str().unwrap());
    let dd = std::process::Command::new("dd").args(["bs=1", &count, "status=none"]).status().unwrap();
    assert!(dd.success());
    for line in std::io::BufRead::lines(std::io::stdin().lock()) {
        println!("read: {}", line.unwrap());
    }
}

/// A rank on another host reads its token and credential from its
/// standard input, then mpxrun's input, whole, as its own: through a
/// launch command that passes its input on (as `ssh` does, and, as `ssh`
/// does, not mpxrun's environment: the token comes on the input too), the
/// rank's program reads mpxrun's input and nothing of its credential, and
/// its standard input is left exactly after the credential, for a child
/// that inherits it as much as for the program's own reads.
#[test]
fn a_rank_on_another_host_reads_mpxruns_input_after_its_credential() {
    let dir = scratch_dir("remote-input");
    // `sh <script> {host} env VAR=... program args`: the host dropped.
    let script = dir.join("ssh-like");
    std::fs::write(&script, "shift\nexec env -u MPX_PMI_TOKEN \"$@\"\n").unwrap();
    let me = std::env::current_exe().unwrap();
    let line = |i: usize| format!("line {i} of the input\n");
    let input: Vec<u8> = (0..2000).map(line).collect::<String>().into_bytes();
    // The first 500 lines go to `dd`, started by the rank once it runs.
    let head: usize = (0..500).map(|i| line(i).len()).sum();
    let out = run_fed(
        mpxrun()
            .env("MPX_TEST_INPUT", head.to_string())
            .args(["-n", "1", "--hosts", "127.0.0.1", "--pmi-host", "127.0.0.1", "--launch"])
            .arg(format!("sh {} {{host}}", script.display()))
            .arg(&me)
            .args(["--exact", "input_reading_child", "--nocapture"]),
        Some(input),
        Duration::from_secs(60),
    );
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{}", text(&out));
    let copied: Vec<&str> = stdout.lines().filter_map(|l| l.strip_prefix("[0] line ")).collect();
    assert_eq!(copied.len(), 500, "{}", text(&out));
    assert!(copied.iter().enumerate().all(|(i, l)| *l == format!("{i} of the input")), "{copied:?}");
    let read: Vec<&str> = stdout.lines().filter_map(|l| l.strip_prefix("[0] read: ")).collect();
    assert_eq!(read.len(), 1500, "{}", text(&out));
    assert!(read.iter().enumerate().all(|(i, l)| *l == format!("line {} of the input", 500 + i)), "{read:?}");
    assert!(!stdout.contains("MPX_PMI_TOKEN") && !stdout.contains("PRIVATE KEY") && !stdout.contains("MPX_LAUNCHER_INPUT_END"), "{stdout}");
}

/// Through `ssh`, whose server has the user's shell run the command line
/// it is given (played here by a script called `ssh` that drops the host
/// and runs the rest with `sh -c`), a remote program gets its arguments
/// as given: spaces, quotes and `;` included.
#[test]
fn a_remote_program_gets_its_arguments_through_a_remote_shell_intact() {
    let dir = scratch_dir("ssh-like");
    let ssh = dir.join("ssh");
    std::fs::write(&ssh, "#!/bin/sh\nshift\nexec sh -c \"$*\"\n").unwrap();
    std::fs::set_permissions(&ssh, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    // A script just written may be "busy" to exec while another test's
    // fork holds it open: wait until it runs.
    let deadline = Instant::now() + Duration::from_secs(10);
    while Command::new(&ssh).args(["host", "true"]).status().map(|s| !s.success()).unwrap_or(true) {
        assert!(Instant::now() < deadline, "{} never ran", ssh.display());
        std::thread::sleep(Duration::from_millis(50));
    }
    let check = r#"test "$1" = "a b" && test "$2" = "it's" && test "$3" = 'x;touch gone' && test "$4" = '$HOME' && echo intact"#;
    let out = run(
        mpxrun()
            .args(["-n", "1", "--hosts", "127.0.0.1", "--pmi-host", "127.0.0.1", "--launch"])
            .arg(format!("{} {{host}}", ssh.display()))
            .args(["sh", "-c", check, "x", "a b", "it's", "x;touch gone", "$HOME"]),
        Duration::from_secs(20),
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("[0] intact"), "{}", text(&out));
}

/// `kill -9` of one rank in the middle of a flood: the others' operations
/// that depend on it fail (they do not hang), and mpxrun exits non-zero
/// naming the rank.
#[test]
fn a_rank_killed_mid_flood_fails_the_others_and_mpxrun() {
    let mut launched = Launched::spawn(
        mpxrun()
            .args(["-n", "3", "--keep-going"])
            .arg(example("flood"))
            .arg("100000000")
            .env("MPX_START_TIMEOUT", "20")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let child = launched.child();
    // Rank 1's process id, then its first progress line.
    let rx = lines_of(child.stdout.take().unwrap());
    let mut pid = None;
    let mut lines = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let Ok(line) = rx.recv_timeout(Duration::from_millis(100)) else { continue };
        if let Some(p) = line.strip_prefix("[1] rank 1 pid ") {
            pid = p.trim().parse::<i32>().ok();
        }
        let flowing = line.contains("messages received");
        lines.push(line);
        if pid.is_some() && flowing {
            break;
        }
    }
    let pid = pid.unwrap_or_else(|| panic!("rank 1 never started flooding:\n{}", lines.join("\n")));
    let killed = Instant::now();
    assert!(Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap().success());
    // The others fail within the idle bound (10 s with Options::local) and
    // mpxrun ends.
    let limit = Duration::from_secs(25);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(killed.elapsed() < limit, "mpxrun still running {limit:?} after the kill");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success());
    assert!(stderr.contains("rank 1 failed"), "{stderr}");
    // The other ranks failed too, with errors, rather than finishing.
    assert!(stderr.contains("[0] Error") && stderr.contains("[2] Error"), "{stderr}");
    assert!(stderr.contains("ProcessFailed"), "{stderr}");
}

#[test]
fn mpich_hydra_runs_the_quickstart_and_a_ring() {
    if !have("mpiexec.hydra") {
        return;
    }
    let out = run(Command::new("mpiexec.hydra").args(["-n", "4"]).arg(example("quickstart")), Duration::from_secs(60));
    check_quickstart(&out);
    let out = run(Command::new("mpiexec.hydra").args(["-n", "4"]).arg(example("quic_ring")), Duration::from_secs(60));
    check_ring(&out, 4);
}

/// PMI-1, which mpx falls back to with a launcher that declines PMI-2
/// (and speaks when `MPX_PMI_VERSION=1`), against hydra and mpxrun.
#[test]
fn pmi_1_still_starts_a_ring_under_hydra_and_mpxrun() {
    let out = run(mpxrun().env("MPX_PMI_VERSION", "1").args(["-n", "3"]).arg(example("quic_ring")), Duration::from_secs(60));
    check_ring(&out, 3);
    if !have("mpiexec.hydra") {
        return;
    }
    let out = run(Command::new("mpiexec.hydra").env("MPX_PMI_VERSION", "1").args(["-n", "3"]).arg(example("quic_ring")), Duration::from_secs(60));
    check_ring(&out, 3);
}

/// Whether a Slurm cluster answers here (`scripts/slurm-up.sh` starts one
/// on this host); if not, fails under `MPX_REQUIRE_LAUNCHERS`, else says
/// so.
fn have_slurm() -> bool {
    let up = Command::new("sinfo")
        .args(["-h", "-o", "%t"])
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success() && ["idle", "mix", "alloc"].iter().any(|s| String::from_utf8_lossy(&o.stdout).contains(s)));
    if !up {
        assert!(
            std::env::var_os("MPX_REQUIRE_LAUNCHERS").is_none(),
            "a Slurm cluster is required (MPX_REQUIRE_LAUNCHERS) but none answers: export SLURM_CONF=$(scripts/slurm-up.sh)"
        );
        eprintln!("no Slurm cluster answers: not tested here (export SLURM_CONF=$(scripts/slurm-up.sh))");
    }
    up
}

/// Slurm's `srun --mpi=pmi2`: ranks meet through Slurm's PMI-2 server,
/// with no variable set; PMI-1 through the same plugin; and a plain
/// `srun` (no PMI) through a rendezvous directory, or an error saying
/// what to type.
#[test]
fn slurm_srun_runs_the_quickstart_and_a_ring() {
    if !have_slurm() {
        return;
    }
    let srun = |args: &[&str], program: PathBuf| {
        let mut c = Command::new("srun");
        c.args(args).arg(program);
        c
    };
    let out = run(&mut srun(&["--mpi=pmi2", "-n", "4"], example("quickstart")), Duration::from_secs(90));
    check_quickstart(&out);
    let out = run(&mut srun(&["--mpi=pmi2", "-n", "3"], example("quic_ring")), Duration::from_secs(90));
    check_ring(&out, 3);
    let out = run(srun(&["--mpi=pmi2", "-n", "3"], example("quic_ring")).env("MPX_PMI_VERSION", "1"), Duration::from_secs(90));
    check_ring(&out, 3);
    let dir = std::env::temp_dir().join(format!("mpx-slurm-rendezvous-{}", std::process::id()));
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
    }
    let out = run(srun(&["-n", "3"], example("quic_ring")).env("MPX_RENDEZVOUS", &dir), Duration::from_secs(90));
    check_ring(&out, 3);
    let _ = std::fs::remove_dir_all(&dir);
    let out = run(srun(&["-n", "2"], example("quic_ring")).env_remove("MPX_RENDEZVOUS"), Duration::from_secs(90));
    assert!(!out.status.success());
    assert!(text(&out).contains("srun --mpi=pmi2"), "{}", text(&out));
}

#[test]
fn open_mpi_runs_the_quickstart_and_a_ring() {
    if !have("mpirun.openmpi") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("mpx-rendezvous-{}", std::process::id()));
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
    }
    let mpirun = |n: &str, program: PathBuf| {
        let mut c = Command::new("mpirun.openmpi");
        c.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .args(["--oversubscribe", "-n", n, "-x"])
            .arg(format!("MPX_RENDEZVOUS={}", dir.display()))
            .arg(program);
        c
    };
    let out = run(&mut mpirun("4", example("quickstart")), Duration::from_secs(90));
    check_quickstart(&out);
    // Each rank removes its card as it ends, the last one the job's folder.
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(left.is_empty(), "the job left {left:?} behind");
    let out = run(&mut mpirun("4", example("quic_ring")), Duration::from_secs(90));
    check_ring(&out, 4);
    // Without the rendezvous directory: an error that says what to type.
    let mut c = Command::new("mpirun.openmpi");
    c.env("OMPI_ALLOW_RUN_AS_ROOT", "1").env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1").args(["--oversubscribe", "-n", "2"]).arg(example("quic_ring"));
    let out = run(&mut c, Duration::from_secs(60));
    assert!(!out.status.success());
    assert!(text(&out).contains("mpirun -x MPX_RENDEZVOUS="), "{}", text(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Eight processes exchange 1,000,048 messages (17,858 each way between
/// every pair), each checking that every peer's arrive complete and in
/// order; each process's peak resident memory stays under 64 MiB, and its
/// resident memory does not grow between a tenth of the flood and its end
/// (within 2 MiB of allocator noise).
#[test]
fn eight_processes_flood_a_million_messages_in_bounded_memory() {
    let out = run(mpxrun().args(["-n", "8"]).arg(example("flood")).arg("17858"), Duration::from_secs(300));
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let number_after = |line: &str, word: &str| -> u64 {
        let at = line.find(word).unwrap_or_else(|| panic!("{word:?} in {line:?}")) + word.len();
        line[at..].split_whitespace().next().and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("a number after {word:?} in {line:?}"))
    };
    let mut total = 0;
    for rank in 0..8 {
        let mine: Vec<&str> = stdout.lines().filter(|l| l.starts_with(&format!("[{rank}] rank {rank}:"))).collect();
        let done = mine.iter().find(|l| l.contains("checked")).unwrap_or_else(|| panic!("rank {rank} did not finish:\n{stdout}"));
        let received = number_after(done, "flood of ");
        assert_eq!(received, 7 * 17858, "rank {rank}");
        total += received;
        let peak = number_after(done, "peak resident ");
        assert!(peak < 64 << 10, "rank {rank}: peak resident {peak} kB");
        let reports: Vec<(u64, u64)> = mine
            .iter()
            .filter(|l| l.contains("messages received"))
            .map(|l| (number_after(l, &format!("rank {rank}: ")), number_after(l, "resident ")))
            .collect();
        let tenth = reports.iter().find(|(n, _)| *n >= received / 10).expect("a report at a tenth");
        let last = reports.last().expect("reports");
        assert!(last.1 <= tenth.1 + 2048, "rank {rank}: resident {} kB at {} messages, {} kB at {}", tenth.1, tenth.0, last.1, last.0);
    }
    assert_eq!(total, 1_000_048);
}

/// Three "hosts" on this machine: network namespaces, each with its own
/// address on a bridge, removed on every exit path (dropping this).
struct Hosts {
    names: Vec<String>,
    /// Each host's link, on the bridge's side.
    links: Vec<String>,
    bridge: String,
    /// The bridge's address: where `mpxrun` listens.
    gateway: String,
}

fn ip(args: &str) -> Result<(), String> {
    let out = Command::new("ip").args(args.split_whitespace()).output().map_err(|e| format!("ip {args}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {args}: {}", String::from_utf8_lossy(&out.stderr).trim()))
    }
}

impl Hosts {
    fn new(n: usize) -> Result<Hosts, String> {
        // Names and a network of each set's own: tests of this process run
        // side by side.
        static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let made = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = (std::process::id() % 10_000) * 10 + made % 10;
        let net = format!("10.77.{}", id % 250);
        let mut hosts = Hosts { names: Vec::new(), links: Vec::new(), bridge: format!("mx{id}b"), gateway: format!("{net}.254") };
        ip(&format!("link add {} type bridge", hosts.bridge))?;
        ip(&format!("addr add {}/24 dev {}", hosts.gateway, hosts.bridge))?;
        ip(&format!("link set {} up", hosts.bridge))?;
        for i in 0..n {
            let (ns, outer, inner) = (format!("mpx-{id}-h{i}"), format!("mx{id}h{i}"), format!("mx{id}n{i}"));
            ip(&format!("netns add {ns}"))?;
            hosts.names.push(ns.clone());
            ip(&format!("link add {outer} type veth peer name {inner}"))?;
            hosts.links.push(outer.clone());
            ip(&format!("link set {inner} netns {ns}"))?;
            ip(&format!("link set {outer} master {} up", hosts.bridge))?;
            ip(&format!("netns exec {ns} ip addr add {net}.{}/24 dev {inner}", i + 1))?;
            ip(&format!("netns exec {ns} ip link set {inner} up"))?;
            ip(&format!("netns exec {ns} ip link set lo up"))?;
        }
        Ok(hosts)
    }

    /// Host `i`'s address on the bridge.
    fn address(&self, i: usize) -> String {
        let net = self.gateway.rsplit_once('.').map_or(self.gateway.as_str(), |(net, _)| net);
        format!("{net}.{}", i + 1)
    }

    /// `mpxrun` starting rank `r` on host `r % 3`.
    fn mpxrun(&self, ranks: usize) -> Command {
        let mut c = mpxrun();
        // `env -i`: the rank starts with no environment, as over ssh, so
        // everything it needs must come on its command line and its input.
        c.args(["-n", &ranks.to_string(), "--hosts", &self.names.join(","), "--launch", "ip netns exec {host} env -i", "--pmi-host", &self.gateway]);
        c
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.names {
            let _ = ip(&format!("netns del {ns}"));
        }
        for link in &self.links {
            let _ = ip(&format!("link del {link}"));
        }
        let _ = ip(&format!("link del {}", self.bridge));
    }
}

/// Ranks on three hosts (network namespaces) run a ring, in two ports of
/// each host's given by `MPX_PORT_RANGE` too, and an all-to-all flood;
/// then one host's link is cut in the middle of a flood, and the
/// ranks on the others fail with `ProcessFailed` within the idle bound
/// instead of hanging.
#[test]
fn ranks_on_three_hosts_run_and_a_host_cut_off_fails_the_others() {
    let hosts = match Hosts::new(3) {
        Ok(h) => h,
        Err(e) => {
            assert!(std::env::var_os("MPX_REQUIRE_LAUNCHERS").is_none(), "network namespaces are required here: {e}");
            eprintln!("cannot make network namespaces here ({e}): not tested");
            return;
        }
    };
    let out = run(hosts.mpxrun(3).arg(example("quic_ring")), Duration::from_secs(60));
    check_ring(&out, 3);
    // A port range reaches the remote ranks on their command lines: two
    // ports hold a host's one rank, one cannot.
    let out = run(hosts.mpxrun(3).env("MPX_PORT_RANGE", "7000:7001").arg(example("quic_ring")), Duration::from_secs(60));
    check_ring(&out, 3);
    let out = run(hosts.mpxrun(3).env("MPX_PORT_RANGE", "7000:7000").arg(example("quic_ring")), Duration::from_secs(60));
    assert!(!out.status.success() && text(&out).contains("every port of 7000:7000"), "{}", text(&out));
    let out = run(hosts.mpxrun(6).arg(example("flood")).arg("2000"), Duration::from_secs(120));
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).matches("flood of 10000 messages checked").count(), 6, "{}", text(&out));

    // Cut host 1 (ranks 1 and 4) off in the middle of a flood.
    // A failure bound of 3 s, which reaches the remote ranks on their
    // command lines.
    let mut launched = Launched::spawn(
        hosts
            .mpxrun(6)
            .env("MPX_IDLE_TIMEOUT", "3")
            .arg("--keep-going")
            .arg(example("flood"))
            .arg("100000000")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let child = launched.child();
    let rx = lines_of(child.stdout.take().unwrap());
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    loop {
        assert!(Instant::now() < deadline, "the flood never started:\n{}", seen.join("\n"));
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(100)) {
            let flowing = line.contains("messages received");
            seen.push(line);
            if flowing {
                break;
            }
        }
    }
    ip(&format!("link set {} down", hosts.links[1])).unwrap();
    let cut = Instant::now();
    // Well under the 10 s default: the 3 s bound was applied.
    let limit = Duration::from_secs(9);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if cut.elapsed() > limit {
            let _ = child.kill();
            panic!("mpxrun still running {limit:?} after the cut");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "{stderr}");
    for rank in [0, 2, 3, 5] {
        assert!(stderr.contains(&format!("[{rank}] Error: ProcessFailed")), "rank {rank} did not fail:\n{stderr}");
    }
    assert!(stderr.contains("rank: 1") || stderr.contains("rank: 4"), "the failures name a rank of the cut host:\n{stderr}");
}

/// One rank of the by-hand test below (a no-op unless started as one): a
/// program that calls `mpx::launch` for two ranks, each sending the other
/// 64 KiB.
#[test]
fn by_hand_child() {
    if std::env::var_os("MPX_TEST_BY_HAND").is_none() {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let got = runtime.block_on(mpx::launch(2, |world| async move {
        let (me, other) = (world.rank(), 1 - world.rank());
        let sent = world.isend(vec![me as u8 + 1; 64 << 10], other, 5);
        let (got, _) = world.recv_vec::<u8>(other, 5).await?;
        sent.await?;
        if got.len() != 64 << 10 || got.iter().any(|&b| b != other as u8 + 1) {
            return Err(mpx::Error::user(format!("rank {me}: {} bytes from rank {other}, not its 64 KiB", got.len())));
        }
        Ok(format!("rank {me}: 64 KiB from rank {other} checked"))
    }));
    match got {
        Ok(lines) => lines.iter().for_each(|line| println!("{line}")),
        Err(e) => panic!("by hand: {e}"),
    }
}

/// Two ranks of a program that calls `mpx::launch`, started by hand
/// (`MPX_RANK`, `MPX_ADDRS`, `MPX_CREDENTIAL`, one a file's path and one
/// the PEM text) on two hosts (network namespaces) whose links carry
/// 1500-byte packets (veth's MTU): their 64 KiB messages arrive, in
/// packets that fit the path, although the program picked no options.
#[test]
fn a_program_started_by_hand_on_two_hosts_sends_64_kib_over_a_1500_byte_mtu() {
    let hosts = match Hosts::new(2) {
        Ok(h) => h,
        Err(e) => {
            assert!(std::env::var_os("MPX_REQUIRE_LAUNCHERS").is_none(), "network namespaces are required here: {e}");
            eprintln!("cannot make network namespaces here ({e}): not tested");
            return;
        }
    };
    for link in &hosts.links {
        let mtu = std::fs::read_to_string(format!("/sys/class/net/{link}/mtu")).unwrap_or_default();
        assert_eq!(mtu.trim(), "1500", "{link}'s MTU");
    }
    let job = mpx_net::quic::JobCredential::generate(0x64_1500).unwrap();
    let dir = std::env::temp_dir().join(format!("mpx-by-hand-{}", std::process::id()));
    let rank_0 = dir.join("rank-0.pem");
    {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&rank_0).unwrap();
        std::io::Write::write_all(&mut file, job.issue(0).unwrap().to_pem().as_bytes()).unwrap();
    }
    let credentials = [rank_0.display().to_string(), job.issue(1).unwrap().to_pem()];
    let addrs = format!("{}:7000,{}:7000", hosts.address(0), hosts.address(1));
    let me = std::env::current_exe().unwrap();
    let ranks: Vec<Launched> = (0..2)
        .map(|rank| {
            Launched::spawn(
                Command::new("ip")
                    .args(["netns", "exec", &hosts.names[rank]])
                    .arg(&me)
                    .args(["--exact", "by_hand_child", "--nocapture"])
                    .env("MPX_TEST_BY_HAND", "1")
                    .env("MPX_RANK", rank.to_string())
                    .env("MPX_ADDRS", &addrs)
                    .env("MPX_CREDENTIAL", &credentials[rank])
                    .env("MPX_START_TIMEOUT", "20")
                    .env_remove("MPX_HOST")
                    .env_remove("MPX_PORT_RANGE")
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped()),
            )
        })
        .collect();
    let (finished, outputs) = outputs_within(ranks, Duration::from_secs(60));
    let _ = std::fs::remove_dir_all(&dir);
    let all: Vec<String> = outputs.iter().enumerate().map(|(rank, out)| format!("rank {rank}:\n{}", text(out))).collect();
    assert!(finished, "the ranks did not finish in 60 s:\n{}", all.join("\n"));
    for (rank, out) in outputs.iter().enumerate() {
        assert!(out.status.success(), "{}", all[rank]);
        let want = format!("rank {rank}: 64 KiB from rank {} checked", 1 - rank);
        assert!(String::from_utf8_lossy(&out.stdout).contains(&want), "{}", all[rank]);
    }
}

/// Under mpxrun, a process of the job that lacks the job's credential (it
/// makes a certificate of its own) is refused by the rank it dials, and no
/// message of its arrives; the rank waiting for it fails within the
/// start-up bound, naming what it waited for.
#[test]
fn a_rank_without_the_jobs_credential_is_refused_under_mpxrun() {
    let flood = example("flood");
    let script = format!("if [ \"$PMI_RANK\" = 1 ]; then unset MPX_CREDENTIAL; fi; exec {} 100", flood.display());
    let started = Instant::now();
    let out = run(mpxrun().args(["-n", "2", "--keep-going", "sh", "-c", &script]).env("MPX_START_TIMEOUT", "5"), Duration::from_secs(30));
    assert!(!out.status.success());
    let all = text(&out);
    assert!(all.contains("[1] Error: ProcessFailed { rank: 0") && all.contains("UnknownIssuer"), "TLS refused rank 1:\n{all}");
    // Whichever bound ends the wait first: the launch's wait for hellos or
    // the transport's for rank 1's connection (both the start timeout).
    let named = all.contains("for every peer's hello (rank 0 has none from [1])") || all.contains("waiting for rank 1 to connect");
    assert!(all.contains("[0] Error") && named, "rank 0 failed naming its wait:\n{all}");
    assert!(!all.contains("messages received"), "nothing flowed:\n{all}");
    assert!(started.elapsed() < Duration::from_secs(20), "within the start-up bound");
}

/// Rank 1 of the hydra refusal test below (a no-op unless started as
/// that): a process that takes part in the job's PMI exchange, but
/// publishes one certificate's fingerprint and connects with another, as
/// a process that learned rank 0's address without holding the job's
/// trust would. Prints whether rank 0 let it in.
#[test]
fn intruder_child() {
    use mpx_net::bootstrap::pmi;
    use mpx_net::quic::{bind, start, Options, RankCredential};
    if std::env::var_os("MPX_TEST_INTRUDER").is_none() {
        return;
    }
    let number = |name: &str| std::env::var(name).unwrap().parse::<u32>().unwrap();
    let (rank, size) = (number("PMI_RANK"), number("PMI_SIZE"));
    // SAFETY: mpxrun hands this process PMI_FD for PMI alone, and nothing
    // else here takes it.
    let stream = unsafe { pmi::connect(&pmi::Channel::Fd(number("PMI_FD") as i32), Duration::from_secs(10)) }.unwrap();
    let mut client = pmi::Client::init(stream, rank, pmi::Version::V2).unwrap();
    let hex = |fp: &[u8; 32]| fp.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let published = RankCredential::self_signed(0, rank).unwrap();
    let mut used = RankCredential::self_signed(0, rank).unwrap();
    let socket = bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let me = socket.local_addr().unwrap();
    client.put(&format!("mpx-{rank}"), &format!("{me},{}", hex(&published.fingerprint()))).unwrap();
    client.barrier().unwrap();
    let mut addrs = Vec::new();
    let mut pins = Vec::new();
    for r in 0..size {
        let card = client.get(&format!("mpx-{r}")).unwrap();
        let (addr, fp) = card.rsplit_once(',').unwrap();
        addrs.push(addr.parse().unwrap());
        let mut pin = [0u8; 32];
        for (i, b) in pin.iter_mut().enumerate() {
            *b = u8::from_str_radix(&fp[2 * i..2 * i + 2], 16).unwrap();
        }
        pins.push(if r == rank { used.fingerprint() } else { pin });
    }
    used.pin(pins).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let got_in = runtime.block_on(async {
        let options = Options { connect_timeout: Duration::from_secs(5), ..Options::local() };
        let endpoint = start(socket, &addrs, used, &options).unwrap();
        let sent = tokio::time::timeout(Duration::from_secs(10), endpoint.world().send(&7u32, 0, 0)).await;
        match sent {
            Ok(Ok(())) => true,
            Ok(Err(e)) => {
                println!("intruder: refused: {e}");
                false
            }
            Err(_) => {
                println!("intruder: refused: no connection in 10 s");
                false
            }
        }
    });
    let _ = client.finalize();
    assert!(!got_in, "rank 0 let a process without the job's trust in");
}

/// Under MPICH's hydra, where the job's trust is the fingerprints its
/// ranks publish through hydra's PMI: a process that connects to rank 0
/// with a certificate other than the one published for its rank is
/// refused, and rank 0 fails naming its wait, within the start-up bound.
#[test]
fn a_process_without_the_jobs_credential_is_refused_under_hydra() {
    if !have("mpiexec.hydra") {
        return;
    }
    let me = std::env::current_exe().unwrap();
    let script = format!(
        "if [ \"$PMI_RANK\" = 1 ]; then MPX_TEST_INTRUDER=1 exec {} --exact intruder_child --nocapture; else exec {} 100; fi",
        me.display(),
        example("flood").display()
    );
    let started = Instant::now();
    let out = run(Command::new("mpiexec.hydra").args(["-n", "2", "sh", "-c", &script]).env("MPX_START_TIMEOUT", "5"), Duration::from_secs(60));
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(all.contains("intruder: refused"), "the intruder was refused:\n{all}");
    let named = all.contains("for every peer's hello") || all.contains("waiting for rank 1 to connect");
    assert!(named, "rank 0 failed naming its wait:\n{all}");
    assert!(!all.contains("messages received"), "nothing flowed:\n{all}");
    assert!(started.elapsed() < Duration::from_secs(30), "within the start-up bound");
}

/// A rank whose launcher cannot be reached, or never answers, or whose
/// peers never appear, fails within its start-up time naming what it
/// waited for: never a hang.
#[test]
fn start_up_failures_are_errors_within_the_start_timeout() {
    let quickstart = example("quickstart");
    let expect_failure = |cmd: &mut Command, names: &str| {
        let started = Instant::now();
        let out = run(cmd.env("MPX_START_TIMEOUT", "2"), Duration::from_secs(30));
        assert!(!out.status.success(), "{}", text(&out));
        assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());
        assert!(text(&out).contains(names), "the error names {names:?}:\n{}", text(&out));
    };
    // A PMI port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap();
    drop(closed);
    let pmi = |c: &mut Command, addr: String| {
        c.env("PMI_PORT", addr).env("PMI_ID", "0").env("PMI_RANK", "0").env("PMI_SIZE", "4").env_remove("PMI_FD");
    };
    let mut c = Command::new(&quickstart);
    pmi(&mut c, port.to_string());
    expect_failure(&mut c, "PMI");
    // A PMI port that takes the connection and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    let holder = std::thread::spawn(move || {
        let held: Vec<_> = silent.incoming().take(1).collect();
        std::thread::sleep(Duration::from_secs(8));
        drop(held);
    });
    let mut c = Command::new(&quickstart);
    pmi(&mut c, addr.to_string());
    expect_failure(&mut c, "PMI");
    holder.join().unwrap();
    // Open MPI's variables and a rendezvous directory where rank 1 never
    // writes its card.
    let dir = std::env::temp_dir().join(format!("mpx-lonely-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let mut c = Command::new(&quickstart);
    c.env("OMPI_COMM_WORLD_RANK", "0")
        .env("OMPI_COMM_WORLD_SIZE", "4")
        .env("PMIX_NAMESPACE", format!("lonely-{}", std::process::id()))
        .env("MPX_RENDEZVOUS", &dir);
    expect_failure(&mut c, "rank 1");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A card that a killed rank of an earlier job under the same name (a
/// reused `PMIX_NAMESPACE`) left in the rendezvous directory, with an
/// address nothing listens on and a fingerprint no rank's certificate
/// has, is never trusted. Two ranks started with Open MPI's variables, as
/// `mpirun` starts them, rank 1 a second after rank 0 (which reads the
/// stale card first): rank 0 alone fails waiting for rank 1's card to be
/// this job's, and with rank 1 the ring runs.
#[test]
fn a_stale_card_in_the_rendezvous_directory_does_not_stop_the_next_job() {
    let program = example("quic_ring");
    let base = std::env::temp_dir().join(format!("mpx-stale-rendezvous-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let namespace = format!("reused-{}", std::process::id());
    let job = base.join(format!("job-{namespace}"));
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().mode(0o700).recursive(true).create(&job).unwrap();
    }
    let dead = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let stale = format!("{dead},{}\n{}\n{}\n", "ab".repeat(32), "cd".repeat(16), "ef".repeat(32));
    std::fs::write(job.join("rank-1"), stale).unwrap();
    let rank = |r: u32, timeout: &str| {
        let mut c = Command::new(&program);
        c.env("OMPI_COMM_WORLD_RANK", r.to_string())
            .env("OMPI_COMM_WORLD_SIZE", "2")
            .env("PMIX_NAMESPACE", &namespace)
            .env("MPX_RENDEZVOUS", &base)
            .env("MPX_START_TIMEOUT", timeout)
            .env("MPX_HOST", "127.0.0.1")
            .env_remove("MPX_RANK")
            .env_remove("MPX_CREDENTIAL")
            .env_remove("PMI_FD")
            .env_remove("PMI_PORT")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    };
    let started = Instant::now();
    let out = run(&mut rank(0, "2"), Duration::from_secs(30));
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(all.contains("rank 1's card") && all.contains("to be this job's"), "rank 0 waited for rank 1's card to be this job's:\n{all}");
    assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());

    let mut ranks = vec![Launched::spawn(&mut rank(0, "20"))];
    std::thread::sleep(Duration::from_secs(1));
    ranks.push(Launched::spawn(&mut rank(1, "20")));
    let (finished, outputs) = outputs_within(ranks, Duration::from_secs(60));
    let _ = std::fs::remove_dir_all(&base);
    let all: String = outputs.iter().enumerate().map(|(r, out)| format!("rank {r}:\n{}\n", text(out))).collect();
    assert!(finished, "the ranks did not finish in 60 s:\n{all}");
    for (r, out) in outputs.iter().enumerate() {
        assert!(out.status.success(), "rank {r} failed:\n{all}");
        assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("rank {r} of 2:")), "{all}");
    }
    assert!(String::from_utf8_lossy(&outputs[0].stdout).contains("rank 0 of 2: token 2,"), "{all}");
}

/// Ranks die with `mpxrun`, however it ends: killed with SIGKILL (no
/// chance to clean up), it takes its ranks with it.
#[test]
fn ranks_die_with_a_killed_mpxrun() {
    let mut launched = Launched::spawn(mpxrun().args(["-n", "2"]).arg(example("flood")).arg("100000000").stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null()));
    let child = launched.child();
    let rx = lines_of(child.stdout.take().unwrap());
    let mut pids = [None, None];
    let deadline = Instant::now() + Duration::from_secs(30);
    while pids.iter().any(Option::is_none) && Instant::now() < deadline {
        let Ok(line) = rx.recv_timeout(Duration::from_millis(100)) else { continue };
        for (rank, pid) in pids.iter_mut().enumerate() {
            if let Some(p) = line.strip_prefix(&format!("[{rank}] rank {rank} pid ")) {
                *pid = p.trim().parse::<u32>().ok();
            }
        }
    }
    let pids = pids.map(|p| p.expect("every rank printed its pid"));
    child.kill().unwrap();
    child.wait().unwrap();
    let left = outliving(&pids, Duration::from_secs(5));
    assert!(left.is_empty(), "ranks {left:?} of {pids:?} outlived mpxrun");
}

/// Whether process `pid` runs: there, and not a zombie waiting for a
/// reaper.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')))
}

/// Waits up to `limit` for the processes `pids` to end: those still
/// running then, killed (SIGKILL) so that no test leaves them behind.
fn outliving(pids: &[u32], limit: Duration) -> Vec<u32> {
    let deadline = Instant::now() + limit;
    while pids.iter().any(|&p| alive(p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
    for p in &left {
        let _ = Command::new("kill").args(["-9", &p.to_string()]).status();
    }
    left
}

/// Ranks on other hosts die with `mpxrun` too. The launch command here
/// behaves as `sshd` does without a terminal: it starts the rank's command
/// in a session of its own (out of reach of `mpxrun`'s kill of the launch
/// command's process group, and of `PR_SET_PDEATHSIG`), its output in a
/// file, and waits for it. Interrupted, `mpxrun` kills the launch commands
/// and exits; the ranks, seeing their PMI connections close, end within
/// seconds, saying why.
#[test]
fn remote_ranks_die_with_an_interrupted_mpxrun() {
    if !have_setsid() {
        return;
    }
    let dir = scratch_dir("sshd-like");
    // `sh <script> {host} env VAR=... program args`: the host dropped, the
    // rest run as sshd runs a command, with the credential on its input
    // (kept in descriptor 3, as a background command's own input is
    // /dev/null) and its output in rank-<pid>.log. Run by `sh`, not
    // executed: a script just written may be "busy" to exec while another
    // test's fork holds it open.
    let script = dir.join("sshd-like");
    std::fs::write(&script, "shift\nexec 3<&0\nsetsid \"$@\" <&3 3<&- >\"$(dirname \"$0\")/rank-$$.log\" 2>&1 &\nwait\n").unwrap();
    let logs = || {
        let mut all = String::new();
        for entry in std::fs::read_dir(&dir).unwrap().map_while(Result::ok) {
            if entry.file_name().to_string_lossy().starts_with("rank-") {
                all.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
            }
        }
        all
    };
    let mut launched = Launched::spawn(
        mpxrun()
            .args(["-n", "2", "--hosts", "127.0.0.1,localhost", "--pmi-host", "127.0.0.1", "--launch"])
            .arg(format!("sh {} {{host}}", script.display()))
            .arg(example("flood"))
            .arg("100000000")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    );
    let child = launched.child();
    let stderr_of = |child: &mut std::process::Child| {
        let mut stderr = String::new();
        if let Some(mut pipe) = child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
        }
        stderr
    };
    // Each rank's process id, from a whole line of its log.
    let pid_of = |all: &str, rank: usize| {
        let prefix = format!("rank {rank} pid ");
        all.split_inclusive('\n').filter(|l| l.ends_with('\n')).find_map(|l| l.strip_prefix(&prefix).and_then(|p| p.trim().parse::<u32>().ok()))
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let pids = loop {
        let all = logs();
        if let (Some(a), Some(b)) = (pid_of(&all, 0), pid_of(&all, 1)) {
            break [a, b];
        }
        if child.try_wait().unwrap().is_some() || Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the ranks never started:\n{all}\nmpxrun:\n{}", stderr_of(child));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    let interrupted = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(interrupted.elapsed() < Duration::from_secs(10), "mpxrun still running 10 s after SIGINT");
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = outliving(&pids, Duration::from_secs(15));
    let all = logs();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(left.is_empty(), "ranks {left:?} of {pids:?} outlived mpxrun:\n{all}\nmpxrun:\n{}", stderr_of(child));
    assert!(all.contains("mpxrun is gone"), "the ranks said why they ended:\n{all}");
}

/// A rank started through a wrapper (`sh -c 'program; true'`) is the
/// wrapper's child, which `PR_SET_PDEATHSIG` (set on the wrapper) does not
/// cover: it too ends once a killed `mpxrun` is gone.
#[test]
fn a_rank_under_a_wrapper_dies_with_a_killed_mpxrun() {
    // `--no-prefix`: the ranks write to this test's pipe, not to one of
    // mpxrun's, so nothing but their PMI connections ties them to mpxrun.
    let mut launched = Launched::spawn(
        mpxrun()
            .args(["-n", "2", "--no-prefix", "sh", "-c", "\"$0\" 100000000; true"])
            .arg(example("flood"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
    );
    let child = launched.child();
    let rx = lines_of(child.stdout.take().unwrap());
    let mut pids = [None, None];
    let mut lines = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while pids.iter().any(Option::is_none) && Instant::now() < deadline {
        let Ok(line) = rx.recv_timeout(Duration::from_millis(100)) else { continue };
        for (rank, pid) in pids.iter_mut().enumerate() {
            if let Some(p) = line.strip_prefix(&format!("rank {rank} pid ")) {
                *pid = p.trim().parse::<u32>().ok();
            }
        }
        lines.push(line);
    }
    let pids = pids.map(|p| p.unwrap_or_else(|| panic!("every rank printed its pid:\n{}", lines.join("\n"))));
    child.kill().unwrap();
    child.wait().unwrap();
    let left = outliving(&pids, Duration::from_secs(15));
    assert!(left.is_empty(), "ranks {left:?} of {pids:?}, started by sh -c, outlived mpxrun");
    drop(rx);
}
