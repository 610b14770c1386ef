//! What `mpxrun`'s PMI server reads from its ranks (over a socket pair, or
//! over TCP from other hosts once a rank has shown its token): any
//! bytes, from any of three ranks, cut at any points, in either wire form.
//! Asserts that nothing panics, that every answer goes to one of the
//! job's ranks and is no longer than one message, and that what the
//! decoder holds stays bounded by its input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mpx_net::bootstrap::pmi::{Decoder, KvSpace, Version, MAX_LINE};

fuzz_target!(|data: &[u8]| {
    let mut kvs = KvSpace::new("job", 3);
    let mut rest = data;
    // Each step: a rank byte, a length byte, then that many bytes.
    while let [rank, len, tail @ ..] = rest {
        let rank = usize::from(*rank % 3);
        let len = usize::from(*len).min(tail.len());
        let (bytes, tail) = tail.split_at(len);
        rest = tail;
        match kvs.receive(rank, bytes) {
            Ok(replies) => {
                for (to, bytes) in replies {
                    assert!(to < 3);
                    assert!(bytes.len() <= MAX_LINE + 6, "an answer longer than any message");
                }
            }
            // A broken rank fails the job: the launcher stops serving.
            Err(_) => return,
        }
    }
    // The decoder alone, on the whole input, in both forms.
    for version in [Version::V1, Version::V2] {
        let mut d = Decoder::default();
        d.feed(data);
        while let Ok(Some(_)) = d.next(version) {}
        assert!(d.pending() <= data.len());
    }
});
