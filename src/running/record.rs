//! One CloudTrail record of a call as a typed [`Call`]: who made it (the session issuer of an
//! assumed role), the IAM action, the time, the Karpenter version in its user agent, for a
//! refused call the error and the resource, and a fleet's launches that failed inside it.

use super::support::Ymd;
use crate::karpenter_iam::KarpenterVersion;
use serde_json::Value;
use std::fmt;

/// One call as CloudTrail recorded it.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// `userIdentity.type`: `AssumedRole` for Pod Identity and IRSA credentials.
    pub identity_type: String,
    /// Who made the call: for an assumed role, the role's ARN with its path
    /// (`userIdentity.sessionContext.sessionIssuer.arn`); else `userIdentity.arn`.
    pub issuer_arn: Option<String>,
    /// `eventTime` as recorded (`2026-08-01T10:00:00Z`).
    pub time: String,
    /// The same, in seconds since the epoch (0 when it does not parse).
    pub epoch: i64,
    pub event_source: String,
    pub event_name: String,
    /// The IAM action of the call (`ec2:CreateFleet`), from the event source and name.
    pub action: String,
    pub user_agent: String,
    /// The `karpenter.sh-<version>` token of the user agent, if any.
    pub karpenter: Option<RunningVersion>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    /// The resource: "on resource: <arn>" of the error message, else the record's first resource.
    pub resource: Option<String>,
    pub region: Option<String>,
    /// The launches that failed inside a `CreateFleet` that itself succeeded (its `errorSet`).
    pub fleet_errors: Vec<FleetError>,
}

/// One entry of a `CreateFleet` record's `responseElements.CreateFleetResponse.errorSet.item`:
/// a launch that failed inside the fleet (the call itself has no `errorCode`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetError {
    /// `UnauthorizedOperation`, `VcpuLimitExceeded`, `InsufficientInstanceCapacity`, ...
    pub code: String,
    pub message: String,
    /// `spot` or `on-demand`.
    pub lifecycle: Option<String>,
    pub instance_type: Option<String>,
    pub zone: Option<String>,
    pub subnet: Option<String>,
}

/// The failed launches of a `CreateFleet` record. XML made JSON: `item` is an object for one
/// entry and a list for several.
pub fn fleet_errors(record: &Value) -> Vec<FleetError> {
    let items = &record["responseElements"]["CreateFleetResponse"]["errorSet"]["item"];
    let list: Vec<&Value> = match items {
        Value::Array(a) => a.iter().collect(),
        Value::Object(_) => vec![items],
        _ => vec![],
    };
    let text = |v: &Value| v.as_str().map(str::to_string).filter(|t| !t.is_empty());
    list.into_iter()
        .filter_map(|e| {
            let o = &e["launchTemplateAndOverrides"]["overrides"];
            Some(FleetError {
                code: text(&e["errorCode"])?,
                message: text(&e["errorMessage"]).unwrap_or_default(),
                lifecycle: text(&e["lifecycle"]),
                instance_type: text(&o["instanceType"]),
                zone: text(&o["availabilityZone"]),
                subnet: text(&o["subnetId"]),
            })
        })
        .collect()
}

/// Parse one record: the `CloudTrailEvent` JSON text of a `LookupEvents` event. `resources` are
/// the event's `Resources[].ResourceName` (used when the record names none). An error says what
/// is missing; the caller skips such a record.
pub fn parse_record(cloudtrail_event: &str, resources: &[String]) -> Result<Call, String> {
    let r: Value = serde_json::from_str(cloudtrail_event).map_err(|e| format!("a CloudTrail record that is not JSON: {e}"))?;
    let text = |v: &Value| v.as_str().map(str::to_string);
    let event_source = text(&r["eventSource"]).ok_or("a CloudTrail record without eventSource")?;
    let event_name = text(&r["eventName"]).ok_or("a CloudTrail record without eventName")?;
    let identity = &r["userIdentity"];
    let identity_type = text(&identity["type"]).unwrap_or_default();
    let issuer_arn = match identity_type.as_str() {
        "AssumedRole" => text(&identity["sessionContext"]["sessionIssuer"]["arn"]),
        _ => text(&identity["arn"]),
    };
    let time = text(&r["eventTime"]).unwrap_or_default();
    let user_agent = text(&r["userAgent"]).unwrap_or_default();
    let error_message = text(&r["errorMessage"]);
    let resource = error_message
        .as_deref()
        .and_then(resource_in_message)
        .or_else(|| r["resources"].as_array().and_then(|a| a.iter().find_map(|x| text(&x["ARN"]))))
        .or_else(|| resources.first().cloned());
    Ok(Call {
        identity_type,
        issuer_arn,
        epoch: epoch_of(&time).unwrap_or(0),
        time,
        action: action_of(&event_source, &event_name),
        karpenter: karpenter_in_agent(&user_agent),
        user_agent,
        event_source,
        event_name,
        error_code: text(&r["errorCode"]),
        error_message,
        resource,
        region: text(&r["awsRegion"]),
        fleet_errors: fleet_errors(&r),
    })
}

