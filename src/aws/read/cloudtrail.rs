//! CloudTrail `LookupEvents` for the running Karpenter: each source looked up in the Region whose
//! history keeps it, by name when a source's pages fill up; two lookups a second per account and
//! Region; never an error (a refused lookup is a [`LookupProblem`]). docs/running-karpenter.md.

use crate::facts::records::{LookupProblem, LookupRead, RawEvent, Trail};
use aws_sdk_cloudtrail::types::{LookupAttribute, LookupAttributeKey};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Events per page (CloudTrail's most).
pub const PAGE_SIZE: i32 = 50;

/// What a run reads: the event sources (each in the Region that keeps it, see [`home_region`]),
/// at most `max_pages` pages each, and, for a source whose pages were all full (a busy account:
/// other callers' records fill them), Karpenter's rare writes of that source looked up by
/// event name ([`karpenter_writes`]), at most `name_pages` pages each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    pub sources: &'static [&'static str],
    pub max_pages: usize,
    pub name_pages: usize,
}

/// What `up` and `diff` read: EC2 (every few seconds from a running controller: its version,
/// and launches refused) and IAM (instance profiles, PassRole), 100 events of each, the newest;
/// when those pages are full, one page of each of Karpenter's writes by name. In a quiet account
/// two lookups, which fit in CloudTrail's two a second.
pub const READINESS: Reading = Reading { sources: &["ec2.amazonaws.com", "iam.amazonaws.com"], max_pages: 2, name_pages: 1 };

/// What doctor and import read: the event sources the controller's and the nodes' calls are
/// recorded under: EC2 (launches, describes, and the nodes' own calls), IAM (instance profiles,
/// PassRole), SSM (AMI parameters), the Price List API (`pricelist`, in its endpoint's Region),
/// EKS, SQS (control-plane calls only: ReceiveMessage is a data event) and ECR (the nodes pull
/// images with the node role); 500 events an hour of each is more than enough to see a
/// controller's version (it calls EC2 every few seconds) and its refusals.
pub const DOCTOR: Reading = Reading {
    sources: &[
        "ec2.amazonaws.com",
        "iam.amazonaws.com",
        "ssm.amazonaws.com",
        "pricelist.amazonaws.com",
        "eks.amazonaws.com",
        "sqs.amazonaws.com",
        "ecr.amazonaws.com",
    ],
    max_pages: 10,
    name_pages: 2,
};

/// Karpenter's calls of `source` that few other callers make, found by event name in an account
/// whose other callers fill that source's pages: its launches (with their `errorSet`), launch
/// templates and terminations; its instance profiles. They carry its user agent.
pub fn karpenter_writes(source: &str) -> &'static [&'static str] {
    match source {
        "ec2.amazonaws.com" => &["CreateFleet", "RunInstances", "CreateLaunchTemplate", "TerminateInstances"],
        "iam.amazonaws.com" => &["CreateInstanceProfile", "AddRoleToInstanceProfile", "TagInstanceProfile"],
        _ => &[],
    }
}

/// The Region whose event history keeps `source`'s records for a cluster in `region`: IAM's
/// and STS's in the partition's global Region (us-east-1, cn-north-1, us-gov-west-1), the
/// Price List API's in its endpoint's Region; None: no Region of this partition keeps them.
pub fn home_region(source: &str, region: &str) -> Option<String> {
    use crate::aws::partition::{global_region, partition, pricing_region};
    let host = source.split('.').next().unwrap_or(source);
    match host {
        "iam" | "sts" => Some(global_region(partition(region)).unwrap_or(region).to_string()),
        "pricelist" => pricing_region(region).map(str::to_string),
        _ => Some(region.to_string()),
    }
}

/// The CloudTrail reader: one client per Region it reads, one read per (window, reading) a run shares.
pub struct Trails {
    clients: BTreeMap<String, aws_sdk_cloudtrail::Client>,
    region: String,
    memo: super::memo::Memo<Arc<Trail>>,
}

