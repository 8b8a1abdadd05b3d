//! `route` and `hedge` through the attribute, in one test binary. On the paused clock.

#[path = "../support/mod.rs"]
mod support;

mod attr_hedge;
mod attr_hedge_shapes;
mod attr_route;
mod attr_route_edges;
