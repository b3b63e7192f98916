//! TOML plan files: load, defaults, validation. Errors name the file, the line and the field.

use crate::error::UserError;
use crate::model::Tags;
use crate::names;
use crate::settings::Settings;
use crate::spec::*;
use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPlan {
    pub cluster: Option<String>,
    pub region: Option<String>,
    pub account_id: Option<String>,
    /// Assume this role for every call of the cluster (another account, or a narrower role).
    pub assume_role_arn: Option<String>,
    pub external_id: Option<String>,
    pub session_name: Option<String>,
    #[serde(default)]
    pub tags: Tags,
    #[serde(default)]
    pub interruption: RawInterruption,
    #[serde(default)]
    pub identity: RawIdentity,
    #[serde(default)]
    pub discovery: RawDiscovery,
    #[serde(default)]
    pub account: RawAccount,
}

/// `[account]`: account-wide objects karpctl may make (never deletes: others use them too).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAccount {
    /// `up` creates the EC2 Spot service-linked role when the account has none (default false).
    pub create_spot_service_linked_role: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIdentity {
    /// "pod_identity" (default) or "irsa".
    pub mode: Option<String>,
    pub karpenter_version: Option<String>,
    pub path: Option<String>,
    pub node_role_name: Option<String>,
    /// Use this existing role (name or ARN) instead of creating one.
    pub existing_node_role: Option<String>,
    pub controller_role_name: Option<String>,
    #[serde(default)]
    pub extra_node_policy_arns: Vec<String>,
    /// Managed policies kept on the controller role besides karpctl's own (KMS rights for
    /// encrypted volumes, say); `karpctl import` fills it with what is not Karpenter's.
    #[serde(default)]
    pub extra_controller_policy_arns: Vec<String>,
    pub instance_profile: Option<bool>,
    pub instance_profile_name: Option<String>,
    pub access_entry_type: Option<String>,
    pub namespace: Option<String>,
    pub service_account: Option<String>,
    pub create_pod_identity_agent: Option<bool>,
    pub zonal_shift: Option<bool>,
    /// Add `aws:SourceAccount` = this account to the node role's trust (default false).
    pub node_trust_source_account: Option<bool>,
    /// A managed policy ARN set as the permissions boundary of every role karpctl creates.
    pub permissions_boundary: Option<String>,
    /// Policies another tool gave the controller role that karpctl's own replace (`karpctl
    /// import` fills it in): managed policy ARNs, or inline policy names.
    #[serde(default)]
    pub retire_policies: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDiscovery {
    pub subnet_ids: Option<Vec<String>>,
    pub subnet_tags: Option<Tags>,
    pub security_group_id: Option<String>,
    pub security_group_name: Option<String>,
    /// true: the EC2NodeClass gives nodes public IPs (public subnets without
    /// `MapPublicIpOnLaunch` become usable).
    pub associate_public_ip: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawInterruption {
    pub enabled: Option<bool>,
    pub queue_name: Option<String>,
    pub kms_key_id: Option<String>,
    pub sqs_managed_sse: Option<bool>,
    /// "separate" (default: upstream's layout, one rule per event kind) or "merged" (one rule
    /// carrying every kind's pattern). "five", the old name of "separate", is still accepted.
    pub rules: Option<String>,
    /// Existing rules to keep under their names, by rule part (`karpctl import` fills it in):
    /// an EventBridge rule cannot be renamed.
    pub rule_names: Option<std::collections::BTreeMap<String, String>>,
}

/// An IAM role ARN: `arn:<partition>:iam::<12 digits>:role/<path/>name`. Returns the account.
pub fn validate_role_arn(arn: &str) -> Result<String, String> {
    let bad = || format!("{arn:?} is not an IAM role ARN (arn:aws:iam::123456789012:role/NAME)");
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    let [a, partition, service, region, account, resource] = parts.as_slice() else { return Err(bad()) };
    let name = resource.strip_prefix("role/").ok_or_else(bad)?;
    let last = name.rsplit('/').next().unwrap_or("");
    let name_ok =
        |n: &str| !n.is_empty() && n.len() <= 64 && n.chars().all(|c| c.is_ascii_alphanumeric() || "+=,.@_-".contains(c));
    if *a != "arn"
        || !partition.starts_with("aws")
        || *service != "iam"
        || !region.is_empty()
        || account.len() != 12
        || !account.chars().all(|c| c.is_ascii_digit())
        || !name_ok(last)
        || arn.len() > 2048
    {
        return Err(bad());
    }
    Ok(account.to_string())
}

/// An STS role session name: 2 to 64 of `[\w+=,.@-]`.
fn validate_session_name(s: &str) -> Result<(), String> {
    if (2..=64).contains(&s.len()) && s.chars().all(|c| c.is_ascii_alphanumeric() || "_+=,.@-".contains(c)) {
        Ok(())
    } else {
        Err(format!("{s:?} is not a role session name (2 to 64 letters, digits and _+=,.@-)"))
    }
}

fn named(wanted: Option<&str>, default: String, limit: usize, what: &str) -> Named {
    match wanted {
        Some(n) => Named { name: n.to_string(), note: None },
        None => {
            let (name, short) = names::fit(&default, limit);
            let note = short.then(|| format!("{what} name shortened to fit AWS's {limit} characters: {name}"));
            Named { name, note }
        }
    }
}

/// The line where `key` is set in `table` ("" for the top level), for error messages.
fn line_of(text: &str, table: &str, key: &str) -> Option<usize> {
    let mut current = String::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.starts_with('[') {
            current = line.trim_matches(|c| c == '[' || c == ']').trim().to_string();
            continue;
        }
        let Some((k, _)) = line.split_once('=') else { continue };
        let k = k.trim().trim_matches('"');
        if current == table && k == key {
            return Some(i + 1);
        }
        if table.is_empty() && current.is_empty() && k == key {
            return Some(i + 1);
        }
        // dotted keys: interruption.queue_name = ...
        if current.is_empty() && k == format!("{table}.{key}") {
            return Some(i + 1);
        }
    }
    None
}

/// `interruption.rules`: one rule per event kind (the default, upstream's layout).
pub const SEPARATE: &str = "separate";
/// `interruption.rules`: one rule per cluster carrying every kind's pattern.
pub const MERGED: &str = "merged";
/// `interruption.rules`: the old name of `SEPARATE` (it counted the rules), still accepted with a
/// note.
const FIVE: &str = "five";

struct Ctx<'a> {
    file: &'a str,
    text: &'a str,
    /// KARPCTL_ALLOW_UNKNOWN_REGION=1.
    allow_unknown_region: bool,
}

