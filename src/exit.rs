//! Exit codes, like `terraform plan -detailed-exitcode` (README "Exit codes").

pub const EXIT_OK: i32 = 0;
pub const EXIT_ERROR: i32 = 1;
/// `diff` found changes (also `doctor` found problems).
pub const EXIT_CHANGES: i32 = 2;
pub const EXIT_INTERRUPTED: i32 = 130;
