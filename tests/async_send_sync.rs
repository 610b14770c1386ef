//! Which public types are Send and Sync (and futures 'static where promised).

use mpx::*;

fn send<T: Send>() {}
fn sync<T: Sync>() {}
fn send_static<T: Send + 'static>(_: &T) {}

#[test]
fn thread_safety_of_public_types() {
    send::<Datatype>();
    sync::<Datatype>();
    send::<Comm>();
    sync::<Comm>();
    send::<Endpoint>();
    sync::<Endpoint>();
    send::<Error>();
    sync::<Error>();
    send::<Status>();
    send::<Request<'static>>();
    send::<RequestSet<Request<'static>>>();
    send::<OwnedRecv<Vec<u8>>>();
    send::<ValueRecv<u64>>();
    send::<WaitAll<Request<'static>>>();
    send::<Exchange<'static>>();
    send::<Incoming<u32>>();
    send::<mpx::coll::Collective<'static>>();
    send::<Message>();
    send::<Region<'static>>();
    send::<RegionMut<'static>>();
    send::<SendBuf<'static>>();
    send::<RecvBuf<'static>>();
    send::<PersistentSend<'static, u32>>();
    send::<PersistentRecv<'static, u32>>();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owned_and_blocking_futures_can_be_spawned() {
    launch(1, |comm| async move {
        let send = comm.isend(vec![1u8], 0, 0);
        send_static(&send);
        let recv = comm.recv_vec::<u8>(0, 0);
        send_static(&recv);
        let bytes = comm.irecv_bytes(0, 1);
        send_static(&bytes);
        tokio::spawn(send).await.unwrap()?;
        let (v, _) = tokio::spawn(recv).await.unwrap()?;
        assert_eq!(v, [1]);
        drop(bytes);
        Ok(())
    })
    .await
    .unwrap();
}
