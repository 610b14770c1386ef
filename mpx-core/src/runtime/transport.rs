//! The boundary between an endpoint and the network (or memory) that
//! carries its frames.

use crate::error::Result;
use crate::proto::wire::Frame;

/// Carries frames between ranks. Implemented by the in-memory loopback and
/// the QUIC transport in `mpx-net`.
///
/// `send` is called with the endpoint's lock held, which keeps frames to
/// each peer in the order the engine produced them: it must not block and
/// must not call back into the endpoint. Frames that arrive are given to
/// [`Endpoint::handle_frame`] by the transport's own driver, in the order
/// the peer sent them.
pub trait Transport: Send + Sync + 'static {
    /// Queues `frame` for rank `dest` (which may be this rank). An error
    /// means the peer is unreachable; the engine then fails it.
    fn send(&self, dest: u32, frame: Frame) -> Result<()>;

    /// Hands every frame that has already arrived to `deliver`, in order,
    /// without waiting. `test` calls use it to progress where no driver
    /// task gets to run (a polling loop on a current-thread runtime).
    /// Implementations must not interleave this with their driver's
    /// deliveries (hold the inbox while delivering).
    fn progress(&self, deliver: &mut dyn FnMut(u32, Frame)) {
        let _ = deliver;
    }
}