impl Ctx<'_> {
    fn err(&self, table: &str, key: &str, what: &str) -> UserError {
        let field = if table.is_empty() { key.to_string() } else { format!("{table}.{key}") };
        let at = match line_of(self.text, table, key) {
            Some(l) => format!("{}:{l}", self.file),
            None => self.file.to_string(),
        };
        UserError::new(format!("{at}: `{field}` {what}"))
    }
}

pub fn validate_cluster_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 100 {
        return Err(format!("must be 1 to 100 characters (got {})", name.len()));
    }
    let mut chars = name.chars();
    let first = chars.next().unwrap();
    if !first.is_ascii_alphanumeric() {
        return Err("must start with a letter or digit".into());
    }
    if let Some(bad) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_')) {
        return Err(format!("contains {bad:?}; only letters, digits, '-' and '_' are allowed"));
    }
    Ok(())
}

/// Regions karpctl knows. A region outside this list is refused (a typo would otherwise only
/// fail at the first AWS call) unless KARPCTL_ALLOW_UNKNOWN_REGION=1, for regions newer than
/// this list.
pub const KNOWN_REGIONS: &[&str] = &[
    "af-south-1",
    "ap-east-1",
    "ap-east-2",
    "ap-northeast-1",
    "ap-northeast-2",
    "ap-northeast-3",
    "ap-south-1",
    "ap-south-2",
    "ap-southeast-1",
    "ap-southeast-2",
    "ap-southeast-3",
    "ap-southeast-4",
    "ap-southeast-5",
    "ap-southeast-6",
    "ap-southeast-7",
    "ca-central-1",
    "ca-west-1",
    "cn-north-1",
    "cn-northwest-1",
    "eu-central-1",
    "eu-central-2",
    "eu-north-1",
    "eu-south-1",
    "eu-south-2",
    "eu-west-1",
    "eu-west-2",
    "eu-west-3",
    "eu-isoe-west-1",
    "eusc-de-east-1",
    "il-central-1",
    "me-central-1",
    "me-south-1",
    "mx-central-1",
    "sa-east-1",
    "us-east-1",
    "us-east-2",
    "us-gov-east-1",
    "us-gov-west-1",
    "us-iso-east-1",
    "us-iso-west-1",
    "us-isob-east-1",
    "us-isof-east-1",
    "us-isof-south-1",
    "us-west-1",
    "us-west-2",
];

/// A region name; one karpctl does not know only with `allow_unknown`
/// (`Settings::allow_unknown_region`, KARPCTL_ALLOW_UNKNOWN_REGION=1).
pub fn validate_region(region: &str, allow_unknown: bool) -> Result<(), String> {
    validate_region_format(region)?;
    if !allow_unknown && !KNOWN_REGIONS.contains(&region) {
        return Err(format!(
            "{region:?} is not a known AWS region (if it is a region newer than this karpctl, set KARPCTL_ALLOW_UNKNOWN_REGION=1)"
        ));
    }
    Ok(())
}

fn validate_region_format(region: &str) -> Result<(), String> {
    // <area>-<direction>-<n>, optionally with a gov/iso segment: us-east-1, us-gov-west-1,
    // cn-north-1, us-isof-south-1; the European Sovereign Cloud's area is longer: eusc-de-east-1.
    let parts: Vec<&str> = region.split('-').collect();
    let ok = parts.len() >= 3
        && parts.len() <= 4
        && (2..=4).contains(&parts[0].len())
        && parts.iter().take(parts.len() - 1).all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_lowercase()))
        && parts.last().is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
    if ok { Ok(()) } else { Err(format!("{region:?} is not an AWS region name (expected something like us-east-1)")) }
}

/// A character IAM (and EKS) accept in a tag key or value: `[\p{L}\p{Z}\p{N}_.:/=+\-@]`.
/// Letters and numbers of any script and space separators; not `,` `#` `(` `)` `!` `&` `'` `"`
/// `*` and the like (docs/aws-behaviour.md section 9). IAM gets every tag of the plan.
pub fn tag_char(c: char) -> bool {
    c.is_alphabetic() || c.is_numeric() || (c.is_whitespace() && !c.is_control()) || "_.:/=+-@".contains(c)
}

fn validate_tags(ctx: &Ctx, tags: &Tags) -> Result<(), UserError> {
    if tags.len() > 40 {
        return Err(ctx.err(
            "",
            "tags",
            &format!("has {} tags; at most 40 (AWS allows 50 per object and karpctl adds its own)", tags.len()),
        ));
    }
    for (k, v) in tags {
        let bad = if k.is_empty() || k.len() > 127 {
            Some(format!("key {k:?} must be 1 to 127 characters"))
        } else if k.to_ascii_lowercase().starts_with("aws:") {
            Some(format!("key {k:?} uses the reserved prefix aws:"))
        } else if k.starts_with("karpctl.io/") {
            Some(format!("key {k:?} uses karpctl's own prefix karpctl.io/"))
        } else if v.len() > 256 {
            Some(format!("value of {k:?} is longer than 256 characters"))
        } else {
            let key_char = k.chars().find(|c| !tag_char(*c)).map(|c| format!("key {k:?} contains {c:?}"));
            let value_char = || v.chars().find(|c| !tag_char(*c)).map(|c| format!("value of {k:?} contains {c:?}"));
            key_char.or_else(value_char).map(|what| format!("{what}, which IAM does not allow in tags"))
        };
        if let Some(b) = bad {
            return Err(ctx.err("tags", k, &b).hint(
                "tag keys and values may hold letters, digits, spaces and _ . : / = + - @ (IAM's and EKS's set; every object karpctl creates gets these tags)",
            ));
        }
    }
    Ok(())
}

