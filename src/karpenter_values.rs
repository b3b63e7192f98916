//! `karpctl output`: what a user passes on to Karpenter (docs/aws-behaviour.md section 4), read from live AWS.

use crate::cli::OutputFormat;
use crate::desired;
use crate::model::{Kind, Owner};
use crate::options::Options;
use crate::plan_file::{IdentityMode, UserError};
use crate::report::ValuesReport;
use anyhow::Result;
use serde_json::{Value, json};

pub async fn run(global: &Options, format: OutputFormat) -> Result<ValuesReport> {
    let p = crate::prepare::prepare(global, crate::facts::Intent::Diff, false).await?;
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
        "identity_mode": match id.mode { IdentityMode::PodIdentity => "pod_identity", IdentityMode::Irsa => "irsa" },
        "controller_role_arn": controller_arn,
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
        OutputFormat::CallerPolicy => unreachable!("main.rs prints the caller policy (caller_policy::run)"),
    };
    Ok(ValuesReport { doc, text })
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

/// Karpenter's chart (an OCI artifact on ECR Public).
const CHART: &str = "oci://public.ecr.aws/karpenter/karpenter";

/// The chart version to install: a semver range of the minor release the permissions were made
/// for. Helm takes a range in `--version` for an OCI chart too (it lists the registry's tags and
/// picks the newest match), so `~1.14.0` is the newest 1.14 patch; `1.14.x` and `1.14` are not
/// versions helm can resolve to the minor's patches.
fn chart_range(doc: &Value) -> String {
    format!("~{}.0", s(&doc["karpenter_version"]))
}

/// Helm values for the karpenter chart, with the install command first (a comment): the chart
/// pinned to the Karpenter release the permissions were made for, the release in the
/// association's namespace.
pub fn helm(doc: &Value, irsa: bool) -> String {
    let ns = s(&doc["service_account"]["namespace"]);
    let range = chart_range(doc);
    let mut out = vec![
        format!(
            "# Karpenter {}: the release these permissions were made for (identity.karpenter_version).",
            s(&doc["karpenter_version"])
        ),
        format!("# --version \"{range}\" installs its newest patch; to pin one, take `version:` from"),
        format!("#   helm show chart {CHART} --version \"{range}\""),
        "#   (or https://github.com/aws/karpenter-provider-aws/releases) and pass it instead.".to_string(),
        format!("# helm upgrade --install karpenter {CHART} --version \"{range}\" --namespace {ns} -f values.yaml"),
        "settings:".to_string(),
        format!("  clusterName: {}", s(&doc["cluster_name"])),
    ];
    if let Some(q) = doc["interruption_queue"].as_str() {
        out.push(format!("  interruptionQueue: {q}"));
    }
    if doc["isolated_vpc"].as_bool() == Some(true) {
        out.push("  # The subnets have no route out (VPC endpoints only): no pricing API.".to_string());
        out.push("  isolatedVPC: true".to_string());
    }
    out.push("serviceAccount:".to_string());
    out.push(format!("  name: {}", s(&doc["service_account"]["name"])));
    if irsa {
        out.push("  annotations:".to_string());
        out.push(format!("    eks.amazonaws.com/role-arn: {}", s(&doc["controller_role_arn"])));
    }
    out.join("\n")
}

/// The AMI selector: `al2023@latest`, with why not to keep it in production and how to pin it
/// (karpctl has no SSM client to resolve the recommended release itself).
fn ami_terms(doc: &Value) -> Vec<String> {
    let k8s = match s(&doc["kubernetes_version"]) {
        "" => "<kubernetes version>",
        v => v,
    };
    vec![
        "  amiSelectorTerms:".to_string(),
        "    # @latest follows every EKS AMI release as AWS publishes it: Karpenter then sees drift and".to_string(),
        "    # replaces every node with an AMI nobody tested. In production pin a release:".to_string(),
        format!(
            "    #   aws ssm get-parameter --name /aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/x86_64/standard/recommended/image_id --query Parameter.Value --output text"
        ),
        "    #   aws ec2 describe-images --image-ids <that id> --query 'Images[0].Name' --output text   # ...-v<date>"
            .to_string(),
        "    # and use `- alias: al2023@v<date>`.".to_string(),
        "    - alias: al2023@latest".to_string(),
    ]
}

