//! The one integration-test binary (one binary keeps builds fast): the real karpctl against the
//! emulator started by `scripts/test`.

mod bad_input;
mod cli;
mod common;
mod interruption;
mod ownership;
