//! The reads doctor and a plan both make, into the `Setup` the checks judge. Doctor's gather
//! (`setup`, import's too) and preflight (`up`, `diff`) call them alike: a fact both need is read
//! in one place, a refusal is said one way (`Setup::unreadable`: the checks that need it are
//! skipped), and the setup a plan leaves (`as_left`) starts from what preflight read here.

use crate::aws::read::Readers;
use crate::facts::finding::Code;
use crate::facts::setup::{Setup, Unreadable};
use anyhow::Result;

/// The answers, read at once (`read`), put into a setup afterwards (`into`): the callers read
/// them alongside their own reads.
pub struct Shared {
    /// The account's EC2 Spot service-linked role (a role at the Spot service's path: on AWS
    /// `AWSServiceRoleForEC2Spot`; an emulator may name it otherwise).
    spot_role: Result<bool>,
}

/// Read what both sides need, concurrently.
pub async fn read(aws: &Readers) -> Shared {
    let spot_role = aws.iam.role_at_path(crate::checks::cluster::SPOT_ROLE_PATH).await;
    Shared { spot_role }
}

impl Shared {
    /// Put the answers into `s`: a refused read leaves its fact unread (None) and is said in
    /// `s.unreadable`; any other failure is the caller's error.
    pub fn into(self, s: &mut Setup) -> Result<()> {
        s.spot_service_linked_role = refusable(s, Code::SpotRoleUnreadable, self.spot_role)?;
        Ok(())
    }
}

/// The current values of the vCPU quotas the launches inside Karpenter's fleets hit, read at
/// once (none read when no launch hit one): doctor's gather and `up`/`diff` alike.
pub async fn read_quotas(aws: &Readers, running: &mut crate::facts::observed::Running) {
    let codes = running.quota_codes();
    let values = futures::future::join_all(codes.iter().map(|code| aws.quotas.ec2(code))).await;
    running.quotas.extend(codes.into_iter().map(str::to_string).zip(values));
}

/// A read's answer; refused: None, and the refusal as the finding-to-be `code` (once per code);
/// every other error is returned.
pub fn refusable<T>(s: &mut Setup, code: Code, r: Result<T>) -> Result<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) => match refusal(&e, code) {
            Some(u) => {
                if !s.unreadable.iter().any(|x| x.code == code) {
                    s.unreadable.push(u);
                }
                Ok(None)
            }
            None => Err(e),
        },
    }
}

/// The refusal in `e`, if AWS refused the call, as the finding-to-be `code` names it (the call
/// and AWS's error code).
pub fn refusal(e: &anyhow::Error, code: Code) -> Option<Unreadable> {
    crate::aws::refusal_in(e).map(|a| Unreadable { code, operation: a.operation.clone(), aws_code: a.code.clone() })
}
