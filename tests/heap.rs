//! What mpx's memory is bounded by, counted with an allocator that
//! tallies the bytes live (and the most live at once), in a test binary of
//! its own (the allocator is global; its tests take turns):
//!
//! - The eager credit a receiver grants bounds the memory its unexpected
//!   messages take, bookkeeping included: a queued message, empty or not,
//!   takes no more of the receiver's heap than it costs in credit beyond
//!   its data ([`EAGER_OVERHEAD`]).
//! - A broadcast's root packs its data once, whatever its children.
//! - External32 data a peer describes with a run per element converts in
//!   little more memory than the converted data.
//! - Large allreduces that fail on a rank's refusal leave no round open.
//! - A chain of `resized` and `dup` types keeps one compiled program.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use mpx::proto::engine::EAGER_OVERHEAD;
use mpx::LaunchOptions;

/// The system allocator, counting the bytes allocated and not yet freed.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
/// The most bytes live at once since it was last set.
static PEAK: AtomicIsize = AtomicIsize::new(0);

/// Held by each test: the counts are the whole process's.
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Counts `bytes` more (or fewer) live.
fn count(bytes: isize) {
    let live = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to `System` with the same arguments; the
// counter only observes sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        // SAFETY: the caller's contract for `alloc` is `System::alloc`'s.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as isize - layout.size() as isize);
        // SAFETY: the caller's contract for `realloc` is `System::realloc`'s.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Bytes of the receiver's heap per message while `messages` messages of
/// `len` bytes from rank 1, each with a tag of its own or all with one,
/// wait unexpected at rank 0 (both ranks on one thread, so nothing else
/// allocates meanwhile). `local_messages`: handed over without frames,
/// or as eager frames.
fn heap_per_queued_message(messages: usize, len: usize, tags_of_their_own: bool, local_messages: bool) -> f64 {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut options = LaunchOptions { local_messages, ..LaunchOptions::ranks(2) };
    options.engine.eager_credit = 1 << 30;
    let out = runtime.block_on(mpx::launch_with(options, move |comm| async move {
        const GO: i32 = 1 << 20;
        const LAST: i32 = GO + 1;
        let data = vec![7u8; len];
        if comm.rank() == 1 {
            comm.recv::<u8>(0, GO).await?;
            for i in 0..messages {
                let tag = if tags_of_their_own { i as i32 } else { 0 };
                comm.send(&data[..], 0, tag).await?;
            }
            comm.send(&[1u8], 0, LAST).await?;
            return Ok(0.0);
        }
        // Warm up what the first messages allocate once (the pair's lanes).
        comm.send(&[0u8], 1, GO).await?;
        let before = LIVE.load(Ordering::Relaxed);
        // Non-overtaking: the last message arrives after all the others.
        comm.recv::<u8>(1, LAST).await?;
        let after = LIVE.load(Ordering::Relaxed);
        // Every message is still there to receive.
        for i in 0..messages {
            let tag = if tags_of_their_own { i as i32 } else { 0 };
            assert_eq!(comm.recv_vec::<u8>(1, tag).await?.0, data);
        }
        Ok((after - before) as f64 / messages as f64)
    }));
    out.unwrap()[0]
}

#[test]
fn queued_messages_take_no_more_heap_than_their_credit() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    // Counts on both sides of the indexes' growth steps.
    for (messages, len) in [(300, 0), (1_000, 8), (20_000, 0), (29_000, 200)] {
        for (own_tags, local) in [(false, false), (true, false), (false, true), (true, true)] {
            let per_message = heap_per_queued_message(messages, len, own_tags, local);
            assert!(
                per_message <= (len as u64 + EAGER_OVERHEAD) as f64,
                "{messages} {len}-byte messages, tags of their own {own_tags}, without frames {local}: {per_message:.0} bytes each, above their credit of {}",
                len as u64 + EAGER_OVERHEAD
            );
            // The count sees the queue: a message takes something.
            assert!(per_message >= len as f64, "{per_message:.0} bytes for a {len}-byte message");
        }
    }
}

/// A broadcast over messages (collectives not meeting in memory) takes
/// one copy of its data beyond the ranks' own buffers, however many
/// children its root sends to (4 of 9 ranks here, 2 of 3): the root packs
/// it once, and each child's message shares that copy. (Messages meet
/// their receivers without frames, so no transport holds more.)
#[test]
fn a_broadcast_root_packs_its_data_once() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    const LEN: usize = 8 << 20;
    for ranks in [3, 9] {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let options = LaunchOptions { local_collectives: false, ..LaunchOptions::ranks(ranks) };
        let started = std::sync::Arc::new(tokio::sync::Barrier::new(ranks));
        let base = std::sync::Arc::new(AtomicIsize::new(0));
        let at_start = base.clone();
        runtime
            .block_on(mpx::launch_with(options, move |comm| {
                let (started, at_start) = (started.clone(), at_start.clone());
                async move {
                    let mut data = vec![comm.rank() as u8 + 1; LEN];
                    comm.barrier().await?;
                    // Every rank's buffer is allocated: counted from here.
                    if started.wait().await.is_leader() {
                        at_start.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
                        PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
                    }
                    comm.bcast(&mut data[..], 0).await?;
                    assert!(data.iter().all(|&b| b == 1), "rank {} got the root's data", comm.rank());
                    Ok(())
                }
            }))
            .unwrap();
        // From there on the ranks only freed what they had.
        let extra = PEAK.load(Ordering::Relaxed) - base.load(Ordering::Relaxed);
        assert!(extra < (LEN + LEN / 2) as isize, "{ranks} ranks: {:.2} copies of the data at once", extra as f64 / LEN as f64);
    }
}