/// `parse_with` in an empty environment.
#[cfg(test)]
pub fn parse(text: &str, file: &str, cluster_flag: Option<&str>) -> Result<Spec, UserError> {
    parse_with(text, file, cluster_flag, &Settings::default())
}

/// Parse and validate a plan. `cluster_flag` is the `--cluster` value, if given; `settings`
/// say whether a region karpctl does not know is accepted.
pub fn parse_with(text: &str, file: &str, cluster_flag: Option<&str>, settings: &Settings) -> Result<Spec, UserError> {
    let raw: RawPlan = toml::from_str(text).map_err(|e| {
        let line = e.span().map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
        let at = match line {
            Some(l) => format!("{file}:{l}"),
            None => file.to_string(),
        };
        match unknown_key(e.message(), text, e.span().map(|s| s.start)) {
            Some((message, hint)) => UserError::new(format!("{at}: {message}")).hint(hint),
            None => UserError::new(format!("{at}: {}", e.message()))
                .hint("fix the plan file; every key is documented in the README's plan reference"),
        }
    })?;
    let ctx = Ctx { file, text, allow_unknown_region: settings.allow_unknown_region };
    resolve(raw, &ctx, cluster_flag, Some(PathBuf::from(file)))
}

/// serde's "unknown field `x`, expected one of `a`, `b`" as karpctl says it: the key, its table,
/// and the closest known key ("did you mean"), or the keys there are. None for other errors.
fn unknown_key(message: &str, text: &str, at: Option<usize>) -> Option<(String, String)> {
    let rest = message.strip_prefix("unknown field `")?;
    let (key, rest) = rest.split_once('`')?;
    let known: Vec<&str> = rest.split('`').skip(1).step_by(2).collect();
    // The table the key is in: the last `[header]` line before it.
    let before = &text[..at.unwrap_or(0).min(text.len())];
    let table = before
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('[') && !l.starts_with("[["))
        .map(|l| l.trim_matches(['[', ']', ' ']).to_string());
    let place = match &table {
        Some(t) => format!("in [{t}]"),
        None => "at the top level".to_string(),
    };
    let message = format!("unknown key `{key}` {place}");
    let hint = match crate::suggest::closest(key, known.iter().copied()) {
        Some(k) => format!("did you mean `{k}`? (every key is in the README's plan reference)"),
        None if !known.is_empty() => {
            format!("the keys {place} are {}", known.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", "))
        }
        None => "every key is documented in the README's plan reference".to_string(),
    };
    Some((message, hint))
}

/// The plan karpctl uses when there is no plan file: everything from defaults.
pub fn defaults(cluster: &str) -> Result<Spec, UserError> {
    let ctx = Ctx { file: "--cluster", text: "", allow_unknown_region: false };
    resolve(RawPlan::default(), &ctx, Some(cluster), None)
}

