//! Events from the engine, and how they reach a person: plan rendering and progress lines.
//! Progress during a run goes through a `Reporter`; what else is printed (the plan, JSON
//! documents, the stats table, errors) is printed by `engine.rs` and `output.rs` only.

use crate::model::{Action, Change, Level, Plan, Step};
use serde_json::Value;
use std::fmt::Write as _;
use std::io::Write as _;
use std::time::{Duration, Instant};

pub enum Event<'a> {
    Started {
        step: &'a Step,
    },
    Still {
        step: &'a Step,
        elapsed: Duration,
    },
    Finished {
        step: &'a Step,
        elapsed: Duration,
    },
    Failed {
        step: &'a Step,
        error: &'a str,
        elapsed: Duration,
    },
    Skipped {
        step: &'a Step,
        because: &'a str,
    },
    Cancelling {
        in_flight: usize,
    },
    Retrying {
        id: &'a str,
        operation: &'a str,
        code: &'a str,
        attempt: u32,
        elapsed: Duration,
    },
    /// A write succeeded and karpctl waits for AWS to show it (or for a delete to take effect).
    Waiting {
        id: &'a str,
        what: &'a str,
        elapsed: Duration,
    },
    Info(&'a str),
}

pub trait Reporter: Send + Sync {
    fn event(&self, e: Event<'_>);
}

/// Discards everything (used for `--quiet` and JSON output).
pub struct Silent;
impl Reporter for Silent {
    fn event(&self, _: Event<'_>) {}
}

/// Progress on stderr, like `terraform apply`: plain lines, and on a terminal a live status line
/// of the steps in flight, redrawn under the log lines.
pub struct Progress {
    pub style: Style,
    /// stderr is a terminal: keep a live view of in-flight steps.
    pub live: bool,
    pub in_flight: std::sync::Mutex<std::collections::BTreeMap<String, Instant>>,
}

impl Progress {
    pub fn new(live: bool, style: Style) -> Self {
        Progress { style, live, in_flight: Default::default() }
    }

