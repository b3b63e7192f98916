//! `karpctl output`: what a user passes on to Karpenter (docs/aws-behaviour.md section 4), read from live AWS.

use crate::cli::OutputFormat;
use crate::desired;
use crate::error::UserError;
use crate::model::{Kind, Owner};
use crate::options::Options;
use crate::report::ValuesReport;
use crate::spec::IdentityMode;
use anyhow::Result;
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;

pub async fn run(global: &Options, format: OutputFormat) -> Result<ValuesReport> {
    let p = crate::prepare::prepare(global, crate::facts::prepared::Intent::Diff, false).await?;
    let spec = &p.spec;
    let nodes = desired::build(spec, &p.facts);
    // Read only what the outputs name.
    let wanted: Vec<_> = nodes
        .into_iter()
        .filter(|n| {
            n.fields.is_some() && matches!(n.kind, Kind::Queue | Kind::IamRole | Kind::InstanceProfile | Kind::PodIdentity)
        })
        .collect();
    let observed = crate::observe::observe_nodes(&p.ctx, wanted, global.concurrency as usize).await?;
    let missing: Vec<String> = observed
        .iter()
        .filter(|(_, o)| !matches!(o.as_ref().map(|o| &o.owner), Some(Owner::Ours | Owner::External)))
        .map(|(n, o)| match o {
            None => format!("{} {} does not exist", n.kind.label(), n.name),
            Some(_) => format!("{} {} is not karpctl's for this cluster", n.kind.label(), n.name),
        })
        .collect();
    if !missing.is_empty() {
        return Err(UserError::new(format!(
            "the cluster's Karpenter resources are not in place:\n  - {}",
            missing.join("\n  - ")
        ))
        .hint(format!("run `karpctl up --cluster {}` first", spec.cluster))
        .into());
    }
    let id = &spec.identity;
    let controller_arn = crate::arns::controller_role_arn(spec, &p.facts);
    let node_role_name = id.node_role_name();
    let node_role_arn = crate::arns::node_role_arn(spec, &p.facts);
    let queue = spec.interruption.enabled.then(|| spec.interruption.queue_name.clone());
    // An isolated cluster's EC2NodeClass names the profile karpctl made: Karpenter cannot
    // create one without an IAM endpoint.
    let profile = crate::resources::instance_profile::wanted(spec, &p.facts).then(|| id.instance_profile_name.name.clone());
    let selector = json!([{"tags": {"karpenter.sh/discovery": spec.cluster}}]);
    let doc = json!({
        "format_version": 1,
        "cluster_name": spec.cluster,
        "account_id": p.facts.account_id,
        "region": p.facts.region,
        "interruption_queue": queue,
        "interruption_queue_arn": queue.as_ref().map(|q| crate::arns::queue_arn(&p.facts, q)),
        "identity_mode": id.mode,
        "controller_role_arn": controller_arn,
        "controller_role_name": id.controller_role.name,
        "service_account": {"namespace": id.namespace, "name": id.service_account},
        "node_role_name": node_role_name,
        "node_role_arn": node_role_arn,
        "instance_profile": profile,
        "subnet_selector_terms": selector,
        "security_group_selector_terms": selector,
        "subnets": p.facts.discovery.subnets.iter().map(|s| s.id.clone()).collect::<Vec<_>>(),
        "security_group": p.facts.discovery.security_group.as_ref().map(|g| g.id.clone()),
        "isolated_vpc": p.facts.discovery.isolated,
        "associate_public_ip": p.facts.discovery.associate_public_ip,
        "karpenter_version": spec.identity.karpenter_version.to_string(),
        "kubernetes_version": p.facts.cluster.version,
    });
    let text = match format {
        OutputFormat::Json => serde_json::to_string_pretty(&doc)?,
        OutputFormat::Helm => helm(&doc, id.mode == IdentityMode::Irsa),
        OutputFormat::Nodeclass => nodeclass(&doc),
        OutputFormat::Manifests => manifests(&doc),
        OutputFormat::CallerPolicy => unreachable!("main.rs prints the caller policy (fleet::caller_policy)"),
    };
    Ok(ValuesReport { doc, text })
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

/// Karpenter's chart (an OCI artifact on ECR Public).
pub const CHART: &str = "oci://public.ecr.aws/karpenter/karpenter";

/// The chart version to install: a semver range of the minor release the permissions were made
/// for. Helm takes a range in `--version` for an OCI chart too (it lists the registry's tags and
/// picks the newest match), so `~1.14.0` is the newest 1.14 patch; `1.14.x` and `1.14` are not
/// versions helm can resolve to the minor's patches.
pub fn chart_range(karpenter_version: &str) -> String {
    format!("~{karpenter_version}.0")
}

/// YAML from the serializer (serde-saphyr): every string YAML 1.1 would read as another type
/// (`2024`, `1e3`, `0x1f`, `yes`, `on`, `null`, `1_000`...) is quoted, since Kubernetes and Helm
/// read YAML 1.1-ish; sequences indented under their key. No trailing newline.
pub fn to_yaml<T: Serialize>(value: &T) -> String {
    let options = serde_saphyr::ser_options! { compact_list_indent: false };
    let text = serde_saphyr::to_string_with_options(value, options)
        .unwrap_or_else(|e| unreachable!("karpctl's own values always serialize: {e}"));
    text.trim_end().to_string()
}

/// `yaml` with comment lines put before the first line that starts (after its indentation) with
/// each anchor, at that line's indentation. The serializer writes the data; the comments only
/// explain it, so they cannot change what a reader gets.
fn with_comments(yaml: &str, notes: &[(&str, Vec<String>)]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut used = vec![false; notes.len()];
    for line in yaml.lines() {
        let body = line.trim_start();
        let indent = &line[..line.len() - body.len()];
        for (i, (anchor, comment)) in notes.iter().enumerate() {
            if !used[i] && body.starts_with(anchor) {
                used[i] = true;
                out.extend(comment.iter().map(|c| format!("{indent}# {c}")));
            }
        }
        out.push(line.to_string());
    }
    debug_assert!(used.iter().all(|u| *u), "every comment has its line: {yaml}");
    out.join("\n")
}

/// The Helm values karpctl owns, as the chart names them.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct HelmValues<'a> {
    settings: HelmSettings<'a>,
    service_account: HelmServiceAccount<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct HelmSettings<'a> {
    cluster_name: &'a str,
    /// Written even when empty (no queue: interruption handling off), so that a release
    /// upgraded with `--reset-then-reuse-values` drops a queue it named before.
    interruption_queue: &'a str,
    #[serde(rename = "isolatedVPC")]
    isolated_vpc: bool,
}

