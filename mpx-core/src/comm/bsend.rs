//! The buffer for buffered sends (`MPI_Buffer_attach`,
//! `MPI_Buffer_detach`).

use super::Comm;
use crate::error::{ErrorKind, Result};

/// Bytes of bookkeeping each buffered send takes from the attached buffer
/// besides its packed data (`MPI_BSEND_OVERHEAD`): size buffers as
/// `Σ (pack_size + BSEND_OVERHEAD)`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> mpx::Result<()> {
/// # mpx_net::loopback::launch(1, |comm| async move {
/// use mpx::{ErrorKind, MpiType, BSEND_OVERHEAD};
/// let data = [1.0f64; 10];
/// let packed = f64::datatype().pack_size(data.len() as u64)?;
/// comm.buffer_attach(vec![0; packed])?; // room for the data, not its bookkeeping
/// let err = comm.bsend(&data[..], 0, 0).await.unwrap_err();
/// assert!(matches!(err.kind(), ErrorKind::BufferExhausted { needed, .. } if *needed as usize == packed + BSEND_OVERHEAD));
/// comm.buffer_detach().await?;
/// comm.buffer_attach(vec![0; packed + BSEND_OVERHEAD])?;
/// comm.bsend(&data[..], 0, 0).await?; // to itself
/// assert_eq!(comm.recv_vec::<f64>(0, 0).await?.0, data);
/// comm.buffer_detach().await?;
/// # Ok(()) }).await?; Ok(()) }
/// ```
pub const BSEND_OVERHEAD: usize = 96;

impl Comm {
    // ----- buffered-send buffer ----------------------------------------------------------

    /// `MPI_Buffer_attach`: gives mpx `buffer.len()` bytes for buffered
    /// sends. Only one buffer can be attached per process.
    ///
    /// mpx accounts buffered messages against this capacity (each takes its
    /// packed size plus [`BSEND_OVERHEAD`]) and keeps their data in owned
    /// buffers of its own; the attached memory is returned untouched by
    /// [`buffer_detach`](Comm::buffer_detach).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(2, |comm| async move {
    /// use mpx::BSEND_OVERHEAD;
    /// let other = 1 - comm.rank();
    /// comm.buffer_attach(vec![0; 64 + BSEND_OVERHEAD])?;
    /// assert!(comm.buffer_attach(vec![0; 64]).is_err(), "one buffer at a time");
    /// comm.bsend(&[comm.rank() as u32; 4][..], other, 0).await?; // copied: returns at once
    /// let (got, _) = comm.recv_vec::<u32>(other, 0).await?;
    /// assert_eq!(got, [other as u32; 4]);
    /// assert_eq!(comm.buffer_detach().await?.len(), 64 + BSEND_OVERHEAD);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    pub fn buffer_attach(&self, buffer: Vec<u8>) -> Result<()> {
        let mut st = self.shared.lock();
        if st.engine.is_closed() {
            return Err(ErrorKind::Finalized.into());
        }
        if st.bsend.attached.is_some() {
            return Err(ErrorKind::BufferState("a buffer is already attached").into());
        }
        st.bsend.attached = Some(buffer);
        Ok(())
    }

    /// `MPI_Buffer_detach`: waits until every buffered message has been
    /// delivered to the transport, then returns the attached buffer.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> mpx::Result<()> {
    /// # mpx_net::loopback::launch(1, |comm| async move {
    /// comm.buffer_attach(vec![0; 4096])?;
    /// let buffer = comm.buffer_detach().await?;
    /// assert_eq!(buffer.len(), 4096);
    /// # Ok(()) }).await?; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel-safe: the buffer stays attached until the call completes.
    pub fn buffer_detach(&self) -> impl std::future::Future<Output = Result<Vec<u8>>> + Send + 'static {
        let shared = self.shared.clone();
        async move {
            // With no buffer attached nothing is in flight, so this returns at once.
            let mut st = std::future::poll_fn(|cx| shared.poll_bsend_drained(cx)).await;
            st.bsend.attached.take().ok_or_else(|| ErrorKind::BufferState("no buffer is attached").into())
        }
    }
}
