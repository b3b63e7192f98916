//! The one integration-test binary (one binary keeps builds fast): the real karpctl against the
//! emulator started by `scripts/test`.
// Lints whose fixes would rewrite test assertions; the assertions stay as they were written.
#![allow(clippy::cloned_ref_to_slice_refs, clippy::type_complexity, clippy::needless_borrow)]
// Tests print what they diagnose (the crate denies printing outside src/report/).
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod bad_input;
mod caller_policy;
mod cli;
mod common;
mod discovery;
mod doctor;
mod doctor_records;
mod eks_lag;
mod faults;
mod fleet;
mod iam_edge_cases;
mod identity;
mod identity_switch;
mod import;
mod interruption;
mod kms;
mod lagpolicy_selftest;
mod lagproxy_selftest;
mod least_privilege;
mod merged_rules;
mod ownership;
mod performance;
mod plans_and_outputs;
mod quotas;
mod readiness;
mod replicas;
mod running;
mod snapshots;
mod sqs_lag;
mod strict;
mod tags;
mod takeover_plan;
mod throttling;
