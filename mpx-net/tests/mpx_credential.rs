//! `mpx-credential` writes a job's keys only where no other user can read
//! or redirect them: a new directory of mode 0700 or a private one of the
//! user's, new files of mode 0600, never through a symbolic link.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use mpx_net::quic::RankCredential;

/// A private scratch directory of the test's own, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let path = std::env::temp_dir().join(format!("mpx-credential-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::DirBuilder::new().mode(0o700).create(&path).expect("a scratch directory");
        Scratch(path)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn mpx_credential(ranks: u32, dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mpx-credential")).arg(ranks.to_string()).arg(dir).output().expect("running mpx-credential")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).expect("the path's metadata").mode() & 0o7777
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut all: Vec<PathBuf> = std::fs::read_dir(dir).expect("listing").map(|e| e.expect("an entry").path()).collect();
    all.sort();
    all
}

#[test]
fn a_new_directory_gets_mode_0700_and_each_rank_file_0600() {
    let scratch = Scratch::new("fresh");
    let dir = scratch.0.join("job");
    let out = mpx_credential(3, &dir);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(mode(&dir), 0o700, "the directory");
    let files: Vec<PathBuf> = (0..3).map(|r| dir.join(format!("rank-{r}.pem"))).collect();
    assert_eq!(entries(&dir), files);
    for (rank, file) in (0..3u32).zip(&files) {
        assert_eq!(mode(file), 0o600, "{}", file.display());
        let pem = std::fs::read_to_string(file).expect("reading a rank's file");
        assert_eq!(RankCredential::from_pem(&pem).expect("a credential").rank(), rank);
    }
    // Run again into the same directory: the files are there, and stay as
    // they were.
    let before: Vec<String> = files.iter().map(|f| std::fs::read_to_string(f).expect("reading")).collect();
    let out = mpx_credential(3, &dir);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("exists already"), "{}", text(&out));
    let after: Vec<String> = files.iter().map(|f| std::fs::read_to_string(f).expect("reading")).collect();
    assert_eq!(before, after, "no file was overwritten");
}

#[test]
fn an_existing_directory_open_to_others_or_a_link_is_refused() {
    let scratch = Scratch::new("open");
    let open = scratch.0.join("open");
    std::fs::create_dir(&open).expect("a directory");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).expect("mode 0777");
    let out = mpx_credential(2, &open);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("0777") && text(&out).contains("0700"), "{}", text(&out));
    assert!(entries(&open).is_empty(), "nothing written: {:?}", entries(&open));
    // Group-readable is open too.
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o750)).expect("mode 0750");
    let out = mpx_credential(2, &open);
    assert!(!out.status.success() && entries(&open).is_empty(), "{}", text(&out));

    // A symbolic link to a private directory: refused, the directory
    // untouched.
    let private = scratch.0.join("private");
    std::fs::DirBuilder::new().mode(0o700).create(&private).expect("a directory");
    let link = scratch.0.join("link");
    std::os::unix::fs::symlink(&private, &link).expect("a symbolic link");
    let out = mpx_credential(2, &link);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("symbolic link"), "{}", text(&out));
    assert!(entries(&private).is_empty(), "nothing written: {:?}", entries(&private));

    // A private directory of another user's (where this test may give one
    // away: as root).
    let theirs = scratch.0.join("theirs");
    std::fs::DirBuilder::new().mode(0o700).create(&theirs).expect("a directory");
    if std::os::unix::fs::chown(&theirs, Some(65534), None).is_ok() {
        let out = mpx_credential(2, &theirs);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(text(&out).contains("belongs to user 65534"), "{}", text(&out));
        assert!(entries(&theirs).is_empty(), "nothing written: {:?}", entries(&theirs));
    }
}

#[test]
fn a_symbolic_link_in_place_of_a_rank_file_is_refused_and_its_target_untouched() {
    let scratch = Scratch::new("link");
    let dir = scratch.0.join("job");
    std::fs::DirBuilder::new().mode(0o700).create(&dir).expect("a directory");
    let decoy = scratch.0.join("decoy");
    std::fs::write(&decoy, "the decoy's own text\n").expect("the decoy");
    std::fs::set_permissions(&decoy, std::fs::Permissions::from_mode(0o644)).expect("mode 0644");
    std::os::unix::fs::symlink(&decoy, dir.join("rank-1.pem")).expect("a symbolic link");
    let out = mpx_credential(2, &dir);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("rank-1.pem exists already"), "{}", text(&out));
    assert_eq!(std::fs::read_to_string(&decoy).expect("the decoy"), "the decoy's own text\n");
    assert_eq!(mode(&decoy), 0o644);
    // Nothing else written either.
    assert_eq!(entries(&dir), [dir.join("rank-1.pem")]);
}

/// A number of ranks no job can have (none, or more than mpx takes) is
/// refused before anything is made, instead of an empty directory or an
/// allocation the system cannot give.
#[test]
fn a_number_of_ranks_no_job_has_is_refused() {
    let scratch = Scratch::new("ranks");
    for ranks in [0, mpx_net::bootstrap::Start::MAX_RANKS + 1, 4_000_000_000] {
        let dir = scratch.0.join(format!("job-{ranks}"));
        let out = mpx_credential(ranks, &dir);
        assert_eq!(out.status.code(), Some(2), "{ranks}: {}", text(&out));
        assert!(text(&out).contains("a job has 1 to"), "{}", text(&out));
        assert!(!dir.exists(), "{ranks}: nothing made");
    }
}