fn resolve(raw: RawPlan, ctx: &Ctx, cluster_flag: Option<&str>, source: Option<PathBuf>) -> Result<Spec, UserError> {
    let cluster = match (&raw.cluster, cluster_flag) {
        (Some(p), Some(f)) if p != f => {
            return Err(ctx
                .err("", "cluster", &format!("is {p:?} but --cluster is {f:?}"))
                .hint("use the plan file made for this cluster, or fix `cluster` in it"));
        }
        (Some(p), _) => p.clone(),
        (None, Some(f)) => f.to_string(),
        (None, None) => return Err(ctx.err("", "cluster", "is missing").hint("add `cluster = \"<name>\"` or pass --cluster")),
    };
    if let Err(e) = validate_cluster_name(&cluster) {
        let e = if raw.cluster.is_some() {
            ctx.err("", "cluster", &e)
        } else {
            UserError::new(format!("--cluster {cluster:?}: {e}"))
        };
        return Err(e.hint("EKS cluster names are 1-100 letters, digits, '-' and '_', starting with a letter or digit"));
    }
    if let Some(r) = &raw.region {
        validate_region(r, ctx.allow_unknown_region)
            .map_err(|e| ctx.err("", "region", &e).hint("use an AWS region name such as us-east-1"))?;
    }
    if let Some(a) = &raw.account_id
        && (a.len() != 12 || !a.chars().all(|c| c.is_ascii_digit()))
    {
        return Err(ctx.err("", "account_id", &format!("{a:?} is not a 12-digit AWS account id")));
    }
    let assume_role = resolve_assume_role(&raw, ctx, &cluster)?;
    validate_tags(ctx, &raw.tags)?;

    let i = raw.interruption;
    let default_queue = format!("Karpenter-{cluster}");
    let (queue_name, queue_name_note) = match &i.queue_name {
        Some(q) => {
            if q.is_empty() || q.len() > 80 || !q.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
                return Err(ctx
                    .err("interruption", "queue_name", &format!("{q:?} is not a valid SQS queue name"))
                    .hint("use 1 to 80 letters, digits, '-' or '_'"));
            }
            (q.clone(), None)
        }
        None => {
            let (n, shortened) = names::fit(&default_queue, 80);
            (n.clone(), shortened.then(|| format!("queue name shortened to fit SQS's 80 characters: {n}")))
        }
    };
    if let Some(k) = &i.kms_key_id {
        if k.trim().is_empty() {
            return Err(ctx
                .err("interruption", "kms_key_id", "is empty")
                .hint("remove it to use SSE-SQS, give a KMS key id, ARN or alias, or \"create\" to have karpctl make one"));
        }
        if is_aws_managed_sqs_key(k) {
            return Err(ctx
                .err(
                    "interruption",
                    "kms_key_id",
                    &format!("is {k:?}, the AWS managed key for SQS; EventBridge can never deliver to a queue encrypted with it (its key policy cannot grant events.amazonaws.com), so Karpenter would receive no interruption events"),
                )
                .hint("use a customer managed KMS key whose key policy lets events.amazonaws.com use kms:GenerateDataKey and kms:Decrypt, or remove kms_key_id to use SSE-SQS"));
        }
        if i.sqs_managed_sse == Some(true) {
            return Err(ctx
                .err(
                    "interruption",
                    "sqs_managed_sse",
                    "is true while `interruption.kms_key_id` is set; a queue uses one or the other",
                )
                .hint("remove `sqs_managed_sse` to encrypt with the KMS key, or remove `kms_key_id` to use SSE-SQS"));
        }
    } else if i.sqs_managed_sse == Some(false) {
        return Err(ctx
            .err(
                "interruption",
                "sqs_managed_sse",
                "is false but no `interruption.kms_key_id` is set; the queue must be encrypted",
            )
            .hint("remove `sqs_managed_sse` (SSE-SQS is the default) or set `kms_key_id`"));
    }
    let rule_names = resolve_rule_names(i.rule_names.unwrap_or_default(), ctx)?;
    let (merged, rules_note) = match i.rules.as_deref() {
        None | Some(SEPARATE) => (false, None),
        Some(MERGED) => (true, None),
        Some(FIVE) => (
            false,
            Some(format!(
                "{}: interruption.rules = \"{FIVE}\" is now \"{SEPARATE}\" (same layout: one rule per event kind); write \"{SEPARATE}\", as \"{FIVE}\" may stop being accepted",
                ctx.file
            )),
        ),
        Some(other) => {
            return Err(ctx.err("interruption", "rules", &format!("is {other:?}")).hint(format!(
                "use \"{SEPARATE}\" (upstream's layout, one rule per event kind, the default) or \"{MERGED}\" (one rule per cluster for large fleets)"
            )));
        }
    };
    if merged && !rule_names.is_empty() {
        return Err(ctx
            .err("interruption", "rules", "is \"merged\" while `interruption.rule_names` keeps rules of the separate-rule layout")
            .hint(format!("remove `rule_names` (the merged rule replaces those rules) or use rules = \"{SEPARATE}\"")));
    }
    let identity = resolve_identity(&raw.identity, ctx, &cluster)?;
    let discovery = resolve_discovery(raw.discovery, ctx)?;
    let create_key = i.kms_key_id.as_deref() == Some(CREATE_KEY);
    let kms_key_id = i.kms_key_id.map(|k| if create_key { created_key_alias(&cluster) } else { k });
    Ok(Spec {
        identity,
        discovery,
        cluster,
        region: raw.region,
        account_id: raw.account_id,
        assume_role,
        tags: raw.tags,
        interruption: Interruption {
            enabled: i.enabled.unwrap_or(true),
            queue_name,
            queue_name_note,
            create_key,
            kms_key_id,
            rule_names,
            merged,
            rules_note,
        },
        create_spot_role: raw.account.create_spot_service_linked_role.unwrap_or(false),
        source,
    })
}

/// `interruption.rule_names`: each key a rule part of `catalog::RULES`, each name one EventBridge
/// accepts (1 to 64 of letters, digits and `.-_`), no name twice.
fn resolve_rule_names(
    names: std::collections::BTreeMap<String, String>,
    ctx: &Ctx,
) -> Result<std::collections::BTreeMap<String, String>, UserError> {
    let mut seen = std::collections::BTreeSet::new();
    for (part, name) in &names {
        if crate::catalog::rule(part).is_none() {
            let parts: Vec<&str> = crate::catalog::RULES.iter().map(|r| r.part).collect();
            return Err(ctx
                .err("interruption.rule_names", part, "is not one of Karpenter's interruption rules")
                .hint(format!("use one of {}", parts.join(", "))));
        }
        if name.is_empty() || name.len() > 64 || !name.chars().all(|c| c.is_ascii_alphanumeric() || ".-_".contains(c)) {
            return Err(ctx
                .err("interruption.rule_names", part, &format!("{name:?} is not a valid EventBridge rule name"))
                .hint("use 1 to 64 letters, digits, '.', '-' or '_'"));
        }
        if !seen.insert(name.to_lowercase()) {
            return Err(ctx.err("interruption.rule_names", part, &format!("names rule {name:?} a second time")));
        }
    }
    Ok(names)
}

/// `alias/aws/sqs`, as an alias name or an alias ARN.
pub fn is_aws_managed_sqs_key(k: &str) -> bool {
    let k = k.trim();
    k == "alias/aws/sqs" || (k.starts_with("arn:") && k.contains(":kms:") && k.ends_with(":alias/aws/sqs"))
}

fn is_policy_arn(a: &str) -> bool {
    a.starts_with("arn:") && a.contains(":iam::") && a.contains(":policy/")
}

fn valid_iam_name(n: &str, limit: usize) -> bool {
    !n.is_empty() && n.len() <= limit && n.chars().all(|c| c.is_ascii_alphanumeric() || "+=,.@_-".contains(c))
}

