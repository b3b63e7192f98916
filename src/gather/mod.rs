//! Every read that becomes facts, judging nothing: what doctor and import find (`setup`),
//! discovery's subnets and group (`discovery`), preflight's reads before a write (`preflight`),
//! and what `down` finds without a plan (`locate`); and the setup a plan leaves (`as_left`), put
//! together from those reads for the checks.

pub mod as_left;
pub mod discovery;
pub mod locate;
pub mod preflight;
pub mod setup;
pub mod shared;
