//! The engine reports posts, matches and completions through `tracing`.

use std::io::Write;
use std::sync::{Arc, Mutex};

use mpx::prelude::*;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn post_match_and_completion_are_traced() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(launch(2, |comm| async move {
            if comm.rank() == 0 {
                comm.send(&[1u8], 1, 4).await?;
                // A freed ready send that finds no receive: its error is traced.
                comm.irsend(&[2u8], 1, 5).free();
                // Messages stay in order: when rank 1 has seen tag 7 it has
                // answered the ready send (or refused it as it came), and
                // that answer reaches rank 0 before tag 6.
                comm.send(&[0u8], 1, 7).await?;
                comm.recv_vec::<u8>(1, 6).await?;
            } else {
                comm.recv_vec::<u8>(0, 4).await?;
                comm.recv_vec::<u8>(0, 7).await?;
                comm.send(&[0u8], 0, 6).await?;
            }
            Ok(())
        }))
        .unwrap();
    });
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    for event in ["send posted", "receive posted", "matched", "completed"] {
        assert!(log.contains(event), "no {event:?} event in:\n{log}");
    }
    // The freed ready send's failure: traced as it completes, or (where
    // it failed as it started, as between ranks whose messages meet) as
    // its request goes.
    assert!(
        log.contains("dropped or freed send failed") || log.contains("request dropped with its error untaken"),
        "the freed ready send's failure is not traced in:\n{log}"
    );
}
