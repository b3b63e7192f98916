//! The one integration-test binary (one binary keeps builds fast): the real karpctl against the
//! emulator started by `scripts/test`.

mod bad_input;
mod cli;
mod common;
mod discovery;
mod faults;
mod identity;
mod interruption;
mod ownership;
mod performance;
mod plans_and_outputs;
mod strict;