impl Trails {
    pub fn new(clients: BTreeMap<String, aws_sdk_cloudtrail::Client>, region: String) -> Trails {
        Trails { clients, region, memo: Default::default() }
    }

    /// The events `reading` asks for in the last `window` (up to now); never an error (see
    /// [`Trail::problem`]). Each Region's lookups one after another (its pace), the Regions at once.
    pub async fn recent(&self, window: Duration, reading: &Reading) -> Arc<Trail> {
        let key = format!("{}:{reading:?}", window.as_secs());
        let read = self
            .memo
            .get(&key, || async {
                let end = SystemTime::now();
                let start = end.checked_sub(window).unwrap_or(SystemTime::UNIX_EPOCH);
                let mut by_region: Vec<(String, Vec<&str>)> = Vec::new();
                for source in reading.sources {
                    let Some(r) = home_region(source, &self.region) else { continue };
                    match by_region.iter_mut().find(|(x, _)| *x == r) {
                        Some((_, v)) => v.push(source),
                        None => by_region.push((r, vec![source])),
                    }
                }
                let reads = by_region.iter().filter_map(|(r, sources)| {
                    let client = self.clients.get(r)?;
                    Some(read_region(client, r, start, end, sources, reading))
                });
                let mut t = merge(futures::future::join_all(reads).await);
                t.window = window;
                Ok(Arc::new(t))
            })
            .await;
        read.unwrap_or_default()
    }
}

/// The reads of several Regions as one.
fn merge(parts: Vec<Trail>) -> Trail {
    let mut t = Trail::default();
    let mut seen = HashSet::new();
    for p in parts {
        t.events.extend(p.events.into_iter().filter(|e| seen.insert(e.cloudtrail_event.clone())));
        t.pages += p.pages;
        t.truncated |= p.truncated;
        t.problem = t.problem.or(p.problem);
        t.reads.extend(p.reads);
    }
    t
}

/// `sources` (all kept in `region`) between `start` and `end`, one lookup after another; after
/// a source whose pages were all full, Karpenter's writes of it by name. Stops at the first
/// problem.
async fn read_region(
    client: &aws_sdk_cloudtrail::Client,
    region: &str,
    start: SystemTime,
    end: SystemTime,
    sources: &[&str],
    reading: &Reading,
) -> Trail {
    let mut trail = Trail::default();
    let mut seen = HashSet::new();
    let mut queue: Vec<(LookupAttributeKey, String, usize)> =
        sources.iter().map(|s| (LookupAttributeKey::EventSource, s.to_string(), reading.max_pages)).collect();
    let mut i = 0;
    while i < queue.len() {
        let (key, value, max_pages) = queue[i].clone();
        i += 1;
        let read = lookup(client, start, end, key.clone(), &value, max_pages).await;
        trail.pages += read.pages;
        trail.events.extend(read.events.into_iter().filter(|e| seen.insert(e.cloudtrail_event.clone())));
        trail.truncated |= read.cut_short;
        trail.reads.push(LookupRead {
            region: region.to_string(),
            key: if key == LookupAttributeKey::EventName { "EventName" } else { "EventSource" },
            value: value.clone(),
            events: read.count,
            pages: read.pages,
            cut_short: read.cut_short,
        });
        if let Some(p) = read.problem {
            trail.problem = Some(p);
            return trail;
        }
        if read.cut_short && key == LookupAttributeKey::EventSource {
            let names =
                karpenter_writes(&value).iter().map(|n| (LookupAttributeKey::EventName, n.to_string(), reading.name_pages));
            queue.extend(names);
        }
    }
    trail
}

/// What one lookup read.
#[derive(Debug, Default)]
struct OneLookup {
    events: Vec<RawEvent>,
    count: usize,
    pages: usize,
    cut_short: bool,
    problem: Option<LookupProblem>,
}

