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
    });
    let text = match format {
        OutputFormat::Json => serde_json::to_string_pretty(&doc)?,
        OutputFormat::Helm => helm(&doc, id.mode == IdentityMode::Irsa),
        OutputFormat::Nodeclass => nodeclass(&doc),
    };
    Ok(ValuesReport { doc, text })
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

/// Helm values for the karpenter chart; install the release into the association's namespace.
pub fn helm(doc: &Value, irsa: bool) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "# helm upgrade --install karpenter oci://public.ecr.aws/karpenter/karpenter --namespace {} -f values.yaml\n",
        s(&doc["service_account"]["namespace"])
    ));
    out.push_str("settings:\n");
    out.push_str(&format!("  clusterName: {}\n", s(&doc["cluster_name"])));
    if let Some(q) = doc["interruption_queue"].as_str() {
        out.push_str(&format!("  interruptionQueue: {q}\n"));
    }
    if doc["isolated_vpc"].as_bool() == Some(true) {
        out.push_str("  # The subnets have no route out (VPC endpoints only): no pricing API.\n");
        out.push_str("  isolatedVPC: true\n");
    }
    out.push_str("serviceAccount:\n");
    out.push_str(&format!("  name: {}\n", s(&doc["service_account"]["name"])));
    if irsa {
        out.push_str("  annotations:\n");
        out.push_str(&format!("    eks.amazonaws.com/role-arn: {}\n", s(&doc["controller_role_arn"])));
    } else {
        out.push_str(&format!(
            "  # Pod Identity reaches only pods started after the association exists or changes its role:\n  # kubectl -n {} rollout restart deployment/{}\n",
            s(&doc["service_account"]["namespace"]),
            s(&doc["service_account"]["name"])
        ));
    }
    out.trim_end().to_string()
}

/// An EC2NodeClass that uses the node role (or the instance profile) and the discovery tags.
pub fn nodeclass(doc: &Value) -> String {
    let c = s(&doc["cluster_name"]);
    let who = match doc["instance_profile"].as_str() {
        Some(p) => format!("  instanceProfile: {p}\n"),
        None => format!("  role: {}\n", s(&doc["node_role_name"])),
    };
    // Public subnets without MapPublicIpOnLaunch (`discovery.associate_public_ip`).
    let public_ip = if doc["associate_public_ip"].as_bool() == Some(true) { "  associatePublicIPAddress: true\n" } else { "" };
    format!(
        "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata:\n  name: default\nspec:\n{who}{public_ip}  amiSelectorTerms:\n    - alias: al2023@latest\n  subnetSelectorTerms:\n    - tags:\n        karpenter.sh/discovery: {c}\n  securityGroupSelectorTerms:\n    - tags:\n        karpenter.sh/discovery: {c}"
    )
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
        assert!(h.contains("# kubectl -n kube-system rollout restart deployment/karpenter"));
        assert!(!helm(&doc(None), true).contains("rollout restart"));
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
    }
}