/// The IAM action of a call: the service prefix from the event source (`ec2.amazonaws.com` ->
/// `ec2`) and the event name. Where the prefix is not the host's first label, AWS's own
/// exceptions apply: CloudWatch records `monitoring.amazonaws.com` (actions `cloudwatch:`), SES
/// `email.amazonaws.com` (`ses:`), the Resource Groups Tagging API `tagging.amazonaws.com`
/// (`tag:`), the Price List API `pricelist.amazonaws.com` (`pricing:`); an `api.` host label
/// (`api.ecr.amazonaws.com`) is dropped.
pub fn action_of(event_source: &str, event_name: &str) -> String {
    let host = event_source.strip_prefix("api.").unwrap_or(event_source);
    let label = host.split('.').next().unwrap_or(host);
    let prefix = match label {
        "monitoring" => "cloudwatch",
        "email" => "ses",
        "tagging" => "tag",
        "pricelist" => "pricing",
        other => other,
    };
    format!("{prefix}:{event_name}")
}

/// `2026-08-01T10:00:00Z` (fractions of a second allowed) in seconds since the epoch.
pub fn epoch_of(time: &str) -> Option<i64> {
    let (date, clock) = time.trim_end_matches('Z').split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut c = clock.split(':');
    let (h, min) = (c.next()?.parse::<i64>().ok()?, c.next()?.parse::<i64>().ok()?);
    let s = c.next()?.split('.').next()?.parse::<i64>().ok()?;
    Some(Ymd::new(y as i32, m as u32, day as u32).days_since_epoch() * 86_400 + h * 3600 + min * 60 + s)
}

// --- The running version ----------------------------------------------------------------------

/// A Karpenter version as its user agent names it: `karpenter.sh-1.12.3`, `karpenter.sh-v1.12.3`,
/// `karpenter.sh-1.14.0-rc.1`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RunningVersion {
    /// As recorded, without the token's prefix (`1.12.3`, `v1.12.3`).
    pub recorded: String,
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
    /// A pre-release (`rc.1`), which sorts before the release.
    pub pre: Option<String>,
}

impl RunningVersion {
    pub fn parse(text: &str) -> Option<RunningVersion> {
        let bare = text.strip_prefix('v').unwrap_or(text);
        let (core, pre) = match bare.split_once('-') {
            Some((c, p)) if !p.is_empty() => (c, Some(p.to_string())),
            Some(_) => return None,
            None => (bare, None),
        };
        let core = core.split('+').next()?;
        let mut n =
            core.split('.').map(|p| (!p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())).then(|| p.parse().ok()).flatten());
        let (major, minor, patch) = (n.next()??, n.next()??, n.next()??);
        if n.next().is_some() {
            return None;
        }
        Some(RunningVersion { recorded: text.to_string(), major, minor, patch, pre })
    }

    /// The minor as karpctl knows it; None for a version outside its table (newer than
    /// `KarpenterVersion::LATEST`, or not 1.x).
    pub fn known(&self) -> Option<KarpenterVersion> {
        (self.major == 1 && self.minor <= KarpenterVersion::LATEST.minor).then_some(KarpenterVersion { minor: self.minor })
    }

    /// Newer than every version karpctl knows.
    pub fn newer_than_known(&self) -> bool {
        (self.major, self.minor) > (1, KarpenterVersion::LATEST.minor)
    }

    /// `MAJOR.MINOR`, what `karpenter_version` takes.
    pub fn minor_text(&self) -> String {
        format!("{}.{}", self.major, self.minor)
    }
}