#[derive(Serialize)]
struct HelmServiceAccount<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    annotations: BTreeMap<&'static str, &'a str>,
}

/// The `helm upgrade --install` command for these values (in `values.yaml`): the release's other
/// values are kept (`--reset-then-reuse-values`, Helm 3.14+) and these set over them.
pub fn helm_command(karpenter_version: &str, namespace: &str) -> String {
    format!(
        "helm upgrade --install karpenter {CHART} --version \"{}\" --namespace {namespace} --reset-then-reuse-values -f values.yaml",
        chart_range(karpenter_version)
    )
}

/// Helm values for the karpenter chart, with the install command first (a comment): the chart
/// pinned to the Karpenter release the permissions were made for, the release in the
/// association's namespace.
pub fn helm(doc: &Value, irsa: bool) -> String {
    let ns = s(&doc["service_account"]["namespace"]);
    let version = s(&doc["karpenter_version"]);
    let range = chart_range(version);
    let mut annotations = BTreeMap::new();
    if irsa {
        annotations.insert("eks.amazonaws.com/role-arn", s(&doc["controller_role_arn"]));
    }
    let values = HelmValues {
        settings: HelmSettings {
            cluster_name: s(&doc["cluster_name"]),
            interruption_queue: doc["interruption_queue"].as_str().unwrap_or_default(),
            isolated_vpc: doc["isolated_vpc"].as_bool() == Some(true),
        },
        service_account: HelmServiceAccount { name: s(&doc["service_account"]["name"]), annotations },
    };
    let head = [
        format!("# Karpenter {version}: the release these permissions were made for (identity.karpenter_version)."),
        format!("# --version \"{range}\" installs its newest patch; to pin one, take `version:` from"),
        format!("#   helm show chart {CHART} --version \"{range}\""),
        "#   (or https://github.com/aws/karpenter-provider-aws/releases) and pass it instead.".to_string(),
        format!("# {}", helm_command(version, ns)),
    ];
    let mut notes = Vec::new();
    if values.settings.interruption_queue.is_empty() {
        notes.push((
            "interruptionQueue:",
            vec!["No interruption queue (interruption.enabled = false): handling is off.".to_string()],
        ));
    }
    if values.settings.isolated_vpc {
        notes.push(("isolatedVPC:", vec!["The subnets have no route out (VPC endpoints only): no pricing API.".to_string()]));
    }
    let body = with_comments(&to_yaml(&values), &notes);
    format!("{}\n{body}", head.join("\n"))
}