fn resolve_identity(i: &RawIdentity, ctx: &Ctx, cluster: &str) -> Result<Identity, UserError> {
    let mode = match i.mode.as_deref() {
        None | Some("pod_identity") => IdentityMode::PodIdentity,
        Some("irsa") => IdentityMode::Irsa,
        Some(other) => {
            return Err(ctx.err("identity", "mode", &format!("is {other:?}; use \"pod_identity\" or \"irsa\"")));
        }
    };
    // "running": the version CloudTrail shows the controller running, resolved by `prepare`
    // before the desired state is built (the newest until then).
    let follow_running = i.karpenter_version.as_deref().is_some_and(|v| v.trim().eq_ignore_ascii_case("running"));
    let karpenter_version = match i.karpenter_version.as_ref().filter(|_| !follow_running) {
        Some(v) => crate::karpenter_iam::KarpenterVersion::parse(v).map_err(|e| {
            ctx.err("identity", "karpenter_version", &e)
                .hint("use a version from 1.0 to 1.14, such as \"1.14\", or \"running\" (the version CloudTrail shows)")
        })?,
        None => crate::karpenter_iam::KarpenterVersion::LATEST,
    };
    let path = match &i.path {
        Some(p) => {
            if !(p.starts_with('/') && p.ends_with('/') && p.len() <= 512 && p.chars().all(|c| c.is_ascii_graphic())) {
                return Err(ctx
                    .err("identity", "path", &format!("{p:?} is not an IAM path"))
                    .hint("an IAM path starts and ends with '/' and is at most 512 characters, e.g. \"/karpctl/my-cluster/\""));
            }
            p.clone()
        }
        None => format!("/karpctl/{cluster}/"),
    };
    for (key, val, limit) in [
        ("node_role_name", &i.node_role_name, 64),
        ("controller_role_name", &i.controller_role_name, 64),
        ("instance_profile_name", &i.instance_profile_name, 128),
    ] {
        if let Some(v) = val
            && !valid_iam_name(v, limit)
        {
            return Err(ctx
                .err("identity", key, &format!("{v:?} is not a valid IAM name"))
                .hint(format!("use 1 to {limit} letters, digits and +=,.@_-")));
        }
    }
    if i.existing_node_role.is_some() && i.node_role_name.is_some() {
        return Err(ctx.err("identity", "existing_node_role", "and `identity.node_role_name` are both set").hint(
            "set `existing_node_role` to use a role you already have, or `node_role_name` to have karpctl create one, not both",
        ));
    }
    if let Some(e) = &i.existing_node_role {
        let name = e.rsplit('/').next().unwrap_or(e);
        if !(valid_iam_name(name, 64) && (!e.contains(':') || e.starts_with("arn:"))) {
            return Err(ctx.err("identity", "existing_node_role", &format!("{e:?} is neither an IAM role name nor a role ARN")));
        }
    }
    if let Some(b) = &i.permissions_boundary
        && !is_policy_arn(b)
    {
        return Err(ctx
            .err("identity", "permissions_boundary", &format!("{b:?} is not an IAM managed policy ARN"))
            .hint("use the boundary policy's ARN, like arn:aws:iam::123456789012:policy/MyBoundary"));
    }
    for a in &i.extra_node_policy_arns {
        if !is_policy_arn(a) {
            return Err(ctx
                .err("identity", "extra_node_policy_arns", &format!("{a:?} is not an IAM policy ARN"))
                .hint("use ARNs like arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess"));
        }
    }
    for a in &i.extra_controller_policy_arns {
        if !is_policy_arn(a) {
            return Err(ctx
                .err("identity", "extra_controller_policy_arns", &format!("{a:?} is not an IAM policy ARN"))
                .hint("use ARNs like arn:aws:iam::123456789012:policy/KarpenterKms"));
        }
        if i.retire_policies.contains(a) {
            return Err(ctx
                .err("identity", "extra_controller_policy_arns", &format!("{a:?} is also in identity.retire_policies"))
                .hint("a policy is either kept on the controller role or retired: remove it from one of the two lists"));
        }
    }
    for r in &i.retire_policies {
        if !(is_policy_arn(r) || valid_iam_name(r, 128)) {
            return Err(ctx
                .err("identity", "retire_policies", &format!("{r:?} is neither a managed policy ARN nor an inline policy name"))
                .hint("list managed policies by ARN (arn:aws:iam::123456789012:policy/NAME) and inline ones by name"));
        }
    }
    let access_entry_type = match i.access_entry_type.as_deref() {
        None => "EC2_LINUX".to_string(),
        Some(t @ ("EC2_LINUX" | "EC2_WINDOWS")) => t.to_string(),
        Some(t) => {
            return Err(ctx.err("identity", "access_entry_type", &format!("is {t:?}; use \"EC2_LINUX\" or \"EC2_WINDOWS\"")));
        }
    };
    let k8s_name = |key: &str, v: &str| -> Result<(), UserError> {
        let ok = !v.is_empty()
            && v.len() <= 63
            && v.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !v.starts_with('-')
            && !v.ends_with('-');
        if ok {
            Ok(())
        } else {
            Err(ctx.err("identity", key, &format!("{v:?} is not a valid Kubernetes name (lower-case letters, digits, '-')")))
        }
    };
    let namespace = i.namespace.clone().unwrap_or_else(|| "kube-system".into());
    k8s_name("namespace", &namespace)?;
    let service_account = i.service_account.clone().unwrap_or_else(|| "karpenter".into());
    k8s_name("service_account", &service_account)?;
    let instance_profile_name =
        named(i.instance_profile_name.as_deref(), format!("KarpenterNodeInstanceProfile-{cluster}"), 128, "instance profile");
    Ok(Identity {
        mode,
        karpenter_version,
        follow_running,
        path,
        node_role: i
            .existing_node_role
            .is_none()
            .then(|| named(i.node_role_name.as_deref(), format!("KarpenterNodeRole-{cluster}"), 64, "node role")),
        existing_node_role: i.existing_node_role.clone(),
        controller_role: named(
            i.controller_role_name.as_deref(),
            format!("KarpenterController-{cluster}"),
            64,
            "controller role",
        ),
        extra_node_policy_arns: i.extra_node_policy_arns.clone(),
        extra_controller_policy_arns: i.extra_controller_policy_arns.clone(),
        instance_profile: i.instance_profile.unwrap_or(false).then(|| instance_profile_name.clone()),
        instance_profile_off: i.instance_profile == Some(false),
        instance_profile_name,
        access_entry_type,
        namespace,
        service_account,
        create_pod_identity_agent: i.create_pod_identity_agent.unwrap_or(false),
        zonal_shift: i.zonal_shift.unwrap_or(false),
        node_trust_source_account: i.node_trust_source_account.unwrap_or(false),
        permissions_boundary: i.permissions_boundary.clone(),
        retire_policies: i.retire_policies.clone(),
    })
}