impl Ord for RunningVersion {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(o.major, o.minor, o.patch))
            .then_with(|| match (&self.pre, &o.pre) {
                (None, None) => std::cmp::Ordering::Equal,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (Some(_), None) => std::cmp::Ordering::Less,
                (Some(a), Some(b)) => a.cmp(b),
            })
            .then_with(|| self.recorded.cmp(&o.recorded))
    }
}

impl PartialOrd for RunningVersion {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

impl fmt::Display for RunningVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.recorded)
    }
}

/// The version in a user agent's `karpenter.sh-<version>` token (Karpenter adds it to every AWS
/// call it makes).
pub fn karpenter_in_agent(agent: &str) -> Option<RunningVersion> {
    agent
        .split(|c: char| c.is_whitespace() || c == '(' || c == ')' || c == ',')
        .find_map(|tok| tok.strip_prefix("karpenter.sh-"))
        .and_then(RunningVersion::parse)
}

/// The resource an `errorMessage` names ("... on resource: <arn> ..."), without the sentence's
/// punctuation.
pub fn resource_in_message(message: &str) -> Option<String> {
    let rest = message.split("on resource: ").nth(1)?;
    let r = rest.split_whitespace().next()?.trim_end_matches(['.', ',', ';']);
    (!r.is_empty()).then(|| r.to_string())
}

/// The action an `errorMessage` names ("not authorized to perform: iam:PassRole"): the action
/// actually refused, which may not be the call's own (RunInstances refused for iam:PassRole).
pub fn action_in_message(message: &str) -> Option<String> {
    let rest = message.split("authorized to perform: ").nth(1)?;
    let a = rest.split_whitespace().next()?.trim_end_matches(['.', ',', ';']);
    (a.contains(':') && !a.is_empty()).then(|| a.to_string())
}

/// EC2's encoded authorization message ("Encoded authorization failure message: <blob>").
pub fn encoded_in_message(message: &str) -> Option<String> {
    let rest = message.split("Encoded authorization failure message: ").nth(1)?;
    let e = rest.split_whitespace().next()?;
    (!e.is_empty()).then(|| e.to_string())
}

/// A CloudTrail record of the controller's role in AWS's shape, for the tests of this module tree.
#[cfg(test)]
pub(crate) mod fixtures {
    use serde_json::json;

    pub const ROLE: &str = "arn:aws:iam::111122223333:role/karpenter/KarpenterController-c1";

