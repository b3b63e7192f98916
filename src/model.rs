//! The engine's vocabulary: resource kinds, nodes, desired and observed state, steps. Every object
//! is a flat map of named fields holding canonical JSON, so the planner, the renderers and saved
//! plans are generic over kinds; only reading and applying are kind-specific (`resources`).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

pub type Fields = BTreeMap<String, Value>;
pub type Tags = BTreeMap<String, String>;

use crate::tags::OWNER_TAG;

/// Fields from (name, value) pairs.
pub fn fields_of(pairs: Vec<(&str, Value)>) -> Fields {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// Every resource kind, listed once (see the `kinds!` call below): its variant, the spec its
/// nodes carry and its Terraform-like label. The macro makes `Kind`, `NodeSpec`, and the maps
/// between them, so adding a kind here is one line; its behaviour lives in its own module under
/// `resources/` (see `resources::kind::KindDef`).
macro_rules! kinds {
    ($( $(#[$doc:meta])* $variant:ident($spec:ty) = $label:literal, )*) => {
        /// A resource kind. Declaration order is the sort order.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum Kind {
            $($variant,)*
        }

        impl Kind {
            /// Every kind, in declaration order.
            #[cfg(test)]
            pub const ALL: &'static [Kind] = &[$(Kind::$variant,)*];

            /// A Terraform-like type label used in plan output.
            pub fn label(self) -> &'static str {
                match self {
                    $(Kind::$variant => $label,)*
                }
            }
        }

        /// What each kind needs to read and apply a node besides its name: one variant per
        /// kind. The types live here, below the planner and the kinds, because `Node` carries
        /// them through the pure planner and executor; each kind's module is the only code that
        /// reads its own variant.
        #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(tag = "type", rename_all = "snake_case")]
        pub enum NodeSpec {
            $($(#[$doc])* $variant($spec),)*
        }

        impl NodeSpec {
            pub fn kind(&self) -> Kind {
                match self {
                    $(NodeSpec::$variant(_) => Kind::$variant,)*
                }
            }

            /// A spec of the given kind with empty values, for tests over the generic parts.
            #[cfg(test)]
            pub fn for_tests(kind: Kind) -> NodeSpec {
                match kind {
                    $(Kind::$variant => NodeSpec::$variant(Default::default()),)*
                }
            }
        }
    };
}

kinds! {
    IamRole(ArnSpec) = "aws_iam_role",
    IamPolicy(ArnSpec) = "aws_iam_policy",
    RolePolicyAttachment(AttachmentSpec) = "aws_iam_role_policy_attachment",
    InstanceProfile(ArnSpec) = "aws_iam_instance_profile",
    AccessEntry(EksSpec) = "aws_eks_access_entry",
    PodIdentity(PodIdentitySpec) = "aws_eks_pod_identity_association",
    Queue(ArnSpec) = "aws_sqs_queue",
    QueuePolicy(QueueSpec) = "aws_sqs_queue_policy",
    EventRule(QueueSpec) = "aws_cloudwatch_event_rule",
    DiscoveryTags(DiscoverySpec) = "aws_ec2_tag",
    /// The key karpctl makes for the queue: its ARN when it exists ("" before it is made).
    KmsKey(ArnSpec) = "aws_kms_key",
    /// A policy of another tool on the controller role (`identity.retire_policies`): `policy_arn`
    /// holds a managed policy's ARN or an inline policy's name.
    RetiredPolicy(AttachmentSpec) = "retired_policy",
}

/// Who owns a live object, judged from its tags (or its parent's).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "owner", content = "cluster", rename_all = "snake_case")]
pub enum Owner {
    /// Carries `karpctl.io/cluster=<this cluster>`.
    Ours,
    /// Exists without karpctl's ownership tag.
    Unowned,
    /// Owned by karpctl for another cluster.
    OtherCluster(String),
    /// Not karpctl's and never will be, but satisfies the requirement (for example an access
    /// entry EKS made for a managed node group with the same role). Never changed or deleted.
    External,
}

impl Owner {
    pub fn from_tags(tags: &Tags, cluster: &str) -> Owner {
        match tags.get(OWNER_TAG) {
            Some(c) if c == cluster => Owner::Ours,
            Some(c) => Owner::OtherCluster(c.clone()),
            None => Owner::Unowned,
        }
    }
}

/// One node of the desired graph. `fields` is `None` when the plan does not want the object
/// (a feature switched off, or `down`): it is still read, and deleted if it is ours.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub id: String,
    /// Always `spec.kind()` (set by `Node::new`); kept as a field so that the planner, the
    /// executor and the renderers can stay generic over kinds.
    pub kind: Kind,
    /// The AWS name (or identifier) of the object.
    pub name: String,
    pub fields: Option<Fields>,
    /// Logical ids this node depends on (must exist before it; deleted after it).
    pub deps: Vec<String>,
    /// Kind-specific data needed to read and apply, not compared (ARNs, parent names).
    pub spec: NodeSpec,
    /// Messages for the plan output (for example a shortened name).
    pub notes: Vec<String>,
    /// The node whose delete removes this one too (a policy attachment goes with its role, a
    /// queue policy with its queue): deleting both needs no call for this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contained_in: Option<String>,
    /// Found by orphan discovery (owned by this cluster, not named by the plan), not built from
    /// the plan.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unlisted: bool,
    /// Nodes this one is bound to by identity, with why: when the plan creates or replaces one of
    /// them, this object must be made again too (an access entry is bound to its role's unique
    /// id, not its ARN).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bound_to: Vec<(String, String)>,
    /// Fields that cannot change in place: a change to one replaces the object. Each kind names
    /// its own (`resources::<kind>::IMMUTABLE`); `desired::build` sets them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub immutable: Vec<String>,
    /// When this node's object is deleted while these are made or changed in the same run, the
    /// delete waits for them (an old rule goes only once the rule that replaces it exists).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delete_after: Vec<String>,
    /// `--adopt` takes this object over even when it is someone else's (`Owner::External`): the
    /// node role's access entry that the tool karpctl takes over from made for the same role.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adopt_external: bool,
    /// No desired state, but an object of karpctl's that exists is kept as it is (never deleted
    /// by `up`; `down` removes it): the instance profile made while the subnets were isolated,
    /// which an EC2NodeClass may still name.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_existing: bool,
    /// When this node's object is made or changed while these are deleted in the same run, it
    /// waits for the deletes (the queue policy drops the old rules' names once they are gone).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after_deletes: Vec<String>,
}

impl Node {
    /// A node with no desired fields, dependencies or notes yet; its kind is the spec's.
    pub fn new(id: impl Into<String>, name: impl Into<String>, spec: NodeSpec) -> Node {
        Node {
            id: id.into(),
            kind: spec.kind(),
            name: name.into(),
            fields: None,
            deps: vec![],
            spec,
            notes: vec![],
            contained_in: None,
            unlisted: false,
            bound_to: vec![],
            immutable: vec![],
            delete_after: vec![],
            adopt_external: false,
            keep_existing: false,
            after_deletes: vec![],
        }
    }
    pub fn with_fields(mut self, fields: Option<Fields>) -> Node {
        self.fields = fields;
        self
    }
    pub fn with_deps<S: Into<String>>(mut self, deps: impl IntoIterator<Item = S>) -> Node {
        self.deps = deps.into_iter().map(Into::into).collect();
        self
    }
    pub fn with_notes(mut self, notes: impl IntoIterator<Item = String>) -> Node {
        self.notes = notes.into_iter().collect();
        self
    }
    pub fn contained_in(mut self, parent: &str) -> Node {
        self.contained_in = Some(parent.to_string());
        self
    }
    /// Replace this node whenever the plan makes `id` anew, for the reason given.
    pub fn bound_to(mut self, id: &str, why: &str) -> Node {
        self.bound_to.push((id.to_string(), why.to_string()));
        self
    }
    /// `--adopt` takes it over also when it belongs to someone else (see `adopt_external`).
    pub fn adopt_external(mut self) -> Node {
        self.adopt_external = true;
        self
    }
    /// Kept when it exists, though not wanted (see `keep_existing`).
    pub fn keep_existing(mut self) -> Node {
        self.keep_existing = true;
        self
    }
    pub fn unlisted(mut self) -> Node {
        self.unlisted = true;
        self
    }
    /// Deleted only after the steps of these nodes that are not deletes (see `delete_after`).
    pub fn delete_after<S: Into<String>>(mut self, ids: impl IntoIterator<Item = S>) -> Node {
        self.delete_after = ids.into_iter().map(Into::into).collect();
        self
    }
}

/// An object named by its own ARN ("" when the ARN is not known before the object exists).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArnSpec {
    pub arn: String,
}

impl ArnSpec {
    pub fn new(arn: impl Into<String>) -> ArnSpec {
        ArnSpec { arn: arn.into() }
    }
}

/// An object of the interruption queue (its policy, a rule that targets it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueSpec {
    pub queue_arn: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachmentSpec {
    /// The role's name.
    pub role: String,
    pub policy_arn: String,
    /// The node id of the role: an attachment is ours when its role is.
    pub owner_from: String,
}

/// An access entry: the EKS cluster it belongs to and the principal (the node role's ARN).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EksSpec {
    pub cluster: String,
    pub principal_arn: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodIdentitySpec {
    pub cluster: String,
    pub namespace: String,
    pub service_account: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiscoverySpec {
    /// `subnet` or `security-group`.
    pub resource_type: String,
    /// Every resource id of this run's discovery nodes: one DescribeTags reads them all.
    pub batch: Vec<String>,
}

impl NodeSpec {
    /// The EKS cluster an EKS object (access entry, Pod Identity association) belongs to.
    pub fn eks_cluster(&self) -> Option<&str> {
        match self {
            NodeSpec::AccessEntry(e) => Some(&e.cluster),
            NodeSpec::PodIdentity(p) => Some(&p.cluster),
            _ => None,
        }
    }
    /// The object's ARN, for the kinds whose spec carries one ("" otherwise); for the queue's
    /// policy and rules, the queue's.
    pub fn arn(&self) -> &str {
        match self {
            NodeSpec::IamRole(s)
            | NodeSpec::IamPolicy(s)
            | NodeSpec::InstanceProfile(s)
            | NodeSpec::Queue(s)
            | NodeSpec::KmsKey(s) => &s.arn,
            NodeSpec::QueuePolicy(q) | NodeSpec::EventRule(q) => &q.queue_arn,
            // Listed, not `_`: a new kind must say whether it carries an ARN.
            NodeSpec::AccessEntry(_)
            | NodeSpec::RolePolicyAttachment(_)
            | NodeSpec::RetiredPolicy(_)
            | NodeSpec::PodIdentity(_)
            | NodeSpec::DiscoveryTags(_) => "",
        }
    }
}

/// What a read found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Observed {
    pub fields: Fields,
    pub owner: Owner,
    /// AWS identifiers (ARN, URL, id) for output.
    pub ids: BTreeMap<String, String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Create,
    Update,
    Replace,
    Delete,
    /// Take over an unowned object of the expected name (`--adopt`): tag it, then converge it.
    Adopt,
}

impl Action {
    pub fn symbol(self) -> &'static str {
        match self {
            Action::Create => "+",
            Action::Update => "~",
            Action::Replace => "-/+",
            Action::Delete => "-",
            Action::Adopt => "~",
        }
    }
    pub fn progress(self) -> &'static str {
        match self {
            Action::Create => "Creating",
            Action::Update | Action::Adopt => "Modifying",
            Action::Replace => "Replacing",
            Action::Delete => "Destroying",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Change {
    pub field: String,
    pub before: Value,
    pub after: Value,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub forces_replacement: bool,
}

/// One unit of work of a plan.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Step {
    pub id: String,
    pub kind: Kind,
    pub name: String,
    pub action: Action,
    pub changes: Vec<Change>,
    pub deps: Vec<String>,
    pub node: Node,
    pub observed: Option<Observed>,
    /// Set when this delete needs no call because its parent's delete removes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed_with: Option<String>,
}

/// A live object blocking the plan: same name, not ours.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Conflict {
    pub id: String,
    pub kind: Kind,
    pub name: String,
    pub owner: Owner,
    /// Why it cannot be resolved, beyond ownership (for example adoption would replace it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl Conflict {
    pub fn message(&self) -> String {
        let base = self.base_message();
        match &self.detail {
            Some(d) => format!("{base}; {d}"),
            None => base,
        }
    }

    fn base_message(&self) -> String {
        match &self.owner {
            Owner::OtherCluster(c) => {
                format!("{} {} exists but is managed by karpctl for cluster {c}", self.kind.label(), self.name)
            }
            _ => format!("{} {} exists but is not managed by karpctl (it has no {OWNER_TAG} tag)", self.kind.label(), self.name),
        }
    }
}