fn resolve_discovery(d: RawDiscovery, ctx: &Ctx) -> Result<Discovery, UserError> {
    if d.subnet_ids.is_some() && d.subnet_tags.is_some() {
        return Err(ctx
            .err("discovery", "subnet_tags", "and `discovery.subnet_ids` are both set")
            .hint("choose subnets either by id or by tag filter"));
    }
    if let Some(ids) = &d.subnet_ids {
        if ids.is_empty() {
            return Err(ctx.err("discovery", "subnet_ids", "is empty").hint("remove it to use the cluster's subnets"));
        }
        if let Some(bad) = ids.iter().find(|s| !s.starts_with("subnet-")) {
            return Err(ctx.err("discovery", "subnet_ids", &format!("{bad:?} is not a subnet id (subnet-...)")));
        }
    }
    if let Some(t) = &d.subnet_tags
        && t.is_empty()
    {
        return Err(ctx.err("discovery", "subnet_tags", "is empty").hint("remove it to use the cluster's subnets"));
    }
    if d.security_group_id.is_some() && d.security_group_name.is_some() {
        return Err(ctx
            .err("discovery", "security_group_name", "and `discovery.security_group_id` are both set")
            .hint("name the security group either by id or by name"));
    }
    if let Some(id) = &d.security_group_id
        && !id.starts_with("sg-")
    {
        return Err(ctx.err("discovery", "security_group_id", &format!("{id:?} is not a security group id (sg-...)")));
    }
    Ok(Discovery {
        subnet_ids: d.subnet_ids,
        subnet_tags: d.subnet_tags,
        security_group_id: d.security_group_id,
        security_group_name: d.security_group_name,
        associate_public_ip: d.associate_public_ip.unwrap_or(false),
    })
}

fn resolve_assume_role(raw: &RawPlan, ctx: &Ctx, cluster: &str) -> Result<Option<AssumeRole>, UserError> {
    let Some(arn) = &raw.assume_role_arn else {
        for (key, v) in [("external_id", &raw.external_id), ("session_name", &raw.session_name)] {
            if v.is_some() {
                return Err(ctx.err("", key, "is set without `assume_role_arn`").hint("add `assume_role_arn`, or remove it"));
            }
        }
        return Ok(None);
    };
    let account_id = validate_role_arn(arn).map_err(|e| ctx.err("", "assume_role_arn", &e))?;
    if let Some(pin) = &raw.account_id
        && pin != &account_id
    {
        return Err(ctx.err(
            "",
            "assume_role_arn",
            &format!("is in account {account_id}, but the plan is pinned to `account_id = \"{pin}\"`"),
        ));
    }
    if let Some(x) = &raw.external_id
        && (x.len() < 2 || x.len() > 1224 || !x.chars().all(|c| c.is_ascii_alphanumeric() || "+=,.@:/_-".contains(c)))
    {
        return Err(ctx.err("", "external_id", "must be 2 to 1224 letters, digits and +=,.@:/-_"));
    }
    let session_name = match &raw.session_name {
        Some(s) => {
            validate_session_name(s).map_err(|e| ctx.err("", "session_name", &e))?;
            s.clone()
        }
        None => {
            let mut s: String = format!("karpctl-{cluster}")
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '-' })
                .collect();
            s.truncate(64);
            s
        }
    };
    Ok(Some(AssumeRole { role_arn: arn.clone(), account_id, external_id: raw.external_id.clone(), session_name }))
}

/// Find the plan for a command: `--config`, else `plans/<cluster>.toml` if it exists, else
/// defaults. Without a cluster: KARPCTL_CLUSTER (`settings.cluster`), or the only plan in `plans/`.
pub fn load(
    plan_flag: Option<&Path>,
    cluster_flag: Option<&str>,
    plans_dir: &Path,
    settings: &Settings,
) -> Result<Spec, UserError> {
    if let Some(p) = plan_flag {
        let text = std::fs::read_to_string(p)
            .map_err(|e| UserError::new(format!("cannot read plan file {}: {e}", p.display())).hint("check the --config path"))?;
        return parse_with(&text, &p.display().to_string(), cluster_flag, settings);
    }
    let cluster = match cluster_flag {
        Some(c) => c.to_string(),
        None => pick_cluster(plans_dir, settings.cluster.as_deref())?,
    };
    let path = plans_dir.join(format!("{cluster}.toml"));
    if path.exists() {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| UserError::new(format!("cannot read plan file {}: {e}", path.display())))?;
        parse_with(&text, &path.display().to_string(), Some(&cluster), settings)
    } else {
        defaults(&cluster)
    }
}

