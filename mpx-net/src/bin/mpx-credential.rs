//! Makes a job's credential: `mpx-credential <ranks> <directory> [job id]`
//! writes `rank-<r>.pem` for every rank into the directory (created if
//! missing), each readable by its owner only. Hand each rank its own file
//! (see `mpx_net::quic::start_from_env`).

use std::io::Write;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = run(&args) {
        eprintln!("mpx-credential: {e}");
        eprintln!("usage: mpx-credential <ranks> <directory> [job id, hex]");
        std::process::exit(2);
    }
}

fn run(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let [ranks, dir, rest @ ..] = args else { return Err("two arguments needed".into()) };
    let ranks: u32 = ranks.parse()?;
    let job = match rest {
        [] => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_nanos() as u64,
        [id] => u64::from_str_radix(id, 16)?,
        _ => return Err("too many arguments".into()),
    };
    let credential = mpx_net::quic::JobCredential::generate(job)?;
    std::fs::create_dir_all(dir)?;
    for rank in 0..ranks {
        let path = std::path::Path::new(dir).join(format!("rank-{rank}.pem"));
        let mut file = std::fs::OpenOptions::new();
        file.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut file, 0o600);
        file.open(&path)?.write_all(credential.issue(rank)?.to_pem().as_bytes())?;
    }
    println!("job {job:016x}: {ranks} credentials in {dir}");
    Ok(())
}
