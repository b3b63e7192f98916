//! EventBridge reads: rules on the default bus (all, or by name prefix memoised with its
//! failure), one rule, its targets and tags, and the rules targeting a queue.

use super::memo::Memo;
use crate::aws::{AwsError, Classify, aws_err};
use anyhow::Result;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A rule as ListRules or DescribeRule gives it.
#[derive(Clone, Debug, Default)]
pub struct Rule {
    pub name: String,
    pub arn: Option<String>,
    pub pattern: Option<String>,
    pub state: Option<String>,
    pub description: Option<String>,
}

/// A rule's target.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Target {
    pub id: String,
    pub arn: String,
}

/// Rules by name, as one listing gave them.
pub type Listing = Arc<BTreeMap<String, Rule>>;

pub struct Events {
    client: aws_sdk_eventbridge::Client,
    listings: Memo<std::result::Result<Listing, Arc<anyhow::Error>>>,
    bus_count: Memo<usize>,
}

impl Events {
    pub fn new(client: aws_sdk_eventbridge::Client) -> Events {
        Events { client, listings: Memo::default(), bus_count: Memo::default() }
    }

    /// Every rule on the default bus (whose name starts with `prefix` when given): ListRules,
    /// paginated, in AWS's order.
    pub async fn rules(&self, prefix: Option<&str>) -> Result<Vec<Rule>> {
        let mut out = Vec::new();
        let mut token = None;
        loop {
            let o = self
                .client
                .list_rules()
                .set_name_prefix(prefix.map(str::to_string))
                .set_next_token(token)
                .send()
                .await
                .map_err(|e| aws_err("events:ListRules", e))?;
            out.extend(o.rules().iter().map(|r| Rule {
                name: r.name().unwrap_or_default().to_string(),
                arn: r.arn().map(str::to_string),
                pattern: r.event_pattern().map(str::to_string),
                state: r.state().map(|s| s.as_str().to_string()),
                description: r.description().map(str::to_string),
            }));
            token = o.next_token().map(str::to_string);
            if token.is_none() {
                return Ok(out);
            }
        }
    }

    /// How many rules the default bus holds (one paginated ListRules), memoised for the run, so
    /// that `prepare` can start the count early and the quota check takes it from the memo.
    pub async fn bus_rule_count(&self) -> Result<usize> {
        self.bus_count.get("default", || async { Ok(self.rules(None).await?.len()) }).await
    }

    /// The named rules whose name starts with `prefix` (one listing instead of a DescribeRule
    /// each), memoised for the observation, its failure too (every caller gets it; none asks again).
    pub async fn rules_with_prefix(&self, prefix: &str) -> Result<Listing> {
        let memo = self
            .listings
            .get(prefix, || async {
                Ok(self
                    .rules(Some(prefix))
                    .await
                    .map(|rs| Arc::new(rs.into_iter().filter(|r| !r.name.is_empty()).map(|r| (r.name.clone(), r)).collect()))
                    .map_err(Arc::new))
            })
            .await?;
        memo.map_err(|e| match e.chain().find_map(|c| c.downcast_ref::<AwsError>()) {
            Some(a) => anyhow::Error::new(a.clone()),
            None => anyhow::anyhow!("{e:#}"),
        })
    }

    pub fn forget_rules_with_prefix(&self, prefix: &str) {
        self.listings.forget(prefix);
    }

    /// DescribeRule now (None: no such rule).
    pub async fn rule(&self, name: &str) -> Result<Option<Rule>> {
        match self.client.describe_rule().name(name).send().await {
            Ok(d) => Ok(Some(Rule {
                name: d.name().unwrap_or(name).to_string(),
                arn: d.arn().map(str::to_string),
                pattern: d.event_pattern().map(str::to_string),
                state: d.state().map(|s| s.as_str().to_string()),
                description: d.description().map(str::to_string),
            })),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(aws_err("events:DescribeRule", e)),
        }
    }

    /// A rule's targets (ListTargetsByRule, paginated), in AWS's order; None: no such rule.
    pub async fn targets(&self, rule: &str) -> Result<Option<Vec<Target>>> {
        let mut out = Vec::new();
        let mut token = None;
        loop {
            match self.client.list_targets_by_rule().rule(rule).set_next_token(token).send().await {
                Ok(o) => {
                    out.extend(o.targets().iter().map(|t| Target { id: t.id().to_string(), arn: t.arn().to_string() }));
                    token = o.next_token().map(str::to_string);
                    if token.is_none() {
                        return Ok(Some(out));
                    }
                }
                Err(e) if e.is_not_found() => return Ok(None),
                Err(e) => return Err(aws_err("events:ListTargetsByRule", e)),
            }
        }
    }

    /// A rule's tags in AWS's order (ListTagsForResource); None: no such rule.
    pub async fn tags(&self, arn: &str) -> Result<Option<Vec<(String, String)>>> {
        match self.client.list_tags_for_resource().resource_arn(arn).send().await {
            Ok(o) => Ok(Some(o.tags().iter().map(|t| (t.key().to_string(), t.value().to_string())).collect())),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(aws_err("events:ListTagsForResource", e)),
        }
    }

    /// The names of the rules that target `arn` (ListRuleNamesByTarget, paginated; none when
    /// EventBridge says not found).
    pub async fn rules_targeting(&self, arn: &str) -> Result<Vec<String>> {
        let mut out = Vec::new();
        let mut token = None;
        loop {
            let o = match self.client.list_rule_names_by_target().target_arn(arn).set_next_token(token).send().await {
                Ok(o) => o,
                Err(e) if e.is_not_found() => return Ok(out),
                Err(e) => return Err(aws_err("events:ListRuleNamesByTarget", e)),
            };
            out.extend(o.rule_names().iter().cloned());
            token = o.next_token().map(str::to_string);
            if token.is_none() {
                return Ok(out);
            }
        }
    }
}
