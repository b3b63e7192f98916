//! One check catalog for `up`, `diff` and `doctor`: each check a pure function with a typed
//! code (`facts::finding`), its row (title, the reads it needs, the commands that run it) kept
//! beside it in its area file (identity, cluster, interruption, network, kms, running, records)
//! over `facts`; `catalog` puts the areas together and runs them (`row`: what a row is).

pub mod catalog;
pub mod cluster;
pub mod identity;
pub mod interruption;
pub mod kms;
pub mod network;
pub mod records;
pub mod row;
pub mod running;

/// The one runner: every check a command runs over a setup (`catalog::run`), the folder's front
/// door for the commands.
pub use catalog::run;
