//! Human text: the plan (like `terraform plan`), the stats table, errors, the apply summary, the
//! many-cluster table. Pure: every function returns text; `Printer` writes it.

use super::style::Style;
use crate::model::{Action, Change, Level, Plan, Step};
use serde_json::Value;
use std::fmt::Write as _;

fn scalar(v: &Value) -> String {
    match v {
        Value::Null => "(none)".into(),
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

fn render_tags(out: &mut String, c: &Change, style: Style) {
    let (lines, unchanged) = crate::tags::changes(&c.before, &c.after);
    let sym = match (&c.before, &c.after) {
        (Value::Null, _) => style.green("+"),
        (_, Value::Null) => style.red("-"),
        _ => style.yellow("~"),
    };
    let _ = writeln!(out, "      {sym} {} = {{", c.field);
    for (s, line) in lines {
        let painted = match s {
            '+' => style.green(&format!("+ {line}")),
            '-' => style.red(&format!("- {line}")),
            _ => style.yellow(&format!("~ {line}")),
        };
        let _ = writeln!(out, "          {painted}");
    }
    if unchanged > 0 {
        let _ = writeln!(out, "            # ({unchanged} unchanged {})", if unchanged == 1 { "tag" } else { "tags" });
    }
    let _ = writeln!(out, "        }}");
}

fn render_change(out: &mut String, c: &Change, style: Style, action: Action) {
    if c.field == "tags" && (c.before.is_object() || c.after.is_object()) {
        render_tags(out, c, style);
        return;
    }
    let sym = match (&c.before, &c.after) {
        (Value::Null, _) => style.green("+"),
        (_, Value::Null) => style.red("-"),
        _ => style.yellow("~"),
    };
    let force = if c.forces_replacement { style.red(" # forces replacement") } else { String::new() };
    let structured = c.before.is_object() || c.after.is_object() || c.before.is_array() || c.after.is_array();
    if !structured {
        let text = match (&c.before, &c.after) {
            (Value::Null, a) => scalar(a),
            (b, Value::Null) => scalar(b),
            (b, a) => format!("{} -> {}", scalar(b), scalar(a)),
        };
        let _ = writeln!(out, "      {sym} {} = {text}{force}", c.field);
        return;
    }
    let _ = writeln!(out, "      {sym} {}{force}", c.field);
    let before = (!c.before.is_null()).then_some(&c.before);
    let after = (!c.after.is_null()).then_some(&c.after);
    let body = if action == Action::Create || action == Action::Delete {
        serde_json::to_string_pretty(after.or(before).unwrap()).unwrap_or_default()
    } else {
        crate::policy::doc::render_diff(before, after).unwrap_or_default()
    };
    for line in body.lines() {
        let painted = if line.starts_with("+ ") {
            style.green(line)
        } else if line.starts_with("- ") {
            style.red(line)
        } else {
            line.to_string()
        };
        let _ = writeln!(out, "          {painted}");
    }
}

/// The human rendering of a plan: grouped resources with symbols, field-level changes, then a
/// summary line. Deterministic.
pub fn render_plan(plan: &Plan, style: Style) -> String {
    let mut out = String::new();
    for f in &plan.notes {
        let tag = match f.level {
            Level::Info => "note",
            Level::Warning => &style.yellow("warning"),
        };
        let _ = writeln!(out, "{tag}: {}", f.message);
    }
    if !plan.notes.is_empty() {
        out.push('\n');
    }
    if plan.steps.is_empty() {
        if plan.conflicts.is_empty() {
            let _ = writeln!(out, "No changes. {} resources are in sync.", plan.in_sync.len());
        }
    } else {
        let _ = writeln!(out, "karpctl will perform the following actions:\n");
        let mut steps: Vec<&Step> = plan.steps.iter().collect();
        steps.sort_by_key(|s| (s.kind, s.id.clone()));
        for s in steps {
            let header = format!("{} {} {} ({})", style.action(s.action), style.bold(&s.id), s.kind.label(), s.name);
            let _ = writeln!(
                out,
                "  {header} will be {}",
                match s.action {
                    Action::Create => "created",
                    Action::Update => "updated in place",
                    Action::Replace => "replaced",
                    Action::Delete => "destroyed",
                    Action::Adopt => "adopted (karpctl's tags added) and updated",
                }
            );
            for n in &s.node.notes {
                let _ = writeln!(out, "      # {n}");
            }
            if let Some(p) = &s.removed_with {
                let _ = writeln!(out, "      # removed together with {p}");
            }
            for c in &s.changes {
                render_change(&mut out, c, style, s.action);
            }
            out.push('\n');
        }
        let (a, c, d) = plan.counts();
        let _ = writeln!(out, "{}", style.bold(&format!("Plan: {a} to add, {c} to change, {d} to destroy.")));
    }
    for c in &plan.conflicts {
        let _ = writeln!(out, "{}: {}", style.red("conflict"), c.message());
    }
    if let Some(s) = &plan.identity_switch {
        out.push('\n');
        out.push_str(&identity_switch(s, style, false));
    }
    out
}

/// An identity switch: where the plan leaves it and why, then what the user does (the Helm
/// change, the restart) and what removes the old path (`IdentitySwitch::text`).
pub fn identity_switch(s: &crate::model::IdentitySwitch, style: Style, applied: bool) -> String {
    let (head, lines) = s.text(applied);
    let mut out = format!("{}\n", style.bold(&head));
    for (depth, line) in lines {
        let _ = writeln!(out, "{}{line}", "  ".repeat(depth as usize));
    }
    out
}

/// The readiness checks: one line when all passed, else each finding with its fix.
pub fn readiness(r: &crate::facts::finding::Outcome, pin: Option<&crate::facts::finding::PinSupport>, style: Style) -> String {
    use crate::facts::finding::Severity;
    let n = r.checked.len();
    let pin = pin.map(|k| format!("Karpenter {} (pinned): {}.\n", k.version, k.detail)).unwrap_or_default();
    if r.findings.is_empty() {
        return format!("Karpenter can work here: {n} of {n} checks passed.\n{pin}");
    }
    let mut out = format!("Karpenter readiness: {} of {n} checks passed.\n{pin}", r.passed().len());
    for c in &r.findings {
        let mark = match c.severity {
            Severity::Error => style.red("error"),
            Severity::Warning => style.yellow("warning"),
            Severity::Note => "note".to_string(),
        };
        let _ =
            writeln!(out, "  {mark} {}  {}\n      {}\n      fix: {}", style.bold(c.code.as_str()), c.resource, c.message, c.fix);
    }
    out
}

/// The `--stats` table (stderr).
/// When AWS throttled the run: by service, how many answers, over how long, and that karpctl
/// slowed down and retried (empty when nothing was throttled).
pub fn throttled_note(t: &std::collections::BTreeMap<String, crate::aws::Throttled>, style: Style) -> String {
    let mut out = String::new();
    for (service, x) in t {
        let _ = writeln!(
            out,
            "{}: AWS throttled {} {service} request(s) between {:.1} s and {:.1} s into the run; karpctl slowed its {service} calls for the account down and retried them",
            style.yellow("note"),
            x.answers,
            x.first_s,
            x.last_s
        );
    }
    out
}

pub fn stats_table(r: &crate::aws::StatsReport) -> String {
    let mut out = format!("AWS calls: {} ({} reads, {} writes), {} retries\n", r.calls, r.reads, r.writes, r.retries);
    for (op, c) in &r.operations {
        let retries = c.attempts.saturating_sub(c.calls);
        let _ = writeln!(
            out,
            "  {op:<45} {:>4}{}",
            c.calls,
            if retries > 0 { format!("  ({retries} retries)") } else { String::new() }
        );
    }
    if let Some(t) = &r.trace {
        let _ = writeln!(out, "  ({} units of work traced: `--output json` gives each one's calls under stats.trace)", t.len());
    }
    out
}

/// An error for the terminal: `error: <what failed>`, its causes, `hint: <what to do>`.
pub fn error_text(err: &anyhow::Error, style: Style) -> String {
    let mut out = format!("{}: {err}\n", style.red("error"));
    for c in err.chain().skip(1) {
        let _ = writeln!(out, "  caused by: {c}");
    }
    if let Some(h) = super::hint::hint_of(err) {
        let _ = writeln!(out, "{}: {h}", style.bold("hint"));
    }
    out
}

/// An error as one cluster's result in a many-cluster run: the message, then its hint.
pub fn error_brief(e: &anyhow::Error) -> String {
    let mut s = e.to_string();
    if let Some(h) = super::hint::hint_of(e) {
        s.push_str(&format!("\nhint: {h}"));
    }
    s
}

/// The line after `up`/`down` applied steps, like Terraform's.
pub fn apply_line(command: &str, a: &super::values::Applied) -> String {
    let verb = if command == "down" { "Destroy" } else { "Apply" };
    let state = if a.failed + a.skipped + a.cancelled == 0 { "complete" } else { "incomplete" };
    format!(
        "{verb} {state}! Resources: {} added, {} changed, {} destroyed. ({:.1}s)\n",
        a.add,
        a.change,
        a.destroy,
        a.elapsed.as_secs_f64()
    )
}

/// After a Pod Identity association was made or changed: restart the controller.
pub fn restart_note(command: &str, style: Style) -> String {
    format!(
        "{}: Pod Identity reaches only pods started after this change; if Karpenter is already running, restart it:\n  {command}\n",
        style.bold("note")
    )
}

/// Ctrl-C during `up`/`down`: what was not done.
pub fn interrupted(command: &str, cancelled: usize) -> String {
    format!(
        "Interrupted: {cancelled} step(s) not started or stopped part-way. Run `karpctl {command}` again to finish; it picks up from what exists.\n"
    )
}

fn dash(s: &str) -> &str {
    if s.is_empty() { "-" } else { s }
}

/// A cluster's own part of a many-cluster run's human output: its plan (`diff`), its values
/// (`output`), its error.
pub fn fleet_cluster(command: &str, d: &super::values::ClusterRun, style: Style) -> String {
    let mut out = String::new();
    let s = &d.section;
    let head = format!("== {} (account {}, region {}) ==", s.cluster, dash(&s.account_id), dash(&s.region));
    match command {
        "diff" => {
            let _ = writeln!(out, "{}", style.bold(&head));
            if let Some(p) = &d.plan {
                out.push_str(&render_plan(p, style));
            }
        }
        "output" => {
            let _ = writeln!(out, "# {head}");
            if let Some(text) = d.text.as_ref().filter(|_| s.error.is_none()) {
                let _ = writeln!(out, "{text}");
            }
        }
        _ => {}
    }
    if let Some(e) = &s.error {
        if !matches!(command, "diff" | "output") {
            let _ = writeln!(out, "{}", style.bold(&head));
        }
        for (i, line) in e.lines().enumerate() {
            if i == 0 {
                let _ = writeln!(out, "{}: {line}", style.red("error"));
            } else {
                let _ = writeln!(out, "  {line}");
            }
        }
    }
    out.push('\n');
    out
}

/// The many-cluster summary table.
pub fn summary_table(cmd: &str, done: &[super::values::ClusterRun]) -> String {
    let rows: Vec<[String; 4]> = done
        .iter()
        .map(|d| {
            let s = &d.section;
            [
                s.cluster.clone(),
                dash(&s.account_id).to_string(),
                dash(&s.region).to_string(),
                super::markdown::result_text(cmd, s),
            ]
        })
        .collect();
    let head = ["CLUSTER".to_string(), "ACCOUNT".into(), "REGION".into(), "RESULT".into()];
    let mut w = [0usize; 3];
    for r in rows.iter().chain(std::iter::once(&head)) {
        for i in 0..3 {
            w[i] = w[i].max(r[i].chars().count());
        }
    }
    let mut out = format!("Summary of {} cluster(s):\n", rows.len());
    for r in std::iter::once(&head).chain(rows.iter()) {
        out.push_str(&format!("  {:<a$}  {:<b$}  {:<c$}  {}\n", r[0], r[1], r[2], r[3], a = w[0], b = w[1], c = w[2]));
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::{Kind, Node};
    use serde_json::json;

    pub(crate) fn step(id: &str, kind: Kind, action: Action, changes: Vec<Change>) -> Step {
        let node = Node::new(id, format!("Name-{id}"), crate::model::NodeSpec::for_tests(kind));
        Step {
            id: id.into(),
            kind,
            name: node.name.clone(),
            action,
            changes,
            deps: vec![],
            node,
            observed: None,
            removed_with: None,
        }
    }

    #[test]
    fn plain_rendering_has_symbols_fields_and_summary() {
        let plan = Plan {
            steps: vec![
                step(
                    "queue",
                    Kind::Queue,
                    Action::Create,
                    vec![Change {
                        field: "MessageRetentionPeriod".into(),
                        before: Value::Null,
                        after: json!("300"),
                        forces_replacement: false,
                    }],
                ),
                step(
                    "rule-Rebalance",
                    Kind::EventRule,
                    Action::Update,
                    vec![Change {
                        field: "State".into(),
                        before: json!("DISABLED"),
                        after: json!("ENABLED"),
                        forces_replacement: false,
                    }],
                ),
                step("rule-Old", Kind::EventRule, Action::Delete, vec![]),
            ],
            ..Default::default()
        };
        let text = render_plan(&plan, Style { color: false });
        assert!(text.contains("+ queue aws_sqs_queue (Name-queue) will be created"), "{text}");
        assert!(text.contains("+ MessageRetentionPeriod = \"300\""), "{text}");
        assert!(text.contains("~ State = \"DISABLED\" -> \"ENABLED\""), "{text}");
        assert!(text.contains("- rule-Old"), "{text}");
        assert!(text.contains("Plan: 1 to add, 1 to change, 1 to destroy."), "{text}");
        assert!(!text.contains('\x1b'));
    }

    /// A plan with creates, an update of a policy statement, a replace and deletes.
    pub(crate) fn mixed_plan() -> Plan {
        use crate::model::{Level, Note, Observed, Owner};
        let before_policy = json!({"Version": "2012-10-17", "Statement": [
            {"Sid": "AllowPassingInstanceRole", "Effect": "Allow", "Action": ["iam:PassRole"], "Resource": ["arn:aws:iam::123456789012:role/KarpenterNodeRole-c"]},
            {"Sid": "AllowUnscopedInstanceProfileListAction", "Effect": "Allow", "Action": ["iam:ListInstanceProfiles"], "Resource": ["*"]}
        ]});
        let mut after_policy = before_policy.clone();
        after_policy["Statement"][0]["Condition"] =
            json!({"StringEquals": {"iam:PassedToService": ["ec2.amazonaws.com", "ec2.amazonaws.com.cn"]}});
        let mut update = step(
            "controller-policy-IAMIntegration",
            Kind::IamPolicy,
            Action::Update,
            vec![Change {
                field: "PolicyDocument".into(),
                before: before_policy,
                after: after_policy,
                forces_replacement: false,
            }],
        );
        update.observed = Some(Observed {
            fields: Default::default(),
            owner: Owner::Ours,
            ids: [(
                "arn".to_string(),
                "arn:aws:iam::123456789012:policy/karpctl/c/KarpenterControllerIAMIntegrationPolicy-c".to_string(),
            )]
            .into(),
        });
        Plan {
            steps: vec![
                step(
                    "queue",
                    Kind::Queue,
                    Action::Create,
                    vec![
                        Change {
                            field: "MessageRetentionPeriod".into(),
                            before: Value::Null,
                            after: json!("300"),
                            forces_replacement: false,
                        },
                        Change {
                            field: "tags".into(),
                            before: Value::Null,
                            after: json!({"karpctl.io/cluster": "c", "karpctl.io/resource": "queue"}),
                            forces_replacement: false,
                        },
                    ],
                ),
                update,
                step(
                    "node-access-entry",
                    Kind::AccessEntry,
                    Action::Replace,
                    vec![Change {
                        field: "type".into(),
                        before: json!("STANDARD"),
                        after: json!("EC2_LINUX"),
                        forces_replacement: true,
                    }],
                ),
                step(
                    "rule-Old",
                    Kind::EventRule,
                    Action::Delete,
                    vec![Change {
                        field: "State".into(),
                        before: json!("ENABLED"),
                        after: Value::Null,
                        forces_replacement: false,
                    }],
                ),
                step("node-instance-profile", Kind::InstanceProfile, Action::Delete, vec![]),
            ],
            conflicts: vec![],
            notes: vec![Note {
                id: "discovery".into(),
                level: Level::Warning,
                message: "us-east-1c: subnet-0c has 12 free addresses (fewer than 256)".into(),
            }],
            in_sync: vec!["controller-role".into()],
            identity_switch: None,
        }
    }

    #[test]
    fn snapshot_human_plan() {
        insta::assert_snapshot!(render_plan(&mixed_plan(), Style { color: false }));
    }

    #[test]
    fn snapshot_json_plan() {
        let doc =
            super::super::json::plan_json("diff", "c", "123456789012", "us-east-1", &mixed_plan(), None, json!({"calls": 0}));
        insta::assert_json_snapshot!(doc);
    }

    /// A takeover as the planner makes it (`--adopt`): the old controller role adopted, one of
    /// its attachments already in place, one of karpctl's policies attached anew, and the
    /// tool's old policy retired.
    pub(crate) fn takeover_plan() -> Plan {
        use crate::model::{ArnSpec, AttachmentSpec, NodeSpec, Observed, Owner, fields_of};
        use crate::planner::{PlanOptions, plan};
        let obs = |f: Vec<(&str, Value)>, owner: Owner| Observed { fields: fields_of(f), owner, ids: Default::default() };
        let role = "KarpenterController-2024";
        let attachment = |id: &str, arn: &str| {
            let a = AttachmentSpec { role: role.into(), policy_arn: arn.into(), owner_from: "controller-role".into() };
            Node::new(id, format!("{role}/{}", arn.rsplit('/').next().unwrap()), NodeSpec::RolePolicyAttachment(a))
                .with_fields(Some(fields_of(vec![("PolicyArn", json!(arn))])))
                .with_deps(["controller-role"])
        };
        let tags = json!({"karpctl.io/cluster": "c", "karpctl.io/resource": "controller-role"});
        let kept = "arn:aws:iam::123456789012:policy/KarpenterControllerEKSIntegrationPolicy-c";
        let new = "arn:aws:iam::123456789012:policy/KarpenterControllerNodeLifecyclePolicy-c";
        let old = "arn:aws:iam::123456789012:policy/KarpenterController-2024";
        let retired = Node::new(
            "retired-policy-KarpenterController-2024",
            format!("{role}/KarpenterController-2024"),
            NodeSpec::RetiredPolicy(AttachmentSpec { role: role.into(), policy_arn: old.into(), owner_from: "controller-role".into() }),
        )
        .with_fields(Some(fields_of(vec![("attached", json!(false))])))
        .with_notes([format!("managed policy {old}: karpctl's split policies replace it; detached once they are all attached, then deleted if nothing else uses it")])
        .delete_after(["controller-role", "controller-policy-attachment-NodeLifecycle"])
        .contained_in("controller-role");
        plan(
            vec![
                (
                    Node::new(
                        "controller-role",
                        role,
                        NodeSpec::IamRole(ArnSpec::new(format!("arn:aws:iam::123456789012:role/{role}"))),
                    )
                    .with_fields(Some(fields_of(vec![("path", json!("/")), ("tags", tags)]))),
                    Some(obs(vec![("path", json!("/")), ("tags", json!({}))], Owner::Unowned)),
                ),
                (
                    attachment("controller-policy-attachment-EKSIntegration", kept),
                    Some(obs(vec![("PolicyArn", json!(kept))], Owner::Unowned)),
                ),
                (attachment("controller-policy-attachment-NodeLifecycle", new), None),
                (retired, Some(obs(vec![("attached", json!(true))], Owner::Unowned))),
            ],
            PlanOptions { adopt: true },
        )
    }

    /// The retired policy is a `-` counted in "to destroy"; the attachment that is already in
    /// place is neither adopted nor updated, only in sync.
    #[test]
    fn snapshot_human_takeover_plan() {
        let p = takeover_plan();
        assert_eq!(p.counts(), (1, 1, 1), "{:?}", p.steps.iter().map(|s| (&s.id, s.action)).collect::<Vec<_>>());
        assert!(p.in_sync.contains(&"controller-policy-attachment-EKSIntegration".to_string()));
        let text = render_plan(&p, Style { color: false });
        assert!(text.contains("  - retired-policy-KarpenterController-2024 retired_policy"), "{text}");
        assert!(!text.contains("controller-policy-attachment-EKSIntegration"), "{text}");
        insta::assert_snapshot!(text);
    }

    #[test]
    fn snapshot_json_takeover_counts() {
        let doc = super::super::json::plan_json("diff", "c", "123456789012", "us-east-1", &takeover_plan(), None, json!({}));
        assert_eq!(doc["summary"], json!({"add": 1, "change": 1, "destroy": 1}));
        let actions: Vec<(String, String)> = doc["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["id"].as_str().unwrap().to_string(), s["action"].as_str().unwrap().to_string()))
            .collect();
        insta::assert_debug_snapshot!(actions);
    }

    #[test]
    fn colour_only_when_asked() {
        let text = render_plan(&mixed_plan(), Style { color: true });
        assert!(text.contains("\x1b[32m+\x1b[0m"));
    }
}
