//! Collective operations over communicators. Today: the barrier.

mod barrier;
