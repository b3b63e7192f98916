//! One check catalog for `up`, `diff` and `doctor`: each check a pure function with a typed
//! code (`finding`), registered once with its title and the reads it needs (`catalog`); the
//! checks live by area (identity, network, interruption, cluster, kms, running, records) over `facts`.

pub mod catalog;
pub mod cluster;
pub mod identity;
pub mod interruption;
pub mod kms;
pub mod network;
pub mod records;
pub mod running;