/// The events whose `key` is `value` between `start` and `end`, at most `max_pages` pages.
async fn lookup(
    client: &aws_sdk_cloudtrail::Client,
    start: SystemTime,
    end: SystemTime,
    key: LookupAttributeKey,
    value: &str,
    max_pages: usize,
) -> OneLookup {
    let mut out = OneLookup::default();
    let attribute = match LookupAttribute::builder().attribute_key(key).attribute_value(value).build() {
        Ok(a) => a,
        Err(e) => {
            out.problem = Some(LookupProblem::Failed { message: e.to_string() });
            return out;
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
        let answered = match answer {
            Ok(o) => o,
            Err(e) => {
                out.problem = Some(problem_of(crate::aws::aws_err("cloudtrail:LookupEvents", e)));
                return out;
            }
        };
        out.pages += 1;
        out.count += answered.events().len();
        out.events.extend(answered.events().iter().filter_map(|e| {
            Some(RawEvent {
                cloudtrail_event: e.cloud_trail_event()?.to_string(),
                resources: e.resources().iter().filter_map(|r| r.resource_name().map(str::to_string)).collect(),
            })
        }));
        token = answered.next_token().filter(|t| !t.is_empty()).map(str::to_string);
        if token.is_none() {
            break;
        }
        if page + 1 == max_pages {
            out.cut_short = true;
        }
    }
    out
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

    /// A page of `n` events, each record unique to (`tag`, its index).
    fn page(n: usize, token: Option<&str>, tag: &str) -> (u16, String) {
        let events: Vec<_> = (0..n)
            .map(|i| serde_json::json!({"EventId": format!("e{i}"), "CloudTrailEvent": format!("{{\"n\":{i},\"p\":\"{tag}\"}}"), "Resources": [{"ResourceName": "r"}]}))
            .collect();
        let mut doc = serde_json::json!({"Events": events});
        if let Some(t) = token {
            doc["NextToken"] = t.into();
        }
        (200, doc.to_string())
    }

    const READ: Reading = Reading { sources: &[], max_pages: 2, name_pages: 1 };

    fn window() -> (SystemTime, SystemTime) {
        let end = SystemTime::UNIX_EPOCH + Duration::from_secs(1_785_578_400);
        (end - Duration::from_secs(3600), end)
    }

    #[tokio::test]
    async fn pages_each_source_with_next_token_up_to_the_bound_then_karpenters_writes_by_name() {
        let c = Canned::default();
        *c.answers.lock().unwrap() = vec![
            page(50, Some("t1"), "ec2-1"),
            page(3, None, "ec2-2"),
            page(50, Some("u1"), "iam-1"),
            page(50, Some("u2"), "iam-2"),
            // The IAM pages were full: Karpenter's instance-profile writes by name, one page
            // each; the first holds a record the source's pages already had (kept once).
            page(2, None, "iam-1"),
            page(1, None, "name-2"),
            page(0, None, "name-3"),
        ];
        let (start, end) = window();
        let t = read_region(&client(&c), "us-east-1", start, end, &["ec2.amazonaws.com", "iam.amazonaws.com"], &READ).await;
        assert_eq!((t.events.len(), t.pages, t.truncated, t.problem.clone()), (154, 7, true, None));
        assert_eq!(t.events[0], RawEvent { cloudtrail_event: "{\"n\":0,\"p\":\"ec2-1\"}".into(), resources: vec!["r".into()] });
        let asked = c.asked.lock().unwrap();
        assert_eq!(
            asked[0]["LookupAttributes"],
            serde_json::json!([{"AttributeKey": "EventSource", "AttributeValue": "ec2.amazonaws.com"}])
        );
        assert_eq!((asked[0]["MaxResults"].as_i64(), asked[0].get("NextToken")), (Some(50), None));
        assert_eq!(asked[1]["NextToken"], "t1");
        assert_eq!(asked[2]["LookupAttributes"][0]["AttributeValue"], "iam.amazonaws.com");
        let names: Vec<&serde_json::Value> = asked[4..].iter().map(|a| &a["LookupAttributes"][0]).collect();
        assert!(names.iter().all(|n| n["AttributeKey"] == "EventName"), "{names:?}");
        assert_eq!(names[0]["AttributeValue"], "CreateInstanceProfile");
        assert_eq!(asked[0]["StartTime"].as_f64(), Some(1_785_574_800.0));
        assert_eq!(asked[0]["EndTime"].as_f64(), Some(1_785_578_400.0));
        let cut: Vec<String> = t.cut_short().iter().map(|r| r.what()).collect();
        assert_eq!(cut, ["iam.amazonaws.com in us-east-1"]);
        assert!(t.longer_window_reads_more(), "the EC2 lookup and the names reached the window's start");
        assert_eq!(t.reads.len(), 2 + karpenter_writes("iam.amazonaws.com").len());
    }

    #[test]
    fn each_source_is_read_where_aws_keeps_it() {
        assert_eq!(home_region("ec2.amazonaws.com", "us-east-2").as_deref(), Some("us-east-2"));
        assert_eq!(home_region("iam.amazonaws.com", "us-east-2").as_deref(), Some("us-east-1"));
        assert_eq!(home_region("sts.amazonaws.com", "eu-west-1").as_deref(), Some("us-east-1"));
        assert_eq!(home_region("iam.amazonaws.com", "cn-northwest-1").as_deref(), Some("cn-north-1"));
        assert_eq!(home_region("iam.amazonaws.com", "us-gov-east-1").as_deref(), Some("us-gov-west-1"));
        assert_eq!(home_region("iam.amazonaws.com", "us-iso-east-1").as_deref(), Some("us-iso-east-1"), "not said: its own");
        assert_eq!(home_region("pricelist.amazonaws.com", "eu-west-1").as_deref(), Some("eu-central-1"));
        assert_eq!(home_region("pricelist.amazonaws.com", "ap-northeast-1").as_deref(), Some("ap-south-1"));
        assert_eq!(home_region("pricelist.amazonaws.com", "ca-central-1").as_deref(), Some("us-east-1"));
        assert_eq!(home_region("pricelist.amazonaws.com", "cn-north-1").as_deref(), Some("cn-northwest-1"));
        assert_eq!(home_region("pricelist.amazonaws.com", "us-gov-west-1"), None, "not in that partition");
        let t = Trail {
            reads: vec![LookupRead {
                region: "r".into(),
                key: "EventSource",
                value: "ec2.amazonaws.com".into(),
                events: 100,
                pages: 2,
                cut_short: true,
            }],
            ..Default::default()
        };
        assert!(!t.longer_window_reads_more(), "a lookup cut short reads the same newest pages");
    }

    #[tokio::test]
    async fn a_refused_or_throttled_lookup_is_a_problem_naming_the_permission_never_an_error() {
        let c = Canned::default();
        *c.answers.lock().unwrap() = vec![
            page(50, Some("t1"), "a"),
            (
                400,
                r#"{"__type":"AccessDeniedException","message":"User: x is not authorized to perform: cloudtrail:LookupEvents"}"#
                    .into(),
            ),
        ];
        let (start, end) = window();
        let read = Reading { max_pages: 5, ..READ };
        let t = read_region(&client(&c), "us-east-1", start, end, &["ec2.amazonaws.com"], &read).await;
        assert_eq!(t.events.len(), 50, "what was read before is kept");
        let p = t.problem.clone().expect("a problem");
        assert!(matches!(&p, LookupProblem::Refused { message } if message.starts_with("AccessDeniedException")), "{p:?}");
        assert!(p.warning().contains("cloudtrail:LookupEvents"), "{}", p.warning());
        assert!(!t.longer_window_reads_more());

        let c = Canned::default();
        *c.answers.lock().unwrap() = vec![(400, r#"{"__type":"ThrottlingException","message":"Rate exceeded"}"#.into())];
        let t = read_region(&client(&c), "us-east-1", start, end, &["ec2.amazonaws.com"], &read).await;
        assert_eq!(t.problem, Some(LookupProblem::Throttled));
        assert!(LookupProblem::Throttled.warning().contains("cloudtrail:LookupEvents"));
    }
}
