//! Helpers of the library's tests: the shared kit (servers, HTTP client), and the
//! hybrid-mode simulation.

pub use tollgate_testkit::*;

pub mod hybrid_sim;
