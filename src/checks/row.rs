//! A row of the check catalog and the group it sits in: each area file (`identity.rs`,
//! `network.rs`, ...) keeps its rows beside the functions that run them and their tests, as
//! `CHECKS`; `catalog.rs` puts the areas together in checklist order and runs them.

use crate::facts::finding::{Checker, Code, Command, Read};
use crate::facts::setup::Setup;

/// One check: its code, what it looks at (doctor's passed line), the reads it needs (skipped
/// when one is refused) and the commands that run it.
pub struct Check {
    pub code: Code,
    pub title: &'static str,
    pub reads: &'static [Read],
    pub commands: &'static [Command],
}

/// One function of an area and the checks it runs (one function may give several codes).
pub struct Group {
    pub run: fn(&Setup, &mut Checker),
    pub checks: &'static [Check],
}

pub const fn check(code: Code, title: &'static str, reads: &'static [Read], commands: &'static [Command]) -> Check {
    Check { code, title, reads, commands }
}

/// Doctor only: what `up` and `diff` make or judge elsewhere (the roles, queue and rules are
/// the plan's own steps), or what only doctor reads (CloudWatch, the policy simulator).
pub const DOCTOR: &[Command] = &[Command::Doctor];
/// Every command: what the plan cannot settle by writing (the network, the account, what runs).
pub const EVERY: &[Command] = &[Command::Doctor, Command::Up, Command::Diff];
/// `up` and `diff` only.
pub const PLAN: &[Command] = &[Command::Up, Command::Diff];
