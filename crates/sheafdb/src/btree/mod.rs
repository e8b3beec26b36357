//! Copy-on-write B+tree over byte-ordered keys.
//!
//! (Being written: see the module docs that replace this stub.)

pub mod store;
