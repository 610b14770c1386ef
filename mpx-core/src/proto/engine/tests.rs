//! Tests of the engine, driven by hand.
