//! The locks the flight registry is built on. `flight_model` compiles `flight.rs` a second
//! time against shuttle's versions of these, so the registry is model-checked as written.
pub(crate) use std::sync::{Arc, Mutex, MutexGuard};
