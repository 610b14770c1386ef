//! Makes a job's credential: `mpx-credential <ranks> <directory> [job id]`
//! writes `rank-<r>.pem` for every rank into the directory, each readable
//! by its owner only (mode 0600). Hand each rank its own file (see
//! `mpx_net::quic::start_from_env`).
//!
//! The files hold the ranks' private keys, so the directory must be
//! private: a missing one is created with mode 0700; an existing one must
//! be a directory (not a symbolic link) that belongs to this user and that
//! no one else may enter (mode 0700), such as `mktemp -d` makes. Files are
//! only ever created, never overwritten, and a symbolic link in their
//! place is refused: the keys never land where another user can read or
//! redirect them.

use std::ffi::CString;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = run(&args) {
        eprintln!("mpx-credential: {e}");
        eprintln!("usage: mpx-credential <ranks> <directory> [job id, hex]");
        eprintln!("       (a new directory, or a private one of yours: `mpx-credential 2 \"$(mktemp -d)\"`)");
        std::process::exit(2);
    }
}

fn run(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let [ranks, dir, rest @ ..] = args else { return Err("two arguments needed".into()) };
    let ranks: u32 = ranks.parse()?;
    let most = mpx_net::bootstrap::Start::MAX_RANKS;
    if ranks == 0 || ranks > most {
        return Err(format!("{ranks} ranks: a job has 1 to {most}").into());
    }
    let job = match rest {
        [] => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_nanos() as u64,
        [id] => u64::from_str_radix(id, 16)?,
        _ => return Err("too many arguments".into()),
    };
    let credential = mpx_net::quic::JobCredential::generate(job)?;
    let folder = private_directory(Path::new(dir))?;
    let names: Vec<String> = (0..ranks).map(|rank| format!("rank-{rank}.pem")).collect();
    // Nothing written unless every file is new.
    for name in &names {
        let path = Path::new(dir).join(name);
        if std::fs::symlink_metadata(&path).is_ok() {
            return Err(exists(&path).into());
        }
    }
    for (rank, name) in (0..ranks).zip(&names) {
        let path = Path::new(dir).join(name);
        let mut file = create_in(&folder, name, &path)?;
        file.write_all(credential.issue(rank)?.to_pem().as_bytes()).map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    println!("job {job:016x}: {ranks} credentials in {dir}");
    Ok(())
}

fn exists(path: &Path) -> String {
    format!("{} exists already: mpx-credential writes new files only (give it a new directory, `mktemp -d`)", path.display())
}

/// Creates `dir` with mode 0700 if it is missing, and opens it; an
/// existing `dir` must be a directory (not a symbolic link) of this
/// user's, closed to group and others. The checks look at the directory
/// opened, which the files are then created in, whatever happens to its
/// name meanwhile.
fn private_directory(dir: &Path) -> Result<File, String> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("creating {}: {e}", dir.display())),
    }
    let refuse = |why: &str| {
        format!(
            "{} {why}: the credential holds the ranks' private keys, so its directory must be a private one of this user's (mode 0700, as `mktemp -d` makes) or a new one",
            dir.display()
        )
    };
    let folder = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(dir)
        .map_err(|e| match std::fs::symlink_metadata(dir) {
            Ok(meta) if meta.file_type().is_symlink() => refuse("is a symbolic link"),
            Ok(meta) if !meta.is_dir() => refuse("is not a directory"),
            _ => format!("opening {}: {e}", dir.display()),
        })?;
    let meta = folder.metadata().map_err(|e| format!("reading {}: {e}", dir.display()))?;
    // SAFETY: geteuid takes no arguments, touches no memory of the
    // program's and cannot fail.
    let me = unsafe { libc::geteuid() };
    if !meta.is_dir() {
        return Err(refuse("is not a directory"));
    }
    if meta.uid() != me {
        return Err(refuse(&format!("belongs to user {}, not to this one ({me})", meta.uid())));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(refuse(&format!("has mode {:04o}, open to group or others", meta.mode() & 0o7777)));
    }
    Ok(folder)
}

/// Creates the file `name` in the open directory `folder` (`path`, for
/// messages), mode 0600: never an existing file, never through a
/// symbolic link.
fn create_in(folder: &File, name: &str, path: &Path) -> Result<File, String> {
    let c_name = CString::new(name).map_err(|e| format!("{}: {e}", path.display()))?;
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    let mode: libc::c_uint = 0o600;
    // SAFETY: `folder` is an open directory for the whole call, and
    // `c_name` a NUL-terminated string that outlives it; the mode, the
    // variadic argument O_CREAT takes, is passed as an unsigned int.
    let fd = unsafe { libc::openat(folder.as_raw_fd(), c_name.as_ptr(), flags, mode) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return Err(match e.kind() {
            std::io::ErrorKind::AlreadyExists => exists(path),
            _ if e.raw_os_error() == Some(libc::ELOOP) => exists(path),
            _ => format!("creating {}: {e}", path.display()),
        });
    }
    // SAFETY: `fd` was just opened by this call and nothing else owns it.
    Ok(unsafe { File::from_raw_fd(fd) })
}