/// A peer's description of external32 data (a [`TypeSequence`] of one run
/// per element, the longest a message's length allows) converts to the
/// native form taking little more than the converted data: no datatype is
/// built for its runs.
///
/// [`TypeSequence`]: mpx::pack::TypeSequence
#[test]
fn a_description_of_many_runs_converts_in_little_more_than_its_data() {
    use mpx::pack::TypeSequence;
    use mpx::{Basic, Datatype};
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let pairs = 200_000usize;
    // int, short, int, short, ...: runs that never merge.
    let item = Datatype::contiguous(pairs as i64, &Datatype::structure(&[1, 1], &[0, 4], &[Datatype::int(), Datatype::basic(Basic::Short)]).unwrap()).unwrap();
    let ext: Vec<u8> = (0..pairs * 6).map(|i| (i % 251) as u8).collect();
    let sequence = TypeSequence::decode(&TypeSequence::of(&item, 1).unwrap().encode()).unwrap();
    let native_len = pairs * 6;
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let native = sequence.external32_to_native(&ext).unwrap();
    let extra = PEAK.load(Ordering::Relaxed) - before;
    assert_eq!(native.len(), native_len);
    // The first pair, as this machine lays it out: external32 is big-endian.
    assert_eq!(native[..4], i32::from_be_bytes([0, 1, 2, 3]).to_ne_bytes());
    assert_eq!(native[4..6], i16::from_be_bytes([4, 5]).to_ne_bytes());
    assert!(extra as usize <= native_len + (64 << 10), "{extra} bytes at most to convert {native_len}");
}

/// A large allreduce (two rounds where ranks meet) that one rank refuses
/// (its receive buffer is too short) fails on every rank and leaves no
/// round open: a loop of them takes no more heap the longer it runs.
#[test]
fn failing_large_allreduces_leave_nothing_behind() {
    use mpx::coll::SUM;
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let grown = runtime.block_on(mpx::launch(2, |comm| async move {
        let send = vec![1.0f64; 16384];
        let mut recv = vec![0.0; if comm.rank() == 0 { 16384 } else { 1 }];
        let mut before = 0;
        for call in 0..400 {
            if call == 100 {
                comm.barrier().await?;
                before = LIVE.load(Ordering::Relaxed);
            }
            assert!(comm.allreduce(&send[..], &mut recv[..], SUM).await.is_err(), "call {call}");
        }
        comm.barrier().await?;
        Ok(LIVE.load(Ordering::Relaxed) - before)
    }))
    .unwrap();
    assert!(grown[0] < 64 << 10, "300 failed calls left {} bytes behind", grown[0]);
}

/// A chain of `resized` and `dup` types over a large indexed type keeps
/// one compiled program, however long the chain: each level is the type
/// it names, as far as packing goes.
#[test]
fn a_chain_of_renamed_types_keeps_one_program() {
    use mpx::{Datatype, Region};
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let entries = 20_000i64;
    // Irregular displacements: a program of a run per entry.
    let displacements: Vec<i64> = (0..entries).map(|i| i * 3 + i % 7).collect();
    let base = Datatype::indexed_block(1, &displacements, &Datatype::double()).unwrap();
    let memory = vec![0u8; base.extent() as usize];
    let packed_len = base.pack_size(1).unwrap();
    let compiled = |t: &Datatype| {
        let before = LIVE.load(Ordering::Relaxed);
        let packed = t.pack_to_vec(Region::new(&memory), 1).unwrap();
        assert_eq!(packed.len(), packed_len);
        drop(packed);
        LIVE.load(Ordering::Relaxed) - before
    };
    let one = compiled(&base);
    let mut chain = base.clone();
    for level in 0..1_000 {
        chain = match level % 2 {
            0 => Datatype::resized(0, base.extent(), &chain).unwrap(),
            _ => chain.dup().unwrap(),
        };
    }
    let all = compiled(&chain);
    assert!(one > 100_000, "a run per entry: {one} bytes");
    assert!(all < 1_000 * 64 + 4096, "1,000 levels took {all} bytes beside the base's {one}");
}