fn pick_cluster(plans_dir: &Path, env_cluster: Option<&str>) -> Result<String, UserError> {
    if let Some(c) = env_cluster {
        return Ok(c.to_string());
    }
    let mut found: Vec<String> = std::fs::read_dir(plans_dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    let p = e.path();
                    (p.extension().is_some_and(|x| x == "toml")).then(|| p.file_stem().unwrap().to_string_lossy().to_string())
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(UserError::new("no cluster given and no plan in plans/").hint("pass --cluster NAME or set KARPCTL_CLUSTER")),
        _ => Err(UserError::new(format!("no cluster given and plans/ holds several plans: {}", found.join(", ")))
            .hint("pass --cluster NAME or set KARPCTL_CLUSTER")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_plan_parses() {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/plans/say-when-east.toml")).unwrap();
        let s = parse(&text, "plans/say-when-east.toml", Some("say-when-east")).unwrap();
        assert_eq!(s.cluster, "say-when-east");
        assert_eq!(s.region.as_deref(), Some("us-east-1"));
        assert!(s.interruption.enabled);
        assert_eq!(s.interruption.queue_name, "Karpenter-say-when-east");
        assert_eq!(s.interruption.kms_key_id, None);
    }

    #[test]
    fn tags_outside_iams_character_set_are_refused_naming_the_tag() {
        for (key, value) in [("team", "a,b"), ("cost#center", "x"), ("owner", "o'brien"), ("x", "(y)"), ("a*", "b")] {
            let text = format!("cluster = \"a\"\n[tags]\n\"{key}\" = \"{value}\"\n");
            let e = parse(&text, "p.toml", None).unwrap_err();
            assert!(e.message.starts_with("p.toml:3:"), "{}", e.message);
            assert!(e.message.contains(key), "{}", e.message);
            assert!(e.message.contains("IAM does not allow"), "{}", e.message);
        }
        let ok = "cluster = \"a\"\n[tags]\n\"team/owner\" = \"platform:core+ops@example.com = 1\"\n\"équipe\" = \"plateforme\"\n";
        assert!(parse(ok, "p.toml", None).is_ok());
    }

    #[test]
    fn associate_public_ip_is_a_boolean_off_by_default() {
        assert!(!parse("cluster = \"a\"\n", "p.toml", None).unwrap().discovery.associate_public_ip);
        let on = parse("cluster = \"a\"\n[discovery]\nassociate_public_ip = true\n", "p.toml", None).unwrap();
        assert!(on.discovery.associate_public_ip);
        let e = parse("cluster = \"a\"\n[discovery]\nassociate_public_ip = \"yes\"\n", "p.toml", None).unwrap_err();
        assert!(e.message.starts_with("p.toml:3:") && e.message.contains("bool"), "{}", e.message);
        let e = parse("cluster = \"a\"\n[discovery]\nassociate_public_ips = true\n", "p.toml", None).unwrap_err();
        assert!(e.message.contains("associate_public_ips"), "{}", e.message);
    }

    #[test]
    fn the_aws_managed_sqs_key_is_refused() {
        for k in ["alias/aws/sqs", "arn:aws:kms:us-east-1:123456789012:alias/aws/sqs"] {
            let text = format!("cluster = \"a\"\n[interruption]\nkms_key_id = \"{k}\"\n");
            let e = parse(&text, "p.toml", None).unwrap_err();
            assert!(e.message.contains("EventBridge can never deliver"), "{}", e.message);
            assert!(e.message.starts_with("p.toml:3:"), "{}", e.message);
        }
        assert!(parse("cluster = \"a\"\n[interruption]\nkms_key_id = \"alias/my-key\"\n", "p.toml", None).is_ok());
    }

    #[test]
    fn permissions_boundaries_must_be_policy_arns() {
        let e = parse("cluster = \"a\"\n[identity]\npermissions_boundary = \"MyBoundary\"\n", "p.toml", None).unwrap_err();
        assert!(e.message.contains("identity.permissions_boundary"), "{}", e.message);
        let s =
            parse("cluster = \"a\"\n[identity]\npermissions_boundary = \"arn:aws:iam::123456789012:policy/B\"\n", "p.toml", None)
                .unwrap();
        assert_eq!(s.identity.permissions_boundary.as_deref(), Some("arn:aws:iam::123456789012:policy/B"));
    }

    #[test]
    fn rule_layout_is_separate_or_merged_and_five_is_read_as_separate_with_a_note() {
        let p = |rules: &str| parse(&format!("cluster = \"a\"\n[interruption]\nrules = \"{rules}\"\n"), "p.toml", None);
        let s = p("separate").unwrap();
        assert!(!s.interruption.merged && s.interruption.rules_note.is_none());
        let s = p("merged").unwrap();
        assert!(s.interruption.merged && s.interruption.rules_note.is_none());
        let s = parse("cluster = \"a\"\n", "p.toml", None).unwrap();
        assert!(!s.interruption.merged && s.interruption.rules_note.is_none(), "separate is the default");
        let s = p("five").unwrap();
        assert!(!s.interruption.merged);
        let note = s.interruption.rules_note.unwrap();
        assert!(note.contains("\"five\" is now \"separate\"") && note.contains("p.toml"), "{note}");
        let e = p("four").unwrap_err();
        assert!(e.message.contains("interruption.rules"), "{}", e.message);
        let hint = e.hint.unwrap_or_default();
        assert!(hint.contains("\"separate\"") && hint.contains("\"merged\"") && !hint.contains("five"), "{hint}");
    }

    #[test]
    fn kept_rules_and_retired_policies_are_checked() {
        let p = |body: &str| parse(&format!("cluster = \"a\"\n{body}"), "p.toml", None);
        let e = p("[interruption]\nrule_names = { Spot = \"r\" }\n").unwrap_err();
        assert!(e.message.contains("interruption.rule_names.Spot") && e.message.contains("not one of"), "{}", e.message);
        let e = p("[interruption]\nrule_names = { SpotInterrupt = \"a b\" }\n").unwrap_err();
        assert!(e.message.contains("not a valid EventBridge rule name"), "{}", e.message);
        let e = p("[interruption]\nrule_names = { SpotInterrupt = \"r\", Rebalance = \"R\" }\n").unwrap_err();
        assert!(e.message.contains("a second time"), "{}", e.message);
        let s = p("[interruption]\nrule_names = { SpotInterrupt = \"KarpenterSpotInterrupt-1\" }\n").unwrap();
        assert_eq!(crate::arns::rule_name(&s, "SpotInterrupt").0, "KarpenterSpotInterrupt-1");
        assert_eq!(crate::arns::rule_name(&s, "Rebalance").0, "Karpenter-a-Rebalance");
        let e = p("[identity]\nretire_policies = [\"arn:aws:s3:::x\"]\n").unwrap_err();
        assert!(e.message.contains("identity.retire_policies"), "{}", e.message);
        let s = p("[identity]\nretire_policies = [\"arn:aws:iam::123456789012:policy/P\", \"Inline\"]\n").unwrap();
        assert_eq!(s.identity.retire_policies.len(), 2);
        let e = p("[identity]\nextra_controller_policy_arns = [\"Kms\"]\n").unwrap_err();
        assert!(e.message.contains("identity.extra_controller_policy_arns"), "{}", e.message);
        let both = "[identity]\nextra_controller_policy_arns = [\"arn:aws:iam::123456789012:policy/P\"]\nretire_policies = [\"arn:aws:iam::123456789012:policy/P\"]\n";
        assert!(p(both).unwrap_err().message.contains("retire_policies"));
        let s = p("[identity]\nextra_controller_policy_arns = [\"arn:aws:iam::123456789012:policy/Kms\"]\n").unwrap();
        assert_eq!(s.identity.extra_controller_policy_arns, ["arn:aws:iam::123456789012:policy/Kms"]);
    }

    #[test]
    fn unknown_keys_are_rejected_with_the_line() {
        let e = parse("cluster = \"a\"\n[interruption]\nenabeld = true\n", "p.toml", None).unwrap_err();
        assert!(e.message.starts_with("p.toml:3:"), "{}", e.message);
        assert!(e.message.contains("unknown key `enabeld` in [interruption]"), "{}", e.message);
        assert_eq!(e.hint.as_deref(), Some("did you mean `enabled`? (every key is in the README's plan reference)"));
        let e = parse("cluster = \"a\"\nregoin = \"us-east-1\"\n", "p.toml", None).unwrap_err();
        assert!(e.message.contains("unknown key `regoin` at the top level"), "{}", e.message);
        assert!(e.hint.unwrap().contains("did you mean `region`?"));
        // Nothing close: the keys of that table.
        let e = parse("cluster = \"a\"\n[account]\nspot = true\n", "p.toml", None).unwrap_err();
        assert!(e.hint.unwrap().contains("`create_spot_service_linked_role`"));
    }

    #[test]
    fn wrong_types_and_bad_toml_name_the_line() {
        let e = parse("cluster = \"a\"\nregion = 5\n", "p.toml", None).unwrap_err();
        assert!(e.message.starts_with("p.toml:2:"), "{}", e.message);
        let e = parse("cluster = \n", "p.toml", None).unwrap_err();
        assert!(e.message.starts_with("p.toml:1:"), "{}", e.message);
    }

    #[test]
    fn invalid_values_name_the_field() {
        let cases = [
            ("cluster = \"-bad\"\n", "`cluster`"),
            ("cluster = \"a\"\nregion = \"moon-1\"\n", "`region`"),
            ("cluster = \"a\"\naccount_id = \"12\"\n", "`account_id`"),
            ("cluster = \"a\"\n[interruption]\nqueue_name = \"has space\"\n", "`interruption.queue_name`"),
            (
                "cluster = \"a\"\n[interruption]\nkms_key_id = \"alias/k\"\nsqs_managed_sse = true\n",
                "`interruption.sqs_managed_sse`",
            ),
            ("cluster = \"a\"\n[tags]\n\"aws:x\" = \"y\"\n", "`tags.aws:x`"),
        ];
        for (text, field) in cases {
            let e = parse(text, "p.toml", None).unwrap_err();
            assert!(e.message.contains(field), "{text}: {}", e.message);
        }
    }

    #[test]
    fn cluster_must_match_the_flag() {
        let e = parse("cluster = \"a\"\n", "p.toml", Some("b")).unwrap_err();
        assert!(e.message.contains("--cluster"), "{}", e.message);
    }

    #[test]
    fn long_cluster_names_get_a_shortened_queue_name() {
        let c = "c".repeat(100);
        let s = defaults(&c).unwrap();
        assert!(s.interruption.queue_name.len() <= 80);
        assert!(s.interruption.queue_name_note.is_some());
    }

    #[test]
    fn cluster_names() {
        assert!(validate_cluster_name("say-when-east").is_ok());
        assert!(validate_cluster_name(&"a".repeat(100)).is_ok());
        assert!(validate_cluster_name(&"a".repeat(101)).is_err());
        assert!(validate_cluster_name("a.b").is_err());
        assert!(validate_cluster_name("").is_err());
    }

    #[test]
    fn regions() {
        for r in ["us-east-1", "us-gov-west-1", "cn-north-1", "ap-northeast-1", "eu-central-2"] {
            assert!(validate_region(r, false).is_ok(), "{r}");
        }
        for r in ["useast1", "us-east", "US-EAST-1", "moon-1", "us-moon-1"] {
            assert!(validate_region(r, false).is_err(), "{r}");
        }
    }

    #[test]
    fn assume_role_arn_is_validated_and_names_its_account() {
        assert_eq!(validate_role_arn("arn:aws:iam::210987654321:role/karpctl").unwrap(), "210987654321");
        assert_eq!(validate_role_arn("arn:aws-cn:iam::210987654321:role/a/b/Deploy_1").unwrap(), "210987654321");
        for bad in [
            "",
            "arn:aws:iam::2109:role/x",
            "arn:aws:sts::210987654321:role/x",
            "arn:aws:iam::210987654321:user/x",
            "arn:aws:iam:us-east-1:210987654321:role/x",
            "arn:aws:iam::210987654321:role/",
            "arn:aws:iam::210987654321:role/a b",
        ] {
            assert!(validate_role_arn(bad).is_err(), "{bad}");
        }
        let s = parse(
            "cluster = \"a\"\nassume_role_arn = \"arn:aws:iam::210987654321:role/x\"\nexternal_id = \"ext-1\"\n",
            "p.toml",
            None,
        )
        .unwrap();
        let r = s.assume_role.unwrap();
        assert_eq!(
            (r.account_id.as_str(), r.session_name.as_str(), r.external_id.as_deref()),
            ("210987654321", "karpctl-a", Some("ext-1"))
        );
        let e = parse("cluster = \"a\"\nassume_role_arn = \"arn:aws:iam::2:role/x\"\n", "p.toml", None).unwrap_err();
        assert!(e.message.contains("p.toml:2: `assume_role_arn`"), "{}", e.message);
        let e = parse(
            "cluster = \"a\"\naccount_id = \"123456789012\"\nassume_role_arn = \"arn:aws:iam::210987654321:role/x\"\n",
            "p.toml",
            None,
        )
        .unwrap_err();
        assert!(e.message.contains("pinned"), "{}", e.message);
        assert!(parse("cluster = \"a\"\nexternal_id = \"ext-1\"\n", "p.toml", None).is_err());
    }
}
