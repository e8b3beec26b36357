//! sheafdb: an embedded, transactional, single-file key-value database.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod btree;
pub mod error;
pub mod format;
pub mod storage;
pub mod types;

pub use error::{Error, Result};
