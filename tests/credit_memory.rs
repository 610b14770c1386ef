//! The eager credit a receiver grants bounds the memory its unexpected
//! messages take, bookkeeping included: a queued message, empty or not,
//! takes no more of the receiver's heap than it costs in credit beyond its
//! data ([`EAGER_OVERHEAD`]). Counted with an allocator that tallies the
//! bytes live, in a test binary of its own (the allocator is global).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use mpx::proto::engine::EAGER_OVERHEAD;
use mpx::LaunchOptions;

/// The system allocator, counting the bytes allocated and not yet freed.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded to `System` with the same arguments; the
// counter only observes sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc` is `System::alloc`'s.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
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