/// A Kubernetes object as `kubectl apply` takes it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Object<S> {
    api_version: &'static str,
    kind: &'static str,
    metadata: Metadata,
    spec: S,
}

#[derive(Serialize)]
struct Metadata {
    name: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct NodeClassSpec<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    instance_profile: Option<&'a str>,
    #[serde(rename = "associatePublicIPAddress", skip_serializing_if = "Option::is_none")]
    associate_public_ip_address: Option<bool>,
    ami_selector_terms: Vec<AmiTerm>,
    subnet_selector_terms: Vec<TagTerm<'a>>,
    security_group_selector_terms: Vec<TagTerm<'a>>,
}

#[derive(Serialize)]
struct AmiTerm {
    alias: &'static str,
}

#[derive(Serialize)]
struct TagTerm<'a> {
    tags: BTreeMap<&'static str, &'a str>,
}

/// The AMI selector's comment: why not to keep `al2023@latest` in production and how to pin it
/// (karpctl has no SSM client to resolve the recommended release itself).
fn ami_comment(doc: &Value) -> Vec<String> {
    let k8s = match s(&doc["kubernetes_version"]) {
        "" => "<kubernetes version>",
        v => v,
    };
    vec![
        "@latest follows every EKS AMI release as AWS publishes it: Karpenter then sees drift and".to_string(),
        "replaces every node with an AMI nobody tested. In production pin a release:".to_string(),
        format!(
            "  aws ssm get-parameter --name /aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/x86_64/standard/recommended/image_id --query Parameter.Value --output text"
        ),
        "  aws ec2 describe-images --image-ids <that id> --query 'Images[0].Name' --output text   # ...-v<date>".to_string(),
        "and use `- alias: al2023@v<date>`.".to_string(),
    ]
}

