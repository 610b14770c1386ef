//! A request/reply service: rank 0 serves, ranks 1 to 3 are clients.
//!
//! ```text
//! cargo run --release --example service
//! ```
//!
//! Requests are a `#[derive(MpiType)]` struct sent as typed data; replies
//! are a serde type (a `String` and an enum with data). The server reads
//! requests from a `Stream` (`Comm::incoming`) with a deadline from
//! `tokio::time::timeout`, and replies to each request's sender. Every
//! client checks every reply; the program exits non-zero on any mismatch or
//! if the server waits past its deadline.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use mpx::prelude::*;
use mpx::MpiType;
use serde::{Deserialize, Serialize};

const SERVER: usize = 0;
const REQUEST: i32 = 1;
const REPLY: i32 = 2;
/// Requests each client sends before it says goodbye.
const REQUESTS_PER_CLIENT: u32 = 6;
/// How long the server waits for the next request.
const IDLE_DEADLINE: Duration = Duration::from_secs(5);

/// What a client asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, MpiType)]
#[repr(u32)]
enum Action {
    #[default]
    SquareRoot = 1,
    Square,
    /// The client is done; the server answers with how many it served.
    Goodbye,
}

/// A request: typed data, sent with `send`.
#[derive(Clone, Copy, Debug, Default, MpiType)]
#[repr(C)]
struct Query {
    id: u32,
    op: Action,
    operand: f64,
}

/// A reply: a serde value, sent as `Serde(&reply)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Reply {
    id: u32,
    text: String,
    outcome: Outcome,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
enum Outcome {
    Number(f64),
    Refused { reason: String },
    Farewell { served: u32 },
}

/// The server's answer to `request` from `client`, who has had `served`
/// requests answered before this one.
fn answer(request: &Query, client: usize, served: u32) -> Reply {
    let Query { id, op, operand: x } = *request;
    let (text, outcome) = match op {
        Action::SquareRoot if x < 0.0 => {
            (format!("sqrt({x}) for rank {client}: refused"), Outcome::Refused { reason: format!("{x} is negative") })
        }
        Action::SquareRoot => (format!("sqrt({x}) for rank {client}"), Outcome::Number(x.sqrt())),
        Action::Square => (format!("{x}² for rank {client}"), Outcome::Number(x * x)),
        Action::Goodbye => (format!("goodbye, rank {client}"), Outcome::Farewell { served }),
    };
    Reply { id, text, outcome }
}

/// What the server did.
#[derive(Debug, Default)]
struct Served {
    /// Requests answered, per client.
    per_client: BTreeMap<usize, u32>,
    /// Whether it gave up waiting for a request.
    deadline_passed: bool,
}

async fn serve(world: Comm) -> mpx::Result<Served> {
    let mut requests = world.incoming::<Query>(Any, REQUEST);
    let mut served = Served::default();
    let mut clients_left = world.size() - 1;
    while clients_left > 0 {
        let Ok(next) = tokio::time::timeout(IDLE_DEADLINE, requests.next()).await else {
            served.deadline_passed = true;
            break;
        };
        let Some(item) = next else { break };
        let (request, status) = item?;
        let client = status.source.expect("a request comes from a rank");
        let count = served.per_client.entry(client).or_default();
        world.send(Serde(&answer(&request, client, *count)), client, REPLY).await?;
        if request.op == Action::Goodbye {
            clients_left -= 1;
        } else {
            *count += 1;
        }
    }
    Ok(served)
}

/// A client's requests, and the mismatches it found in the replies.
async fn ask(world: Comm) -> mpx::Result<Vec<String>> {
    let me = world.rank();
    let mut mismatches = Vec::new();
    let mut check = |request: &Query, got: Reply, served: u32| {
        let expected = answer(request, me, served);
        if got != expected {
            mismatches.push(format!("rank {me}, request {}: expected {expected:?}, got {got:?}", request.id));
        }
    };
    for id in 0..REQUESTS_PER_CLIENT {
        let op = if id % 2 == 0 { Action::SquareRoot } else { Action::Square };
        // Rank 2's third request asks for a square root it will be refused.
        let sign = if me == 2 && id == 2 { -1.0 } else { 1.0 };
        let request = Query { id, op, operand: sign * f64::from(me as u32 * 10 + id) };
        world.send(&request, SERVER, REQUEST).await?;
        let (reply, _) = world.recv::<Serde<Reply>>(SERVER, REPLY).await?;
        check(&request, reply, id);
    }
    let goodbye = Query { id: REQUESTS_PER_CLIENT, op: Action::Goodbye, operand: 0.0 };
    world.send(&goodbye, SERVER, REQUEST).await?;
    let (reply, _) = world.recv::<Serde<Reply>>(SERVER, REPLY).await?;
    check(&goodbye, reply, REQUESTS_PER_CLIENT);
    Ok(mismatches)
}

#[derive(Debug)]
enum Role {
    /// What the server served, and the world's size.
    Server(Served, usize),
    /// A client's rank and its mismatches.
    Client(usize, Vec<String>),
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> mpx::Result<()> {
    let roles = mpx::launch(4, |world| async move {
        if world.rank() == SERVER {
            let size = world.size();
            serve(world).await.map(|served| Role::Server(served, size))
        } else {
            let rank = world.rank();
            ask(world).await.map(|m| Role::Client(rank, m))
        }
    })
    .await?;

    let mut failed = false;
    // One role per rank of this process: all four when alone, one under a
    // launcher.
    for role in &roles {
        match role {
            Role::Server(served, size) => {
                println!("server: answered {:?} requests per client", served.per_client);
                let all = (1..*size).all(|c| served.per_client.get(&c) == Some(&REQUESTS_PER_CLIENT));
                if served.deadline_passed || !all {
                    eprintln!("server: deadline passed or requests missing: {served:?}");
                    failed = true;
                }
            }
            Role::Client(rank, mismatches) => {
                println!("client {rank}: {} replies checked, {} mismatches", REQUESTS_PER_CLIENT + 1, mismatches.len());
                for m in mismatches {
                    eprintln!("{m}");
                }
                failed |= !mismatches.is_empty();
            }
        }
    }
    if failed {
        std::process::exit(1);
    }
    Ok(())
}
