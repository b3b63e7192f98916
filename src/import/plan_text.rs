//! The plan file `import` writes for what it found (TOML naming those objects), and the summary
//! of what was found (pure).

use super::found::{Found, FoundRole, Policies, Tool};
use crate::spec::IdentityMode;

pub(super) fn q(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// Pure: the plan file naming what was found, and what it could not tell or left alone (notes).
pub fn plan_toml(f: &Found, pol: &Policies) -> (String, Vec<String>) {
    let mut notes = Vec::new();
    let mut t = String::new();
    t.push_str(&format!(
        "# Written by `karpctl import` from what it found in account {} ({}).\n# `karpctl diff --cluster {} --adopt` shows what `up --adopt` changes; docs/import.md.\n",
        f.account_id, f.region, f.cluster
    ));
    t.push_str(&format!("cluster = {}\nregion = {}\naccount_id = {}\n", q(&f.cluster), q(&f.region), q(&f.account_id)));

    t.push_str("\n[interruption]\n");
    match &f.queue {
        Some(name) => {
            t.push_str(&format!("queue_name = {}\n", q(name)));
            match &f.queue_kms_key {
                Some(k) if crate::plan_file::is_aws_managed_sqs_key(k) => notes.push(format!(
                    "queue {name} is encrypted with {k}, through which EventBridge can never deliver: the plan switches it to SSE-SQS"
                )),
                Some(k) => t.push_str(&format!("kms_key_id = {}\n", q(k))),
                None => {}
            }
            if !f.rules.is_empty() {
                t.push_str("# Existing rules kept under their names (an EventBridge rule cannot be renamed);\n# a kind not listed gets a new rule.\n");
                t.push_str("rule_names = { ");
                let parts: Vec<String> = f.rules.iter().map(|(p, n)| format!("{p} = {}", q(n))).collect();
                t.push_str(&parts.join(", "));
                t.push_str(" }\n");
            }
        }
        None => notes.push("no interruption queue found: the plan makes a new one (Karpenter-<cluster>)".into()),
    }
    for r in &f.rules_left {
        notes.push(format!("rule {r} targets the queue but is not kept (another rule carries its kind, or it carries several): remove it in its tool, or each event reaches the queue twice"));
    }

    t.push_str("\n[identity]\n");
    let mode = match f.mode {
        Some(IdentityMode::Irsa) => "irsa",
        _ => "pod_identity",
    };
    t.push_str(&format!("mode = {}\n", q(mode)));
    t.push_str(&format!("karpenter_version = {}\n", q(&f.version.to_string())));
    if pol.zonal_shift {
        t.push_str("# The controller may read zonal shift today (settings.enableZonalShift): Karpenter stops at start without it.\nzonal_shift = true\n");
    }
    let path = f.path();
    t.push_str(&format!("path = {}\n", q(&path)));
    match &f.controller {
        Some(r) => t.push_str(&format!("controller_role_name = {}\n", q(&r.name))),
        None if f.controller_searched.is_empty() => notes.push("no controller role found: the plan makes a new one".into()),
        None => notes.push(format!("no controller role found ({}): the plan makes a new one", f.controller_searched)),
    }
    if f.controller.is_some() && !f.association && f.mode != Some(IdentityMode::Irsa) {
        notes.push(format!(
            "controller role {} is trusted by Pod Identity but no association uses it: up --adopt makes the association {}/{}",
            f.controller.as_ref().map(|r| r.name.as_str()).unwrap_or_default(),
            f.namespace,
            f.service_account
        ));
    }
    let node_owned = match (&f.node_role, &f.node_role_shared) {
        (Some(r), Some(why)) => {
            t.push_str(&format!("# Used as it is, never changed or deleted: {why}.\nexisting_node_role = {}\n", q(&r.arn)));
            notes.push(format!("node role {}: {why}; the plan uses it as it is (existing_node_role) and never owns it", r.name));
            false
        }
        (Some(r), None) if r.path == path => {
            t.push_str(&format!("node_role_name = {}\n", q(&r.name)));
            true
        }
        (Some(r), None) => {
            t.push_str(&format!("existing_node_role = {}\n", q(&r.arn)));
            notes.push(format!(
                "node role {} lives under {} and the controller role under {path}: the plan uses it as it is (existing_node_role), without managing it",
                r.name, r.path
            ));
            false
        }
        (None, _) => {
            notes.push("no node role found: the plan makes a new one".into());
            false
        }
    };
    for n in &f.node_roles_left {
        notes.push(n.clone());
    }
    if let Some((name, p)) = &f.instance_profile {
        if *p == path && node_owned {
            t.push_str(&format!("instance_profile = true\ninstance_profile_name = {}\n", q(name)));
        } else {
            notes.push(format!("instance profile {name} is left alone (under {p}, or its role is not karpctl's)"));
        }
    }
    if !f.extra_node_policies.is_empty() && node_owned {
        let arns: Vec<String> = f.extra_node_policies.iter().map(|a| q(a)).collect();
        t.push_str(&format!(
            "# Attached to the node role today; kept so that nodes lose nothing.\nextra_node_policy_arns = [{}]\n",
            arns.join(", ")
        ));
    }
    if let Some(kind) = &f.access_entry_type
        && node_owned
    {
        t.push_str(&format!("access_entry_type = {}\n", q(kind)));
    }
    if f.namespace != "kube-system" {
        t.push_str(&format!("namespace = {}\n", q(&f.namespace)));
    }
    if f.service_account != "karpenter" {
        t.push_str(&format!("service_account = {}\n", q(&f.service_account)));
    }
    let kept: Vec<&String> = pol.keep.iter().chain(pol.pre_v1.iter().filter(|k| k.starts_with("arn:"))).collect();
    if !kept.is_empty() {
        t.push_str("# On the controller role today and not replaced by karpctl's policies: kept attached.\nextra_controller_policy_arns = [\n");
        for k in &kept {
            let why = if pol.pre_v1.contains(k) { "   # Karpenter's pre-v1 policy: see the note" } else { "" };
            t.push_str(&format!("  {},{why}\n", q(k)));
        }
        t.push_str("]\n");
    }
    for k in &pol.keep_inline {
        notes.push(format!("inline policy {k} on the controller role is not Karpenter's: kept as it is"));
    }
    notes.extend(pol.notes.iter().cloned());
    if !pol.retire.is_empty() {
        t.push_str("# Karpenter's own, replaced by karpctl's split policies: detached once those are attached;\n# a customer managed one that nothing else uses is then deleted.\nretire_policies = [\n");
        for r in &pol.retire {
            let why = if pol.pre_v1_retired.contains(r) {
                format!("   # Karpenter's pre-v1 policy: Karpenter {} runs", f.version)
            } else {
                String::new()
            };
            t.push_str(&format!("  {},{why}\n", q(r)));
        }
        t.push_str("]\n");
    }

    if !f.subnets.is_empty() || !f.subnets_left.is_empty() || f.security_group.is_some() {
        t.push_str("\n[discovery]\n");
        for (id, why) in &f.subnets_left {
            t.push_str(&format!("# left out: {id} is tagged for discovery but nodes cannot work from it: {why}\n"));
        }
        if !f.subnets.is_empty() {
            let ids: Vec<String> = f.subnets.iter().map(|s| q(s)).collect();
            t.push_str(&format!("subnet_ids = [{}]\n", ids.join(", ")));
        }
        if let Some(g) = &f.security_group {
            t.push_str(&format!("security_group_id = {}\n", q(g)));
        }
    }
    for (id, why) in &f.subnets_left {
        notes.push(format!(
            "subnet {id} carries the discovery tag but nodes cannot work from it ({why}): left out of the plan; remove its tag where it was set (e.g. Terraform's public_subnet_tags), or Karpenter still picks it"
        ));
    }
    (t, notes)
}

/// One line per piece found, for the report.
pub(super) fn summary(f: &Found, pol: &Policies) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let tool = match f.tool() {
        Tool::Terraform => "the terraform-aws-eks karpenter module (by its names)".to_string(),
        Tool::CloudFormation { stack } => format!("Karpenter's CloudFormation stack {stack} (by its names)"),
        Tool::Unknown => "no known tool (names of neither the Terraform module nor the CloudFormation stack)".to_string(),
    };
    out.push(("made by".into(), tool));
    let role =
        |r: &Option<FoundRole>| r.as_ref().map(|r| format!("{} (path {})", r.name, r.path)).unwrap_or_else(|| "none".into());
    out.push(("controller role".into(), role(&f.controller)));
    let node = match (&f.node_role, &f.node_role_shared) {
        (Some(_), Some(why)) => format!("{}, used as it is: {why}", role(&f.node_role)),
        _ => role(&f.node_role),
    };
    out.push(("node role".into(), node));
    out.push(("queue".into(), f.queue.clone().unwrap_or_else(|| "none".into())));
    let rules: Vec<String> = f.rules.iter().map(|(p, n)| format!("{p}: {n}")).collect();
    out.push(("rules kept".into(), if rules.is_empty() { "none".into() } else { rules.join(", ") }));
    let list = |l: &[String]| if l.is_empty() { "none".to_string() } else { l.join(", ") };
    out.push(("policies replaced".into(), list(&pol.retire)));
    let kept: Vec<String> = pol.keep.iter().chain(&pol.keep_inline).chain(&pol.pre_v1).cloned().collect();
    out.push(("policies kept".into(), list(&kept)));
    out
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{TS, tf};
    use super::super::found::{Tool, sort_policies};
    use super::*;

    #[test]
    fn a_terraform_setup_becomes_a_plan_naming_its_objects() {
        let f = tf();
        assert_eq!(f.tool(), Tool::Terraform);
        let p = sort_policies(&f, &[]);
        let (text, notes) = plan_toml(&f, &p);
        let spec = crate::plan_file::parse(&text, "x.toml", Some("say-when-east")).expect(&text);
        assert_eq!(spec.identity.path, "/");
        assert_eq!(spec.identity.controller_role.name, format!("KarpenterController-{TS}"));
        assert_eq!(spec.identity.node_role_name(), "say-when-east", "the module example's fixed node role name");
        assert_eq!(spec.interruption.queue_name, "Karpenter-say-when-east");
        assert_eq!(spec.interruption.rule_names["SpotInterrupt"], format!("KarpenterSpotInterrupt-{TS}"));
        assert_eq!(spec.identity.retire_policies, p.retire);
        assert_eq!(spec.identity.extra_controller_policy_arns, p.keep);
        assert!(spec.identity.zonal_shift);
        assert_eq!(spec.discovery.subnet_ids, Some(vec!["subnet-1".to_string()]), "the unusable subnet is left out");
        assert!(text.contains("# left out: subnet-2"), "{text}");
        assert!(notes.iter().any(|n| n.contains("subnet-2") && n.contains("public_subnet_tags")), "{notes:?}");
        assert!(notes.iter().any(|n| n.contains("team-s3")), "{notes:?}");
    }

    #[test]
    fn a_shared_node_role_is_used_never_owned() {
        let mut f = tf();
        f.node_role_shared = Some("it also backs managed node group ng-1".into());
        let (text, _) = plan_toml(&f, &sort_policies(&f, &[]));
        let spec = crate::plan_file::parse(&text, "x.toml", Some("say-when-east")).expect(&text);
        assert!(spec.identity.node_role.is_none(), "{text}");
        assert_eq!(spec.identity.existing_node_role.as_deref(), Some("arn:aws:iam::123456789012:role/say-when-east"));
        assert!(!text.contains("extra_node_policy_arns") && !text.contains("access_entry_type"), "{text}");
    }
}