    pub fn record(role: &str, source: &str, name: &str, agent: &str, time: &str) -> String {
        json!({
            "eventVersion": "1.11",
            "userIdentity": {
                "type": "AssumedRole",
                "arn": "arn:aws:sts::111122223333:assumed-role/KarpenterController-c1/eks-c1-karpenter-abc",
                "sessionContext": {"sessionIssuer": {"type": "Role", "arn": role, "userName": "KarpenterController-c1"}}
            },
            "eventTime": time, "eventSource": source, "eventName": name, "awsRegion": "eu-west-1",
            "userAgent": agent,
        })
        .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::{ROLE, record};
    use super::*;
    use serde_json::json;

    #[test]
    fn a_record_becomes_a_call_with_its_issuer_action_version_and_time() {
        let agent = "aws-sdk-go-v2/1.36.3 ua/2.1 os/linux lang/go#1.24.4 api/ec2#1.211.0 karpenter.sh-1.12.3";
        let c = parse_record(&record(ROLE, "ec2.amazonaws.com", "CreateFleet", agent, "2026-08-01T10:00:00Z"), &[]).unwrap();
        assert_eq!(c.identity_type, "AssumedRole");
        assert_eq!(c.issuer_arn.as_deref(), Some(ROLE), "the session issuer, with its path, not the session ARN");
        assert_eq!(c.action, "ec2:CreateFleet");
        assert_eq!(c.karpenter.as_ref().map(|v| v.recorded.as_str()), Some("1.12.3"));
        assert_eq!(c.epoch, 1_785_578_400);
        assert_eq!((c.region.as_deref(), c.error_code.as_ref(), c.resource.as_ref()), (Some("eu-west-1"), None, None));
        // A refused call: code, message, the resource from the message first.
        let mut r: Value =
            serde_json::from_str(&record(ROLE, "ec2.amazonaws.com", "RunInstances", agent, "2026-08-01T10:00:01.5Z")).unwrap();
        r["errorCode"] = json!("Client.UnauthorizedOperation");
        r["errorMessage"] = json!(
            "You are not authorized to perform this operation. User: x is not authorized to perform: iam:PassRole on resource: arn:aws:iam::111122223333:role/KarpenterNodeRole-c1 with an explicit deny in a permissions boundary. Encoded authorization failure message: AbC"
        );
        r["resources"] = json!([{"ARN": "arn:aws:ec2:eu-west-1:111122223333:launch-template/lt-1"}]);
        let c = parse_record(&r.to_string(), &["ignored".into()]).unwrap();
        assert_eq!(c.resource.as_deref(), Some("arn:aws:iam::111122223333:role/KarpenterNodeRole-c1"));
        assert_eq!(c.epoch, 1_785_578_401);
        r["errorMessage"] = json!("denied");
        assert_eq!(
            parse_record(&r.to_string(), &[]).unwrap().resource.as_deref(),
            Some("arn:aws:ec2:eu-west-1:111122223333:launch-template/lt-1")
        );
        r.as_object_mut().unwrap().remove("resources");
        assert_eq!(parse_record(&r.to_string(), &["from-event".into()]).unwrap().resource.as_deref(), Some("from-event"));
        // A user's call: the identity's own ARN. Garbage: an error.
        let user = json!({"userIdentity": {"type": "IAMUser", "arn": "arn:aws:iam::111122223333:user/alice"},
                          "eventSource": "iam.amazonaws.com", "eventName": "GetRole", "eventTime": "2026-08-01T10:00:00Z"});
        let c = parse_record(&user.to_string(), &[]).unwrap();
        assert_eq!((c.issuer_arn.as_deref(), c.karpenter.as_ref()), (Some("arn:aws:iam::111122223333:user/alice"), None));
        assert!(parse_record("{", &[]).is_err());
        assert!(parse_record("{}", &[]).unwrap_err().contains("eventSource"));
    }

    #[test]
    fn a_fleets_failed_launches_are_read_from_its_error_set_one_entry_or_several() {
        let agent = "karpenter.sh-1.12.3";
        let mut r: Value =
            serde_json::from_str(&record(ROLE, "ec2.amazonaws.com", "CreateFleet", agent, "2026-08-01T10:00:00Z")).unwrap();
        let entry = |code: &str, lifecycle: &str, t: &str| {
            json!({"errorCode": code, "errorMessage": format!("{code} for {t}"), "lifecycle": lifecycle,
                   "launchTemplateAndOverrides": {"launchTemplateSpecification": {"launchTemplateId": "lt-1", "version": "1"},
                   "overrides": {"instanceType": t, "availabilityZone": "us-east-2a", "subnetId": "subnet-1"}}})
        };
        r["responseElements"] = json!({"CreateFleetResponse": {"fleetId": "fleet-1",
            "errorSet": {"item": entry("UnauthorizedOperation", "spot", "m5.large")}}});
        let c = parse_record(&r.to_string(), &[]).unwrap();
        assert_eq!(c.error_code, None, "the call itself succeeded");
        assert_eq!(
            c.fleet_errors,
            [FleetError {
                code: "UnauthorizedOperation".into(),
                message: "UnauthorizedOperation for m5.large".into(),
                lifecycle: Some("spot".into()),
                instance_type: Some("m5.large".into()),
                zone: Some("us-east-2a".into()),
                subnet: Some("subnet-1".into()),
            }]
        );
        r["responseElements"]["CreateFleetResponse"]["errorSet"]["item"] = json!([
            entry("VcpuLimitExceeded", "on-demand", "c5.large"),
            entry("InsufficientInstanceCapacity", "spot", "c5.xlarge")
        ]);
        let c = parse_record(&r.to_string(), &[]).unwrap();
        let codes: Vec<&str> = c.fleet_errors.iter().map(|e| e.code.as_str()).collect();
        assert_eq!(codes, ["VcpuLimitExceeded", "InsufficientInstanceCapacity"]);
        r["responseElements"] = json!({"CreateFleetResponse": {"fleetId": "fleet-1", "fleetInstanceSet": {"item": {}}}});
        assert!(parse_record(&r.to_string(), &[]).unwrap().fleet_errors.is_empty());
        r["responseElements"] = Value::Null;
        assert!(parse_record(&r.to_string(), &[]).unwrap().fleet_errors.is_empty());
    }

    #[test]
    fn event_sources_map_to_action_prefixes_with_aws_exceptions() {
        assert_eq!(action_of("ec2.amazonaws.com", "DescribeInstanceTypes"), "ec2:DescribeInstanceTypes");
        assert_eq!(action_of("iam.amazonaws.com", "GetInstanceProfile"), "iam:GetInstanceProfile");
        assert_eq!(action_of("ssm.amazonaws.com", "GetParameter"), "ssm:GetParameter");
        assert_eq!(action_of("pricing.amazonaws.com", "GetProducts"), "pricing:GetProducts");
        assert_eq!(action_of("pricelist.amazonaws.com", "GetProducts"), "pricing:GetProducts");
        assert_eq!(action_of("monitoring.amazonaws.com", "GetMetricData"), "cloudwatch:GetMetricData");
        assert_eq!(action_of("email.amazonaws.com", "SendEmail"), "ses:SendEmail");
        assert_eq!(action_of("tagging.amazonaws.com", "GetResources"), "tag:GetResources");
        assert_eq!(action_of("api.ecr.amazonaws.com", "GetAuthorizationToken"), "ecr:GetAuthorizationToken");
        assert_eq!(action_of("ec2.amazonaws.com.cn", "CreateFleet"), "ec2:CreateFleet");
        assert_eq!(action_of("eks-auth.amazonaws.com", "AssumeRoleForPodIdentity"), "eks-auth:AssumeRoleForPodIdentity");
    }

    #[test]
    fn versions_in_user_agents_parse_and_order() {
        for (agent, want) in [
            ("aws-sdk-go-v2/1.36.3 karpenter.sh-1.12.3", Some((1, 12, 3, None))),
            ("karpenter.sh-v1.12.3 aws-sdk-go-v2/1.36.3", Some((1, 12, 3, None))),
            ("x karpenter.sh-1.14.0-rc.1", Some((1, 14, 0, Some("rc.1")))),
            ("x karpenter.sh-1.8.2+build.5", Some((1, 8, 2, None))),
            ("aws-sdk-go-v2/1.36.3 api/ec2#1.211.0", None),
            ("karpenter.sh-latest", None),
            ("karpenter.sh-1.12", None),
            ("karpenter.sh-1.12.3-", None),
        ] {
            let got = karpenter_in_agent(agent);
            assert_eq!(got.as_ref().map(|v| (v.major, v.minor, v.patch, v.pre.as_deref())), want, "{agent}");
        }
        let v = |s: &str| RunningVersion::parse(s).unwrap();
        assert!(v("1.14.0-rc.1") < v("1.14.0") && v("1.13.9") < v("1.14.0-rc.1") && v("1.12.10") > v("1.12.9"));
        assert_eq!(v("v1.12.3").to_string(), "v1.12.3", "shown as recorded");
        assert_eq!(v("v1.12.3").minor_text(), "1.12");
        assert_eq!(v("1.12.3").known(), Some(KarpenterVersion { minor: 12 }));
        assert_eq!(v("1.15.0").known(), None);
        assert!(v("1.15.0").newer_than_known() && v("2.0.0").newer_than_known() && !v("1.14.9").newer_than_known());
        assert_eq!(v("0.37.0").known(), None, "pre-1.0 is outside the table");
    }
}
