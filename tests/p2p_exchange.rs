//! Many sends and receives over one buffer (`Comm::exchange`,
//! `ExchangeBuf::split`) and `sendrecv`: overlapping typemaps rejected
//! before anything starts, touching ones accepted, null neighbours, halo
//! exchanges checked cell by cell, dropped exchanges, typed buffers and
//! large typemaps, on every transport.

use mpx::prelude::*;
use mpx::{ExchangeBuf, MpiType, Transfer};

#[macro_use]
mod support;

/// `subsizes` cells at `starts` of a C-order array of doubles of `sizes`.
fn sub(sizes: &[i64], subsizes: &[i64], starts: &[i64]) -> mpx::Result<Datatype> {
    Datatype::subarray(sizes, subsizes, starts, Order::C, &Datatype::double())
}

/// `n` doubles starting at double `first`.
fn doubles_at(first: i64, n: i64) -> mpx::Result<Datatype> {
    Datatype::hindexed(&[n], &[8 * first], &Datatype::double())
}

each_transport! {
#[derive(Clone, Copy, Debug, Default, PartialEq, MpiType)]
#[repr(C)]
struct Cell {
    heat: f64,
    material: u8, // then 7 bytes of padding
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_transfers_are_rejected_before_anything_starts() {
    launch(2, |comm| async move {
        let cols = |first: i64| sub(&[4, 4], &[4, 2], &[0, first]);
        if comm.rank() == 0 {
            let mut grid = [0f64; 16];
            // Two receives sharing column 1 (bytes 8..16 of row 0 first).
            let list = [Transfer::send(1, &cols(2)?, 1, 5), Transfer::recv(1, &cols(0)?, 1, 0), Transfer::recv(1, &cols(1)?, 1, 1)];
            assert_eq!(comm.exchange(&mut grid, &list).await, Err(ErrorKind::Overlap { first: 1, second: 2, byte: 8 }.into()));
            // A receive into a column a send reads, in either order.
            let list = [Transfer::recv(1, &cols(0)?, 1, 0), Transfer::send(1, &cols(1)?, 1, 5)];
            assert_eq!(comm.exchange(&mut grid, &list).await, Err(ErrorKind::Overlap { first: 0, second: 1, byte: 8 }.into()));
            let list = [Transfer::send(1, &cols(1)?, 1, 5), Transfer::recv(1, &cols(0)?, 1, 0)];
            assert_eq!(comm.exchange(&mut grid, &list).await, Err(ErrorKind::Overlap { first: 0, second: 1, byte: 8 }.into()));
            // A receive whose typemap overlaps itself.
            let twice = Datatype::hindexed(&[2, 2], &[0, 8], &Datatype::double())?;
            let list = [Transfer::send(1, &cols(2)?, 1, 5), Transfer::recv(1, &twice, 1, 0)];
            assert_eq!(comm.exchange(&mut grid, &list).await, Err(ErrorKind::Overlap { first: 1, second: 1, byte: 8 }.into()));
            // A transfer outside the buffer, an invalid rank, an invalid tag.
            let list = [Transfer::send(1, &cols(2)?, 1, 5), Transfer::recv(2, &cols(0)?, 1, 0)];
            assert!(matches!(comm.exchange(&mut grid, &list).await, Err(ref e) if matches!(e.kind(), ErrorKind::OutOfBounds { .. })));
            let list = [Transfer::send(1, &cols(2)?, 1, 5), Transfer::recv(1, &cols(0)?, 7, 0)];
            assert!(matches!(comm.exchange(&mut grid, &list).await, Err(ref e) if matches!(e.kind(), ErrorKind::InvalidRank { rank: 7, .. })));
            let list = [Transfer::send(1, &cols(2)?, 1, 5), Transfer::send(1, &cols(0)?, 1, -3)];
            assert_eq!(comm.exchange(&mut grid, &list).await, Err(ErrorKind::InvalidTag(-3).into()));
            assert_eq!(grid, [0.0; 16]);
            // None of those sends started (rank 1 checks), and rank 1's
            // message was taken by no receive.
            comm.send(&[0u8], 1, 6).await?;
            let (got, _) = comm.recv_vec::<f64>(1, 0).await?;
            assert_eq!(got, [1.0; 8]);
        } else {
            comm.send(&[1.0f64; 8], 0, 0).await?;
            comm.recv_vec::<u8>(0, 6).await?;
            assert!(comm.iprobe(0, 5)?.is_none(), "a rejected exchange started a send");
        }
        Ok(())
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn touching_transfers_are_accepted_and_sends_may_overlap() {
    let out = launch(2, |comm| async move {
        let other = 1 - comm.rank();
        let mut buf: Vec<f64> = (0..8).map(|i| (10 * comm.rank() + i) as f64).collect();
        // Receives [0, 2) and [2, 4) touch each other, the send [4, 6)
        // touches the second, and the send [5, 7) overlaps the first send.
        let list = [
            Transfer::recv(1, &doubles_at(0, 2)?, other, 0),
            Transfer::recv(1, &doubles_at(2, 2)?, other, 1),
            Transfer::send(1, &doubles_at(4, 2)?, other, 0),
            Transfer::send(1, &doubles_at(5, 2)?, other, 1),
        ];
        let statuses = comm.exchange(&mut buf, &list).await?;
        assert_eq!(statuses.len(), 4);
        assert_eq!((statuses[0].source, statuses[0].tag, statuses[0].bytes), (Some(other), Some(0), 16));
        assert_eq!((statuses[1].source, statuses[1].tag, statuses[1].bytes), (Some(other), Some(1), 16));
        assert_eq!(statuses[2], Status::empty());
        Ok(buf)
    })
    .await
    .unwrap();
    assert_eq!(out[0], [14.0, 15.0, 15.0, 16.0, 4.0, 5.0, 6.0, 7.0]);
    assert_eq!(out[1], [4.0, 5.0, 5.0, 6.0, 14.0, 15.0, 16.0, 17.0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn null_neighbours_move_no_data() {
    // A chain of three ranks, not periodic: [left ghost, a, b, right ghost].
    let out = launch(3, |comm| async move {
        let (rank, size) = (comm.rank(), comm.size());
        let left = rank.checked_sub(1);
        let right = (rank + 1 < size).then_some(rank + 1);
        let mut cells = [-1.0, (10 * rank + 1) as f64, (10 * rank + 2) as f64, -1.0];
        let list = [
            Transfer::recv(1, &doubles_at(0, 1)?, Peer::from(left), 1),
            Transfer::send(1, &doubles_at(1, 1)?, Peer::from(left), 0),
            Transfer::recv(1, &doubles_at(3, 1)?, Peer::from(right), 0),
            Transfer::send(1, &doubles_at(2, 1)?, Peer::from(right), 1),
        ];
        let statuses = comm.exchange(&mut cells, &list).await?;
        assert_eq!(statuses[0].source, left);
        assert_eq!(statuses[2].source, right);
        if left.is_none() {
            assert_eq!(statuses[0], Status::empty());
        }
        Ok(cells)
    })
    .await
    .unwrap();
    assert_eq!(out[0], [-1.0, 1.0, 2.0, 11.0]);
    assert_eq!(out[1], [2.0, 11.0, 12.0, 21.0]);
    assert_eq!(out[2], [12.0, 21.0, 22.0, -1.0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2d_halo_exchange_fills_every_ghost_face_and_nothing_else() {
    // A 2x2 process grid, not periodic; each block 3 rows by 5 columns.
    const ROWS: usize = 3;
    const COLS: usize = 5;
    let (h, w) = (ROWS + 2, COLS + 2);
    let global = |i: usize, j: usize| (1000 * i + j) as f64;
    let out = launch(4, move |comm| async move {
        let (pr, pc) = (comm.rank() / 2, comm.rank() % 2);
        let at = |r: usize, c: usize| r * 2 + c;
        let north = (pr == 1).then(|| at(0, pc));
        let south = (pr == 0).then(|| at(1, pc));
        let west = (pc == 1).then(|| at(pr, 0));
        let east = (pc == 0).then(|| at(pr, 1));
        let s = [h as i64, w as i64];
        let (r, c) = (ROWS as i64, COLS as i64);
        let sides = [
            (north, sub(&s, &[1, c], &[1, 1])?, sub(&s, &[1, c], &[0, 1])?, 0, 1),
            (south, sub(&s, &[1, c], &[r, 1])?, sub(&s, &[1, c], &[r + 1, 1])?, 1, 0),
            (west, sub(&s, &[r, 1], &[1, 1])?, sub(&s, &[r, 1], &[1, 0])?, 2, 3),
            (east, sub(&s, &[r, 1], &[1, c])?, sub(&s, &[r, 1], &[1, c + 1])?, 3, 2),
        ];
        let mut list = vec![];
        for (neighbour, face, ghost, towards, from) in sides {
            list.push(Transfer::recv(1, &ghost, Peer::from(neighbour), from));
            list.push(Transfer::send(1, &face, Peer::from(neighbour), towards));
        }
        let mut block = vec![-1.0; h * w];
        for i in 1..=ROWS {
            for j in 1..=COLS {
                block[i * w + j] = global(pr * ROWS + i - 1, pc * COLS + j - 1);
            }
        }
        comm.exchange(&mut block, &list).await?;
        Ok(((pr, pc), block))
    })
    .await
    .unwrap();
    for ((pr, pc), block) in out {
        for i in 0..h {
            for j in 0..w {
                let ghost_row = i == 0 || i == h - 1;
                let ghost_col = j == 0 || j == w - 1;
                // The global cell this local cell mirrors, if there is one.
                let gi = (pr * ROWS + i).checked_sub(1).filter(|&g| g < 2 * ROWS);
                let gj = (pc * COLS + j).checked_sub(1).filter(|&g| g < 2 * COLS);
                let expected = match (gi, gj) {
                    (Some(gi), Some(gj)) if !(ghost_row && ghost_col) => global(gi, gj),
                    _ => -1.0,
                };
                assert_eq!(block[i * w + j], expected, "rank ({pr}, {pc}), cell ({i}, {j})");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_exchange_writes_nothing_and_loses_no_message() {
    launch(2, |comm| async move {
        if comm.rank() == 0 {
            // Two receives from rank 1 into [0, 4); a send of [4, 6) to it.
            let mut buf = [0.0, 0.0, 0.0, 0.0, 7.0, 8.0];
            let list = [
                Transfer::recv(1, &doubles_at(0, 2)?, 1, 0),
                Transfer::recv(1, &doubles_at(2, 2)?, 1, 1),
                Transfer::send(1, &doubles_at(4, 2)?, 1, 2),
            ];
            let mut exchange = comm.exchange(&mut buf, &list);
            let mut signal = [0u8];
            // Rank 1 signals once the first receive has matched its message;
            // the second message is not sent yet, so the exchange waits.
            tokio::select! {
                done = &mut exchange => panic!("the exchange completed without its second message: {done:?}"),
                signalled = comm.recv_into(&mut signal, 1, 9) => { signalled?; }
            }
            // Polled with the first message matched, then dropped.
            assert!(futures::poll!(&mut exchange).is_pending());
            drop(exchange);
            assert_eq!(buf[..4], [0.0; 4], "a dropped exchange wrote into its buffer");
            // The matched message was given back, and is received again.
            let (first, status) = comm.recv_vec::<f64>(1, 0).await?;
            assert_eq!((first, status.tag), (vec![1.0, 2.0], Some(0)));
            comm.send(&[0u8], 1, 10).await?;
            let (second, _) = comm.recv_vec::<f64>(1, 1).await?;
            assert_eq!(second, [3.0, 4.0]);
        } else {
            // A synchronous send completes once a receive has matched it:
            // the exchange's first receive.
            comm.ssend(&[1.0f64, 2.0], 0, 0).await?;
            comm.send(&[0u8], 0, 9).await?;
            // The dropped exchange's send still arrives.
            let (sent, _) = comm.recv_vec::<f64>(0, 2).await?;
            assert_eq!(sent, [7.0, 8.0]);
            comm.recv_vec::<u8>(0, 10).await?;
            comm.send(&[3.0f64, 4.0], 0, 1).await?;
        }
        Ok(())
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_buffers_keep_out_of_padding_and_invalid_values() {
    launch(1, |comm| async move {
        let mut cells: Vec<Cell> = (0..4).map(|i| Cell { heat: i as f64, material: i as u8 }).collect();
        // The heat of cells 0 and 1 to the heat of cells 2 and 3, by datatypes
        // that skip each cell's material and padding.
        let heats = Datatype::vector(2, 1, 2, &Datatype::double())?;
        let later = Datatype::hindexed(&[1], &[32], &heats)?;
        comm.exchange(&mut cells, &[Transfer::send(1, &heats, 0, 0), Transfer::recv(1, &later, 0, 0)]).await?;
        assert_eq!(cells.iter().map(|c| (c.heat, c.material)).collect::<Vec<_>>(), [(0.0, 0), (1.0, 1), (0.0, 2), (1.0, 3)]);
        // Four doubles from the start cover padding (bytes 9..16).
        let four = Datatype::contiguous(4, &Datatype::double())?;
        let err = comm.exchange(&mut cells, &[Transfer::send(1, &four, 0, 1)]).await.unwrap_err();
        assert!(matches!(err.kind(), ErrorKind::InvalidDatatype(m) if m.contains("byte 9")), "{err}");
        // Receiving into bools through a datatype could store invalid values;
        // sending them is fine.
        let mut flags = [true, false, true, true];
        let two = Datatype::contiguous(2, &bool::datatype())?;
        let err = comm.exchange(&mut flags, &[Transfer::recv(1, &two, 0, 2)]).await.unwrap_err();
        assert!(matches!(err.kind(), ErrorKind::InvalidDatatype(_)), "{err}");
        comm.exchange(&mut flags, &[Transfer::send(1, &two, 0, 3)]).await?;
        let mut got = [false; 2];
        comm.recv_into(&mut got, 0, 3).await?;
        assert_eq!(got, [true, false]);
        Ok(())
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_typemaps_are_checked_by_runs() {
    launch(2, |comm| async move {
        let n = 1000usize;
        let other = 1 - comm.rank();
        let s = [n as i64, n as i64];
        let half = n as i64 / 2;
        // The left half of every row goes, the other rank's lands in the right half.
        let left = sub(&s, &[n as i64, half], &[0, 0])?;
        let right = sub(&s, &[n as i64, half], &[0, half])?;
        let mut grid: Vec<f64> = (0..n * n).map(|k| (comm.rank() * n * n + k) as f64).collect();
        comm.exchange(&mut grid, &[Transfer::send(1, &left, other, 0), Transfer::recv(1, &right, other, 0)]).await?;
        for i in 0..n {
            for j in 0..n {
                let expected = if j < n / 2 { comm.rank() * n * n + i * n + j } else { other * n * n + i * n + j - n / 2 };
                assert_eq!(grid[i * n + j], expected as f64, "cell ({i}, {j})");
            }
        }
        // One column more overlaps in every row: found in row 0, column 499.
        let wider = sub(&s, &[n as i64, half + 1], &[0, half - 1])?;
        let list = [Transfer::send(1, &left, other, 1), Transfer::recv(1, &wider, other, 1)];
        assert_eq!(comm.exchange(&mut grid, &list).await, Err(ErrorKind::Overlap { first: 0, second: 1, byte: 499 * 8 }.into()));
        // Bands of whole rows that touch are disjoint; one row more is not.
        // (That the check walks byte runs, one per band here, never the
        // 500,000 elements, is tested on the runs themselves in
        // mpx-core's pack::disjoint.)
        let top = sub(&s, &[half, n as i64], &[0, 0])?;
        let bottom = sub(&s, &[half, n as i64], &[half, 0])?;
        let (recvs, _) = ExchangeBuf::from(&mut grid).split(&[(1, &top), (1, &bottom)], &[])?;
        assert_eq!(recvs.len(), 2);
        let taller = sub(&s, &[half + 1, n as i64], &[half - 1, 0])?;
        let clash = ExchangeBuf::from(&mut grid).split(&[(1, &top), (1, &taller)], &[]).map(drop);
        assert_eq!(clash, Err(ErrorKind::Overlap { first: 0, second: 1, byte: (half as usize - 1) * n * 8 }.into()));
        Ok(())
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_buffers_serve_any_operation() {
    let out = launch(2, |comm| async move {
        let other = 1 - comm.rank();
        let mut buf: Vec<f64> = (0..6).map(|i| (10 * comm.rank() + i) as f64).collect();
        // Receives into [0, 2) and [2, 4), a send of [4, 6) used twice.
        let (a, b, c) = (doubles_at(0, 2)?, doubles_at(2, 2)?, doubles_at(4, 2)?);
        let (mut recvs, sends) = ExchangeBuf::from(&mut buf).split(&[(1, &a), (1, &b)], &[(1, &c)])?;
        let (second, first) = (recvs.remove(1), recvs.remove(0));
        let (r0, r1, s0, s1) = futures::join!(
            comm.recv_into(first, other, 0),
            comm.recv_into(second, other, 1),
            comm.issend(sends[0].clone(), other, 0),
            comm.isend(sends[0].clone(), other, 1),
        );
        r0?;
        r1?;
        s0?;
        s1?;
        // Positions count the receives first, then the sends.
        assert_eq!(
            ExchangeBuf::from(&mut buf).split(&[(1, &a)], &[(1, &c), (1, &doubles_at(1, 1)?)]).map(drop),
            Err(ErrorKind::Overlap { first: 0, second: 2, byte: 8 }.into())
        );
        Ok(buf)
    })
    .await
    .unwrap();
    assert_eq!(out[0], [14.0, 15.0, 14.0, 15.0, 4.0, 5.0]);
    assert_eq!(out[1], [4.0, 5.0, 4.0, 5.0, 14.0, 15.0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sendrecv_with_datatypes() {
    let out = launch(2, |comm| async move {
        let other = 1 - comm.rank();
        // Column 1 of a 3x3 matrix goes; the other's arrives as row 2.
        let matrix: Vec<f64> = (0..9).map(|i| (10 * comm.rank() + i) as f64).collect();
        let column = Datatype::vector(3, 1, 3, &Datatype::double())?;
        let mut target = [0f64; 9];
        let row = doubles_at(6, 3)?;
        let send = SendBuf::new(Region::of(&matrix[1..]), 1, &column);
        let status = comm.sendrecv(send.clone(), other, 0, RecvBuf::new(RegionMut::of(&mut target), 1, &row), other, 0).await?;
        assert_eq!((status.source, status.bytes), (Some(other), 24));
        // A receive buffer that cannot hold its items fails before the send starts.
        let mut small = [0f64; 2];
        let err = comm.sendrecv(send, other, 1, RecvBuf::new(RegionMut::of(&mut small), 3, &Datatype::double()), other, 1).await;
        assert!(matches!(err, Err(ref e) if matches!(e.kind(), ErrorKind::OutOfBounds { .. })), "{err:?}");
        comm.barrier().await?;
        assert!(comm.iprobe(other, 1)?.is_none(), "the failed sendrecv sent its data");
        Ok(target)
    })
    .await
    .unwrap();
    assert_eq!(out[0][6..], [11.0, 14.0, 17.0]);
    assert_eq!(out[1][6..], [1.0, 4.0, 7.0]);
    assert_eq!(out[0][..6], [0.0; 6]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_exchange_completes_at_once() {
    launch(1, |comm| async move {
        let mut nothing = [0u8; 0];
        assert_eq!(comm.exchange(&mut nothing, &[]).await?, Vec::<Status>::new());
        Ok(())
    })
    .await
    .unwrap();
}
}

/// A value whose datatype lists as many bytes as the value has, but twice
/// over the same four: the other four are padding.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct Overlapping(u32);

// SAFETY: both entries are the `u32` at offset 0 (initialised, any bit
// pattern valid); lb 0 and extent 8, the size of the type.
unsafe impl MpiType for Overlapping {
    fn datatype() -> Datatype {
        let twice = Datatype::hindexed(&[1, 1], &[0, 0], &u32::datatype()).unwrap();
        Datatype::resized(0, 8, &twice).unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_buffers_find_padding_behind_overlapping_entries() {
    launch(1, |comm| async move {
        assert_eq!(Overlapping::datatype().size(), 8, "as many bytes as the value");
        let mut values = [Overlapping(1), Overlapping(2)];
        let all = Datatype::contiguous(16, &Datatype::byte())?;
        let err = comm.exchange(&mut values, &[Transfer::send(1, &all, 0, 0)]).await.unwrap_err();
        assert!(matches!(err.kind(), ErrorKind::InvalidDatatype(m) if m.contains("byte 4")), "{err}");
        // The value's own bytes go.
        comm.exchange(&mut values, &[Transfer::send(1, &u32::datatype(), 0, 1)]).await?;
        assert_eq!(comm.recv::<u32>(0, 1).await?.0, 1);
        Ok(())
    })
    .await
    .unwrap();
}
