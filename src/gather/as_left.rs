//! The setup as the plan leaves it (`up`: as it leaves it; `diff`: as `up` would), for the one
//! runner of the checks (`checks::catalog::run`). Pure: built from what preparation gathered
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
    /// Preflight's reads (the Spot service-linked role).
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
    let mut s = Setup::empty(&spec.cluster);
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
    s.spot_service_linked_role = g.preflight.spot_role.map(|exists| exists || spec.create_spot_role);
    s.running = g.running.cloned();

    let arn = controller_role_arn(spec, facts);
    let (association, trust) = match g.association {
        AssociationAsLeft::Unjudged => (None, None),
        // One karpctl manages gets the plan's fields: session tags on, no session policy.
        AssociationAsLeft::Ours => (Some(Association { role_arn: arn.clone(), ..Default::default() }), None),
        AssociationAsLeft::Theirs { association, trust } => (Some(association.clone()), trust.clone()),
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
            kms_key_policy_unreadable: key.and_then(|k| k.policy_unreadable.clone()),
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
