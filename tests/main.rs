//! The one integration-test binary (one binary keeps builds fast): the real karpctl against the
//! emulator started by `scripts/test`.
// Lints whose fixes would rewrite test assertions; the assertions stay as they were written.
#![allow(clippy::cloned_ref_to_slice_refs, clippy::type_complexity, clippy::needless_borrow)]

mod bad_input;
mod cli;
mod common;
mod discovery;
mod doctor;
mod faults;
mod fleet;
mod identity;
mod interruption;
mod lagproxy_selftest;
mod least_privilege;
mod ownership;
mod performance;
mod plans_and_outputs;
mod real_aws;
mod real_aws_eks;
mod real_aws_sqs;
mod strict;
