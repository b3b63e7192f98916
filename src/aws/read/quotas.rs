//! Service Quotas `GetServiceQuota`: the current value of an EC2 vCPU quota, read only when the
//! launches inside Karpenter's fleets hit it (`running::launch`); never an error.

use super::memo::Memo;
use crate::running::launch::QuotaValue;

pub struct Quotas {
    client: aws_sdk_servicequotas::Client,
    memo: Memo<QuotaValue>,
}

impl Quotas {
    pub fn new(client: aws_sdk_servicequotas::Client) -> Quotas {
        Quotas { client, memo: Memo::default() }
    }

    /// The EC2 quota `code` (`L-1216C47A`) in the clients' Region: its value, or why it is not known.
    pub async fn ec2(&self, code: &str) -> QuotaValue {
        let read = self
            .memo
            .get(code, || async {
                let answer = self.client.get_service_quota().service_code("ec2").quota_code(code).send().await;
                Ok(match answer {
                    Ok(o) => match o.quota().and_then(|q| q.value()) {
                        Some(v) => QuotaValue::Value(v),
                        None => QuotaValue::Failed("Service Quotas answered no value".into()),
                    },
                    Err(e) => {
                        let e = crate::aws::aws_err("servicequotas:GetServiceQuota", e);
                        match crate::aws::refusal_in(&e) {
                            Some(a) => QuotaValue::Refused(format!("{}: {}", a.code, a.message)),
                            None => QuotaValue::Failed(format!("{e:#}")),
                        }
                    }
                })
            })
            .await;
        read.unwrap_or_else(|e| QuotaValue::Failed(format!("{e:#}")))
    }
}