/// Something the user should know that is neither a change nor an error.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Note {
    pub id: String,
    pub level: Level,
    pub message: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    Info,
    Warning,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Plan {
    pub steps: Vec<Step>,
    pub conflicts: Vec<Conflict>,
    pub notes: Vec<Note>,
    /// Ids of nodes that are in sync.
    pub in_sync: Vec<String>,
    /// A change of `identity.mode` in progress, and where this plan leaves it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_switch: Option<IdentitySwitch>,
}

/// A change of `identity.mode` made in stages (docs/reference.md, "Identity switches"): the new
/// way for the controller to get credentials is added beside the old one, and the old one goes
/// only once the controller is seen using the new one, or `--finish-identity-switch` says so.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentitySwitch {
    /// The mode the running controller used (`irsa`, `pod_identity`).
    pub from: String,
    /// The plan's mode.
    pub to: String,
    pub stage: SwitchStage,
    /// Why the old path stays, or goes now.
    pub reason: String,
    /// The change to Karpenter's Helm values, made before the restart.
    pub helm: HelmChange,
    /// The command that restarts the controller, so that its new pods take the new path.
    pub restart: String,
    /// While the old path stays: the step that removes it, and when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SwitchStage {
    /// This plan adds the new path beside the old one.
    Start,
    /// Both paths are in place; the old one stays until the controller is seen on the new one.
    Wait,
    /// This plan removes the old path.
    Finish,
}