/// An EC2NodeClass that uses the node role (or the instance profile) and the discovery tags.
pub fn nodeclass(doc: &Value) -> String {
    let c = s(&doc["cluster_name"]);
    let mut spec: Vec<String> = Vec::new();
    // Who the nodes are.
    match doc["instance_profile"].as_str() {
        Some(p) => spec.push(format!("  instanceProfile: {p}")),
        None => spec.push(format!("  role: {}", s(&doc["node_role_name"]))),
    }
    // Public subnets without MapPublicIpOnLaunch (`discovery.associate_public_ip`).
    if doc["associate_public_ip"].as_bool() == Some(true) {
        spec.push("  associatePublicIPAddress: true".to_string());
    }
    spec.extend(ami_terms(doc));
    // Where they go.
    for selector in ["subnetSelectorTerms", "securityGroupSelectorTerms"] {
        spec.push(format!("  {selector}:"));
        spec.push("    - tags:".to_string());
        spec.push(format!("        karpenter.sh/discovery: {c}"));
    }
    format!("apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata:\n  name: default\nspec:\n{}", spec.join("\n"))
}

/// A NodePool using the EC2NodeClass `default`: Linux on amd64 and arm64, on-demand and Spot,
/// the c, m and r families from generation 3, with its limits and disruption explained.
pub fn nodepool() -> String {
    r#"apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: default
      requirements:
        - key: kubernetes.io/os
          operator: In
          values: ["linux"]
        - key: kubernetes.io/arch
          operator: In
          values: ["amd64", "arm64"]
        # Spot is used when it is available and cheaper; on-demand otherwise.
        - key: karpenter.sh/capacity-type
          operator: In
          values: ["on-demand", "spot"]
        - key: karpenter.k8s.aws/instance-category
          operator: In
          values: ["c", "m", "r"]
        - key: karpenter.k8s.aws/instance-generation
          operator: Gt
          values: ["2"]
      # Nodes are replaced after 30 days (fresh AMI and patches).
      expireAfter: 720h
  # The most this NodePool may launch in total: Karpenter stops adding nodes at the limit.
  # Without limits it scales as far as pending pods ask (and the account's quotas allow).
  limits:
    cpu: 1000
    # memory: 1000Gi
  # How Karpenter removes and replaces nodes: empty or underused nodes are consolidated a
  # minute after they became so. `WhenEmpty` only removes empty ones; budgets (for example
  # `budgets: [{nodes: "10%"}]`) cap how many nodes are disrupted at once.
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 1m"#
        .to_string()
}

/// The EC2NodeClass and a NodePool that uses it, one YAML stream for `kubectl apply -f -`.
pub fn manifests(doc: &Value) -> String {
    format!("{}\n---\n{}", nodeclass(doc), nodepool())
}

#[cfg(test)]
mod tests {
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
        assert!(!h.contains("isolatedVPC"));
        let mut d = doc(None);
        d["isolated_vpc"] = json!(true);
        assert!(helm(&d, false).contains("  isolatedVPC: true"));
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
        let docs: Vec<&str> = m.split("\n---\n").collect();
        assert_eq!(docs.len(), 2, "{m}");
        assert!(docs[0].contains("kind: EC2NodeClass") && docs[0].contains("  name: default"));
        let pool = docs[1];
        for want in [
            "apiVersion: karpenter.sh/v1",
            "kind: NodePool",
            "kind: EC2NodeClass\n        name: default",
            "values: [\"amd64\", \"arm64\"]",
            "values: [\"on-demand\", \"spot\"]",
            "values: [\"c\", \"m\", \"r\"]",
            "operator: Gt\n          values: [\"2\"]",
            "  limits:\n",
            "  disruption:\n    consolidationPolicy: WhenEmptyOrUnderutilized",
        ] {
            assert!(pool.contains(want), "{want}: {pool}");
        }
        assert!(!m.contains('\t'), "YAML has no tabs");
    }
}
