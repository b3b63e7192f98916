//! CloudTrail `LookupEvents` for the running Karpenter: each event source paged in turn up to a
//! bound, paced at two lookups a second per account; never an error (a refused or throttled
//! lookup comes back as a [`LookupProblem`] for a warning). docs/running-karpenter.md.

use aws_sdk_cloudtrail::types::{LookupAttribute, LookupAttributeKey};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Events per page (CloudTrail's most).
pub const PAGE_SIZE: i32 = 50;

/// Pages read per event source by default: 500 events an hour of each source is more than enough
/// to see a controller's version (it calls EC2 every few seconds) and its refusals, and at two
/// lookups a second it costs at most five seconds, overlapped with the other reads.
pub const DEFAULT_MAX_PAGES: usize = 10;

/// What `up` and `diff` read: EC2 (every few seconds from a running controller: its version,
/// and launches refused) and IAM (instance profiles, PassRole). Two lookups fit in CloudTrail's
/// two a second, so the read costs no wait beyond its round trips.
pub const READINESS_SOURCES: [&str; 2] = ["ec2.amazonaws.com", "iam.amazonaws.com"];
/// Pages per source `up` and `diff` read at most (a converged `diff` must stay fast): 100 events
/// of each source, the newest.
pub const READINESS_MAX_PAGES: usize = 2;
/// What doctor reads: the event sources the controller's and the nodes' calls are recorded
/// under: EC2 (launches, describes, and the nodes' own calls), IAM (instance profiles,
/// PassRole), SSM (AMI parameters), pricing, EKS, SQS (control-plane calls only: ReceiveMessage
/// is a data event) and ECR (the nodes pull images with the node role).
pub const DOCTOR_SOURCES: [&str; 7] = [
    "ec2.amazonaws.com",
    "iam.amazonaws.com",
    "ssm.amazonaws.com",
    "pricing.amazonaws.com",
    "eks.amazonaws.com",
    "sqs.amazonaws.com",
    "ecr.amazonaws.com",
];

/// The CloudTrail reader: one lookup per (window, sources, bound) a run shares.
pub struct Trails {
    client: aws_sdk_cloudtrail::Client,
    memo: super::memo::Memo<Arc<Trail>>,
}

impl Trails {
    pub fn new(client: aws_sdk_cloudtrail::Client) -> Trails {
        Trails { client, memo: Default::default() }
    }

    /// The events of `sources` in the last `window` (up to now), at most `max_pages` pages a
    /// source; never an error (see [`Trail::problem`]).
    pub async fn recent(&self, window: Duration, sources: &[&str], max_pages: usize) -> Arc<Trail> {
        let key = format!("{}:{}:{max_pages}", window.as_secs(), sources.join(","));
        let read = self
            .memo
            .get(&key, || async {
                let end = SystemTime::now();
                let start = end.checked_sub(window).unwrap_or(SystemTime::UNIX_EPOCH);
                let mut t = lookup(&self.client, start, end, sources, max_pages).await;
                t.window = window;
                Ok(Arc::new(t))
            })
            .await;
        read.unwrap_or_default()
    }
}

/// One event as LookupEvents returns it: the record (`CloudTrailEvent`, a JSON text) and the
/// event's resource names. Parse with `running::record::parse_record`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawEvent {
    pub cloudtrail_event: String,
    pub resources: Vec<String>,
}

/// Why the lookups stopped short.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LookupProblem {
    /// `cloudtrail:LookupEvents` is not allowed to the caller.
    Refused { message: String },
    /// CloudTrail kept throttling after the SDK's retries.
    Throttled,
    /// Any other failure (network, an error AWS sent), as its message.
    Failed { message: String },
}

impl LookupProblem {
    /// The warning to show: what could not be read and the permission that reads it.
    pub fn warning(&self) -> String {
        match self {
            LookupProblem::Refused { message } => format!(
                "CloudTrail records could not be read: cloudtrail:LookupEvents was refused ({message}); allow cloudtrail:LookupEvents to the caller to check the running Karpenter"
            ),
            LookupProblem::Throttled => "CloudTrail records could not all be read: cloudtrail:LookupEvents stayed throttled (two lookups a second per account and Region, shared with every other caller); run again later".to_string(),
            LookupProblem::Failed { message } => {
                format!("CloudTrail records could not be read: cloudtrail:LookupEvents failed: {message}")
            }
        }
    }
}