/// One key of Karpenter's Helm values to change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HelmChange {
    /// The key as a path, `serviceAccount.annotations."eks.amazonaws.com/role-arn"`.
    pub key: String,
    /// Its new value, or None: remove the key.
    pub value: Option<String>,
}

impl HelmChange {
    /// The change as one instruction.
    pub fn instruction(&self) -> String {
        match &self.value {
            None => format!(
                "remove {} from Karpenter's Helm values and upgrade the release (`karpctl output --format helm` prints the values without it)",
                self.key
            ),
            Some(v) => format!(
                "set {} = {v} in Karpenter's Helm values and upgrade the release (`karpctl output --format helm` prints the values with it)",
                self.key
            ),
        }
    }
}

impl IdentitySwitch {
    /// What every output says of the switch: a headline, then lines with their depth (1, or 2
    /// for the user's steps). `applied`: said after `up` applied the plan (what to do now), else
    /// with the plan (what to do once `up` has applied it).
    pub fn text(&self, applied: bool) -> (String, Vec<(u8, String)>) {
        let (from, to) = (&self.from, &self.to);
        let head = match (self.stage, applied) {
            (SwitchStage::Start, false) => "this plan adds the new path beside the old one",
            (SwitchStage::Start, true) => "the new path is in place beside the old one",
            (SwitchStage::Wait, _) => "both paths are in place; the old one stays",
            (SwitchStage::Finish, false) => "this plan removes the old path",
            (SwitchStage::Finish, true) => "finished, the old path is removed",
        };
        let mut lines = Vec::new();
        if !(applied && self.stage == SwitchStage::Finish) {
            lines.push((1, format!("why: {}", self.reason)));
        }
        if self.stage != SwitchStage::Finish {
            let when = match (self.stage, applied) {
                (SwitchStage::Start, false) => "once `karpctl up` has applied this plan, in this order:",
                (SwitchStage::Start, true) => "now, in this order:",
                _ => "if not done yet, in this order:",
            };
            lines.push((1, when.to_string()));
            lines.push((2, format!("1. Helm: {}", self.helm.instruction())));
            lines.push((2, format!("2. restart the controller: {}", self.restart)));
        }
        if let Some(r) = &self.remaining {
            lines.push((1, format!("then: {r}")));
        }
        (format!("Identity switch {from} -> {to}: {head}"), lines)
    }
}

