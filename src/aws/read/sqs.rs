//! SQS reads: queue URLs (memoised by name), all attributes and tags (memoised by URL).
//! A queue deleted between calls answers NonExistentQueue: callers decide what that means.

use super::memo::Memo;
use crate::aws::{Classify, aws_err};
use crate::model::Tags;
use anyhow::Result;
use aws_sdk_sqs::types::QueueAttributeName;
use std::collections::HashMap;

/// All attributes of a queue now, with a client of its own (for a wait that outlives the
/// run's borrow); None when SQS says there is no such queue.
pub async fn attributes_of(client: &aws_sdk_sqs::Client, url: &str) -> Result<Option<HashMap<String, String>>> {
    match client.get_queue_attributes().queue_url(url).attribute_names(QueueAttributeName::All).send().await {
        Ok(o) => Ok(Some(
            o.attributes().map(|m| m.iter().map(|(k, v)| (k.as_str().to_string(), v.clone())).collect()).unwrap_or_default(),
        )),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(aws_err("sqs:GetQueueAttributes", e)),
    }
}

pub struct Sqs {
    client: aws_sdk_sqs::Client,
    urls: Memo<Option<String>>,
    attrs: Memo<HashMap<String, String>>,
    tags: Memo<Tags>,
}

impl Sqs {
    pub fn new(client: aws_sdk_sqs::Client) -> Sqs {
        Sqs { client, urls: Memo::default(), attrs: Memo::default(), tags: Memo::default() }
    }

    /// GetQueueUrl now (of a queue of `owner`'s account when given); None: no such queue.
    pub async fn url_now(&self, name: &str, owner: Option<&str>) -> Result<Option<String>> {
        match self.client.get_queue_url().queue_name(name).set_queue_owner_aws_account_id(owner.map(str::to_string)).send().await
        {
            Ok(o) => Ok(o.queue_url().map(str::to_string)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(aws_err("sqs:GetQueueUrl", e)),
        }
    }

    /// The URL of this account's queue `name`, memoised (None: no such queue).
    pub async fn url(&self, name: &str) -> Result<Option<String>> {
        self.urls.get(name, || self.url_now(name, None)).await
    }

    pub fn remember_url(&self, name: &str, url: Option<String>) {
        self.urls.put(name, url);
    }

    pub fn forget_url(&self, name: &str) {
        self.urls.forget(name);
    }

    /// Every attribute and tag memoised (a queue was written: URLs may now name other queues).
    pub fn forget_queues(&self) {
        self.attrs.clear();
        self.tags.clear();
    }

    /// All attributes of a queue now; None when SQS says there is no such queue.
    pub async fn attributes_now(&self, url: &str) -> Result<Option<HashMap<String, String>>> {
        attributes_of(&self.client, url).await
    }

    /// All attributes of a queue, memoised by URL (a missing queue is an error here).
    pub async fn attributes(&self, url: &str) -> Result<HashMap<String, String>> {
        self.attrs
            .get(url, || async {
                let o = self
                    .client
                    .get_queue_attributes()
                    .queue_url(url)
                    .attribute_names(QueueAttributeName::All)
                    .send()
                    .await
                    .map_err(|e| aws_err("sqs:GetQueueAttributes", e))?;
                Ok(o.attributes()
                    .map(|m| m.iter().map(|(k, v)| (k.as_str().to_string(), v.clone())).collect())
                    .unwrap_or_default())
            })
            .await
    }

    /// A queue's tags, memoised by URL (a missing queue is an error here).
    pub async fn tags(&self, url: &str) -> Result<Tags> {
        self.tags
            .get(url, || async {
                let o = self.client.list_queue_tags().queue_url(url).send().await.map_err(|e| aws_err("sqs:ListQueueTags", e))?;
                Ok(o.tags().map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()).unwrap_or_default())
            })
            .await
    }
}