/// An EC2NodeClass that uses the node role (or the instance profile) and the discovery tags.
pub fn nodeclass(doc: &Value) -> String {
    let c = s(&doc["cluster_name"]);
    let profile = doc["instance_profile"].as_str();
    let discovery = || vec![TagTerm { tags: BTreeMap::from([(crate::tags::DISCOVERY_TAG, c)]) }];
    let class = Object {
        api_version: "karpenter.k8s.aws/v1",
        kind: "EC2NodeClass",
        metadata: Metadata { name: "default" },
        spec: NodeClassSpec {
            // Who the nodes are.
            role: profile.is_none().then(|| s(&doc["node_role_name"])),
            instance_profile: profile,
            // Public subnets without MapPublicIpOnLaunch (`discovery.associate_public_ip`).
            associate_public_ip_address: (doc["associate_public_ip"].as_bool() == Some(true)).then_some(true),
            ami_selector_terms: vec![AmiTerm { alias: "al2023@latest" }],
            // Where they go.
            subnet_selector_terms: discovery(),
            security_group_selector_terms: discovery(),
        },
    };
    with_comments(&to_yaml(&class), &[("- alias:", ami_comment(doc))])
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct NodePoolSpec {
    template: Template,
    limits: BTreeMap<&'static str, u32>,
    disruption: Disruption,
}

#[derive(Serialize)]
struct Template {
    spec: TemplateSpec,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TemplateSpec {
    node_class_ref: NodeClassRef,
    requirements: Vec<Requirement>,
    expire_after: &'static str,
}

#[derive(Serialize)]
struct NodeClassRef {
    group: &'static str,
    kind: &'static str,
    name: &'static str,
}

#[derive(Serialize)]
struct Requirement {
    key: &'static str,
    operator: &'static str,
    values: &'static [&'static str],
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Disruption {
    consolidation_policy: &'static str,
    consolidate_after: &'static str,
}

/// A NodePool using the EC2NodeClass `default`: Linux on amd64 and arm64, on-demand and Spot,
/// the c, m and r families from generation 3, with its limits and disruption explained.
pub fn nodepool() -> String {
    let req = |key, operator, values| Requirement { key, operator, values };
    let pool = Object {
        api_version: "karpenter.sh/v1",
        kind: "NodePool",
        metadata: Metadata { name: "default" },
        spec: NodePoolSpec {
            template: Template {
                spec: TemplateSpec {
                    node_class_ref: NodeClassRef { group: "karpenter.k8s.aws", kind: "EC2NodeClass", name: "default" },
                    requirements: vec![
                        req("kubernetes.io/os", "In", &["linux"]),
                        req("kubernetes.io/arch", "In", &["amd64", "arm64"]),
                        req("karpenter.sh/capacity-type", "In", &["on-demand", "spot"]),
                        req("karpenter.k8s.aws/instance-category", "In", &["c", "m", "r"]),
                        req("karpenter.k8s.aws/instance-generation", "Gt", &["2"]),
                    ],
                    expire_after: "720h",
                },
            },
            limits: BTreeMap::from([("cpu", 1000)]),
            disruption: Disruption { consolidation_policy: "WhenEmptyOrUnderutilized", consolidate_after: "1m" },
        },
    };
    let note = |lines: &[&str]| lines.iter().map(|l| l.to_string()).collect::<Vec<_>>();
    with_comments(
        &to_yaml(&pool),
        &[
            ("- key: karpenter.sh/capacity-type", note(&["Spot is used when it is available and cheaper; on-demand otherwise."])),
            ("expireAfter:", note(&["Nodes are replaced after 30 days (fresh AMI and patches)."])),
            (
                "limits:",
                note(&[
                    "The most this NodePool may launch in total: Karpenter stops adding nodes at the limit.",
                    "Without limits it scales as far as pending pods ask (and the account's quotas allow);",
                    "`memory: 1000Gi` beside `cpu` caps memory too.",
                ]),
            ),
            (
                "disruption:",
                note(&[
                    "How Karpenter removes and replaces nodes: empty or underused nodes are consolidated a",
                    "minute after they became so. `WhenEmpty` only removes empty ones; budgets (for example",
                    "`budgets: [{nodes: \"10%\"}]`) cap how many nodes are disrupted at once.",
                ]),
            ),
        ],
    )
}

/// The EC2NodeClass and a NodePool that uses it, one YAML stream for `kubectl apply -f -`.
pub fn manifests(doc: &Value) -> String {
    format!("{}\n---\n{}", nodeclass(doc), nodepool())
}

/// After `up`: what this run changed in what `output` hands on, and the commands that pass it
/// on (only steps that were done count). The Helm values change with the queue (made or
/// deleted), the controller role and the Pod Identity association when made (Karpenter was not
/// installed against them; with IRSA the role's ARN is a value), and the pin (the chart
/// version); the EC2NodeClass with the node role and the instance profile. `kept`: the older
/// releases whose grants the policies keep during an upgrade in flight (`upgrade::kept_by`).
pub fn handoff(
    plan: &crate::model::Plan,
    results: &BTreeMap<String, crate::model::Outcome>,
    spec: &crate::spec::Spec,
    facts: &crate::facts::prepared::Facts,
    kept: &[crate::karpenter_iam::KarpenterVersion],
    config: Option<&std::path::Path>,
) -> crate::report::Handoff {
    use crate::model::{Action, Outcome};
    let mut h = crate::report::Handoff::default();
    let irsa = spec.identity.mode == IdentityMode::Irsa;
    let mut fresh = false;
    for s in plan.steps.iter().filter(|s| results.get(&s.id) == Some(&Outcome::Done)) {
        let (made, gone) = (matches!(s.action, Action::Create), matches!(s.action, Action::Delete));
        let replaced = matches!(s.action, Action::Replace);
        let noun = match s.kind {
            Kind::Queue => "SQS queue",
            Kind::IamRole => "IAM role",
            Kind::InstanceProfile => "instance profile",
            Kind::PodIdentity => "Pod Identity association",
            _ => s.kind.label(),
        };
        let what = format!("{noun} {}", s.name);
        match (s.kind, s.id.as_str()) {
            (Kind::Queue, _) if made => h.helm_values.push(format!("{what} was created (settings.interruptionQueue)")),
            (Kind::Queue, _) if gone => h.helm_values.push(format!("{what} was deleted (settings.interruptionQueue)")),
            (Kind::IamRole, "controller-role") if made || (irsa && replaced) => {
                fresh |= made;
                let why = if irsa { "the serviceAccount annotation names its ARN" } else { "Karpenter runs as it" };
                h.helm_values.push(format!("{what} was {} ({why})", if made { "created" } else { "replaced" }));
            }
            (Kind::PodIdentity, _) if made => {
                h.helm_values.push(format!("{what} was created (the release's namespace and service account)"))
            }
            (Kind::IamRole, "node-role") if made || replaced => {
                h.nodeclass.push(format!("{what} was {} (spec.role)", if made { "created" } else { "replaced" }))
            }
            (Kind::InstanceProfile, _) if made || gone => h.nodeclass.push(format!(
                "{what} was {} (spec.{})",
                if made { "created" } else { "deleted" },
                if made { "instanceProfile" } else { "role" }
            )),
            _ => {}
        }
    }
    let before = previous_pin(plan, results, spec, facts);
    if let (Some(first), Some(last)) = (before.first(), before.last()) {
        let was = if first == last { format!("Karpenter {first}'s") } else { format!("those of Karpenter {first} to {last}") };
        let pin = spec.identity.karpenter_version;
        let keeping = match kept {
            [] => String::new(),
            kept => {
                let names: Vec<String> = kept.iter().map(|v| v.to_string()).collect();
                format!(", keeping what Karpenter {} still calls until CloudTrail shows only {pin} running", names.join(" and "))
            }
        };
        h.helm_values.push(format!("the controller's policies were {was} and are now {pin}'s{keeping} (the chart version)"));
    }
    let output = |format: &str| output_command(&spec.cluster, config, format);
    if !h.helm_values.is_empty() {
        h.helm_commands = helm_steps(spec, config);
    }
    if !h.nodeclass.is_empty() {
        // A fresh install needs the NodePool too; later only the EC2NodeClass changes, and
        // applying the NodePool would undo the user's changes to it.
        let what = output(if fresh { "manifests" } else { "nodeclass" });
        h.kubectl_commands = vec![format!("{what} | kubectl diff -f -"), format!("{what} | kubectl apply -f -")];
    }
    h
}

/// `karpctl output` for this cluster (and settings file) in `format`.
pub fn output_command(cluster: &str, config: Option<&std::path::Path>, format: &str) -> String {
    let config = config.map(|c| format!(" --config '{}'", c.display().to_string().replace('\'', r"'\''"))).unwrap_or_default();
    format!("karpctl output --cluster {cluster}{config} --format {format}")
}

/// The commands that hand the plan's values on to Karpenter's Helm release: `karpctl output`
/// into `values.yaml`, then `helm upgrade` to the pinned release.
pub fn helm_steps(spec: &crate::spec::Spec, config: Option<&std::path::Path>) -> Vec<String> {
    let version = spec.identity.karpenter_version.to_string();
    vec![
        format!("{} > values.yaml", output_command(&spec.cluster, config, "helm")),
        helm_command(&version, &spec.identity.namespace),
    ]
}

/// The Karpenter releases the controller's policies were made for before this run (oldest
/// first; several when their documents are the same), when the run replaced documents that are
/// exactly another release's: the pin changed. A document someone edited by hand matches none.
fn previous_pin(
    plan: &crate::model::Plan,
    results: &BTreeMap<String, crate::model::Outcome>,
    spec: &crate::spec::Spec,
    facts: &crate::facts::prepared::Facts,
) -> Vec<crate::karpenter_iam::KarpenterVersion> {
    use crate::karpenter_iam::KarpenterVersion;
    let pinned = spec.identity.karpenter_version;
    let replaced: Vec<(&str, &Value)> = plan
        .steps
        .iter()
        .filter(|s| s.kind == Kind::IamPolicy && results.get(&s.id) == Some(&crate::model::Outcome::Done))
        .filter_map(|s| {
            s.changes.iter().find(|c| c.field == "PolicyDocument" && !c.before.is_null()).map(|c| (s.id.as_str(), &c.before))
        })
        .collect();
    if replaced.is_empty() {
        return vec![];
    }
    let matches = |v: KarpenterVersion| {
        let mut other = spec.clone();
        other.identity.karpenter_version = v;
        let docs = crate::resources::iam_policy::controller_policies(&other, facts);
        replaced.iter().all(|(id, before)| {
            docs.iter()
                .find(|p| p.id == *id)
                .and_then(|p| p.doc.as_ref())
                .is_some_and(|d| crate::policy::doc::equivalent(d, before))
        })
    };
    KarpenterVersion::all().filter(|v| *v != pinned && matches(*v)).collect()
}

/// The test's YAML readers (YAML 1.2, and YAML 1.1 as Kubernetes and Helm read it), shared with
/// the integration tests.
#[cfg(test)]
#[path = "../tests/common/yaml.rs"]
pub(crate) mod yaml_read;

/// Karpenter's CRDs as the test oracle (OpenAPI schema and CEL rules), for the tests.
#[cfg(test)]
#[path = "../tests/common/crd.rs"]
pub(crate) mod crd;

#[cfg(test)]
mod tests {
    use super::yaml_read::{TRICKY_NAMES, yaml_1_1, yaml_1_2};
    use super::*;

    fn doc(profile: Option<&str>) -> Value {
        json!({
            "cluster_name": "say-when-east", "interruption_queue": "Karpenter-say-when-east",
            "service_account": {"namespace": "kube-system", "name": "karpenter"},
            "controller_role_arn": "arn:aws:iam::1:role/karpctl/say-when-east/KarpenterController-say-when-east",
            "node_role_name": "KarpenterNodeRole-say-when-east", "instance_profile": profile,
            "karpenter_version": "1.14", "kubernetes_version": "1.31",
        })
    }

    #[test]
    fn helm_values() {
        let h = helm(&doc(None), false);
        assert!(h.contains("clusterName: say-when-east"));
        assert!(h.contains("interruptionQueue: Karpenter-say-when-east"));
        assert!(h.contains("name: karpenter"));
        assert!(!h.contains("role-arn"));
        assert!(helm(&doc(None), true).contains("eks.amazonaws.com/role-arn: arn:aws:iam::1:role/"));
        // The restart note is `up`'s, when it made or changed the association, not every output's.
        assert!(!h.contains("rollout restart"));
        assert!(!helm(&doc(None), true).contains("rollout restart"));
        // The chart pinned to the minor release the permissions were made for, as helm takes it.
        let install = h.lines().find(|l| l.contains("helm upgrade --install")).unwrap();
        assert!(
            install.contains("oci://public.ecr.aws/karpenter/karpenter --version \"~1.14.0\" --namespace kube-system"),
            "{install}"
        );
        assert!(h.contains("helm show chart oci://public.ecr.aws/karpenter/karpenter"), "how to pick a patch: {h}");
        assert!(h.contains("  isolatedVPC: false"), "{h}");
        assert!(!h.contains("VPC endpoints only"), "{h}");
        let mut d = doc(None);
        d["isolated_vpc"] = json!(true);
        assert!(
            helm(&d, false)
                .contains("  # The subnets have no route out (VPC endpoints only): no pricing API.\n  isolatedVPC: true")
        );
        // No queue: written empty, so that reused values drop an old one.
        d["interruption_queue"] = Value::Null;
        assert_eq!(yaml_1_1(&helm(&d, false))[0]["settings"]["interruptionQueue"], "");
    }

    #[test]
    fn nodeclass_uses_role_or_profile() {
        assert!(nodeclass(&doc(None)).contains("role: KarpenterNodeRole-say-when-east"));
        let n = nodeclass(&doc(Some("KarpenterNodeInstanceProfile-say-when-east")));
        assert!(n.contains("instanceProfile: KarpenterNodeInstanceProfile-say-when-east"));
        assert!(!n.contains("  role:"));
        assert!(n.contains("karpenter.sh/discovery: say-when-east"));
        assert!(!n.contains("associatePublicIPAddress"));
    }

    #[test]
    fn nodeclass_gives_public_ips_when_the_subnets_need_them() {
        let mut d = doc(None);
        d["associate_public_ip"] = json!(true);
        let n = nodeclass(&d);
        assert!(n.contains("spec:\n  role: KarpenterNodeRole-say-when-east\n  associatePublicIPAddress: true\n"), "{n}");
        assert!(n.contains("    - alias: al2023@latest"), "{n}");
        assert!(n.contains("/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/"), "how to pin: {n}");
    }

    #[test]
    fn manifests_are_a_nodeclass_and_a_nodepool_using_it() {
        let m = manifests(&doc(None));
        let docs = yaml_1_1(&m);
        assert_eq!(docs.len(), 2, "{m}");
        assert_eq!(docs[0]["kind"], "EC2NodeClass");
        assert_eq!(docs[0]["metadata"]["name"], "default");
        let pool = &docs[1];
        assert_eq!(pool["apiVersion"], "karpenter.sh/v1");
        assert_eq!(pool["kind"], "NodePool");
        let spec = &pool["spec"]["template"]["spec"];
        assert_eq!(spec["nodeClassRef"], json!({"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}));
        assert_eq!(
            spec["requirements"],
            json!([
                {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand", "spot"]},
                {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                // A string, as the CRD types it: `2` unquoted would be a number.
                {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["2"]},
            ])
        );
        assert_eq!(spec["expireAfter"], "720h");
        assert_eq!(pool["spec"]["limits"], json!({"cpu": 1000}));
        assert_eq!(
            pool["spec"]["disruption"],
            json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "1m"})
        );
        // The comments stay where they help.
        for want in [
            "# Spot is used when",
            "# Nodes are replaced after 30 days",
            "# The most this NodePool may launch",
            "# How Karpenter removes",
        ] {
            assert!(m.contains(want), "{want}: {m}");
        }
        assert!(!m.contains('\t'), "YAML has no tabs");
    }

    /// The expected reading of `nodeclass` for cluster `c` (the node role, no public IPs).
    fn nodeclass_json(c: &str) -> Value {
        let discovery = json!([{"tags": {"karpenter.sh/discovery": c}}]);
        json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
            "spec": {
                "role": format!("KarpenterNodeRole-{c}"),
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": discovery, "securityGroupSelectorTerms": discovery,
            },
        })
    }

    fn doc_for(c: &str) -> Value {
        let mut d = doc(None);
        d["cluster_name"] = json!(c);
        d["interruption_queue"] = json!(format!("Karpenter-{c}"));
        d["node_role_name"] = json!(format!("KarpenterNodeRole-{c}"));
        d
    }

    /// A cluster name YAML 1.1 takes for a number, a boolean or null reads back as the string it
    /// is, in every YAML format, by a YAML 1.2 loader and as Kubernetes and Helm read YAML.
    #[test]
    fn cluster_names_that_look_like_other_types_read_back_as_strings() {
        for &c in TRICKY_NAMES {
            let d = doc_for(c);
            let helm_want = json!({
                "settings": {"clusterName": c, "interruptionQueue": format!("Karpenter-{c}"), "isolatedVPC": false},
                "serviceAccount": {"name": "karpenter"},
            });
            let class_want = nodeclass_json(c);
            for (format, text, want) in [
                ("helm", helm(&d, false), vec![helm_want.clone()]),
                ("nodeclass", nodeclass(&d), vec![class_want.clone()]),
                ("manifests", manifests(&d), vec![class_want.clone(), yaml_1_2(&nodepool())[0].clone()]),
            ] {
                assert_eq!(yaml_1_1(&text), want, "{format} for cluster {c:?}, read as YAML 1.1:\n{text}");
                assert_eq!(yaml_1_2(&text), want, "{format} for cluster {c:?}, read as YAML 1.2:\n{text}");
            }
            // The JSON document is YAML too.
            let json_text = serde_json::to_string_pretty(&d).unwrap();
            assert_eq!(yaml_1_1(&json_text)[0]["cluster_name"], json!(c), "{json_text}");
        }
    }

    /// Every Karpenter minor karpctl supports, with its fixtures (tests/fixtures/karpenter/<minor>:
    /// the newest patch's CRDs and chart values, from scripts/karpenter-fixtures).
    fn releases() -> Vec<(String, std::path::PathBuf)> {
        crate::karpenter_iam::KarpenterVersion::all()
            .map(|v| {
                let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/karpenter").join(v.to_string());
                assert!(dir.join("SOURCE").exists(), "no fixtures for Karpenter {v}: run scripts/karpenter-fixtures");
                (v.to_string(), dir)
            })
            .collect()
    }

    fn read(dir: &std::path::Path, file: &str) -> String {
        std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("{}: {e}", dir.join(file).display()))
    }

    /// Every manifest `output` can print (the node role or an instance profile, public IPs or
    /// not, a cluster name YAML reads as a number) passes the CRDs of every release karpctl can
    /// pin: the schema with unknown fields refused, and every CEL rule that does not use `oldSelf`.
    #[test]
    fn every_manifest_passes_karpenters_crds_for_each_pin() {
        let mut shapes = Vec::new();
        for profile in [None, Some("KarpenterNodeInstanceProfile-say-when-east")] {
            for public in [false, true] {
                for c in ["say-when-east", "2024"] {
                    let mut d = doc_for(c);
                    d["instance_profile"] = json!(profile);
                    d["associate_public_ip"] = json!(public);
                    shapes.push((format!("{c} profile={profile:?} public={public}"), d));
                }
            }
        }
        for (version, dir) in releases() {
            let class_schema = crd::schema(&read(&dir, "karpenter.k8s.aws_ec2nodeclasses.yaml"), "v1");
            let pool_schema = crd::schema(&read(&dir, "karpenter.sh_nodepools.yaml"), "v1");
            for (shape, d) in &shapes {
                let docs = yaml_1_1(&manifests(d));
                assert_eq!(docs.len(), 2);
                let refused = crd::refusals(&class_schema, &docs[0]);
                assert!(refused.is_empty(), "Karpenter {version} refuses the EC2NodeClass ({shape}): {refused:#?}");
                let refused = crd::refusals(&pool_schema, &docs[1]);
                assert!(refused.is_empty(), "Karpenter {version} refuses the NodePool: {refused:#?}");
            }
        }
    }

    /// The oracle can fail: one mutated manifest per family of check (unknown field, type,
    /// enum, pattern, required field, and the CEL rules on selectors, the role or profile, the
    /// AMI alias and the requirements) is refused by each release's CRDs.
    #[test]
    fn a_mutated_manifest_is_refused_for_each_family_of_rule() {
        let base = yaml_1_1(&manifests(&doc(None)));
        let (class, pool) = (&base[0], &base[1]);
        type Mutation = (&'static str, &'static str, bool, fn(&mut Value));
        let mutations: &[Mutation] = &[
            ("unknown field", "unknown field", true, |m| m["spec"]["roleName"] = json!("x")),
            ("type", "is not of type", true, |m| m["spec"]["role"] = json!(2024)),
            ("type: a tag value that is a number", "is not of type", true, |m| {
                m["spec"]["subnetSelectorTerms"][0]["tags"]["karpenter.sh/discovery"] = json!(2024)
            }),
            ("CEL: role and instanceProfile", "(rule: ", true, |m| m["spec"]["instanceProfile"] = json!("p")),
            ("CEL: neither role nor instanceProfile", "(rule: ", true, |m| {
                m["spec"].as_object_mut().unwrap().remove("role");
            }),
            ("CEL: an empty selector term", "(rule: ", true, |m| m["spec"]["securityGroupSelectorTerms"] = json!([{}])),
            ("CEL: an empty tag value", "(rule: ", true, |m| {
                m["spec"]["subnetSelectorTerms"][0]["tags"]["karpenter.sh/discovery"] = json!("")
            }),
            ("CEL: an AMI alias family", "(rule: ", true, |m| m["spec"]["amiSelectorTerms"][0]["alias"] = json!("ubuntu@latest")),
            ("required", "is required", false, |m| {
                m["spec"]["template"]["spec"].as_object_mut().unwrap().remove("nodeClassRef");
            }),
            ("enum", "is not one of", false, |m| m["spec"]["disruption"]["consolidationPolicy"] = json!("Sometimes")),
            ("pattern", "does not match", false, |m| m["spec"]["template"]["spec"]["expireAfter"] = json!("30 days")),
            ("CEL: a restricted requirement key", "(rule: ", false, |m| {
                m["spec"]["template"]["spec"]["requirements"][0]["key"] = json!("kubernetes.io/hostname")
            }),
            ("CEL: Gt takes one integer", "(rule: ", false, |m| {
                m["spec"]["template"]["spec"]["requirements"][4]["values"] = json!(["2", "3"])
            }),
            ("CEL: In takes values", "(rule: ", false, |m| {
                m["spec"]["template"]["spec"]["requirements"][0]["values"] = json!([])
            }),
        ];
        for (version, dir) in releases() {
            let class_schema = crd::schema(&read(&dir, "karpenter.k8s.aws_ec2nodeclasses.yaml"), "v1");
            let pool_schema = crd::schema(&read(&dir, "karpenter.sh_nodepools.yaml"), "v1");
            for (what, why, on_class, mutate) in mutations {
                let (schema, mut m) = if *on_class { (&class_schema, class.clone()) } else { (&pool_schema, pool.clone()) };
                mutate(&mut m);
                let refused = crd::refusals(schema, &m);
                // Refused, and only for the reason the mutation is about (its family's check).
                assert!(!refused.is_empty(), "Karpenter {version} takes a manifest with {what}: {m}");
                assert!(refused.iter().all(|r| r.contains(why)), "Karpenter {version} and {what}: {refused:#?}");
            }
        }
    }

    /// Every Helm key `output` writes exists in the chart's values.yaml of every release
    /// karpctl can pin (the annotation's own key is free-form under `annotations`).
    #[test]
    fn every_helm_key_output_writes_exists_in_each_chart() {
        let mut d = doc(None);
        d["isolated_vpc"] = json!(true);
        let written = yaml_1_2(&helm(&d, true));
        let mut keys = Vec::new();
        crd::leaf_paths(&written[0], "", &mut keys);
        assert!(keys.contains(&"serviceAccount.annotations.eks.amazonaws.com/role-arn".to_string()), "{keys:?}");
        for (version, dir) in releases() {
            let chart = yaml_1_2(&read(&dir, "values.yaml")).remove(0);
            for k in &keys {
                let key = k
                    .split(".annotations.")
                    .next()
                    .map(|p| if k.contains(".annotations.") { format!("{p}.annotations") } else { p.to_string() })
                    .unwrap();
                assert!(crd::has_path(&chart, &key), "Karpenter {version}'s chart has no {key}");
            }
            assert!(!crd::has_path(&chart, "settings.noSuchKey"), "the check can fail");
        }
    }
}
