//! The setup as the plan leaves it (`up`: as it leaves it; `diff`: as `up` would), for the one
//! runner of the checks (`checks::run`). Pure: built from what preparation gathered
//! (preflight's facts, discovery's choice, the association `observe` read, CloudTrail's records)
//! and the plan; the checks then judge it as they judge what doctor finds.

use crate::arns::{ARN_AFTER_APPLY, controller_role_arn};
use crate::facts::observed::{Association, AssociationAsLeft, Running};
use crate::facts::prepared::Facts;
use crate::facts::setup::{ControllerRole, Queue, Setup, TaggedGroup, WayOut};
use crate::karpenter_iam::key_policy;
use crate::spec::Spec;

/// What preparation gathered that is not in `Facts`.
pub struct Gathered<'a> {
    /// Preflight's reads (what doctor reads too, in `found`; the queue's key).
    pub preflight: &'a crate::gather::preflight::Preflight,
    /// What CloudTrail shows of the plan's roles (None: not read).
    pub running: Option<&'a Running>,
    /// The Pod Identity association as `up` leaves it.
    pub association: &'a AssociationAsLeft,
    pub today: crate::running::support::Ymd,
}

/// The setup the plan leaves: its pin, its roles, the queue's key with the policy `up` writes
/// (karpctl's own key) or reads, the subnets and the one group `up` tags (the group's rules as
/// read: `up` never writes them), the Spot role once `up` made it, the association `up` leaves.
pub fn setup(facts: &Facts, spec: &Spec, g: &Gathered) -> Setup {
    // What preflight read as doctor reads it (`gather::shared`), with the reads AWS refused.
    let mut s = g.preflight.found.clone().unwrap_or_else(|| Setup::empty(&spec.cluster));
    s.account_id = facts.account_id.clone();
    s.region = facts.region.clone();
    s.partition = facts.partition.clone();
    s.version = spec.identity.karpenter_version;
    s.version_from = "the plan's identity.karpenter_version".into();
    s.today = Some(g.today);
    s.namespace = spec.identity.namespace.clone();
    s.service_account = spec.identity.service_account.clone();
    s.authentication_mode = facts.cluster.authentication_mode.clone();
    s.ip_family = facts.cluster.ip_family.clone();
    s.cluster_vpc = facts.cluster.vpc_id.clone();
    s.auto_mode = facts.cluster.auto_mode;
    s.zonal_shift = spec.identity.zonal_shift;
    s.mode = Some(spec.identity.mode);
    // `up` creates the Spot role first when the plan opts in (and fails if it cannot).
    s.spot_service_linked_role = s.spot_service_linked_role.map(|exists| exists || spec.create_spot_role);
    // What AWS refused to show of the queue's key: its checks are skipped and the refusal said.
    s.unreadable.extend(facts.kms_key.as_ref().and_then(|k| k.policy_unreadable.clone()));
    s.running = g.running.cloned();

    let arn = controller_role_arn(spec, facts);
    // A trust nothing is known of asks for no session tag (an empty document), so the session
    // tags are judged, and pass.
    let no_trust = || serde_json::json!({"Version": "2012-10-17", "Statement": []});
    let (association, trust) = match g.association {
        AssociationAsLeft::Unjudged => (None, None),
        // One karpctl manages gets the plan's fields: session tags on, no session policy.
        AssociationAsLeft::Ours => (Some(Association { role_arn: arn.clone(), ..Default::default() }), Some(no_trust())),
        AssociationAsLeft::Theirs { association, trust } => {
            (Some(association.clone()), Some(trust.clone().unwrap_or_else(no_trust)))
        }
    };
    s.controller = Some(ControllerRole {
        name: spec.identity.controller_role.name.clone(),
        arn,
        how: "the plan's controller role".into(),
        exists: true,
        trust,
        association,
        ..Default::default()
    });

    if spec.interruption.enabled {
        let key = facts.kms_key.as_ref();
        // karpctl's own key carries karpctl's key policy once `up` made it.
        let own = spec.interruption.create_key.then(|| key_policy(&facts.partition, &facts.account_id));
        s.queue = Some(Queue {
            name: spec.interruption.queue_name.clone(),
            arn: crate::arns::queue_arn(facts, &spec.interruption.queue_name),
            how: "the plan's queue".into(),
            exists: true,
            kms_key_arn: key.map(|k| k.arn.clone().unwrap_or_else(|| ARN_AFTER_APPLY.to_string())),
            kms_key_policy: own.or_else(|| key.and_then(|k| k.policy.clone())),
            ..Default::default()
        });
    }

    // The subnets Karpenter will see once the plan is applied, judged by discovery.
    if let Some(network) = &facts.discovery.network {
        s.way_out = Some(WayOut { subnets: facts.discovery.ways.clone(), network: network.clone() });
    }
    if let Some(group) = &facts.discovery.security_group {
        s.discovery.groups = vec![TaggedGroup {
            id: group.id.clone(),
            name: group.name.clone(),
            vpc_id: facts.discovery.vpc_id.clone(),
            rules: group.rules.clone(),
        }];
    }
    let c = &facts.cluster;
    s.control_plane_groups =
        std::iter::once(&c.cluster_security_group_id).chain(&c.security_group_ids).filter(|g| !g.is_empty()).cloned().collect();
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::run;
    use crate::facts::finding::{Code, Command, Severity};
    use crate::facts::prepared::{KmsKeyFacts, SecurityGroupFact};

    const DAY: crate::running::support::Ymd = crate::running::support::Ymd::new(2026, 12, 7);

    fn facts() -> Facts {
        let mut f = Facts::example();
        f.cluster.cluster_security_group_id = "sg-cluster".into();
        f
    }

    fn outcome(
        f: &Facts,
        spec: &Spec,
        spot_role: Option<bool>,
        association: &AssociationAsLeft,
    ) -> crate::facts::finding::Outcome {
        let mut found = Setup::empty("c1");
        found.spot_service_linked_role = spot_role;
        let preflight = crate::gather::preflight::Preflight { found: Some(found), ..Default::default() };
        let g = Gathered { preflight: &preflight, running: None, association, today: DAY };
        run(&setup(f, spec, &g), Command::Diff)
    }

    fn codes(o: &crate::facts::finding::Outcome) -> Vec<(Code, Severity)> {
        o.findings.iter().map(|f| (f.code, f.severity)).collect()
    }

    #[test]
    fn the_plan_runs_only_its_rows_and_judges_what_up_leaves() {
        let spec = crate::plan_file::defaults("c1").unwrap();
        let mut f = facts();
        // A group whose rules let nothing in: judged as read, since `up` never writes its rules.
        f.discovery.security_group = Some(SecurityGroupFact { id: "sg-1".into(), name: "nodes".into(), ..Default::default() });
        let o = outcome(&f, &spec, Some(false), &AssociationAsLeft::Ours);
        assert_eq!(
            o.checked,
            [
                Code::PodIdentitySessionTagsDisabled,
                Code::PodIdentitySessionPolicy,
                Code::SpotServiceLinkedRoleMissing,
                Code::AutoModeNodepoolsOverlap,
                Code::NodeSgBlocksControlPlane,
                Code::KarpenterVersionOutOfSupport,
            ]
        );
        assert_eq!(
            codes(&o),
            [(Code::SpotServiceLinkedRoleMissing, Severity::Warning), (Code::NodeSgBlocksControlPlane, Severity::Warning)]
        );
        // The plan opts in to the Spot role: `up` makes it first, so it is not missing.
        let mut opted = spec.clone();
        opted.create_spot_role = true;
        assert!(
            !codes(&outcome(&f, &opted, Some(false), &AssociationAsLeft::Ours))
                .iter()
                .any(|(c, _)| *c == Code::SpotServiceLinkedRoleMissing)
        );
        // Not read: not judged.
        assert!(!outcome(&f, &spec, None, &AssociationAsLeft::Unjudged).checked.contains(&Code::SpotServiceLinkedRoleMissing));
        // Refused: said as doctor says it, a warning beside a plan.
        let mut found = Setup::empty("c1");
        found.unreadable = vec![crate::facts::setup::Unreadable {
            code: Code::SpotRoleUnreadable,
            operation: "iam:ListRoles".into(),
            aws_code: "AccessDenied".into(),
        }];
        let preflight = crate::gather::preflight::Preflight { found: Some(found), ..Default::default() };
        let g = Gathered { preflight: &preflight, running: None, association: &AssociationAsLeft::Unjudged, today: DAY };
        let o = run(&setup(&f, &spec, &g), Command::Up);
        let said = o.findings.iter().find(|f| f.code == Code::SpotRoleUnreadable).expect("said");
        assert_eq!(said.severity, Severity::Warning);
        assert!(
            said.message.contains("iam:ListRoles") && said.message.contains("skipped: spot-service-linked-role-missing"),
            "{said:?}"
        );
    }

    #[test]
    fn the_queues_key_is_judged_with_the_policy_up_writes_or_reads() {
        let mut spec = crate::plan_file::defaults("c1").unwrap();
        let mut f = facts();
        // A key the plan names whose policy could not be read: said, not guessed.
        f.kms_key = Some(KmsKeyFacts {
            arn: Some("arn:aws:kms:us-east-1:123456789012:key/k1".into()),
            policy: None,
            policy_unreadable: Some(crate::facts::setup::Unreadable {
                code: Code::KmsKeyUnreadable,
                operation: "kms:GetKeyPolicy".into(),
                aws_code: "AccessDeniedException".into(),
            }),
        });
        let o = outcome(&f, &spec, Some(true), &AssociationAsLeft::Unjudged);
        assert_eq!(codes(&o), [(Code::KmsKeyUnreadable, Severity::Warning)]);
        let said = &o.findings[0];
        assert!(
            said.message.starts_with("diff could not read the queue's KMS key") && said.message.contains("kms:GetKeyPolicy"),
            "{said:?}"
        );
        assert!(said.message.contains("skipped: kms-key-policy-events, kms-key-policy-controller"), "{said:?}");
        assert!(said.fix.contains("--for diff"), "{said:?}");
        assert!(!o.checked.contains(&Code::KmsKeyPolicyEvents), "skipped, not passed: {o:?}");
        // karpctl's own key: judged with karpctl's key policy, before its ARN is known.
        spec.interruption.create_key = true;
        f.kms_key = Some(KmsKeyFacts::default());
        let o = outcome(&f, &spec, Some(true), &AssociationAsLeft::Unjudged);
        assert!(o.checked.contains(&Code::KmsKeyPolicyEvents) && o.checked.contains(&Code::KmsKeyPolicyController), "{o:?}");
        assert!(o.findings.is_empty(), "{o:?}");
    }

    #[test]
    fn an_association_karpctl_never_changes_is_judged_as_it_is() {
        let spec = crate::plan_file::defaults("c1").unwrap();
        let association = Association {
            role_arn: "arn:aws:iam::123456789012:role/KarpenterController-c1".into(),
            session_policy: Some("{}".into()),
            ..Default::default()
        };
        let o = outcome(&facts(), &spec, Some(true), &AssociationAsLeft::Theirs { association, trust: None });
        assert_eq!(codes(&o).first().map(|c| c.0), Some(Code::PodIdentitySessionPolicy), "{o:?}");
    }
}