/// What the lookups read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trail {
    /// Every event read, newest first per source, sources in the order asked.
    pub events: Vec<RawEvent>,
    /// LookupEvents calls that answered.
    pub pages: usize,
    /// A source had more pages than `max_pages`: older records in the window were not read.
    pub truncated: bool,
    /// The first problem met; the events read before it are kept.
    pub problem: Option<LookupProblem>,
    /// How far back it read (set by [`Trails::recent`]).
    pub window: Duration,
}

/// The events of `sources` (LookupAttribute EventSource) between `start` and `end`, at most
/// `max_pages` pages per source.
pub async fn lookup(
    client: &aws_sdk_cloudtrail::Client,
    start: SystemTime,
    end: SystemTime,
    sources: &[&str],
    max_pages: usize,
) -> Trail {
    let mut trail = Trail::default();
    for source in sources {
        let attribute =
            LookupAttribute::builder().attribute_key(LookupAttributeKey::EventSource).attribute_value(*source).build();
        let attribute = match attribute {
            Ok(a) => a,
            Err(e) => {
                trail.problem = Some(LookupProblem::Failed { message: e.to_string() });
                return trail;
            }
        };
        let mut token: Option<String> = None;
        for page in 0..max_pages {
            let answer = client
                .lookup_events()
                .lookup_attributes(attribute.clone())
                .start_time(start.into())
                .end_time(end.into())
                .max_results(PAGE_SIZE)
                .set_next_token(token.take())
                .send()
                .await;
            let out = match answer {
                Ok(o) => o,
                Err(e) => {
                    trail.problem = Some(problem_of(crate::aws::aws_err("cloudtrail:LookupEvents", e)));
                    return trail;
                }
            };
            trail.pages += 1;
            trail.events.extend(out.events().iter().filter_map(|e| {
                Some(RawEvent {
                    cloudtrail_event: e.cloud_trail_event()?.to_string(),
                    resources: e.resources().iter().filter_map(|r| r.resource_name().map(str::to_string)).collect(),
                })
            }));
            token = out.next_token().filter(|t| !t.is_empty()).map(str::to_string);
            if token.is_none() {
                break;
            }
            if page + 1 == max_pages {
                trail.truncated = true;
            }
        }
    }
    trail
}

