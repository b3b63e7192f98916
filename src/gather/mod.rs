//! Every read that becomes facts, judging nothing: what doctor and import find (`setup`),
//! discovery's subnets and group (`discovery`), preflight's reads before a write (`preflight`),
//! and what `down` finds without a plan (`locate`).

pub mod discovery;
pub mod locate;
pub mod preflight;
pub mod setup;
