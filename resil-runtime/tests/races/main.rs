//! Routes and hedges, in one test binary: one operation over several targets, and slow
//! attempts raced by more. On tokio's paused clock.

#[path = "../common/mod.rs"]
mod common;

mod cancelled;
mod cancelled_panics;
mod hedge;
mod hedge_edges;
mod hedge_targets;
mod route;
mod route_edges;