impl Plan {
    pub fn counts(&self) -> (usize, usize, usize) {
        let mut add = 0;
        let mut change = 0;
        let mut destroy = 0;
        for s in &self.steps {
            match s.action {
                Action::Create => add += 1,
                Action::Update | Action::Adopt => change += 1,
                Action::Replace => {
                    add += 1;
                    destroy += 1
                }
                Action::Delete => destroy += 1,
            }
        }
        (add, change, destroy)
    }
}

/// How one step of a run ended.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "status", content = "detail", rename_all = "snake_case")]
pub enum Outcome {
    Done,
    Failed(String),
    /// Not run because a step it depends on failed or was not run.
    Skipped(String),
    /// Not started because the run was cancelled.
    Cancelled,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Saved plans carry node specs: their JSON keeps the shape it had before `kinds!`.
    #[test]
    fn node_spec_json_is_tagged_by_kind() {
        let cases = [
            (NodeSpec::IamRole(ArnSpec::new("r")), json!({"type": "iam_role", "arn": "r"})),
            (NodeSpec::QueuePolicy(QueueSpec { queue_arn: "q".into() }), json!({"type": "queue_policy", "queue_arn": "q"})),
            (
                NodeSpec::RetiredPolicy(AttachmentSpec { role: "r".into(), policy_arn: "p".into(), owner_from: "o".into() }),
                json!({"type": "retired_policy", "role": "r", "policy_arn": "p", "owner_from": "o"}),
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(serde_json::to_value(&spec).unwrap(), want);
            assert_eq!(serde_json::from_value::<NodeSpec>(want).unwrap(), spec);
        }
        for k in Kind::ALL {
            assert_eq!(NodeSpec::for_tests(*k).kind(), *k);
        }
    }
}