/// The problem an error of LookupEvents is, by the one classifier.
fn problem_of(e: anyhow::Error) -> LookupProblem {
    match crate::aws::aws_error_in(&e) {
        Some(a) if a.kind == crate::aws::ErrorKind::AccessDenied => {
            LookupProblem::Refused { message: format!("{}: {}", a.code, a.message) }
        }
        Some(a) if a.kind == crate::aws::ErrorKind::Throttled => LookupProblem::Throttled,
        _ => LookupProblem::Failed { message: format!("{e:#}") },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_smithy_runtime_api::client::http::{HttpConnector, HttpConnectorFuture, SharedHttpConnector};
    use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    /// A CloudTrail endpoint answering from a list of (status, body), one per call, and keeping
    /// each request's JSON body.
    #[derive(Debug, Clone, Default)]
    struct Canned {
        answers: Arc<Mutex<Vec<(u16, String)>>>,
        asked: Arc<Mutex<Vec<serde_json::Value>>>,
    }

    impl HttpConnector for Canned {
        fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
            let body = request.body().bytes().map(|b| serde_json::from_slice(b).unwrap_or_default()).unwrap_or_default();
            self.asked.lock().unwrap().push(body);
            let (status, body) = self.answers.lock().unwrap().remove(0);
            crate::aws::throttle::json_answer(status, body)
        }
    }

    fn client(c: &Canned) -> aws_sdk_cloudtrail::Client {
        let c = c.clone();
        let conf = aws_sdk_cloudtrail::Config::builder()
            .behavior_version(aws_config::BehaviorVersion::v2026_01_12())
            .region(aws_sdk_cloudtrail::config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_cloudtrail::config::Credentials::new("AKID", "SECRET", None, None, "test"))
            .endpoint_url("http://127.0.0.1:9")
            .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(1))
            .http_client(aws_smithy_runtime_api::client::http::http_client_fn(move |_, _| SharedHttpConnector::new(c.clone())))
            .build();
        aws_sdk_cloudtrail::Client::from_conf(conf)
    }

    fn page(n: usize, token: Option<&str>) -> (u16, String) {
        let events: Vec<_> = (0..n)
            .map(|i| serde_json::json!({"EventId": format!("e{i}"), "CloudTrailEvent": format!("{{\"n\":{i}}}"), "Resources": [{"ResourceName": "r"}]}))
            .collect();
        let mut doc = serde_json::json!({"Events": events});
        if let Some(t) = token {
            doc["NextToken"] = t.into();
        }
        (200, doc.to_string())
    }

    fn window() -> (SystemTime, SystemTime) {
        let end = SystemTime::UNIX_EPOCH + Duration::from_secs(1_785_578_400);
        (end - Duration::from_secs(3600), end)
    }

    #[tokio::test]
    async fn pages_each_source_with_next_token_up_to_the_bound() {
        let c = Canned::default();
        *c.answers.lock().unwrap() = vec![page(50, Some("t1")), page(3, None), page(50, Some("u1")), page(50, Some("u2"))];
        let (start, end) = window();
        let t = lookup(&client(&c), start, end, &["ec2.amazonaws.com", "iam.amazonaws.com"], 2).await;
        assert_eq!((t.events.len(), t.pages, t.truncated, t.problem.clone()), (153, 4, true, None));
        assert_eq!(t.events[0], RawEvent { cloudtrail_event: "{\"n\":0}".into(), resources: vec!["r".into()] });
        let asked = c.asked.lock().unwrap();
        assert_eq!(
            asked[0]["LookupAttributes"],
            serde_json::json!([{"AttributeKey": "EventSource", "AttributeValue": "ec2.amazonaws.com"}])
        );
        assert_eq!((asked[0]["MaxResults"].as_i64(), asked[0].get("NextToken")), (Some(50), None));
        assert_eq!(asked[1]["NextToken"], "t1");
        assert_eq!(asked[2]["LookupAttributes"][0]["AttributeValue"], "iam.amazonaws.com");
        assert_eq!(asked[0]["StartTime"].as_f64(), Some(1_785_574_800.0));
        assert_eq!(asked[0]["EndTime"].as_f64(), Some(1_785_578_400.0));
    }

    #[tokio::test]
    async fn a_refused_or_throttled_lookup_is_a_problem_naming_the_permission_never_an_error() {
        let c = Canned::default();
        *c.answers.lock().unwrap() = vec![
            page(50, Some("t1")),
            (
                400,
                r#"{"__type":"AccessDeniedException","message":"User: x is not authorized to perform: cloudtrail:LookupEvents"}"#
                    .into(),
            ),
        ];
        let (start, end) = window();
        let t = lookup(&client(&c), start, end, &["ec2.amazonaws.com"], 5).await;
        assert_eq!(t.events.len(), 50, "what was read before is kept");
        let p = t.problem.expect("a problem");
        assert!(matches!(&p, LookupProblem::Refused { message } if message.starts_with("AccessDeniedException")), "{p:?}");
        assert!(p.warning().contains("cloudtrail:LookupEvents"), "{}", p.warning());

        let c = Canned::default();
        *c.answers.lock().unwrap() = vec![(400, r#"{"__type":"ThrottlingException","message":"Rate exceeded"}"#.into())];
        let t = lookup(&client(&c), start, end, &["ec2.amazonaws.com"], 5).await;
        assert_eq!(t.problem, Some(LookupProblem::Throttled));
        assert!(LookupProblem::Throttled.warning().contains("cloudtrail:LookupEvents"));
    }
}
