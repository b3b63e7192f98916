//! CloudWatch `GetMetricData`, one call for a cluster's interruption rules (FailedInvocations) and
//! its queue (ApproximateAgeOfOldestMessage), memoised; reads only: no message is ever received,
//! hidden or deleted. Judged by `running::metrics`.

use super::memo::Memo;
use crate::facts::records::Metrics;
use crate::running::metrics::Series;
use anyhow::Result;
use aws_sdk_cloudwatch::types::{Dimension, Metric, MetricDataQuery, MetricStat};
use std::time::SystemTime;

/// Seconds per datapoint: five minutes, twelve points an hour a metric.
pub const PERIOD_S: i32 = 300;
/// GetMetricData pages read at most (one is the norm: a few hundred points in all).
const MAX_PAGES: usize = 5;

/// The CloudWatch reader: the interruption metrics, memoised by the rules and queue asked.
pub struct CloudWatch {
    client: aws_sdk_cloudwatch::Client,
    interruption: Memo<Metrics>,
}

impl CloudWatch {
    pub fn new(client: aws_sdk_cloudwatch::Client) -> CloudWatch {
        CloudWatch { client, interruption: Memo::default() }
    }

    /// The metrics of `rules` and `queue` over the last `window` (one GetMetricData call),
    /// memoised for the run. An error is `aws_err`'s for `cloudwatch:GetMetricData` (the caller
    /// reports it as a warning, never a failure).
    pub async fn interruption(&self, rules: &[String], queue: Option<&str>, window: std::time::Duration) -> Result<Metrics> {
        let key = format!("{}|{}", rules.join(","), queue.unwrap_or_default());
        self.interruption
            .get(&key, || async {
                let end = std::time::SystemTime::now();
                read(&self.client, rules, queue, end - window, end).await
            })
            .await
    }
}

fn query(id: String, namespace: &str, metric: &str, dimension: (&str, &str), stat: &str) -> MetricDataQuery {
    let m = Metric::builder()
        .namespace(namespace)
        .metric_name(metric)
        .dimensions(Dimension::builder().name(dimension.0).value(dimension.1).build())
        .build();
    MetricDataQuery::builder()
        .id(id)
        .metric_stat(MetricStat::builder().metric(m).period(PERIOD_S).stat(stat).build())
        .return_data(true)
        .build()
}

/// The metrics of `rules` and `queue` between `start` and `end`, in one GetMetricData call
/// (more only when CloudWatch pages the datapoints).
pub async fn read(
    client: &aws_sdk_cloudwatch::Client,
    rules: &[String],
    queue: Option<&str>,
    start: SystemTime,
    end: SystemTime,
) -> Result<Metrics> {
    // Query ids must start with a lower-case letter: r0, r1, ... for the rules, q for the queue.
    let mut queries: Vec<MetricDataQuery> = rules
        .iter()
        .enumerate()
        .map(|(i, r)| query(format!("r{i}"), "AWS/Events", "FailedInvocations", ("RuleName", r), "Sum"))
        .collect();
    if let Some(q) = queue {
        queries.push(query("q".into(), "AWS/SQS", "ApproximateAgeOfOldestMessage", ("QueueName", q), "Maximum"));
    }
    let mut out = Metrics {
        failed_invocations: rules.iter().map(|r| (r.clone(), Series::default())).collect(),
        oldest_message: queue.map(|q| (q.to_string(), Series::default())),
    };
    if queries.is_empty() {
        return Ok(out);
    }
    let mut token: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let answer = client
            .get_metric_data()
            .set_metric_data_queries(Some(queries.clone()))
            .start_time(start.into())
            .end_time(end.into())
            .set_next_token(token.take())
            .send()
            .await;
        let page = answer.map_err(|e| crate::aws::aws_err("cloudwatch:GetMetricData", e))?;
        for r in page.metric_data_results() {
            let series = match r.id() {
                Some("q") => out.oldest_message.as_mut().map(|(_, s)| s),
                Some(id) => id
                    .strip_prefix('r')
                    .and_then(|n| n.parse::<usize>().ok())
                    .and_then(|i| out.failed_invocations.get_mut(i))
                    .map(|(_, s)| s),
                None => None,
            };
            if let Some(s) = series {
                s.timestamps.extend(r.timestamps().iter().map(|t| t.secs()));
                s.values.extend(r.values());
            }
        }
        token = page.next_token().filter(|t| !t.is_empty()).map(str::to_string);
        if token.is_none() {
            break;
        }
    }
    Ok(out)
}
