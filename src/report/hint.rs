//! The hint an error carries, or one karpctl gives for a class of AWS error.

use crate::aws;
use crate::error::UserError;

/// The hint for an error: its own, or one for a missing permission.
pub fn hint_of(err: &anyhow::Error) -> Option<String> {
    let user = err.chain().find_map(|e| e.downcast_ref::<UserError>());
    user.and_then(|u| u.hint.clone()).or_else(|| {
        aws::is_refused(err).then(|| {
            "the credentials lack a permission: the message above names the action; grant it, or run with credentials that have it".to_string()
        })
    })
}