    fn status_line(&self) -> Option<String> {
        let m = self.in_flight.lock().unwrap();
        let oldest = m.values().min()?;
        let names: Vec<&str> = m.keys().map(String::as_str).take(6).collect();
        let more = if m.len() > names.len() { format!(" +{}", m.len() - names.len()) } else { String::new() };
        let line = format!("In flight ({}) [{}]: {}{more}", m.len(), secs(oldest.elapsed()), names.join(", "));
        // One terminal row at most (a wrapped line could not be redrawn in place).
        let width = std::env::var("COLUMNS").ok().and_then(|c| c.parse::<usize>().ok()).unwrap_or(80).max(20) - 1;
        Some(if line.chars().count() > width { line.chars().take(width - 3).chain("...".chars()).collect() } else { line })
    }
}

fn secs(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 { format!("{}m{}s", s / 60, s % 60) } else { format!("{s}s") }
}

impl Reporter for Progress {
    fn event(&self, e: Event<'_>) {
        match &e {
            Event::Started { step } => {
                self.in_flight.lock().unwrap().insert(step.id.clone(), Instant::now());
            }
            Event::Finished { step, .. } | Event::Failed { step, .. } | Event::Skipped { step, .. } => {
                self.in_flight.lock().unwrap().remove(&step.id);
            }
            _ => {}
        }
        let line = match e {
            Event::Started { step } => {
                if step.removed_with.is_some() {
                    None
                } else {
                    Some(format!("{}: {}... [{}]", step.id, step.action.progress(), step.name))
                }
            }
            // On a terminal the live line shows elapsed time; elsewhere a line every 10 s.
            Event::Still { step, elapsed } => (!self.live)
                .then(|| format!("{}: Still {}... [{} elapsed]", step.id, step.action.progress().to_lowercase(), secs(elapsed))),
            Event::Finished { step, elapsed } => Some(if let Some(p) = &step.removed_with {
                format!("{}: removed with {p}", step.id)
            } else {
                let what = match step.action {
                    Action::Create => "Creation",
                    Action::Delete => "Destruction",
                    Action::Replace => "Replacement",
                    Action::Update | Action::Adopt => "Modifications",
                };
                format!("{}: {what} complete after {}", step.id, secs(elapsed))
            }),
            Event::Failed { step, error, elapsed } => {
                Some(format!("{}: {} after {}: {error}", step.id, self.style.red("failed"), secs(elapsed)))
            }
            Event::Skipped { step, because } => Some(format!("{}: skipped ({because})", step.id)),
            Event::Cancelling { in_flight } => Some(format!(
                "Interrupt received: no new steps will start; waiting for {in_flight} in-flight step(s) to finish..."
            )),
            Event::Retrying { id, operation, code, attempt, elapsed } => Some(format!(
                "{id}: {operation} returned {code} (AWS is still propagating a change); retry {attempt} [{} elapsed]",
                secs(elapsed)
            )),
            Event::Waiting { id, what, elapsed } => Some(format!("{id}: waiting for {what} [{} elapsed]", secs(elapsed))),
            Event::Info(s) => Some(s.to_string()),
        };
        let mut err = std::io::stderr().lock();
        if self.live {
            let _ = write!(err, "\r\x1b[2K");
        }
        if let Some(line) = line {
            let _ = writeln!(err, "{line}");
        }
        if self.live {
            if let Some(status) = self.status_line() {
                let _ = write!(err, "{}", self.style.bold(&status));
            }
            let _ = err.flush();
        }
    }
}

/// Colour on a terminal, none with NO_COLOR or when not a terminal.
#[derive(Clone, Copy, Debug)]
pub struct Style {
    pub color: bool,
}

impl Style {
    pub fn detect(stream_is_tty: bool) -> Style {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Style { color: stream_is_tty && !no_color }
    }
    fn paint(&self, code: &str, s: &str) -> String {
        if self.color { format!("\x1b[{code}m{s}\x1b[0m") } else { s.to_string() }
    }
    pub fn green(&self, s: &str) -> String {
        self.paint("32", s)
    }
    pub fn yellow(&self, s: &str) -> String {
        self.paint("33", s)
    }
    pub fn red(&self, s: &str) -> String {
        self.paint("31", s)
    }
    pub fn bold(&self, s: &str) -> String {
        self.paint("1", s)
    }
    fn action(&self, a: Action) -> String {
        match a {
            Action::Create => self.green(a.symbol()),
            Action::Update | Action::Adopt => self.yellow(a.symbol()),
            Action::Replace => self.yellow(a.symbol()),
            Action::Delete => self.red(a.symbol()),
        }
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::Null => "(none)".into(),
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

fn render_change(out: &mut String, c: &Change, style: Style, action: Action) {
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
        crate::policy_doc::render_diff(before, after).unwrap_or_default()
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
    for f in &plan.findings {
        let tag = match f.level {
            Level::Info => "note",
            Level::Warning => &style.yellow("warning"),
        };
        let _ = writeln!(out, "{tag}: {}", f.message);
    }
    if !plan.findings.is_empty() {
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
    out
}

/// The versioned JSON document for `--output json` (stable key order: serde_json sorts keys).
pub fn plan_json(
    command: &str,
    cluster: &str,
    account_id: &str,
    region: &str,
    plan: &Plan,
    results: Option<&std::collections::BTreeMap<String, crate::model::Outcome>>,
    stats: Value,
) -> Value {
    use serde_json::json;
    let (add, change, destroy) = plan.counts();
    let steps: Vec<Value> = plan
        .steps
        .iter()
        .map(|s| {
            json!({
                "id": s.id,
                "kind": s.kind,
                "type": s.kind.label(),
                "name": s.name,
                "action": s.action,
                "changes": s.changes,
                "ids": s.observed.as_ref().map(|o| o.ids.clone()).unwrap_or_default(),
                "notes": s.node.notes,
                "removed_with": s.removed_with,
            })
        })
        .collect();
    json!({
        "format_version": 1,
        "command": command,
        "cluster": cluster,
        "account_id": account_id,
        "region": region,
        "in_sync": plan.steps.is_empty() && plan.conflicts.is_empty(),
        "summary": {"add": add, "change": change, "destroy": destroy},
        "steps": steps,
        "conflicts": plan.conflicts.iter().map(|c| json!({"id": c.id, "type": c.kind.label(), "name": c.name, "owner": c.owner, "message": c.message()})).collect::<Vec<_>>(),
        "findings": plan.findings,
        "unchanged": plan.in_sync,
        "results": results,
        "stats": stats,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Kind, Node};
    use serde_json::json;

    fn step(id: &str, kind: Kind, action: Action, changes: Vec<Change>) -> Step {
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
    fn mixed_plan() -> Plan {
        use crate::model::{Finding, Level, Observed, Owner};
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
            findings: vec![Finding {
                id: "discovery".into(),
                level: Level::Warning,
                message: "us-east-1c: subnet-0c has 12 free addresses (fewer than 256)".into(),
            }],
            in_sync: vec!["controller-role".into()],
        }
    }

    #[test]
    fn snapshot_human_plan() {
        insta::assert_snapshot!(render_plan(&mixed_plan(), Style { color: false }));
    }

    #[test]
    fn snapshot_json_plan() {
        let doc = plan_json("diff", "c", "123456789012", "us-east-1", &mixed_plan(), None, json!({"calls": 0}));
        insta::assert_json_snapshot!(doc);
    }

    #[test]
    fn colour_only_when_asked() {
        let text = render_plan(&mixed_plan(), Style { color: true });
        assert!(text.contains("\x1b[32m+\x1b[0m"));
    }
}
