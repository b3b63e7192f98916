//! KMS reads: a key by id, ARN or alias (memoised by what it was asked by), its key policy
//! and its tags.

use super::memo::Memo;
use crate::aws::{Classify, aws_err};
use crate::model::Tags;
use anyhow::Result;

/// What DescribeKey says.
#[derive(Clone, Debug)]
pub struct LiveKey {
    pub arn: String,
    pub key_id: String,
    pub state: String,
    pub description: String,
    pub manager: String,
}

pub struct Kms {
    client: aws_sdk_kms::Client,
    keys: Memo<Option<LiveKey>>,
}

impl Kms {
    pub fn new(client: aws_sdk_kms::Client) -> Kms {
        Kms { client, keys: Memo::default() }
    }

    /// DescribeKey now (by id, ARN, alias or alias ARN); None when there is no such key or alias.
    pub async fn key_now(&self, key: &str) -> Result<Option<LiveKey>> {
        match self.client.describe_key().key_id(key).send().await {
            Ok(o) => Ok(o.key_metadata().map(|m| LiveKey {
                arn: m.arn().unwrap_or_default().to_string(),
                key_id: m.key_id().to_string(),
                state: m.key_state().map(|s| s.as_str().to_string()).unwrap_or_default(),
                description: m.description().unwrap_or_default().to_string(),
                manager: m.key_manager().map(|s| s.as_str().to_string()).unwrap_or_default(),
            })),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(aws_err("kms:DescribeKey", e)),
        }
    }

    /// `key_now`, memoised for the observation.
    pub async fn key(&self, key: &str) -> Result<Option<LiveKey>> {
        self.keys.get(key, || self.key_now(key)).await
    }

    pub fn forget_key(&self, key: &str) {
        self.keys.forget(key);
    }

    /// The key's `default` policy (the only one a key has) as KMS returns it (GetKeyPolicy).
    pub async fn policy(&self, key_id: &str) -> Result<Option<String>> {
        let o = self
            .client
            .get_key_policy()
            .key_id(key_id)
            .policy_name("default")
            .send()
            .await
            .map_err(|e| aws_err("kms:GetKeyPolicy", e))?;
        Ok(o.policy().map(str::to_string))
    }

    /// The key's tags (ListResourceTags).
    pub async fn tags(&self, key_id: &str) -> Result<Tags> {
        let o = self.client.list_resource_tags().key_id(key_id).send().await.map_err(|e| aws_err("kms:ListResourceTags", e))?;
        Ok(o.tags().iter().map(|t| (t.tag_key().to_string(), t.tag_value().to_string())).collect())
    }
}
